"""The numbers a run's records reduce to: a metric's series, and its final and best value.

The end summary of a command (`rlvr.observe.console`) and the report (`rlvr.report.run_data`) both read
final and best eval accuracy from these, so the two never disagree about which value was the best.
"""

from __future__ import annotations

import math

from rlvr.observe.metric_names import ITERATION


def series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of `key` over `records`, skipping records where it is absent, null, a bool or
    not finite (a record without an iteration counts by its position among the kept ones)."""
    xs, ys = [], []
    for record in records:
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        xs.append(record.get(ITERATION, len(xs)))
        ys.append(float(value))
    return xs, ys


def final_and_best(xs: list[float], ys: list[float]) -> tuple[float | None, float | None, float | None]:
    """(final value, best value, the x where the best was first reached); all None for an empty series."""
    if not ys:
        return None, None, None
    best = max(range(len(ys)), key=lambda i: ys[i])  # max keeps the first of equal values
    return ys[-1], ys[best], xs[best]
