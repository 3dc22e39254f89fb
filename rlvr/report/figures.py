"""The report's figures as data: an ordered list of specs, each turning runs into series (or nothing).

A figure is drawn twice from the same `FigureData`: as an interactive plotly figure in the page
(interactive.py) and as a PNG beside it (png.py), so the two cannot disagree about what is
plotted. Every run has one colour across all figures; within a figure, the series of one run
differ by line style. Each point carries its iteration and its wall-clock second (`elapsed_s`),
so either can be the x axis; an eval point also carries how long the eval took (`eval/seconds`).
A figure whose keys appear in no run is skipped, so old or partial runs still work.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

from rlvr.observe.metric_names import (
    EPISODE_ENV_TOKEN_FRAC,
    EPISODE_TOOL_CALLS,
    EPISODE_TOOL_ERRORS,
    EPISODE_TRUNCATED_PREFIX,
    EPISODE_TURNS,
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    COMPLETION_LEN_MEAN,
    DISTINCT_COMPLETIONS_FRAC,
    ELAPSED_S,
    ENTROPY,
    EVAL_ACCURACY,
    EVAL_PASS_AT_PREFIX,
    EVAL_SECONDS,
    FRAC_NONZERO_ADVANTAGES,
    FRAC_NO_CONTRAST_GROUPS,
    GRAD_NORM,
    ITERATION,
    KL,
    REWARD_MEAN,
    REWARD_PREFIX,
    REWARD_SUMMARIES,
    TIME_ITERATION,
    TIME_PARTS,
    TIME_PREFIX,
    TRUNCATED_FRAC,
)
from rlvr.report.run_data import RunData

ITERATION_AXIS = ITERATION  # the x axis of iterations is the records' ITERATION field
X_AXES = (ITERATION_AXIS, "seconds")
X_LABELS = {ITERATION_AXIS: ITERATION, "seconds": "wall-clock seconds since the run started"}
# TIME_PARTS are stacked in the time figure; whatever time/iteration holds beyond them is "other".
# The eval (EVAL_SECONDS) runs after an iteration's clock stops, so its time is stacked on top as its own part.
WARNING_COLOR = "#c0392b"  # the health warning markers
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def run_colors(count: int) -> list[str]:
    """One colour per run (matplotlib's tab10 order, as hex), repeating after ten."""
    return [TAB10[i % len(TAB10)] for i in range(count)]


@dataclass
class Series:
    """One line (or one stacked part): values with their iteration and wall-clock second."""

    label: str
    color: str
    style_index: int  # position of the key within its figure: line style (or the part's colour in a stack)
    iterations: list[float]
    seconds: list[float | None]  # elapsed_s of the record; None where the record lacks it
    values: list[float]
    # eval series: eval/seconds, the eval ran during these seconds before `seconds`
    durations: list[float] | None = None

    def xs(self, x: str) -> list[float | None]:
        return self.seconds if x == "seconds" else self.iterations


@dataclass(frozen=True)
class Marker:
    """A vertical mark at one iteration (a health warning that starts there), drawn on either x axis."""

    iteration: float
    seconds: float | None
    label: str

    def x(self, axis: str) -> float | None:
        return self.seconds if axis == "seconds" else self.iteration


@dataclass
class FigureData:
    name: str  # file stem of the PNG, id of the figure in the page
    title: str
    ylabel: str
    series: list[Series] = field(default_factory=list)  # kind "lines": every series on one axes
    panels: list[tuple[str, list[Series]]] = field(default_factory=list)  # kind "stacked": one panel per run
    kind: str = "lines"
    markers: list[Marker] = field(default_factory=list)  # health warnings (report/health_warnings.py)


@dataclass
class FigureSpec:
    name: str
    title: str
    select: Callable[[list[RunData], "FigureSpec"], FigureData | None]
    keys: tuple[str, ...] = ()  # the metric keys a line figure plots
    ylabel: str = ""
    source: str = "metrics"  # "metrics" (metrics.jsonl) or "evals" (eval.jsonl)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def key_series(run: RunData, key: str, source: str, label: str, color: str, style_index: int) -> Series | None:
    """The finite values of `key` in one run's records, with iteration, elapsed second and eval duration."""
    iterations, seconds, values, durations = [], [], [], []
    for record in getattr(run, source):
        value = _number(record.get(key))
        if value is None:
            continue
        iterations.append(record.get(ITERATION, len(iterations)))
        seconds.append(_number(record.get(ELAPSED_S)))
        values.append(value)
        durations.append(_number(record.get(EVAL_SECONDS)) or 0.0)
    if not values:
        return None
    return Series(label, color, style_index, iterations, seconds, values,
                  durations=durations if source == "evals" else None)


def lines(runs: list[RunData], keys: list[str], spec: FigureSpec, source: str = "metrics") -> FigureData | None:
    """One series per (run, key) that has data; None when no run has any of the keys."""
    series = []
    for run, color in zip(runs, run_colors(len(runs))):
        for style_index, key in enumerate(keys):
            label = run.label if len(keys) == 1 else (f"{run.label}: {key}" if len(runs) > 1 else key)
            found = key_series(run, key, source, label, color, style_index)
            if found is not None:
                series.append(found)
    return FigureData(spec.name, spec.title, spec.ylabel, series=series) if series else None


def _line_figure(runs: list[RunData], spec: FigureSpec) -> FigureData | None:
    return lines(runs, list(spec.keys), spec, spec.source)


def _reward_components(runs: list[RunData], spec: FigureSpec) -> FigureData | None:
    keys = sorted({k for run in runs for k in run.keys() if k.startswith(REWARD_PREFIX)} - set(REWARD_SUMMARIES))
    return lines(runs, keys, spec) if keys else None


def _episode_shares(runs: list[RunData], spec: FigureSpec) -> FigureData | None:
    """Environment tasks: the environment's share of the tokens and the share of episodes each limit cut."""
    limits = sorted({k for run in runs for k in run.keys() if k.startswith(EPISODE_TRUNCATED_PREFIX)})
    return lines(runs, [EPISODE_ENV_TOKEN_FRAC, *limits], spec)


def _eval_accuracy(runs: list[RunData], spec: FigureSpec) -> FigureData | None:
    # eval.jsonl holds the step-0 eval and each eval's own time; runs without it fall back to metrics.jsonl.
    # A sampled eval (train.eval_samples > 1) adds its pass@k curves; its eval/accuracy is then mean@n.
    if any(run.series(EVAL_ACCURACY, source="evals")[1] for run in runs):
        passes = sorted({k for run in runs for record in run.evals for k in record
                         if k.startswith(EVAL_PASS_AT_PREFIX) and k.removeprefix(EVAL_PASS_AT_PREFIX).isdigit()},
                        key=lambda k: int(k.removeprefix(EVAL_PASS_AT_PREFIX)))
        if passes:
            spec = dataclasses.replace(spec, title="Eval accuracy (mean over the samples) and pass@k, held-out")
        return lines(runs, [EVAL_ACCURACY, *passes], spec, source="evals")
    return lines(runs, [EVAL_ACCURACY], spec)


def time_parts(record: dict) -> dict[str, float]:
    """Seconds per part of one iteration; "other" is time/iteration minus the named parts."""
    parts = {key.removeprefix(TIME_PREFIX): float(record[key]) for key in TIME_PARTS
             if isinstance(record.get(key), (int, float))}
    total = record.get(TIME_ITERATION)
    if isinstance(total, (int, float)):
        parts["other"] = max(0.0, float(total) - sum(parts.values()))
    return parts


def _time_stacked(runs: list[RunData], spec: FigureSpec) -> FigureData | None:
    """Per run, one stacked bar per iteration: the iteration's parts, then the eval that followed it."""
    names = [key.removeprefix(TIME_PREFIX) for key in TIME_PARTS] + ["other", "eval"]
    panels = []
    for run in runs:
        by_iteration: dict[int, dict] = {}
        for record in run.metrics:
            parts = time_parts(record)
            if parts and isinstance(record.get(ITERATION), int):
                by_iteration[record[ITERATION]] = {"parts": parts, ELAPSED_S: _number(record.get(ELAPSED_S))}
        if not by_iteration:
            continue
        for record in run.evals:  # the eval's own clock: it ends at its elapsed_s
            seconds = _number(record.get(EVAL_SECONDS))
            if seconds is not None and isinstance(record.get(ITERATION), int):
                slot = by_iteration.setdefault(record[ITERATION], {"parts": {}, ELAPSED_S: None})
                slot["parts"]["eval"] = seconds
                if slot[ELAPSED_S] is None:  # the step-0 eval: no iteration before it, placed where it ended
                    slot[ELAPSED_S] = _number(record.get(ELAPSED_S))
        iterations = sorted(by_iteration)
        series = []
        for style_index, name in enumerate(names):
            heights = [by_iteration[i]["parts"].get(name, 0.0) for i in iterations]
            if any(heights):
                series.append(Series(name, run_colors(len(names))[style_index], style_index, list(iterations),
                                     [by_iteration[i][ELAPSED_S] for i in iterations], heights))
        panels.append((run.label, series))
    return FigureData(spec.name, spec.title, spec.ylabel, panels=panels, kind="stacked") if panels else None


FIGURES: list[FigureSpec] = [
    FigureSpec("reward", "Rollout reward (mean over the batch)", _line_figure, (REWARD_MEAN,), "reward"),
    FigureSpec("reward_components", "Reward components", _reward_components, (), "mean component"),
    FigureSpec("eval_accuracy", "Eval accuracy (greedy, held-out)", _eval_accuracy, (EVAL_ACCURACY,), "accuracy"),
    FigureSpec("advantage_signal", "Groups without contrast, rows with a learning signal, distinct completions",
               _line_figure, (FRAC_NO_CONTRAST_GROUPS, FRAC_NONZERO_ADVANTAGES, DISTINCT_COMPLETIONS_FRAC),
               "fraction"),
    FigureSpec("kl", "KL to the reference policy", _line_figure, (KL,), "KL (per token)"),
    FigureSpec("clip_frac", "Clipped token fraction", _line_figure, (CLIP_FRAC_LOW, CLIP_FRAC_HIGH), "fraction"),
    FigureSpec("entropy", "Policy entropy", _line_figure, (ENTROPY,), "nats / token"),
    FigureSpec("grad_norm", "Gradient norm (before clipping)", _line_figure, (GRAD_NORM,), "norm"),
    FigureSpec("truncated_frac", "Completions that hit max_new_tokens", _line_figure, (TRUNCATED_FRAC,), "fraction"),
    FigureSpec("completion_len", "Completion length", _line_figure, (COMPLETION_LEN_MEAN,), "tokens"),
    FigureSpec("episode", "Episodes: turns, tool calls and failed calls per episode", _line_figure,
               (EPISODE_TURNS, EPISODE_TOOL_CALLS, EPISODE_TOOL_ERRORS), "per episode"),
    FigureSpec("episode_shares", "Episodes: the environment's share of the tokens, episodes cut by each limit",
               _episode_shares, (), "fraction"),
    FigureSpec("time", "Time per iteration (and the eval after it)", _time_stacked, TIME_PARTS, "seconds"),
]


def select_figures(runs: list[RunData]) -> list[FigureData]:
    """The data of every figure that has some, in report order."""
    return [data for data in (spec.select(runs, spec) for spec in FIGURES) if data is not None]
