"""Run a model's program against a problem's tests: two jailed processes, the verdict out of the model's reach.

Layers, outermost first (docs/guides/tasks.md, "Verifier safety", says what each blocks):
1. bubblewrap (`bwrap`, Debian package `bubblewrap`), where it can create namespaces: a new user
   (uid 65534, no capabilities), pid, network, IPC, UTS and cgroup namespace per process; only `/usr`,
   the Python installation and the runner's folder mounted, read-only; a private writable tmpfs folder;
   a new session; killed with its parent; on x86_64 a seccomp filter (`code_seccomp`: no processes,
   sockets, signals, ptrace). Where `bwrap` is missing or cannot create namespaces, this layer is
   skipped (logged once); `jail="required"` refuses to run without it.
2. `sandbox.enter`: resource limits (address space, file size, open files, no core dumps) and the audit
   hook (no writes outside the temporary folder, no sockets, no new processes, no signals, no ctypes).
3. The verdict: the tests run in a second process that never runs model code; the candidate process
   holds only two pipes to it and sends back plain values (`code_values`). Only the tests process
   writes to the parent. The parent kills both process groups when the tests report or the time is up.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.tasks.verification import code_seccomp, code_values

RUNNER = Path(__file__).resolve().parent / "code_runner.py"
DEFAULT_MEMORY_MB = 1024
STARTUP_SECONDS = 10.0  # two interpreters to start and the setup to run, on a loaded machine
JAILS = ("auto", "required", "none")
NOBODY = "65534"
# The jailed process's writable folder: a tmpfs at a path no bind mount sits under (the runner's folder may be
# under /tmp, as in the mutation script's copies of the repository).
JAIL_FOLDER = "/rlvr-code"


@dataclass(frozen=True)
class Jail:
    kind: str  # "bwrap" or "none"
    reason: str  # why this kind: what works, or why bubblewrap was skipped
    seccomp: bool = False  # bubblewrap loads `code_seccomp.program()`

    def describe(self) -> str:
        if self.kind == "bwrap":
            return ("model code runs in bubblewrap (user, pid, net, ipc, uts and cgroup namespaces; uid 65534 without "
                    "capabilities; read-only /usr and Python; a private writable folder), "
                    "behind it rlimits and the audit hook; "
                    "the tests run in a second jailed process; "
                    + ("seccomp filter on (no processes, sockets, signals, ptrace, mounts)" if self.seccomp else
                       "no seccomp filter (written for x86_64 only)"))
        return (f"bubblewrap skipped ({self.reason}): model code runs with rlimits and the audit hook only, which "
                "is not a jail; the tests still run in a second process")


def _python() -> str:
    return os.path.realpath(sys.executable)


def bwrap_argv(temp_dir_inside: str = JAIL_FOLDER) -> list[str]:
    """The bubblewrap command line that every jailed process starts with."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid", NOBODY, "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH", "/usr/bin",
            "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    mounted = {"/usr"}
    for folder in (sys.base_prefix, os.path.dirname(os.path.dirname(_python())), str(RUNNER.parent)):
        folder = os.path.realpath(folder)
        if not any(folder == m or folder.startswith(m + os.sep) for m in mounted):
            argv += ["--ro-bind", folder, folder]
            mounted.add(folder)
    return argv + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", temp_dir_inside, "--chdir", temp_dir_inside, "--"]


