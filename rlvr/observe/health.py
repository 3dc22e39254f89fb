"""Live health warnings for `rlvr train`: small checks over the recent metric records.

Each check in `HEALTH_CHECKS` is a pure function `(history, thresholds) -> HealthWarning | None`
over the records written to metrics.jsonl (oldest first, the current iteration last). The
`HealthMonitor` runs them every iteration, prints a warning once per streak (with the number that
triggered it and what to try), lists the active ones in the record under `health/warnings`, and
says when a warning named in `train.stop_on` has lasted `train.stop_after` iterations.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable

from rlvr.observe.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    CORRECT_FRAC,
    DISTINCT_COMPLETIONS_FRAC,
    ENTROPY,
    EVAL_ACCURACY,
    EPISODE_TOOL_CALLS_PREFIX,
    EPISODE_TOOL_ERRORS_PREFIX,
    EXPLAINED_VARIANCE,
    FRAC_NO_CONTRAST_GROUPS,
    HEALTH_WARNINGS,
    ITERATION,
    KL,
    REWARD_MEAN,
    SKIPPED_NONFINITE_UPDATES,
    TRUNCATED_FRAC,
    reward_component,
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


@HEALTH_CHECKS.register("no_contrast")
def check_no_contrast(history: list[dict], thresholds) -> HealthWarning | None:
    """Most groups have all-equal rewards (frac_no_contrast_groups > no_contrast_frac) for `window` iterations."""
    values = _values(history, FRAC_NO_CONTRAST_GROUPS, thresholds.window)
    if values is None or min(values) <= thresholds.no_contrast_frac:
        return None
    return HealthWarning(
        "no_contrast",
        f"{values[-1]:.0%} of groups have no reward contrast, all rewards equal "
        f"(above {thresholds.no_contrast_frac:.0%} for "
        f"{thresholds.window} iterations): no learning signal",
        "raise rollout.group_size or rollout.temperature, make the task easier or harder, "
        "or use DAPO dynamic sampling (algorithm.name=dapo)",
    )


def _offered_tools(record: dict) -> list[str]:
    """The tools an environment offers, read from the record's per-tool call counts (logged from 0)."""
    return sorted(key[len(EPISODE_TOOL_CALLS_PREFIX):] for key in record if key.startswith(EPISODE_TOOL_CALLS_PREFIX))


@HEALTH_CHECKS.register("tool_unused")
def check_tool_unused(history: list[dict], thresholds) -> HealthWarning | None:
    """An offered tool was called in no episode for `window` iterations (episode/tool_calls/<tool> == 0)."""
    if not history:
        return None
    unused = []
    for tool in _offered_tools(history[-1]):
        values = _values(history, EPISODE_TOOL_CALLS_PREFIX + tool, thresholds.window)
        if values is not None and max(values) == 0:
            unused.append(tool)
    if not unused:
        return None
    return HealthWarning(
        "tool_unused",
        f"no episode called {', '.join(unused)} in the last {thresholds.window} iterations: a task that needs "
        "the tool cannot be solved this way, and the reward cannot teach a call the policy never makes",
        "warm up with rlvr sft on transcripts that make the call, show a call in the prompt, or raise "
        "rollout.temperature",
    )


@HEALTH_CHECKS.register("tool_errors")
def check_tool_errors(history: list[dict], thresholds) -> HealthWarning | None:
    """Most calls of a tool failed (errors / calls > tool_error_frac) in each of the last `window` iterations."""
    if not history:
        return None
    failing = []
    for tool in _offered_tools(history[-1]):
        calls = _values(history, EPISODE_TOOL_CALLS_PREFIX + tool, thresholds.window)
        errors = _values(history, EPISODE_TOOL_ERRORS_PREFIX + tool, thresholds.window)
        if calls is None or errors is None:
            continue
        shares = [e / c for e, c in zip(errors, calls) if c > 0]
        if len(shares) == len(calls) and min(shares) > thresholds.tool_error_frac:
            failing.append(f"{tool} ({shares[-1]:.0%} of its calls)")
    if not failing:
        return None
    return HealthWarning(
        "tool_errors",
        f"most tool calls fail: {', '.join(failing)} above {thresholds.tool_error_frac:.0%} for {thresholds.window} "
        "iterations (malformed calls, wrong arguments, timeouts: see the transcripts in samples.jsonl)",
        "show the call format in the prompt with an example, or warm up with rlvr sft on well-formed calls",
    )


