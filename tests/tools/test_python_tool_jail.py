"""The `python` tool's own worker runs behind bubblewrap and the seccomp filter (`code_jail`), because model
code in the worker's process can switch the audit hook off: it patches what the hook reads
(`sandbox.REFUSED_PREFIXES`, `sandbox.refusal`). Each test first shows the patch is made, then that the
escape it opens in the Python layers still earns nothing: no socket, no process, no write outside the
worker's private folder, nothing of the host's files."""

import os

import pytest

from rlvr.tasks.verification.code_jail import detect_jail
from rlvr.tools.builtin import PYTHON_WORKER, run_python
from rlvr.tools.execution import ToolError

UNHOOK = ("import sys\n"
          "sandbox = sys.modules['rlvr.tasks.verification.sandbox']\n"
          "sandbox.REFUSED_PREFIXES, sandbox.REFUSED_EVENTS = (), frozenset()\n"
          "sandbox.refusal = lambda *args, **kwargs: None\n"
          "print('unhooked')\n")


@pytest.fixture(scope="module", autouse=True)
def jail():
    jail = detect_jail()
    if jail.kind != "bwrap":
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the python tool jailed (.ci/run installs bubblewrap): {jail.reason}")
        pytest.skip(f"no bubblewrap jail on this machine: {jail.reason}")
    assert PYTHON_WORKER.jailed
    return jail


def test_an_unhooked_sandbox_still_opens_no_socket():
    with pytest.raises(ToolError) as error:
        run_python(UNHOOK + "import socket\nsocket.socket()")
    assert "unhooked" in str(error.value)  # the hook really was switched off
    assert "PermissionError" in str(error.value)  # the kernel refused the socket (seccomp)
    assert run_python("print(6 * 7)") == "42"  # and the tool still works


def test_an_unhooked_sandbox_starts_no_process_and_writes_nothing_outside(tmp_path):
    marker = tmp_path / "escaped"
    os.chmod(tmp_path, 0o777)
    out = run_python(UNHOOK + f"import os\nprint(os.system('echo x > {marker}'))")
    assert out.startswith("unhooked") and out.splitlines()[-1] != "0"  # the shell never ran
    with pytest.raises(ToolError, match="Read-only file system|No such file|Permission"):
        run_python(UNHOOK + f"open({str(marker)!r}, 'w').write('x')")
    assert not marker.exists()
    with pytest.raises(ToolError, match="No such file"):  # the host's files are not there to read
        run_python(UNHOOK + "print(open('/etc/hostname').read())")
    assert run_python("open('mine.txt', 'w').write('ok')\nprint(open('mine.txt').read())") == "ok"