@functools.lru_cache(maxsize=None)
def detect_jail() -> Jail:
    """bubblewrap when it runs here (tried once per process), else no OS jail, with the reason."""
    if shutil.which("bwrap") is None:
        return Jail("none", "no bwrap on PATH: install the Debian package bubblewrap")
    try:
        done = subprocess.run(bwrap_argv() + [_python(), "-I", "-S", "-c", "pass"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Jail("none", f"bwrap could not start: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()[:200]
        return Jail("none", f"bwrap cannot create its namespaces here: {why}")
    filtered = Jail("bwrap", "bwrap created its namespaces", seccomp=True)
    if code_seccomp.program() is not None:
        argv, fds = jail_argv(filtered)
        try:
            if subprocess.run(argv + [_python(), "-I", "-S", "-c", "pass"], capture_output=True, timeout=30,
                              pass_fds=fds).returncode == 0:
                return filtered
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            for fd in fds:
                os.close(fd)
    return Jail("bwrap", "bwrap created its namespaces")


def jail_argv(jail: Jail) -> tuple[list[str], tuple[int, ...]]:
    """The command line in front of a jailed process and the descriptors it must inherit (the seccomp
    filter's pipe, which the caller closes after the start)."""
    argv = bwrap_argv()
    if not jail.seccomp:
        return argv, ()
    read_end, write_end = os.pipe()
    os.write(write_end, code_seccomp.program())
    os.close(write_end)
    return argv[:1] + ["--seccomp", str(read_end)] + argv[1:], (read_end,)


def jailed_worker_command(command: list[str], env: dict[str, str], readable: str,
                          ) -> tuple[list[str], tuple[int, ...], Jail]:
    """`command` (a long-lived worker, e.g. the `python` tool's) behind bubblewrap where it runs here: `readable`
    (the folder holding the rlvr package) and the Python environment (`sys.prefix`) mounted read-only, a private
    writable folder (JAIL_FOLDER) as its RLVR_VERIFIER_TMPDIR, only the RLVR_*, PYTHON* and *_NUM_THREADS
    variables of `env`.
    -> (the command line, the descriptors it must inherit, which the caller closes after the start, the jail);
    where bubblewrap cannot run, `command` unchanged and a jail of kind "none" that says why."""
    jail = detect_jail()
    if jail.kind != "bwrap":
        return command, (), jail
    argv, fds = jail_argv(jail)
    extra: list[str] = []
    mounted: list[str] = []
    for folder in (readable, sys.prefix):  # rlvr's folder, and the environment it runs in (a venv's site-packages)
        folder = os.path.realpath(folder)
        if not any(folder == m or folder.startswith(m + os.sep) for m in mounted):
            extra += ["--ro-bind", folder, folder]
            mounted.append(folder)
    kept = {key: value for key, value in env.items()
            if key.startswith(("RLVR_", "PYTHON")) or key.endswith("_NUM_THREADS")}
    kept["RLVR_VERIFIER_TMPDIR"] = JAIL_FOLDER
    for key, value in sorted(kept.items()):
        extra += ["--setenv", key, value]
    end = len(argv) - 1  # argv ends with "--": the mounts and variables go before it
    return argv[:end] + extra + argv[end:] + command, fds, jail


def choose_jail(mode: str) -> Jail:
    """The jail for `mode` (`auto`, `required`, `none`); raises when `required` cannot be met."""
    if mode not in JAILS:
        raise ValueError(f"code: task.options.jail={mode!r}; valid choices: {', '.join(JAILS)}")
    if mode == "none":
        return Jail("none", "jail=none")
    jail = detect_jail()
    if mode == "required" and jail.kind != "bwrap":
        raise RuntimeError(f"code: task.options.jail=required but {jail.reason}")
    return jail


@dataclass
class TestRun:
    """Outcomes per test (`passed`, `failed`, `error`, `timeout`, `crashed`), or why there are none."""

    outcomes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | timeout (the whole run past its limit) | error (the harness failed)
    detail: str = ""
    seconds: float = 0.0


def _spawn(jail: Jail, role_args: list[str], memory_mb: int, **popen) -> tuple[subprocess.Popen, str | None]:
    host_temp, fds = None, ()
    if jail.kind == "bwrap":
        (prefix, fds), temp_dir = jail_argv(jail), JAIL_FOLDER
    else:
        prefix = []
        host_temp = temp_dir = tempfile.mkdtemp(prefix="rlvr-code-")
    argv = prefix + [_python(), "-I", "-S", "-B", str(RUNNER), role_args[0], temp_dir, str(memory_mb)] + role_args[1:]
    popen["pass_fds"] = tuple(popen.get("pass_fds", ())) + fds
    try:
        process = subprocess.Popen(argv, stderr=subprocess.DEVNULL, start_new_session=True, **popen)
    finally:
        for fd in fds:
            os.close(fd)
    return process, host_temp


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_tests(program: str, setup: str, steps: list[tuple[str, bool]], entry_point: str, *, jail: Jail,
              test_seconds: float, memory_mb: int = DEFAULT_MEMORY_MB) -> TestRun:
    """Run `program` (the model's code) against `steps` (test code, whether it counts as a test), after `setup`."""
    started = time.monotonic()
    to_candidate_r, to_candidate_w = os.pipe()
    from_candidate_r, from_candidate_w = os.pipe()
    processes, temps = [], []
    try:
        candidate, temp = _spawn(jail, ["candidate"], memory_mb, stdin=to_candidate_r, stdout=from_candidate_w)
        processes.append(candidate)
        temps.append(temp)
        os.close(to_candidate_r)
        os.close(from_candidate_w)
        code_values.write_frame(to_candidate_w, {"program": program})
        tests, temp = _spawn(jail, ["tests", str(to_candidate_w), str(from_candidate_r)], memory_mb,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(to_candidate_w, from_candidate_r))
        processes.append(tests)
        temps.append(temp)
        os.close(to_candidate_w)
        os.close(from_candidate_r)
        job = {"setup": setup, "steps": [list(step) for step in steps], "entry_point": entry_point,
               "test_seconds": test_seconds}
        try:
            code_values.write_frame(tests.stdin.fileno(), job)
            tests.stdin.close()
        except OSError as exc:  # the tests process died before reading its job
            return TestRun(status="error", detail=f"the tests process failed to start: {exc}"[:300])
        deadline = started + STARTUP_SECONDS + (test_seconds + 1.0) * max(1, len(steps))

        def wait() -> None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([tests.stdout], [], [], remaining)[0]:
                raise TimeoutError

        try:
            report = code_values.read_frame(tests.stdout.fileno(), wait)
        except TimeoutError:
            return TestRun(status="timeout", detail="the tests ran past their overall limit",
                           seconds=time.monotonic() - started)
        except (EOFError, OSError, code_values.Unsendable) as exc:
            return TestRun(status="error", detail=f"the tests process failed: {type(exc).__name__}: {exc}"[:300],
                           seconds=time.monotonic() - started)
        outcomes = [str(o[0]) for o in report["outcomes"]]
        return TestRun(outcomes=outcomes, details=[str(o[1]) for o in report["outcomes"]],
                       detail=str(report.get("setup_error", "")), seconds=time.monotonic() - started)
    finally:
        for fd in (to_candidate_r, to_candidate_w, from_candidate_r, from_candidate_w):
            try:
                os.close(fd)
            except OSError:
                pass
        for process in processes:
            _stop(process)
        for temp in temps:
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