HEALTH_CHECKS.rename("zero_variance", "no_contrast")  # one name for groups without reward contrast


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


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _solved(record: dict, thresholds) -> bool:
    """The rollout was (nearly) all correct: converging to one answer is then the goal, not a collapse."""
    correct = record.get(CORRECT_FRAC)
    return _finite(correct) and correct >= thresholds.solved_frac


@HEALTH_CHECKS.register("entropy_collapse")
def check_entropy_collapse(history: list[dict], thresholds) -> HealthWarning | None:
    """Entropy below `entropy_collapse_frac` of the run's highest entropy so far (a running maximum, so at
    any point of the run), while the task is not solved (correct_frac < solved_frac).

    `entropy_collapse_within` > 0 limits it to the first that many iterations."""
    within = thresholds.entropy_collapse_within
    if not history or (within and len(history) > within):
        return None
    entropies = [float(r[ENTROPY]) for r in history if _finite(r.get(ENTROPY))]
    current = history[-1].get(ENTROPY)
    if len(entropies) < 2 or not _finite(current) or _solved(history[-1], thresholds):
        return None
    peak = max(entropies)
    if peak <= 0 or current >= thresholds.entropy_collapse_frac * peak:
        return None
    return HealthWarning(
        "entropy_collapse",
        f"entropy fell to {current:.4f}, {current / peak:.0%} of the run's highest {peak:.4f}, "
        f"at iteration {history[-1].get(ITERATION, len(history))} with correct_frac "
        f"{history[-1].get(CORRECT_FRAC, math.nan):.2f}: the policy became near-deterministic before solving the task",
        "lower optim.lr, raise rollout.temperature, or add algorithm.entropy_coef; keep the checkpoint with the "
        "best eval",
    )


@HEALTH_CHECKS.register("identical_completions")
def check_identical_completions(history: list[dict], thresholds) -> HealthWarning | None:
    """The groups' completions became (nearly) identical: distinct_completions_frac below
    `distinct_completions_frac` for `window` iterations, while the task is not solved."""
    values = _values(history, DISTINCT_COMPLETIONS_FRAC, thresholds.window)
    if values is None or max(values) >= thresholds.distinct_completions_frac or _solved(history[-1], thresholds):
        return None
    return HealthWarning(
        "identical_completions",
        f"only {values[-1]:.0%} of each group's completions are distinct (below "
        f"{thresholds.distinct_completions_frac:.0%} for {thresholds.window} iterations) with correct_frac "
        f"{history[-1].get(CORRECT_FRAC, math.nan):.2f}: the policy writes one text per prompt and its groups "
        "carry no contrast",
        "look at samples.jsonl for the repeated text (a bare guess? an echo of the prompt?); lower optim.lr, raise "
        "rollout.temperature or algorithm.entropy_coef, and check what the reward pays for",
    )


def _half_means(values: list[float]) -> tuple[float, float]:
    """Mean of the first half and of the rest (the later half is the larger one for an odd count)."""
    half = len(values) // 2
    return sum(values[:half]) / half, sum(values[half:]) / (len(values) - half)


