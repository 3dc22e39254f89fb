"""Run a verifier's slow or risky check in a separate, locked-down process under a hard time limit.

Why a process and not `signal.alarm`: an alarm only fires in the main thread, and only between
Python bytecodes, so it cannot stop work done inside C (a big-integer power such as
`9^{9^{9^9}}`, a regular expression that backtracks) and it breaks a caller that scores from a
thread. A child process can always be killed. One long-lived worker per process serves every
check (about 0.2 ms of overhead per call), and a warm spare stands behind it: a second worker,
started as soon as the first is ready, that imports its libraries (sympy, reasoning_gym: seconds
to minutes on a loaded machine) in its own process while the first one serves. When a check runs
past its limit the worker is killed (SIGKILL), the verdict is `timeout`, the spare takes over and
a new spare starts behind it, so a restart's import is never charged to the checks waiting behind
it, nor to any check's timed window (a call that arrives before the promoted spare is ready waits
for it untimed). A worker that cannot start (an import error, a crash, not ready within
`STARTUP_SECONDS` of its spawn) is one error, printed once with its reason; from then on every
check that needs those libraries is an `error` verdict at once. The worker imports the libraries
its checks need, then enters the sandbox (`rlvr.tasks.verification.sandbox`: resource limits, its own
temporary folder, an audit hook refusing writes elsewhere, sockets, new processes and ctypes). A
check needing a library the running worker lacks gets a fresh worker (and spare) that import it
too. `close`, and the exit of this process, stop both.

Protocol: the parent writes length-prefixed pickles `(function_name, args)`; the worker answers
one JSON line. Only the functions in `FUNCTIONS` can be called, and results come back as JSON,
so the parent never unpickles anything the worker produced.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import pickle
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rlvr.tasks.verification.sandbox import CPU_SECONDS, enter

STARTUP_SECONDS = 120.0  # importing sympy and friends on a busy machine; not part of any check's limit
START_FAILED = "failed: "  # the worker's first line when it could not import its libraries, then why
CPU_RECYCLE_SECONDS = CPU_SECONDS / 2  # a worker that has used this much CPU time is replaced


# ----------------------------------------------------------------------------- worker side


def _math_verify_equal(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    # The outer process enforces the time limit, so math-verify's own signal-based timeouts
    # (which swallow a timeout into "not equal") are switched off.
    gold_parsed = parse(gold, parsing_timeout=None)
    answer_parsed = parse(answer, parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


_DATASETS: dict[str, Any] = {}


def _reasoning_gym_score(dataset_name: str, config: dict, answer: str, entry: dict) -> dict:
    """`{"score": s, "text": t}` with `t` the text the scorer saw, or `{"refused": why}`.

    The answer is parsed and re-rendered here, in the same call as the scorer, so no caller can
    reach a scorer that evaluates text with the model's own characters.
    """
    import reasoning_gym

    from rlvr.tasks.reasoning_gym_answers import scorer_text
    from rlvr.tasks.verification.safe_parse import Refused

    try:
        text = scorer_text(dataset_name, answer, entry)
    except Refused as exc:
        return {"refused": str(exc)}
    key = json.dumps([dataset_name, config], sort_keys=True, default=str)
    if key not in _DATASETS:
        _DATASETS[key] = reasoning_gym.create_dataset(dataset_name, **{**config, "size": 1, "seed": 0})
    return {"score": float(_DATASETS[key].score_answer(text, entry)), "text": text}


def _sleep(seconds: float) -> float:  # for tests of the time limit itself
    time.sleep(seconds)
    return seconds


def _echo(value: Any) -> Any:
    """For tests: returns `value` after printing to stdout, which must not disturb the replies."""
    print("noise from a library")
    return value


FUNCTIONS = {
    "math_verify_equal": (_math_verify_equal, "math_verify"),
    "reasoning_gym_score": (_reasoning_gym_score, "reasoning_gym"),
    "sleep": (_sleep, None),
    "echo": (_echo, None),
}


def _functions(extra_module: Optional[str]) -> dict:
    """`FUNCTIONS` plus those of `extra_module` (tests register probes of the sandbox this way)."""
    if not extra_module:
        return dict(FUNCTIONS)
    return {**FUNCTIONS, **importlib.import_module(extra_module).FUNCTIONS}


def _read_exact(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def worker_main() -> None:
    """Import, lock down, then serve requests from stdin until it closes."""
    # Replies go to a private copy of stdout; anything a library prints (on import too) goes to
    # stderr instead, so it cannot be mistaken for a reply.
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        functions = _functions(os.environ.get("RLVR_VERIFIER_EXTRA_FUNCTIONS"))
        for module in filter(None, os.environ.get("RLVR_VERIFIER_MODULES", "").split(",")):
            importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which reports it once
        stdout.write(f"{START_FAILED}{type(exc).__name__}: {str(exc)[:300]}".replace("\n", " ") + "\n")
        stdout.flush()
        return
    stdin = sys.stdin.buffer
    sandbox = enter(os.environ["RLVR_VERIFIER_TMPDIR"], int(os.environ.get("RLVR_VERIFIER_MEMORY_MB", "4096")))
    stdout.write("ready\n")
    stdout.flush()
    while True:
        header = _read_exact(stdin, 4)
        if header is None:
            return
        payload = _read_exact(stdin, struct.unpack(">I", header)[0])
        if payload is None:
            return
        name, args = pickle.loads(payload)
        try:
            reply = {"ok": True, "value": functions[name][0](*args)}
        except BaseException as exc:  # noqa: BLE001 - any failure becomes an "error" verdict
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        reply["refused"] = sandbox.take_refusals()
        reply["cpu_seconds"] = time.process_time()
        try:
            line = json.dumps(reply)
        except (TypeError, ValueError):
            line = json.dumps({"ok": False, "error": "result is not JSON", "refused": reply["refused"]})
        stdout.write(line + "\n")
        stdout.flush()


# ----------------------------------------------------------------------------- parent side


@dataclass
class CallResult:
    status: str  # "ok", "timeout" or "error"
    value: Any = None
    detail: str = ""
    seconds: float = 0.0


class _WorkerProcess:
    """One worker process: spawned at once (its import runs on its own), ready after its first line."""

    def __init__(self, modules: frozenset[str], extra_functions: Optional[str],
                 memory_mb: Optional[int] = None, jailed: bool = False) -> None:
        env = dict(os.environ)
        if memory_mb is not None:
            env["RLVR_VERIFIER_MEMORY_MB"] = str(memory_mb)
        # The folder that holds the `rlvr` package (whatever depth this module sits at), so the worker
        # imports the same rlvr, and the caller's extra functions beside it.
        package_root = str(next(folder for folder in Path(__file__).resolve().parents
                                if (folder / "rlvr" / "__init__.py").is_file()))
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self.modules = modules
        self.temp_dir: str | None = tempfile.mkdtemp(prefix="rlvr-verifier-")
        env.update(RLVR_VERIFIER_TMPDIR=self.temp_dir, RLVR_VERIFIER_MODULES=",".join(sorted(modules)),
                   RLVR_VERIFIER_EXTRA_FUNCTIONS=extra_functions or "", PYTHONDONTWRITEBYTECODE="1")
        command = [sys.executable, "-c", "from rlvr.tasks.verification.worker import worker_main; worker_main()"]
        fds: tuple[int, ...] = ()
        if jailed:  # model code runs here on purpose: bubblewrap in front where it runs (code_jail)
            from rlvr.tasks.verification.code_jail import jailed_worker_command

            command, fds, _ = jailed_worker_command(command, env, package_root)
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                cwd=package_root, pass_fds=fds,
            )
        except OSError:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        self.ready_by = time.monotonic() + STARTUP_SECONDS  # its start-up allowance, from the spawn
        self.ready = False
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self) -> Optional[str]:
        """None once the worker has imported its libraries and entered the sandbox, else why it never
        will (it is killed then)."""
        if self.ready:
            return None
        line = self.read_line(self.ready_by)
        if line == b"ready":
            self.ready = True
            return None
        importing = f"importing {', '.join(sorted(self.modules)) or 'nothing'}"
        if line is None:
            reason = f"not ready after {STARTUP_SECONDS:g} s ({importing})"
        elif line.startswith(START_FAILED.encode()):
            reason = f"{line[len(START_FAILED):].decode('utf-8', 'replace')} ({importing})"
        elif line == b"":
            reason = f"it exited with status {self.process.wait()} while {importing}"
        else:
            reason = f"unexpected first line {line[:100]!r} ({importing})"
        self.kill()
        return reason

    def read_line(self, deadline: float) -> bytes | None:
        """The next line, b"" if the worker died, None when `deadline` passes first."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the worker died
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


