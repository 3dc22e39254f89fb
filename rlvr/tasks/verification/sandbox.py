"""Least privilege for the verifier worker: resource limits and an audit hook that refuses side effects.

A second wall behind answer parsing (`rlvr.tasks.reasoning_gym_answers`): should text ever get
evaluated after all, it still cannot write outside the worker's temporary folder, open a socket,
start a process, load native code through ctypes, or lift the limits. The hook is installed after
the worker has imported its libraries and cannot be removed (that is how audit hooks work). It is
defence in depth, not a jail: CPython's audit events do not cover every syscall, so the limits
below stand beside it, and the first wall is the one that must hold.

Limits (per worker process): address space `RLVR_VERIFIER_MEMORY_MB` (default 4096), CPU time
`CPU_SECONDS` over the worker's life (the parent replaces a worker that has used half of it),
files written at most `FILE_BYTES`, `OPEN_FILES` descriptors, no core dumps, and no new processes
(`RLIMIT_NPROC` 0; the kernel does not apply that one to root, the audit hook still does).

The hook reads nothing code in the worker can rebind: it is a closure over a private copy of this
module's rules and helpers (`_private_refusal`: its own globals and builtins, `os.path.realpath` and
`os.fsdecode` bound when the sandbox is entered), its busy flag and folder live in that closure, and
no reference to it is kept. A scorer that sets this module's `REFUSED_PREFIXES = ()`, replaces
`refusal`, `os.path.realpath` or `builtins.isinstance`, empties `WRITE_EVENTS`, or finds the
`Sandbox` object in a caller's frame changes nothing the hook reads. Tracing and profiling
(`sys.settrace`, `sys.setprofile`), which would see the hook's own frame, are refused. One gap is
left: `os.path.realpath` is Python code that calls `posixpath`'s own helpers through that module,
which a scorer could rebind to make a path outside look inside. Where model code runs on purpose
(the `python` tool, the `code` task) the bubblewrap jail stands in front (`code_jail.py`).
"""

from __future__ import annotations

import os
import sys
import builtins
import types
from typing import Any, Callable, Optional

CPU_SECONDS = 600
FILE_BYTES = 64 * 1024 * 1024
OPEN_FILES = 256

# Events refused outright: the network, new processes, native code, and the sandbox's own controls.
REFUSED_PREFIXES = ("socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                    "http.client.", "urllib.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.",
                    "telnetlib.", "webbrowser.", "winreg.")
REFUSED_EVENTS = frozenset({
    "os.system", "os.forkpty", "os.kill", "os.killpg", "os.startfile", "os.putenv", "os.unsetenv",
    "pty.spawn", "signal.pthread_kill", "resource.setrlimit", "resource.prlimit", "sys.addaudithook",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__", "function.__new__",
    "sys.settrace", "sys.setprofile",
})  # not `marshal.loads`: importing a module from its .pyc file needs it
# Modules that may not be loaded once the hook is in: with them, native code or a raw fork.
REFUSED_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
# Events that change the file system: (positions of the paths changed, positions of dir_fd arguments).
WRITE_EVENTS = {
    "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)), "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)),
    "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)), "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)), "os.chflags": ((0,), ()), "os.lchflags": ((0,), ()),
    "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "os.mkfifo": ((0,), (2,)),
    "os.mknod": ((0,), (3,)),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# What the rules call in `os`, by name: `_private_refusal` binds these names to the functions themselves.
_realpath, _fsdecode, _SEP = os.path.realpath, os.fsdecode, os.sep


def _inside(path: Any, folder: str) -> bool:
    """True when `path` (str, bytes or path-like, not a descriptor) resolves inside `folder`."""
    if isinstance(path, int) or path is None:
        return False
    try:
        resolved = _realpath(_fsdecode(path))
    except (TypeError, ValueError):
        return False
    return resolved == folder or resolved.startswith(folder + _SEP)


