"""Running a training command as a user would, and reading what it wrote: shared by the learning benchmarks.

`train_in_fresh_process` starts a command (`rlvr train ...`, or a TRL side that writes the same
files) as a new process, timed from the moment it starts (model loading included), prints each
eval as it lands in the run's eval.jsonl, with its Wilson 95% interval, and returns the run's
metrics and evals. `accuracy_ci`, `best_and_final` and `first_best` summarise eval records the
same way for every benchmark.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the rlvr of this checkout, also when a script runs as `python benchmarks/GROUP/x.py`
    sys.path.insert(0, str(REPO))


def read_jsonl(path: Path) -> list[dict]:
    """The records of a jsonl file; a last line still being written (not valid JSON yet) is left out."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def accuracy_ci(record: dict) -> dict:
    """An eval record's accuracy with its Wilson 95% interval (rlvr eval's), from eval/accuracy and the count."""
    from rlvr.training.evaluation import wilson_interval

    accuracy, count = record.get("eval/accuracy"), int(record.get("eval/num_examples") or 0)
    if accuracy is None or not math.isfinite(accuracy) or count == 0:
        return {"accuracy": math.nan, "low": math.nan, "high": math.nan, "n": count}
    low, high = wilson_interval(round(accuracy * count), count)
    return {"accuracy": accuracy, "low": low, "high": high, "n": count}


def describe_eval(record: dict, started: float) -> str:
    ci = accuracy_ci(record)
    return (f"iteration {record.get('iteration')}: accuracy {ci['accuracy']:.3f} (95% CI {ci['low']:.3f} to "
            f"{ci['high']:.3f}, n={ci['n']}) at {record['time/unix'] - started:.0f} s")


def train_in_fresh_process(command: list[str], run_dir: Path, *, label: str = "", poll_seconds: float = 5.0,
                           on_eval: Optional[Callable[[dict], None]] = None) -> dict:
    """Run `command` (cwd: the repository) and watch `run_dir/eval.jsonl`; returns started, total_s, metrics, evals."""
    print("$", " ".join(command), flush=True)
    started = time.time()
    process = subprocess.Popen(command, cwd=REPO)
    seen = 0

    def report_new_evals() -> None:
        nonlocal seen
        evals = read_jsonl(run_dir / "eval.jsonl")
        for record in evals[seen:]:
            print(f"  [{label}] {describe_eval(record, started)}", flush=True)
            if on_eval is not None:
                on_eval(record)
        seen = len(evals)

    while process.poll() is None:
        time.sleep(poll_seconds)
        report_new_evals()
    report_new_evals()
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
    return {"started": started, "total_s": time.time() - started,
            "metrics": read_jsonl(run_dir / "metrics.jsonl"), "evals": read_jsonl(run_dir / "eval.jsonl")}


def best_and_final(evals: list[dict], started: float) -> dict:
    """The best and the last eval (accuracy, its interval, iteration, seconds since the command started)."""
    def point(record):
        return {**accuracy_ci(record), "iteration": record.get("iteration"), "seconds": record["time/unix"] - started}

    if not evals:
        return {"best": None, "final": None}
    return {"best": point(first_best(evals)), "final": point(evals[-1])}


def first_best(records: list[dict], key: str = "eval/accuracy") -> dict:
    """The record with the highest `key`, the earliest iteration among equals."""
    return max(records, key=lambda r: (r.get(key) or 0.0, -(r.get("iteration") or 0)))


def save_figure(fig, out: Path) -> None:
    """Lay out and write a benchmark's figure to `out` (its folder made if needed), and say so."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
