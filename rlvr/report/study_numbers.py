"""The numbers of a study: each run's metric summaries and threshold crossings, pooled per condition, and ratios.

A threshold's crossing is the first logged iteration where a metric reaches a value, with the
completions generated up to and including that iteration and the run's seconds by then. A
condition's seeds are pooled as mean, lowest, highest and standard deviation; a run that never
reached a threshold is counted as such and kept out of every mean, so "not reached" never becomes
a number. `benchmarks/learning/sweep_summary.py` reads its means and seconds per iteration from here too.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from rlvr.observe.metric_names import (
    DYNAMIC_SAMPLING_SAMPLED_GROUPS,
    ELAPSED_S,
    EVAL_PREFIX,
    ITERATION,
    NUM_SEQUENCES,
    TIME_ITERATION,
)
from rlvr.report.run_data import RunData
from rlvr.report.study_spec import Threshold
from rlvr.run.resume_policy import RESUMES_FILE
from rlvr.utils import read_jsonl


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_mean(values) -> float:
    """The mean of the finite numbers among `values` (None, NaN and inf skipped); NaN when there are none."""
    values = [v for v in values if _finite(v)]
    return statistics.fmean(values) if values else math.nan


def moving_mean(values: list, width: int) -> list[float]:
    """Trailing mean over the last `width` values (fewer at the start); None and NaN skipped."""
    return [finite_mean(values[max(0, i + 1 - width):i + 1]) for i in range(len(values))]


def median_iteration_seconds(run: RunData) -> float | None:
    """The median of the run's `time/iteration` (None when it logged none)."""
    seconds = [m[TIME_ITERATION] for m in run.metrics if _finite(m.get(TIME_ITERATION)) and m[TIME_ITERATION] > 0]
    return statistics.median(seconds) if seconds else None


@dataclass(frozen=True)
class Spread:
    """A number over a condition's runs: mean, lowest, highest, sample standard deviation (None for one run) and
    how many runs had it; all None when none had it."""

    mean: float | None
    low: float | None
    high: float | None
    std: float | None
    count: int


def spread(values) -> Spread:
    values = [float(v) for v in values if _finite(v)]
    if not values:
        return Spread(None, None, None, None, 0)
    std = statistics.stdev(values) if len(values) > 1 else None
    return Spread(statistics.fmean(values), min(values), max(values), std, len(values))


@dataclass(frozen=True)
class MetricStats:
    """One run's metric: the last value logged, the mean over its last K iterations, the highest and the mean."""

    final: float
    last_mean: float
    max: float
    mean: float
    points: int  # values logged (eval metrics: evals, step 0 included)


@dataclass(frozen=True)
class Crossing:
    """Where a run first reached a threshold; `reached` False leaves the rest None."""

    reached: bool
    iteration: int | None = None
    completions: int | None = None  # generated up to and including that iteration (None: not known)
    seconds: float | None = None  # the run's clock at that record (resumed runs: the sessions added up)


def metric_source(run: RunData, metric: str) -> str:
    """Where a metric's values are: eval.jsonl for eval/* (step 0 included), unless the run has no evals there."""
    return "evals" if metric.startswith(EVAL_PREFIX) and run.evals else "metrics"


def metric_stats(run: RunData, metric: str, last: int) -> MetricStats | None:
    """`metric`'s summary over the run (None when it never logged a finite value); "last K" takes the values logged
    at the last K iterations, so for an eval metric the evals in that span."""
    xs, ys = run.series(metric, metric_source(run, metric))
    if not ys:
        return None
    window = [y for x, y in zip(xs, ys) if x > xs[-1] - last]
    return MetricStats(final=ys[-1], last_mean=statistics.fmean(window), max=max(ys), mean=statistics.fmean(ys),
                       points=len(ys))


