"""Metric reduction in one place, and the rank-0 writers for metrics, samples and evals.

Every per-iteration number is accumulated as (weighted sum, weight) pairs and reduced here, so
a data-parallel run only has to all-reduce these pairs to get the global numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import torch

from rlvr.observe.metric_names import ITERATION
from rlvr.utils import append_jsonl


class MetricSums:
    """Accumulates weighted sums: mean = sum(value * weight) / sum(weight)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)

    def add(self, name: str, value, weight=1.0) -> None:
        """`value` is a mean over `weight` items (tensors are read once, here, off the hot path)."""
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        weight = float(weight.detach()) if isinstance(weight, torch.Tensor) else float(weight)
        if weight <= 0:
            return
        self.sums[name] += value * weight
        self.weights[name] += weight

    def add_masked(self, name: str, per_token: torch.Tensor, mask: torch.Tensor) -> None:
        """Token-weighted mean of a [B, T] tensor over the positions where mask is 1."""
        count = mask.sum()
        if float(count) > 0:
            total = (per_token.detach().float() * mask).sum()
            self.sums[name] += float(total)
            self.weights[name] += float(count)

    def reduce(self) -> dict[str, float]:
        # A data-parallel run first totals self.sums and self.weights over ranks (distributed.reduce_metric_sums).
        return {k: (self.sums[k] / self.weights[k] if self.weights[k] > 0 else math.nan) for k in self.sums}


class RunWriter:
    """Writes the run's JSON-lines files; only the main process writes.

    `sinks` (rlvr/observe/sinks.py) get a copy of every metrics and eval record, keyed by iteration.
    """

    METRICS_FILE = "metrics.jsonl"
    SAMPLES_FILE = "samples.jsonl"
    EVAL_FILE = "eval.jsonl"

    def __init__(self, run_dir: Path, is_main: bool = True, sinks: list | None = None):
        self.run_dir = Path(run_dir)
        self.is_main = is_main
        self.sinks = list(sinks or []) if is_main else []
        self.metrics_path = self.run_dir / self.METRICS_FILE
        self.samples_path = self.run_dir / self.SAMPLES_FILE
        self.eval_path = self.run_dir / self.EVAL_FILE

    def paths(self) -> tuple[Path, Path, Path]:
        """The JSON-lines files this writer appends to (metrics, samples, eval)."""
        return self.metrics_path, self.samples_path, self.eval_path

    def metrics(self, record: dict) -> None:
        if self.is_main:
            append_jsonl(self.metrics_path, [record])
            for sink in self.sinks:
                sink.log(record, step=int(record[ITERATION]))

    def samples(self, records: list[dict]) -> None:
        if self.is_main and records:
            append_jsonl(self.samples_path, records)

    def eval(self, record: dict) -> None:
        if self.is_main:
            append_jsonl(self.eval_path, [record])
            for sink in self.sinks:
                sink.log(record, step=int(record[ITERATION]))

    def close(self) -> None:
        """Flush and close the sinks (the JSON-lines files are complete after every write)."""
        for sink in self.sinks:
            sink.close()
        self.sinks = []
