"""Run a verifier's slow or risky check in a separate, locked-down process under a hard time limit.

Why a process and not `signal.alarm`: an alarm only fires in the main thread, and only between
Python bytecodes, so it cannot stop work done inside C (a big-integer power such as
`9^{9^{9^9}}`, a regular expression that backtracks) and it breaks a caller that scores from a
thread. A child process can always be killed. One long-lived worker per process serves every
check (about 0.2 ms of overhead per call); when a check runs past its limit the worker is
killed (SIGKILL), the verdict is `timeout`, and a fresh worker is started at once in a background
thread, so the restart (seconds: it imports sympy and friends) overlaps the caller's other work
and is never inside a check's timed window; a call that arrives before it is ready waits for it
untimed. The worker imports the libraries its checks need, then enters the sandbox
(`rlvr.tasks.sandbox`: resource limits, its own temporary folder, an audit hook refusing writes
elsewhere, sockets, new processes and ctypes). A check needing a library the running worker
lacks gets a fresh worker that imports it too.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rlvr.tasks.sandbox import CPU_SECONDS, enter

STARTUP_SECONDS = 120.0  # importing sympy and friends on a busy machine; not part of any check's limit
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
    from rlvr.tasks.safe_parse import Refused

    try:
        text = scorer_text(dataset_name, answer, entry)
    except Refused as exc:
        return {"refused": str(exc)}
    key = json.dumps([dataset_name, config], sort_keys=True, default=str)
    if key not in _DATASETS:
        _DATASETS[key] = reasoning_gym.create_dataset(dataset_name, **{**config, "size": 1, "seed": 0})
    return {"score": float(_DATASETS[key].score_answer(text, entry)), "text": text[:200]}


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
    functions = _functions(os.environ.get("RLVR_VERIFIER_EXTRA_FUNCTIONS"))
    for module in filter(None, os.environ.get("RLVR_VERIFIER_MODULES", "").split(",")):
        importlib.import_module(module)
    # Replies go to a private copy of stdout; anything a library prints goes to stderr instead,
    # so it cannot be mistaken for a reply.
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
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


class VerifierWorker:
    """A restartable child process; `call` never raises and never waits past its limit.

    `extra_functions` names a module whose `FUNCTIONS` join the built-in ones (for tests).
    """

    def __init__(self, extra_functions: Optional[str] = None) -> None:
        self.extra_functions = extra_functions
        self.functions = _functions(extra_functions)
        self._process: subprocess.Popen | None = None
        self._temp_dir: str | None = None
        self._buffer = b""
        self._modules: frozenset[str] = frozenset()  # imported by the running (or next) worker
        self._lock = threading.Lock()
        self._restarter: threading.Thread | None = None
        self._closed = False  # set by `close`: a pending background restart then starts nothing
        self.restarts = 0

    # -- process lifetime (callers hold the lock)

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _start(self, modules: frozenset[str]) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self._temp_dir = tempfile.mkdtemp(prefix="rlvr-verifier-")
        env.update(RLVR_VERIFIER_TMPDIR=self._temp_dir, RLVR_VERIFIER_MODULES=",".join(sorted(modules)),
                   RLVR_VERIFIER_EXTRA_FUNCTIONS=self.extra_functions or "", PYTHONDONTWRITEBYTECODE="1")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from rlvr.tasks.worker import worker_main; worker_main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=package_root,
            )
        except OSError:
            self._kill()
            raise
        self._buffer = b""
        self._modules = modules
        line = self._read_line(time.monotonic() + STARTUP_SECONDS)
        if line != b"ready":
            self._kill()
            raise RuntimeError(f"verifier worker did not start (importing {', '.join(sorted(modules)) or 'nothing'})")

    def _kill(self) -> None:
        if self._process is not None:
            try:
                self._process.kill()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self._process = None
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _ensure(self, module: str | None) -> None:
        """A live worker that has imported `module`: started here, untimed, if there is none."""
        wanted = self._modules | ({module} if module else set())
        if not self._alive() or wanted != self._modules:
            self._kill()
            self._start(frozenset(wanted))

    def _replace_in_background(self) -> None:
        """Kill the worker and start its successor in a thread, outside every check's timed window."""
        self._kill()
        self.restarts += 1

        def restart() -> None:
            with self._lock:
                if not self._closed and not self._alive():
                    try:
                        self._start(self._modules)
                    except (OSError, RuntimeError):
                        pass  # the next call tries again and reports the failure

        self._restarter = threading.Thread(target=restart, name="rlvr-verifier-restart", daemon=True)
        self._restarter.start()

    def wait_for_restart(self, timeout: float = STARTUP_SECONDS) -> bool:
        """Wait for a background restart to finish; True when a worker is running afterwards."""
        if self._restarter is not None:
            self._restarter.join(timeout)
        with self._lock:
            return self._alive()

    # -- one request

    def _read_line(self, deadline: float) -> bytes | None:
        fd = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the worker died
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _request(self, name: str, args: tuple, limit: float) -> CallResult:
        started = time.monotonic()
        payload = pickle.dumps((name, args))
        try:
            self._process.stdin.write(struct.pack(">I", len(payload)) + payload)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._replace_in_background()
            return CallResult("error", detail="verifier worker died", seconds=time.monotonic() - started)
        line = self._read_line(started + limit)
        elapsed = time.monotonic() - started
        if line is None:
            self._replace_in_background()
            return CallResult("timeout", detail=f"check ran past {limit:g} s", seconds=elapsed)
        if line == b"":
            self._replace_in_background()
            return CallResult("error", detail="verifier worker died (out of memory or CPU time?)", seconds=elapsed)
        try:
            reply = json.loads(line)
        except ValueError:
            self._replace_in_background()
            return CallResult("error", detail="unreadable reply from the verifier worker", seconds=elapsed)
        if float(reply.get("cpu_seconds", 0.0)) > CPU_RECYCLE_SECONDS:
            self._replace_in_background()  # before its CPU-time limit kills it inside a check
        if reply.get("refused"):
            return CallResult("error", detail=f"verifier sandbox refused: {'; '.join(reply['refused'])[:300]}",
                              seconds=elapsed)
        if not reply["ok"]:
            return CallResult("error", detail=reply["error"], seconds=elapsed)
        return CallResult("ok", value=reply["value"], seconds=elapsed)

    def call(self, name: str, *args: Any, timeout: float) -> CallResult:
        """Run `FUNCTIONS[name](*args)` in the worker; `timeout` seconds is a hard limit.

        Starting a worker (or waiting for one being restarted) happens before the limit's clock starts.
        """
        if name not in self.functions:
            raise KeyError(f"unknown verifier function {name!r}; valid: {', '.join(self.functions)}")
        with self._lock:
            self._closed = False
            try:
                self._ensure(self.functions[name][1])
            except (OSError, RuntimeError) as exc:
                return CallResult("error", detail=str(exc))
            return self._request(name, args, timeout)

    def warm_up(self, module: str | None = None) -> None:
        """Start the worker (importing `module`) now rather than before the first check."""
        with self._lock:
            self._closed = False
            self._ensure(module)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._kill()


WORKER = VerifierWorker()
atexit.register(WORKER.close)


def call_with_timeout(name: str, *args: Any, timeout: float) -> CallResult:
    """Run a registered check in the shared worker process under a hard time limit."""
    return WORKER.call(name, *args, timeout=timeout)
