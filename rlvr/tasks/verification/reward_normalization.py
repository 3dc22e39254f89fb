"""How a reward model's raw scores are normalised before they become the `reward_model` component.

Pure functions over plain lists, registered by name (`task.options.normalize`):
  - `none`: the raw score;
  - `running`: (score - mean) / std over every finite score seen so far in the run, this batch included
    (the statistics `RunningMoments` are merged with the batch first, Chan et al.'s parallel update);
  - `group`: a z-score within each group (the completions of one prompt): (score - group mean) / group std.
A degenerate set (one score, or all equal) gives exactly 0, as a group without contrast does in the
advantages. Non-finite scores stay as they are and count in no statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from rlvr.registry import Registry

EPSILON = 1e-6  # below this standard deviation a set of scores has no contrast: every score becomes 0


@dataclass(frozen=True)
class RunningMoments:
    """Count, mean and sum of squared deviations (M2) of every finite score seen so far."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def std(self) -> float:
        """The population standard deviation (0 until two scores are seen)."""
        return math.sqrt(self.m2 / self.count) if self.count > 0 else 0.0


def merge_moments(moments: RunningMoments, scores: Sequence[float]) -> RunningMoments:
    """`moments` with the finite `scores` added (Chan, Golub and LeVeque 1979: merge two sets' moments)."""
    finite = [float(s) for s in scores if math.isfinite(s)]
    if not finite:
        return moments
    count = len(finite)
    mean = sum(finite) / count
    m2 = sum((s - mean) ** 2 for s in finite)
    total = moments.count + count
    delta = mean - moments.mean
    return RunningMoments(count=total, mean=moments.mean + delta * count / total,
                          m2=moments.m2 + m2 + delta * delta * moments.count * count / total)


def _z(score: float, mean: float, std: float) -> float:
    if not math.isfinite(score):
        return score
    return 0.0 if std < EPSILON else (score - mean) / std


def normalize_none(scores: Sequence[float], groups: Sequence[Hashable],
                   moments: RunningMoments) -> tuple[list[float], RunningMoments]:
    """The raw scores; the moments are left as they are."""
    return [float(s) for s in scores], moments


def normalize_running(scores: Sequence[float], groups: Sequence[Hashable],
                      moments: RunningMoments) -> tuple[list[float], RunningMoments]:
    """z-scores against the run's moments merged with this batch; returns the merged moments."""
    merged = merge_moments(moments, scores)
    return [_z(float(s), merged.mean, merged.std) for s in scores], merged


def normalize_group(scores: Sequence[float], groups: Sequence[Hashable],
                    moments: RunningMoments) -> tuple[list[float], RunningMoments]:
    """z-scores within each group (rows with equal `groups` keys), population std; moments untouched."""
    members: dict = {}
    for score, key in zip(scores, groups):
        if math.isfinite(score):
            members.setdefault(key, []).append(float(score))
    stats = {}
    for key, values in members.items():
        mean = sum(values) / len(values)
        stats[key] = (mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
    return [_z(float(s), *stats.get(key, (0.0, 0.0))) for s, key in zip(scores, groups)], moments


Normalization = Callable[[Sequence[float], Sequence[Hashable], RunningMoments], tuple[list[float], RunningMoments]]

NORMALIZATIONS: Registry[Normalization] = Registry("reward model normalization")
NORMALIZATIONS.add("none", normalize_none)
NORMALIZATIONS.add("running", normalize_running)
NORMALIZATIONS.add("group", normalize_group)


def clip_scores(scores: Sequence[float], clip: float | None) -> list[float]:
    """Each finite score clipped to [-clip, clip] (`clip` None: unchanged)."""
    if clip is None:
        return [float(s) for s in scores]
    return [min(max(float(s), -clip), clip) if math.isfinite(s) else float(s) for s in scores]
