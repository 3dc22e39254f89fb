"""The `python` tool's worker runs behind bubblewrap and the seccomp filter (`code_jail`) as well as the audit
hook. Two walls, each shown to hold alone: model code that rebinds what the old hook read
(`sandbox.REFUSED_PREFIXES`, `sandbox.refusal`) is still refused by the hook, which reads only a private copy;
and a process in the same jail with no hook at all (the same `jailed_worker_command`) opens no socket,
starts no process, writes nothing outside its private folder and reads none of the host's files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from rlvr.tasks.verification.code_jail import detect_jail, jailed_worker_command
from rlvr.tools.builtin import PYTHON_WORKER, run_python
from rlvr.tools.execution import ToolError

UNHOOK = ("import sys\n"
          "sandbox = sys.modules['rlvr.tasks.verification.sandbox']\n"
          "sandbox.REFUSED_PREFIXES, sandbox.REFUSED_EVENTS = (), frozenset()\n"
          "sandbox.refusal = lambda *args, **kwargs: None\n"
          "print('rebound')\n")
PACKAGE_ROOT = str(Path(rlvr.__file__).resolve().parents[1])


@pytest.fixture(scope="module", autouse=True)
def jail():
    jail = detect_jail()
    if jail.kind != "bwrap":
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the python tool jailed (.ci/run installs bubblewrap): {jail.reason}")
        pytest.skip(f"no bubblewrap jail on this machine: {jail.reason}")
    assert PYTHON_WORKER.jailed
    return jail


def test_rebinding_the_hooks_module_opens_no_socket_and_starts_no_process():
    with pytest.raises(ToolError, match="sandbox refused: socket"):
        run_python(UNHOOK + "import socket\nsocket.socket()")
    with pytest.raises(ToolError, match="sandbox refused: os.system"):
        run_python(UNHOOK + "import os\nos.system('true')")
    assert run_python("print(6 * 7)") == "42"  # and the tool still works


def _jailed_without_hook(script: str) -> subprocess.CompletedProcess:
    command, fds, jail = jailed_worker_command([sys.executable, "-c", script], dict(os.environ), PACKAGE_ROOT)
    assert jail.kind == "bwrap"
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, pass_fds=fds, cwd=PACKAGE_ROOT)
    finally:
        for fd in fds:
            os.close(fd)


def test_the_jail_alone_refuses_sockets_processes_writes_outside_and_the_hosts_files(tmp_path):
    marker = tmp_path / "escaped"
    os.chmod(tmp_path, 0o777)
    script = f"""
import os, socket
def attempt(name, action):
    try:
        action()
        print(name, "done")
    except OSError as error:
        print(name, "refused", type(error).__name__)
attempt("socket", lambda: socket.socket())
print("system", os.system("echo x > {marker}"))
attempt("write", lambda: open({str(marker)!r}, "w").write("x"))
attempt("read", lambda: open("/etc/hostname").read())
open(os.path.join(os.environ["RLVR_VERIFIER_TMPDIR"], "mine.txt"), "w").write("ok")
print("own folder ok")
"""
    lines = _jailed_without_hook(script).stdout.splitlines()
    assert "socket refused PermissionError" in lines  # seccomp: the kernel refuses the socket
    assert "system 0" not in lines and any(line.startswith("system ") for line in lines)  # no shell ran
    assert any(line.startswith("write refused") for line in lines) and not marker.exists()
    assert "read refused FileNotFoundError" in lines  # the host's files are not there
    assert lines[-1] == "own folder ok"
