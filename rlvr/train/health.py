"""Live health warnings for `rlvr train`: small checks over the recent metric records.

Each check in `HEALTH_CHECKS` is a pure function `(history, thresholds) -> HealthWarning | None`
over the records written to metrics.jsonl (oldest first, the current iteration last). The
`HealthMonitor` runs them every iteration, prints a warning once per streak (with the number that
triggered it and what to try), lists the active ones in the record under `health/warnings`, and
says when a warning named in `train.stop_on` has lasted `train.stop_after` iterations.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable

from rlvr.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    ENTROPY,
    EXPLAINED_VARIANCE,
    FRAC_ZERO_VARIANCE_GROUPS,
    HEALTH_WARNINGS,
    ITERATION,
    KL,
    SKIPPED_NONFINITE_UPDATES,
    TRUNCATED_FRAC,
)
from rlvr.registry import Registry


@dataclass(frozen=True)
class HealthWarning:
    name: str
    message: str  # what was seen, with the number that triggered it
    advice: str  # what to try

    def __str__(self) -> str:
        return f"health warning [{self.name}]: {self.message}. Try: {self.advice}"


HealthCheck = Callable[[list, object], "HealthWarning | None"]

HEALTH_CHECKS: Registry[HealthCheck] = Registry("health warning")


def _values(history: list[dict], key: str, count: int) -> list[float] | None:
    """`key` in the last `count` records, or None when fewer records (or values) exist."""
    if len(history) < count:
        return None
    values = [record.get(key) for record in history[-count:]]
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]


@HEALTH_CHECKS.register("truncation")
def check_truncation(history: list[dict], thresholds) -> HealthWarning | None:
    """Most completions hit max_new_tokens (truncated_frac > truncation_frac) for `window` iterations."""
    values = _values(history, TRUNCATED_FRAC, thresholds.window)
    if values is None or min(values) <= thresholds.truncation_frac:
        return None
    return HealthWarning(
        "truncation",
        f"{values[-1]:.0%} of completions hit max_new_tokens (above {thresholds.truncation_frac:.0%} for "
        f"{thresholds.window} iterations; lowest {min(values):.2f})",
        "the task is not solvable in this budget; raise rollout.max_new_tokens "
        "(do not lower it to save memory: lower rollout.batch_size or use gradient accumulation instead)",
    )


@HEALTH_CHECKS.register("zero_variance")
def check_zero_variance(history: list[dict], thresholds) -> HealthWarning | None:
    """Most groups have all-equal rewards (frac_zero_variance_groups > zero_variance_frac) for `window` iterations."""
    values = _values(history, FRAC_ZERO_VARIANCE_GROUPS, thresholds.window)
    if values is None or min(values) <= thresholds.zero_variance_frac:
        return None
    return HealthWarning(
        "zero_variance",
        f"{values[-1]:.0%} of groups have zero reward variance (above {thresholds.zero_variance_frac:.0%} for "
        f"{thresholds.window} iterations): no learning signal",
        "raise rollout.group_size or rollout.temperature, make the task easier or harder, "
        "or use DAPO dynamic sampling (algorithm.name=dapo)",
    )


@HEALTH_CHECKS.register("clip_fraction")
def check_clip_fraction(history: list[dict], thresholds) -> HealthWarning | None:
    """Share of clipped completion tokens (low + high) above `clip_frac` in the current iteration."""
    if not history:
        return None
    record = history[-1]
    parts = [record.get(CLIP_FRAC_LOW), record.get(CLIP_FRAC_HIGH)]
    parts = [float(p) for p in parts if isinstance(p, (int, float)) and math.isfinite(p)]
    if not parts or sum(parts) <= thresholds.clip_frac:
        return None
    return HealthWarning(
        "clip_fraction",
        f"clip fraction {sum(parts):.3f} > {thresholds.clip_frac}: most of the update is outside the trust region",
        "lower optim.lr or algorithm.ppo_epochs, or raise optim.warmup_steps",
    )


@HEALTH_CHECKS.register("kl_growth")
def check_kl_growth(history: list[dict], thresholds) -> HealthWarning | None:
    """KL rose in every one of the last `kl_window` iterations and is now above `kl_max`."""
    values = _values(history, KL, thresholds.kl_window)
    if values is None or values[-1] <= thresholds.kl_max:
        return None
    if not all(later > earlier for earlier, later in zip(values, values[1:])):
        return None
    return HealthWarning(
        "kl_growth",
        f"KL to the reference {values[-1]:.4f} > {thresholds.kl_max} and rising for {thresholds.kl_window} "
        f"iterations (from {values[0]:.4f})",
        "raise algorithm.kl_coef, lower optim.lr, or check the reward for an exploit in samples.jsonl",
    )


@HEALTH_CHECKS.register("nonfinite")
def check_nonfinite(history: list[dict], thresholds) -> HealthWarning | None:
    """An optimizer step was skipped this iteration because its loss or gradient was not finite."""
    if not history:
        return None
    skipped = history[-1].get(SKIPPED_NONFINITE_UPDATES, 0) or 0
    if skipped <= 0:
        return None
    return HealthWarning(
        "nonfinite",
        f"{skipped} update(s) skipped for a non-finite loss or gradient",
        "lower optim.lr, use model.dtype=float32, or lower optim.max_grad_norm",
    )


@HEALTH_CHECKS.register("entropy_collapse")
def check_entropy_collapse(history: list[dict], thresholds) -> HealthWarning | None:
    """Entropy below `entropy_collapse_frac` of its first value within the first `entropy_collapse_within` iterations."""
    entropies = [r.get(ENTROPY) for r in history]
    finite = [float(e) for e in entropies if isinstance(e, (int, float)) and math.isfinite(e)]
    if len(finite) < 2 or len(history) > thresholds.entropy_collapse_within:
        return None
    first, current = finite[0], entropies[-1]
    if not isinstance(current, (int, float)) or not math.isfinite(current) or first <= 0:
        return None
    if current >= thresholds.entropy_collapse_frac * first:
        return None
    return HealthWarning(
        "entropy_collapse",
        f"entropy fell to {current:.4f}, {current / first:.0%} of its first value {first:.4f}, "
        f"within {len(history)} iterations",
        "lower optim.lr, raise rollout.temperature, or add algorithm.entropy_coef",
    )


@HEALTH_CHECKS.register("value_not_learning")
def check_value_not_learning(history: list[dict], thresholds) -> HealthWarning | None:
    """PPO: the value model's explained variance below `explained_variance_min` for `explained_variance_window`
    iterations (GAE against such values is noisier than no baseline)."""
    values = _values(history, EXPLAINED_VARIANCE, thresholds.explained_variance_window)
    if values is None or max(values) >= thresholds.explained_variance_min:
        return None
    return HealthWarning(
        "value_not_learning",
        f"the value model's explained variance is {values[-1]:.3f}, below {thresholds.explained_variance_min} for "
        f"{thresholds.explained_variance_window} iterations (best {max(values):.3f}): its values predict the returns "
        "worse than their mean",
        "raise algorithm.vf_coef, add algorithm.value_warmup_iterations, lower optim.lr, or try "
        "algorithm.value_model=separate",
    )


class HealthMonitor:
    """Runs the checks each iteration; prints a warning when its streak starts (main process only)."""

    def __init__(self, thresholds, stop_on: Iterable[str] = (), stop_after: int = 3, stop_if_dead_for: int = 0,
                 is_main: bool = True, enabled: bool = True, history: Iterable[dict] = (), stream=None):
        self.thresholds = thresholds
        self.stop_on = list(stop_on)
        self.stop_after = stop_after
        self.stop_if_dead_for = stop_if_dead_for
        self.is_main = is_main
        self.enabled = enabled
        self.stream = stream
        self.history: list[dict] = []
        self.streaks: dict[str, int] = {name: 0 for name in HEALTH_CHECKS}
        self.dead_streak = 0  # iterations in a row where no group had contrast (train.stop_if_dead_for)
        self.printed: list[HealthWarning] = []
        for record in history:  # a resumed run: rebuild the streaks without printing again
            self.observe(record, quiet=True)

    @classmethod
    def from_config(cls, config, is_main: bool = True, history: Iterable[dict] = ()) -> "HealthMonitor":
        train = config.train
        return cls(config.health, stop_on=train.stop_on, stop_after=train.stop_after,
                   stop_if_dead_for=train.stop_if_dead_for, is_main=is_main, enabled=config.health.enabled,
                   history=history)

    def observe(self, record: dict, quiet: bool = False) -> list[str]:
        """Add this iteration's record; returns the names of the active warnings (for `health/warnings`)."""
        self.history.append({k: v for k, v in record.items() if k != HEALTH_WARNINGS})
        zero_variance = record.get(FRAC_ZERO_VARIANCE_GROUPS)
        self.dead_streak = self.dead_streak + 1 if zero_variance == 1.0 else 0
        active = []
        for name in HEALTH_CHECKS:
            warning = HEALTH_CHECKS.get(name)(self.history, self.thresholds) if self.enabled or name in self.stop_on else None
            if warning is None:
                self.streaks[name] = 0
                continue
            self.streaks[name] += 1
            active.append(name)
            if self.streaks[name] == 1 and not quiet and self.enabled:
                self.printed.append(warning)
                if self.is_main:
                    print(f"iteration {record.get(ITERATION, len(self.history))}: {warning}",
                          file=self.stream or sys.stderr, flush=True)
        return active

    def stop_reason(self) -> str | None:
        """Why the run should stop now, or None."""
        for name in self.stop_on:
            if self.streaks[name] >= self.stop_after:
                return (f"the {name} warning has been active for {self.streaks[name]} iterations "
                        f"(train.stop_on includes {name}, train.stop_after={self.stop_after})")
        if self.stop_if_dead_for and self.dead_streak >= self.stop_if_dead_for:
            return (f"no group had reward contrast for {self.dead_streak} iterations "
                    f"(train.stop_if_dead_for={self.stop_if_dead_for})")
        return None
