"""Run a verifier's slow or risky check in a separate process under a hard time limit.

Why a process and not `signal.alarm`: an alarm only fires in the main thread, and only between
Python bytecodes, so it cannot stop work done inside C (a big-integer power such as
`9^{9^{9^9}}`, a regular expression that backtracks) and it breaks a caller that scores from a
thread. A child process can always be killed. One long-lived worker per process serves every
check (about 0.2 ms of overhead per call); when a check runs past its limit the worker is
killed (SIGKILL), the verdict is `timeout`, and a fresh worker starts on the next call. The
worker also caps its own memory (`RLVR_VERIFIER_MEMORY_MB`, default 4096) so a huge number
cannot exhaust the machine.

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
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STARTUP_SECONDS = 120.0  # importing sympy and friends on a busy machine; not part of any check's limit


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


def _reasoning_gym_score(dataset_name: str, config: dict, answer: str, entry: dict) -> float:
    import reasoning_gym

    key = json.dumps([dataset_name, config], sort_keys=True, default=str)
    if key not in _DATASETS:
        _DATASETS[key] = reasoning_gym.create_dataset(dataset_name, **{**config, "size": 1, "seed": 0})
    return float(_DATASETS[key].score_answer(answer, entry))


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


def _limit_memory() -> None:
    megabytes = int(os.environ.get("RLVR_VERIFIER_MEMORY_MB", "4096"))
    if megabytes <= 0:
        return
    try:
        import resource

        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not available on this platform
        pass


def _read_exact(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def worker_main() -> None:
    """Serve requests from stdin until it closes. Imports are requested as `("import", module)`."""
    _limit_memory()
    # Replies go to a private copy of stdout; anything a library prints goes to stderr instead,
    # so it cannot be mistaken for a reply.
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
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
            if name == "import":
                importlib.import_module(args[0])
                reply = {"ok": True, "value": None}
            else:
                function, _ = FUNCTIONS[name]
                reply = {"ok": True, "value": function(*args)}
        except BaseException as exc:  # noqa: BLE001 - any failure becomes an "error" verdict
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        try:
            line = json.dumps(reply)
        except (TypeError, ValueError):
            line = json.dumps({"ok": False, "error": "result is not JSON"})
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
    """A restartable child process; `call` never raises and never waits past its limit."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._buffer = b""
        self._imported: set[str] = set()
        self._lock = threading.Lock()
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from rlvr.tasks.worker import worker_main; worker_main()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, cwd=package_root,
        )
        self._buffer = b""
        self._imported = set()
        line = self._read_line(time.monotonic() + STARTUP_SECONDS)
        if line != b"ready":
            self._kill()
            raise RuntimeError("verifier worker did not start")

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
            self._kill()
            return CallResult("error", detail="verifier worker died", seconds=time.monotonic() - started)
        line = self._read_line(started + limit)
        elapsed = time.monotonic() - started
        if line is None:
            self._kill()
            self.restarts += 1
            return CallResult("timeout", detail=f"check ran past {limit:g} s", seconds=elapsed)
        if line == b"":
            self._kill()
            self.restarts += 1
            return CallResult("error", detail="verifier worker died (out of memory?)", seconds=elapsed)
        try:
            reply = json.loads(line)
        except ValueError:
            self._kill()
            return CallResult("error", detail="unreadable reply from the verifier worker", seconds=elapsed)
        if not reply["ok"]:
            return CallResult("error", detail=reply["error"], seconds=elapsed)
        return CallResult("ok", value=reply["value"], seconds=elapsed)

    def call(self, name: str, *args: Any, timeout: float) -> CallResult:
        """Run `FUNCTIONS[name](*args)` in the worker; `timeout` seconds is a hard limit."""
        if name not in FUNCTIONS:
            raise KeyError(f"unknown verifier function {name!r}; valid: {', '.join(FUNCTIONS)}")
        module = FUNCTIONS[name][1]
        with self._lock:
            try:
                if self._process is None or self._process.poll() is not None:
                    self._kill()
                    self._start()
                if module and module not in self._imported:  # imports do not count against the limit
                    imported = self._request("import", (module,), STARTUP_SECONDS)
                    if imported.status != "ok":
                        return CallResult("error", detail=f"cannot import {module}: {imported.detail}")
                    self._imported.add(module)
            except (OSError, RuntimeError) as exc:
                return CallResult("error", detail=str(exc))
            return self._request(name, args, timeout)

    def warm_up(self, module: str | None = None) -> None:
        """Start the worker (and import `module`) now rather than inside the first timed check."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._kill()
                self._start()
            if module and module not in self._imported:
                if self._request("import", (module,), STARTUP_SECONDS).status == "ok":
                    self._imported.add(module)

    def close(self) -> None:
        with self._lock:
            self._kill()


WORKER = VerifierWorker()
atexit.register(WORKER.close)


def call_with_timeout(name: str, *args: Any, timeout: float) -> CallResult:
    """Run a registered check in the shared worker process under a hard time limit."""
    return WORKER.call(name, *args, timeout=timeout)