def _opens_for_writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def refusal(event: str, args: tuple, temp_dir: str, loaded_modules=frozenset()) -> Optional[str]:
    """Why the sandbox refuses audit `event` with `args`, or None when it is allowed.

    `temp_dir` is the only folder that may be written to (it must be a resolved path).
    """
    if event in REFUSED_EVENTS or event.startswith(REFUSED_PREFIXES):
        return event
    if event == "import" and args and args[0] in REFUSED_IMPORTS and args[0] not in loaded_modules:
        return f"import {args[0]}"
    if event == "open" and len(args) >= 3 and _opens_for_writing(args[1], args[2]):
        return None if _inside(args[0], temp_dir) else f"open for writing {str(args[0])[:100]}"
    if event in WRITE_EVENTS:
        paths, dir_fds = WRITE_EVENTS[event]
        # CPython reports "no dir_fd" as -1 (os.remove, os.mkdir, os.rmdir...), other callers as None.
        if any(i < len(args) and args[i] not in (None, -1) for i in dir_fds):
            return f"{event} relative to a directory descriptor"
        for i in paths:
            if i < len(args) and not _inside(args[i], temp_dir):
                return f"{event} {str(args[i])[:100]}"
    return None


_RULES = ("refusal", "_inside", "_opens_for_writing")  # the functions the hook runs, rebuilt on private globals


def _private_refusal() -> Callable[..., Optional[str]]:
    """`refusal` on a private copy of this module's globals and of the builtins (made before the hook is in)."""
    private = dict(globals())
    private["__builtins__"] = dict(vars(builtins))
    private["WRITE_EVENTS"] = types.MappingProxyType(dict(WRITE_EVENTS))  # the module's dict stays mutable
    for name in _RULES:
        function = globals()[name]
        private[name] = types.FunctionType(function.__code__, private, function.__name__, function.__defaults__)
    return private["refusal"]


def _make_hook(temp_dir: str, record: Callable[[str], None]) -> Callable[[str, tuple], None]:
    """The audit hook: refuse what `refusal` refuses, `record` it, and raise; its state only in its closure."""
    check, modules, refused_error = _private_refusal(), sys.modules, PermissionError
    busy = [False]

    def hook(event: str, args: tuple) -> None:
        if busy[0]:  # an event raised by the check itself (realpath); our own code, allowed
            return
        busy[0] = True
        try:
            reason = check(event, args, temp_dir, modules.keys())
        finally:
            busy[0] = False
        if reason is not None:
            record(reason)
            raise refused_error(f"verifier sandbox refused {reason}")

    return hook


class Sandbox:
    """What the installed hook refused during the current call (reported, then cleared); not the hook itself."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = os.path.realpath(temp_dir)
        self.refused: list[str] = []

    def take_refusals(self) -> list[str]:
        taken = list(self.refused)
        self.refused.clear()  # the same list: the hook appends to it
        return taken


def set_resource_limits(memory_mb: int) -> dict[str, int]:
    """Apply the limits; returns the soft limits set, by name (ones the platform lacks are skipped)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return {}
    wanted = {"RLIMIT_CPU": CPU_SECONDS, "RLIMIT_FSIZE": FILE_BYTES, "RLIMIT_NOFILE": OPEN_FILES,
              "RLIMIT_CORE": 0, "RLIMIT_NPROC": 0}
    if memory_mb > 0:
        wanted["RLIMIT_AS"] = memory_mb * 1024 * 1024
    applied = {}
    for name, value in wanted.items():
        limit = getattr(resource, name, None)
        if limit is None:
            continue
        _, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(limit, (value, value))
            applied[name] = value
        except (ValueError, OSError):
            pass
    return applied


def _refuse_fork_exec(*args, **kwargs):
    raise PermissionError("verifier sandbox refused fork_exec")


def enter(temp_dir: str, memory_mb: int) -> Sandbox:
    """Lock this process down: limits, the temporary folder as working directory, the audit hook.

    Call it after every library the worker needs has been imported: nothing can be undone later.
    `_posixsubprocess.fork_exec` starts processes without an audit event, so it is replaced.
    """
    import subprocess  # noqa: F401 - loaded now so libraries that import it later still can
    import tempfile

    import _posixsubprocess

    _posixsubprocess.fork_exec = _refuse_fork_exec
    subprocess._fork_exec = _refuse_fork_exec
    os.chdir(temp_dir)
    sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]  # nothing imported from the folder
    os.environ["TMPDIR"] = temp_dir
    tempfile.tempdir = temp_dir
    sys.dont_write_bytecode = True
    set_resource_limits(memory_mb)
    sandbox = Sandbox(temp_dir)
    sys.addaudithook(_make_hook(sandbox.temp_dir, sandbox.refused.append))  # no reference to it is kept
    return sandbox
