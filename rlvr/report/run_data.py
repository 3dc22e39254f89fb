"""Read run folders for a report: metrics, evals, samples and the flattened saved config.

Missing files are empty lists (a run still being written, or one without evals); the summary
numbers (final and best reward and eval accuracy) and the config differences are computed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import flatten
from rlvr.observe.metric_names import ELAPSED_S, EVAL_ACCURACY, ITERATION, REWARD_MEAN
from rlvr.observe import numbers as run_numbers
from rlvr.observe.numbers import final_and_best
from rlvr.utils import read_jsonl


@dataclass
class RunData:
    label: str
    path: Path
    metrics: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # flattened: {"optim.lr": 0.001, ...}

    def series(self, key: str, source: str = "metrics") -> tuple[list[float], list[float]]:
        """(iterations, values) of `key`, skipping records where it is absent, null or NaN."""
        return run_numbers.series(getattr(self, source), key)

    def keys(self) -> set[str]:
        return {key for record in self.metrics for key in record}


def load_run(path: str | Path, label: str | None = None) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a run folder")
    if not _is_run(path):
        raise FileNotFoundError(f"{path} is not a run folder: it has neither metrics.jsonl nor eval.jsonl")
    config_path = path / "config.yaml"
    config = flatten(yaml.safe_load(config_path.read_text()) or {}) if config_path.exists() else {}
    return RunData(label=label or path.name, path=path, metrics=read_jsonl(path / "metrics.jsonl"),
                   evals=read_jsonl(path / "eval.jsonl"), samples=read_jsonl(path / "samples.jsonl"),
                   config=config)


def _is_run(path: Path) -> bool:
    return (path / "metrics.jsonl").exists() or (path / "eval.jsonl").exists()


def expand_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run folders as given; a folder of runs (a sweep's output) stands for the runs inside it."""
    out = []
    for path in map(Path, paths):
        inner = (sorted(p for p in path.iterdir() if p.is_dir() and _is_run(p))
                 if path.is_dir() and not _is_run(path) else [])
        out.extend(inner or [path])
    return out


def load_runs(paths: list[str | Path]) -> list[RunData]:
    """Load runs labelled by folder name, or parent/name where two folders share a name."""
    paths = expand_run_dirs(paths)
    if not paths:
        raise ValueError("give at least one run folder")
    names = [p.name for p in paths]
    labels = [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]
    return [load_run(p, label) for p, label in zip(paths, labels)]


def differing_config_keys(runs: list[RunData]) -> list[str]:
    """Flattened config keys whose value differs between runs (or that some runs lack)."""
    if len(runs) < 2:
        return []
    keys = sorted(set().union(*(r.config for r in runs)))
    missing = object()
    return [k for k in keys if len({repr(r.config.get(k, missing)) for r in runs}) > 1]


@dataclass
class Summary:
    iterations: int | None
    final_reward: float | None
    best_reward: float | None
    best_reward_iteration: int | None
    final_eval: float | None
    best_eval: float | None
    best_eval_iteration: int | None
    wall_s: float | None


def summarize(run: RunData) -> Summary:
    final_reward, best_reward, best_reward_at = final_and_best(*run.series(REWARD_MEAN))
    eval_xs, eval_ys = run.series(EVAL_ACCURACY, source="evals")
    if not eval_ys:  # older runs: eval accuracy only inside metrics.jsonl
        eval_xs, eval_ys = run.series(EVAL_ACCURACY)
    final_eval, best_eval, best_eval_at = final_and_best(eval_xs, eval_ys)
    iterations = run.metrics[-1].get(ITERATION) if run.metrics else None
    wall = [r[ELAPSED_S] for r in run.metrics + run.evals if isinstance(r.get(ELAPSED_S), (int, float))]
    return Summary(iterations=iterations, final_reward=final_reward, best_reward=best_reward,
                   best_reward_iteration=best_reward_at, final_eval=final_eval, best_eval=best_eval,
                   best_eval_iteration=best_eval_at, wall_s=max(wall) if wall else None)


def first_and_last_samples(run: RunData) -> tuple[int | None, list[dict], int | None, list[dict]]:
    """The samples of the first and of the last logged iteration (the same one if only one)."""
    iterations = sorted({s.get(ITERATION) for s in run.samples if isinstance(s.get(ITERATION), int)})
    if not iterations:
        return None, [], None, []
    first, last = iterations[0], iterations[-1]
    return (first, [s for s in run.samples if s.get(ITERATION) == first],
            last, [s for s in run.samples if s.get(ITERATION) == last])