def completions_per_iteration(record: dict, config: dict) -> int | None:
    """Completions generated in one iteration: with dynamic sampling every group sampled, kept or not, times the group
    size; otherwise the batch's sequences (`num_sequences`, or batch_size x group_size of the saved config for
    records without it); an estimator's extra inputs add the completions their providers decode per prompt (ReMax's
    greedy one). None when neither is known."""
    group_size, batch_size = config.get("rollout.group_size"), config.get("rollout.batch_size")
    sampled_groups = record.get(DYNAMIC_SAMPLING_SAMPLED_GROUPS)
    if _finite(sampled_groups) and group_size:
        count = sampled_groups * group_size
    elif _finite(record.get(NUM_SEQUENCES)):
        count = record[NUM_SEQUENCES]
    elif batch_size and group_size:
        count = batch_size * group_size
    else:
        return None
    estimator = config.get("algorithm.advantage_estimator")
    if estimator is not None and group_size:
        from rlvr.training.estimator_inputs import input_completions_per_prompt  # imports torch: when a run is read

        per_prompt = input_completions_per_prompt(estimator)  # ReMax: one greedy completion per kept prompt
        prompts = record[NUM_SEQUENCES] // group_size if _finite(record.get(NUM_SEQUENCES)) else batch_size or 0
        count += per_prompt * prompts
    return int(count)


def cumulative_completions(run: RunData) -> dict[int, int | None]:
    """iteration -> completions generated in iterations 1..iteration (None from the first unknown count on)."""
    totals, total = {0: 0}, 0
    for record in sorted(run.metrics, key=lambda r: r.get(ITERATION, 0)):
        count = completions_per_iteration(record, run.config)
        total = None if total is None or count is None else total + count
        totals[record.get(ITERATION, 0)] = total
    return totals


def resume_iterations(run_dir: Path) -> tuple[int, ...]:
    """The checkpoint iteration each resume of the run started from (RUN_DIR/resumes.jsonl), in order."""
    return tuple(record[ITERATION] for record in read_jsonl(Path(run_dir) / RESUMES_FILE) if ITERATION in record)


def run_seconds(record: dict, records: list[dict], resumed_from: tuple[int, ...]) -> float | None:
    """The run's clock at `record`: its `elapsed_s`, plus, after each resume (which restarts the clock), the last
    `elapsed_s` of every earlier session among `records` (metrics and evals)."""
    if not _finite(record.get(ELAPSED_S)):
        return None
    iteration, offset, start = record.get(ITERATION, 0), 0.0, -1
    for resumed in sorted(resumed_from):
        if iteration <= resumed:
            break
        before = [r[ELAPSED_S] for r in records if start < r.get(ITERATION, 0) <= resumed and _finite(r.get(ELAPSED_S))]
        offset += max(before, default=0.0)
        start = resumed
    return offset + record[ELAPSED_S]


def first_crossing(run: RunData, threshold: Threshold, resumed_from: tuple[int, ...] = ()) -> Crossing:
    """The first record (in iteration order) whose `threshold.metric` is finite and >= `threshold.value`."""
    records = getattr(run, metric_source(run, threshold.metric))
    for record in sorted(records, key=lambda r: r.get(ITERATION, 0)):
        value = record.get(threshold.metric)
        if _finite(value) and value >= threshold.value:
            iteration = record.get(ITERATION, 0)
            return Crossing(True, iteration, cumulative_completions(run).get(iteration),
                            run_seconds(record, run.metrics + run.evals, resumed_from))
    return Crossing(False)


@dataclass(frozen=True)
class RunNumbers:
    name: str
    condition: str
    seed: int | str | None
    finished: bool  # the sweep finished it (also after a health stop), or it logged its planned iterations
    iterations: int | None  # the last iteration logged
    planned_iterations: int | None  # its saved config's train.iterations
    completions: int | None  # generated over the whole run
    seconds: float | None  # the run's clock at its last record
    median_iteration_s: float | None
    metrics: dict[str, MetricStats | None]
    crossings: tuple[Crossing, ...]  # one per threshold, in the study's order


def run_numbers(run: RunData, name: str, condition: str, seed, sweep_done: int | None, metrics: tuple[str, ...],
                thresholds: tuple[Threshold, ...], last: int, resumed_from: tuple[int, ...] = ()) -> RunNumbers:
    """One run's numbers; `sweep_done`: the iterations its sweep_done.json holds (None: not finished by a sweep)."""
    records = run.metrics + run.evals
    iterations = max((r.get(ITERATION, 0) for r in run.metrics), default=None)
    planned = run.config.get("train.iterations")
    finished = (sweep_done is not None and sweep_done >= (planned or 0)) or (
        planned is not None and iterations is not None and iterations >= planned)
    clock = [run_seconds(r, records, resumed_from) for r in records]
    totals = cumulative_completions(run)
    return RunNumbers(
        name=name, condition=condition, seed=seed, finished=finished, iterations=iterations,
        planned_iterations=planned, completions=totals[iterations] if iterations else None,
        seconds=max((c for c in clock if c is not None), default=None),
        median_iteration_s=median_iteration_seconds(run),
        metrics={metric: metric_stats(run, metric, last) for metric in metrics},
        crossings=tuple(first_crossing(run, t, resumed_from) for t in thresholds))