@HEALTH_CHECKS.register("reward_divergence")
def check_reward_divergence(history: list[dict], thresholds) -> HealthWarning | None:
    """Over the last `divergence_window` iterations the total reward rose (second-half mean minus first-half
    mean > `divergence_reward_rise`) while the primary component (reward/<primary_component>) fell by more
    than `divergence_fall` in the same way, or eval accuracy did (the first against the last of the evals
    logged in the window and the one before it): the policy is earning the rest of the reward instead."""
    window = thresholds.divergence_window
    totals = _values(history, REWARD_MEAN, window)
    if totals is None:
        return None
    before, after = _half_means(totals)
    if after - before <= thresholds.divergence_reward_rise:
        return None
    component = thresholds.primary_component or "answer"
    falls = []
    primary = _values(history, reward_component(component), window)
    if primary is not None:
        first, last = _half_means(primary)
        if first - last > thresholds.divergence_fall:
            falls.append(f"{reward_component(component)} fell from {first:.3f} to {last:.3f}")
    evals = [float(r[EVAL_ACCURACY]) for r in history[:-window] if _finite(r.get(EVAL_ACCURACY))][-1:]
    evals += [float(r[EVAL_ACCURACY]) for r in history[-window:] if _finite(r.get(EVAL_ACCURACY))]
    if len(evals) >= 2 and evals[0] - evals[-1] > thresholds.divergence_fall:
        falls.append(f"eval accuracy fell from {evals[0]:.3f} to {evals[-1]:.3f}")
    if not falls:
        return None
    return HealthWarning(
        "reward_divergence",
        f"reward/mean rose from {before:.3f} to {after:.3f} over {window} iterations while " + " and ".join(falls)
        + ": the reward pays for something other than right answers",
        "read samples.jsonl for what the rising components pay for; weight the primary component more (or pay "
        "format bonuses only with a right answer), and keep the checkpoint with the best eval",
    )


@HEALTH_CHECKS.register("value_not_learning")
def check_value_not_learning(history: list[dict], thresholds) -> HealthWarning | None:
    """PPO: the value model's explained variance below `explained_variance_min` for `explained_variance_window`
    iterations (GAE against such values is noisier than no baseline), while the task is not solved (a
    solved task's returns hardly vary, and their explained variance is noise)."""
    values = _values(history, EXPLAINED_VARIANCE, thresholds.explained_variance_window)
    if values is None or max(values) >= thresholds.explained_variance_min or _solved(history[-1], thresholds):
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

    def __init__(self, thresholds, stop_on: Iterable[str] = (), stop_after: int = 3, is_main: bool = True,
                 enabled: bool = True, history: Iterable[dict] = (), stream=None):
        self.thresholds = thresholds
        self.stop_on = list(stop_on)
        self.stop_after = stop_after
        self.is_main = is_main
        self.enabled = enabled
        self.stream = stream
        self.history: list[dict] = []
        self.streaks: dict[str, int] = {name: 0 for name in HEALTH_CHECKS}
        self.printed: list[HealthWarning] = []
        for record in history:  # a resumed run: rebuild the streaks without printing again
            self.observe(record, quiet=True)

    @classmethod
    def from_config(cls, config, is_main: bool = True, history: Iterable[dict] = (),
                    task_components: tuple[str, ...] = (), task_primary: str = "answer") -> "HealthMonitor":
        """`task_primary` fills `health.primary_component` when that is empty; a name that is not among
        `task_components` (when given) is an error naming them."""
        train, health = config.train, config.health
        primary = health.primary_component or task_primary
        if task_components and primary not in task_components:
            raise ValueError(f"health.primary_component: {primary!r} is not a component of task "
                             f"{config.task.name!r}; valid choices: {', '.join(task_components)}")
        return cls(dataclasses.replace(health, primary_component=primary), stop_on=train.stop_on,
                   stop_after=train.stop_after, is_main=is_main,
                   enabled=health.enabled, history=history)

    def observe(self, record: dict, quiet: bool = False) -> list[str]:
        """Add this iteration's record; returns the names of the active warnings (for `health/warnings`)."""
        self.history.append({k: v for k, v in record.items() if k != HEALTH_WARNINGS})
        active = []
        for name in HEALTH_CHECKS:
            warning = (HEALTH_CHECKS.get(name)(self.history, self.thresholds)
                       if self.enabled or name in self.stop_on else None)
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
        return None
