"""Functions a test registers in a verifier worker (`VerifierWorker(extra_functions=...)`): each tries
one thing the sandbox must refuse, or one thing it must allow, from inside the locked-down process."""

import os
import shutil
import time

time.sleep(float(os.environ.get("RLVR_TEST_WORKER_SLOW_START", "0")))  # a slow import, for the restart tests


def write_file(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("escaped")
    return "written"


def write_file_quietly(path: str) -> str:
    """Like a scorer that swallows every exception: the refusal must still be reported."""
    try:
        write_file(path)
    except Exception:  # noqa: BLE001
        pass
    return "swallowed"


def write_in_temp_dir(name: str) -> str:
    import tempfile

    path = os.path.join(tempfile.gettempdir(), name)
    write_file(path)
    with open(path) as handle:
        return handle.read()


def write_with_os_open(path: str) -> str:
    """An existing file opened read-write with `os.open` (no mode string, only flags), then written."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.write(fd, b"escaped")
    finally:
        os.close(fd)
    return "written"


def remove_file(path: str) -> str:
    os.remove(path)
    return "removed"


def connect(port: int) -> str:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def run_process(path: str) -> str:
    import subprocess

    subprocess.run(["touch", path], check=False)
    return "ran"


def os_system(path: str) -> int:
    return os.system(f"touch {path}")


def raw_fork_exec(path: str) -> str:
    """`_posixsubprocess.fork_exec` raises no audit event of its own."""
    import _posixsubprocess

    touch = shutil.which("touch").encode()
    error_read, error_write = os.pipe()
    pid = _posixsubprocess.fork_exec([touch, path.encode()], [touch], True, (error_write,), None, None, -1, -1, -1,
                                     -1, -1, -1, error_read, error_write, False, False, -1, None, None, None, -1,
                                     None, False)
    os.waitpid(pid, 0)
    return "forked"


def fork() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


def native_call(path: str) -> int:
    import ctypes

    return ctypes.CDLL(None).system(f"touch {path}".encode())


def raise_limits() -> str:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    return "raised"


def limits() -> dict:
    import resource

    names = ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_NPROC")
    return {name: resource.getrlimit(getattr(resource, name))[0] for name in names}


def needs_missing_library() -> str:
    return "never called: its worker cannot import the library"


FUNCTIONS = {
    "needs_missing_library": (needs_missing_library, "rlvr_no_such_library"),  # a start that fails
    "write_file": (write_file, None),
    "write_file_quietly": (write_file_quietly, None),
    "write_in_temp_dir": (write_in_temp_dir, None),
    "write_with_os_open": (write_with_os_open, None),
    "remove_file": (remove_file, None),
    "connect": (connect, None),
    "run_process": (run_process, None),
    "os_system": (os_system, None),
    "raw_fork_exec": (raw_fork_exec, None),
    "fork": (fork, None),
    "native_call": (native_call, None),
    "raise_limits": (raise_limits, None),
    "limits": (limits, None),
}


def rebind_rules_then_write(path: str) -> str:
    """Switch the hook's rules off by rebinding every name they read, then write outside the folder."""
    import builtins
    import sys
    import tempfile

    sandbox = sys.modules["rlvr.tasks.verification.sandbox"]
    sandbox.REFUSED_PREFIXES, sandbox.REFUSED_EVENTS = (), frozenset()
    sandbox.refusal = lambda *args, **kwargs: None
    sandbox._inside = lambda *args, **kwargs: True
    sandbox._opens_for_writing = lambda *args, **kwargs: False
    sandbox.WRITE_EVENTS.clear()
    realpath, isinstance_ = os.path.realpath, builtins.isinstance
    inside = os.path.join(tempfile.gettempdir(), "x")
    os.path.realpath = sandbox._realpath = lambda *args, **kwargs: inside  # every path "inside" the folder
    builtins.isinstance = lambda *args: False  # `mode` no longer a str: "not opened for writing"
    try:
        return write_file(path)
    finally:
        os.path.realpath, builtins.isinstance = realpath, isinstance_


def rebind_rules_then_run(path: str) -> str:
    import sys

    sandbox = sys.modules["rlvr.tasks.verification.sandbox"]
    sandbox.REFUSED_PREFIXES, sandbox.REFUSED_EVENTS = (), frozenset()
    sandbox.refusal = lambda *args, **kwargs: None
    return os_system(path)


def trace_the_hook() -> str:
    import sys

    sys.settrace(lambda *args: None)
    return "tracing"


FUNCTIONS.update({"rebind_rules_then_write": (rebind_rules_then_write, None),
                  "rebind_rules_then_run": (rebind_rules_then_run, None),
                  "trace_the_hook": (trace_the_hook, None)})
