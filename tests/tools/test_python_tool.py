"""The `python` tool runs code in a sandboxed worker of its own: output comes back, and each limit (time,
memory, writes outside its folder, sockets, new processes) ends the call with an error message for
the model, never a crash of the caller, after which the tool still works."""

import os
import socket

import pytest

from rlvr.tasks.verification.worker import VerifierWorker
from rlvr.tools import FORMATS, TOOLS, run_tool_calls
from rlvr.tools.builtin import PYTHON_MEMORY_MB, run_python
from rlvr.tools.execution import ToolError

TAGGED = FORMATS.get("tagged")


@pytest.fixture(scope="module")
def worker():
    python_worker = VerifierWorker(extra_functions="rlvr.tools.python_worker", memory_mb=PYTHON_MEMORY_MB)
    yield python_worker
    python_worker.close()


def test_output_and_the_value_of_a_final_expression(worker):
    assert run_python("print('hi')\nx = 6 * 7\nx", worker=worker) == "hi\n42"
    assert run_python("x = 1", worker=worker) == "(no output)"


def test_an_exception_is_an_error_with_what_was_printed(worker):
    with pytest.raises(ToolError) as error:
        run_python("print('before')\n1/0", worker=worker)
    assert "ZeroDivisionError: division by zero" in str(error.value) and "before" in str(error.value)
    with pytest.raises(ToolError, match="SyntaxError"):
        run_python("def (", worker=worker)
    with pytest.raises(ToolError, match="SystemExit"):
        run_python("raise SystemExit(3)", worker=worker)


def test_a_loop_that_never_ends_is_stopped_at_the_time_limit(worker):
    with pytest.raises(ToolError, match="ran past the time limit of 1 s"):
        run_python("while True:\n    pass", timeout=1.0, worker=worker)
    assert run_python("print(2 + 2)", worker=worker) == "4"  # the spare took over


def test_a_big_allocation_fails_inside_the_memory_limit(worker):
    size = 2 * PYTHON_MEMORY_MB * 1024 * 1024
    with pytest.raises(ToolError, match="MemoryError"):
        run_python(f"block = bytearray({size})", worker=worker)
    assert run_python("len(bytearray(10 * 1024 * 1024))", worker=worker) == str(10 * 1024 * 1024)  # small ones fit


def test_a_write_outside_its_folder_is_refused(worker, tmp_path):
    target = tmp_path / "escaped.txt"
    with pytest.raises(ToolError, match="sandbox refused: open for writing"):
        run_python(f"open({str(target)!r}, 'w').write('x')", worker=worker)
    assert not target.exists()
    # a swallowed refusal is still an error
    with pytest.raises(ToolError, match="sandbox refused"):
        run_python(f"try:\n    open({str(target)!r}, 'w')\nexcept Exception:\n    pass", worker=worker)
    # its own folder is writable, and emptied between calls
    assert run_python("open('notes.txt', 'w').write('abc')\nprint(open('notes.txt').read())",
                      worker=worker) == "abc"
    assert run_python("import os\nos.listdir('.')", worker=worker) == "[]"
    # a call that moves elsewhere does not move the next one
    assert run_python("import os\nos.chdir('/')", worker=worker) == "(no output)"
    assert run_python("open('again.txt', 'w').write('ok')", worker=worker) == "2"


def test_a_socket_is_refused(worker):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        with pytest.raises(ToolError, match="sandbox refused: socket"):
            run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}))", worker=worker)
        with pytest.raises(BlockingIOError):  # nothing connected
            server.accept()
    finally:
        server.close()


def test_a_new_process_is_refused(worker, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ToolError, match="sandbox refused"):
        run_python(f"import os\nos.system('touch {marker}')", worker=worker)
    assert not marker.exists()


def test_a_print_loop_is_cut_at_the_output_limit(worker):
    output = run_python("for i in range(20000):\n    print('line', i)", timeout=60, worker=worker)
    assert output.startswith("line 0\nline 1\n") and "[output truncated:" in output
    assert len(output) < 2200


def test_the_dropped_output_is_counted(worker):
    # 5000 characters and a newline: the first 2000 are kept, the other 3001 counted
    output = run_python("print('x' * 5000)", timeout=60, worker=worker)
    assert output == "x" * 2000 + "\n[output truncated: 3001 more characters]"


def test_the_registered_tool_turns_failures_into_counted_errors():
    python = TOOLS.get("python")
    run = run_tool_calls("<python>print(sum(range(10)))</python> <python>import os; os.remove('/etc/hosts')</python>",
                         [python], TAGGED)
    first, second = run.content.splitlines()[:2]
    assert first == "python: 45" and second.startswith("python: error: sandbox refused")
    assert run.tool_calls == {"python": 2} and run.tool_errors == {"python": 1}
    assert os.path.exists("/etc/hosts")