class VerifierWorker:
    """A worker process with a warm spare behind it; `call` never raises and never waits past its limit.

    `extra_functions` names a module whose `FUNCTIONS` join the built-in ones (tests' probes, the
    `python` tool); `memory_mb` replaces `RLVR_VERIFIER_MEMORY_MB` as its processes' address-space limit;
    `jailed` starts its processes behind bubblewrap and the seccomp filter where they run here
    (`code_jail.jailed_worker_command`: the `python` tool, whose model code the audit hook alone cannot hold).
    """

    def __init__(self, extra_functions: Optional[str] = None, memory_mb: Optional[int] = None,
                 jailed: bool = False) -> None:
        self.extra_functions = extra_functions
        self.memory_mb = memory_mb
        self.jailed = jailed  # its processes behind bubblewrap where it runs (for model code run on purpose)
        self.functions = _functions(extra_functions)
        self._active: _WorkerProcess | None = None
        self._spare: _WorkerProcess | None = None  # same modules as the active one, importing or ready
        self._modules: frozenset[str] = frozenset()  # imported by the active (or next) worker
        self._failures: dict[frozenset[str], str] = {}  # modules whose worker could not start -> why
        self._lock = threading.Lock()
        self.restarts = 0
        _ALL_WORKERS.add(self)

    # -- process lifetime (callers hold the lock)

    def _spawn_spare(self) -> None:
        if self._spare is None:
            try:
                self._spare = _WorkerProcess(self._modules, self.extra_functions, self.memory_mb, self.jailed)
            except OSError:
                self._spare = None  # no spare: the next replacement starts from scratch

    def _stop_all(self) -> None:
        for worker in (self._active, self._spare):
            if worker is not None:
                worker.kill()
        self._active = self._spare = None

    def _failure_for(self, modules: frozenset[str]) -> Optional[str]:
        return next((why for failed, why in self._failures.items() if failed <= modules), None)

    def _ensure(self, module: str | None) -> Optional[str]:
        """A ready worker that has imported `module` (waited for here, untimed), or why there is none."""
        wanted = self._modules | ({module} if module else set())
        failure = self._failure_for(wanted)
        if failure is not None:
            return f"verifier worker unavailable: it could not start earlier ({failure[:120]})"
        if wanted != self._modules:
            self._stop_all()
            self._modules = wanted
        if self._active is not None and not self._active.alive():
            self._replace()
        if self._active is None:
            self._active, self._spare = self._spare, None
        try:
            if self._active is None:
                self._active = _WorkerProcess(wanted, self.extra_functions, self.memory_mb, self.jailed)
            reason = self._active.wait_ready()
        except OSError as exc:
            reason = f"it could not be started: {exc}"
        if reason is not None:
            self._stop_all()  # the spare imports the same libraries: it would fail the same way
            self._failures[wanted] = reason
            self._modules = frozenset()  # checks needing none of these still get a worker
            print(f"error: the verifier worker did not start: {reason}. Every check that needs "
                  f"{', '.join(sorted(wanted)) or 'it'} is an error verdict from now on.", file=sys.stderr)
            return f"verifier worker did not start: {reason}"
        self._spawn_spare()
        return None

    def _replace(self) -> None:
        """Kill the active worker; the spare takes over, and a new spare starts importing behind it."""
        if self._active is not None:
            self._active.kill()
        self._active, self._spare = self._spare, None
        self.restarts += 1
        self._spawn_spare()

    def wait_for_restart(self) -> bool:
        """Wait until the worker that took over after a restart is ready; True when one is."""
        with self._lock:
            return self._active is not None and self._active.alive() and self._active.wait_ready() is None

    def pids(self) -> list[int]:
        """The process ids of the active worker and its spare (for tests of their cleanup)."""
        with self._lock:
            return [worker.pid for worker in (self._active, self._spare) if worker is not None]

    # -- one request

    def _request(self, name: str, args: tuple, limit: float) -> CallResult:
        started = time.monotonic()
        payload = pickle.dumps((name, args))
        try:
            self._active.process.stdin.write(struct.pack(">I", len(payload)) + payload)
            self._active.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._replace()
            return CallResult("error", detail="verifier worker died", seconds=time.monotonic() - started)
        line = self._active.read_line(started + limit)
        elapsed = time.monotonic() - started
        if line is None:
            self._replace()
            return CallResult("timeout", detail=f"check ran past {limit:g} s", seconds=elapsed)
        if line == b"":
            self._replace()
            return CallResult("error", detail="verifier worker died (out of memory or CPU time?)", seconds=elapsed)
        try:
            reply = json.loads(line)
        except ValueError:
            self._replace()
            return CallResult("error", detail="unreadable reply from the verifier worker", seconds=elapsed)
        if float(reply.get("cpu_seconds", 0.0)) > CPU_RECYCLE_SECONDS:
            self._replace()  # before its CPU-time limit kills it inside a check
        if reply.get("refused"):
            return CallResult("error", detail=f"verifier sandbox refused: {'; '.join(reply['refused'])[:300]}",
                              seconds=elapsed)
        if not reply["ok"]:
            return CallResult("error", detail=reply["error"], seconds=elapsed)
        return CallResult("ok", value=reply["value"], seconds=elapsed)

    def call(self, name: str, *args: Any, timeout: float) -> CallResult:
        """Run `FUNCTIONS[name](*args)` in the worker; `timeout` seconds is a hard limit.

        Waiting for a worker to be ready happens before the limit's clock starts.
        """
        if name not in self.functions:
            raise KeyError(f"unknown verifier function {name!r}; valid: {', '.join(self.functions)}")
        with self._lock:
            problem = self._ensure(self.functions[name][1])
            if problem is not None:
                return CallResult("error", detail=problem)
            return self._request(name, args, timeout)

    def warm_up(self, module: str | None = None) -> None:
        """Start the worker (importing `module`) and its spare now rather than before the first check.

        Raises RuntimeError when the worker cannot start.
        """
        with self._lock:
            problem = self._ensure(module)
        if problem is not None:
            raise RuntimeError(problem)

    def close(self) -> None:
        """Stop the worker and its spare (a later call starts them again)."""
        with self._lock:
            self._stop_all()


_ALL_WORKERS: "weakref.WeakSet[VerifierWorker]" = weakref.WeakSet()


@atexit.register
def _close_all_workers() -> None:
    """At exit no worker or spare outlives this process, whether or not its owner closed it."""
    for worker in list(_ALL_WORKERS):
        worker.close()


WORKER = VerifierWorker()


def call_with_timeout(name: str, *args: Any, timeout: float) -> CallResult:
    """Run a registered check in the shared worker process under a hard time limit."""
    return WORKER.call(name, *args, timeout=timeout)