@dataclass(frozen=True)
class ThresholdPool:
    """A condition's crossings of one threshold: how many runs reached it, and where (over those runs only)."""

    reached: int
    runs: int
    iteration: Spread
    completions: Spread
    seconds: Spread


@dataclass(frozen=True)
class ConditionNumbers:
    label: str
    runs: tuple[str, ...]  # the runs summarised
    missing: tuple[str, ...]  # planned runs with no run folder yet
    seeds: tuple
    metrics: dict[str, dict[str, Spread]]  # metric -> final, last_mean, max, mean -> spread over the runs
    thresholds: tuple[ThresholdPool, ...]
    median_iteration_s: float | None  # the median of the runs' medians


def pool_condition(label: str, runs: list[RunNumbers], missing: list[str], metrics: tuple[str, ...],
                   thresholds: tuple[Threshold, ...]) -> ConditionNumbers:
    pooled_metrics = {}
    for metric in metrics:
        stats = [r.metrics.get(metric) for r in runs]
        pooled_metrics[metric] = {part: spread([getattr(s, part) for s in stats if s is not None])
                                  for part in ("final", "last_mean", "max", "mean")}
    pools = []
    for index in range(len(thresholds)):
        crossings = [r.crossings[index] for r in runs]
        reached = [c for c in crossings if c.reached]
        pools.append(ThresholdPool(reached=len(reached), runs=len(crossings),
                                   iteration=spread([c.iteration for c in reached]),
                                   completions=spread([c.completions for c in reached]),
                                   seconds=spread([c.seconds for c in reached])))
    medians = [r.median_iteration_s for r in runs if r.median_iteration_s is not None]
    return ConditionNumbers(label=label, runs=tuple(r.name for r in runs), missing=tuple(missing),
                            seeds=tuple(r.seed for r in runs), metrics=pooled_metrics, thresholds=tuple(pools),
                            median_iteration_s=statistics.median(medians) if medians else None)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


@dataclass(frozen=True)
class ThresholdRatio:
    threshold: str
    reached: tuple[int, int, int, int]  # numerator reached, its runs, denominator reached, its runs
    iteration: float | None  # mean over the numerator's reached runs / the denominator's; None if either has none
    completions: float | None
    seconds: float | None


@dataclass(frozen=True)
class RatioNumbers:
    numerator: str
    denominator: str
    thresholds: tuple[ThresholdRatio, ...]
    median_iteration_s: float | None


def condition_ratio(a: ConditionNumbers, b: ConditionNumbers, thresholds: tuple[Threshold, ...]) -> RatioNumbers:
    """A / B for each threshold's mean iterations, completions and seconds to reach it, and for the median seconds
    per iteration (below 1: A needs fewer, or is faster)."""
    parts = []
    for threshold, pa, pb in zip(thresholds, a.thresholds, b.thresholds):
        parts.append(ThresholdRatio(threshold.label, (pa.reached, pa.runs, pb.reached, pb.runs),
                                    _ratio(pa.iteration.mean, pb.iteration.mean),
                                    _ratio(pa.completions.mean, pb.completions.mean),
                                    _ratio(pa.seconds.mean, pb.seconds.mean)))
    return RatioNumbers(a.label, b.label, tuple(parts), _ratio(a.median_iteration_s, b.median_iteration_s))


@dataclass(frozen=True)
class StudySummary:
    """Everything `rlvr study` reports: what was planned, what exists, and the numbers."""

    title: str
    study_file: str
    output: str  # the run folder
    page: str | None
    grid: list[str]  # key=v1,v2 per grid entry
    group_by: list[str]
    last: int
    metrics: list[str]
    thresholds: list[str]  # labels, in the order of each run's crossings
    planned: int  # runs in the grid
    missing: list[str]  # planned runs without a run folder
    unfinished: list[str]  # runs that exist but have not logged their planned iterations
    runs: list[RunNumbers]
    conditions: list[ConditionNumbers]
    ratios: list[RatioNumbers]
    figures: list[str]  # the PNGs written
