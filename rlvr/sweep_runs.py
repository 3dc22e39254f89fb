"""One run of a sweep (a grid point or a `before:` stage): its status, and training it to done.

A rerun of a sweep is resumable run by run: a finished run (its `sweep_done.json` written) is
skipped, a run with a checkpoint is resumed from it, and a run that crashed before its first
checkpoint starts over from its config, its stale logs removed first so none is appended to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from rlvr.utils import atomic_write_text

DONE_FILE = "sweep_done.json"  # written when a run of the sweep returns; a grid run's holds its iteration budget
# What a run that crashed before its first checkpoint leaves behind; removed before it starts over.
STALE_LOGS = ("metrics.jsonl", "samples.jsonl", "eval.jsonl", "generations.jsonl")


def _checkpoint_iteration(run_dir: Path) -> int | None:
    from rlvr.run.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    return int(checkpoint.name.split("_")[-1]) if checkpoint is not None else None


def run_status(run_dir: Path, iterations: int | None) -> str:
    """"new", "finished", "resume" (has a checkpoint) or "restart" (logged, but no checkpoint).

    `iterations`: the budget a grid run must have reached (a done file or a checkpoint at it or past it);
    None for a run with its own budget (a `before:` stage): only its done file finishes it."""
    done = run_dir / DONE_FILE
    if done.exists() and (iterations is None or json.loads(done.read_text()).get("iterations", 0) >= iterations):
        return "finished"
    checkpoint_iteration = _checkpoint_iteration(run_dir)
    if checkpoint_iteration is not None:
        return "finished" if iterations is not None and checkpoint_iteration >= iterations else "resume"
    return "restart" if (run_dir / "metrics.jsonl").exists() else "new"


def train_to_done(run_dir: Path, status: str, start: Callable[[], object], resume: Callable[[], object],
                  record: dict) -> None:
    """Bring one run to done from its `status`: skip it (finished), resume it, or start it (a restart's stale
    logs removed first); then write `record` as its done file."""
    if status == "finished":
        return
    if status == "resume":
        resume()
    else:
        for stale in STALE_LOGS:
            (run_dir / stale).unlink(missing_ok=True)
        start()
    atomic_write_text(run_dir / DONE_FILE, json.dumps(record) + "\n")
