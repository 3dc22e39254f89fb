"""The report's figures: an ordered list of specs, each turning runs into one PNG (or nothing).

Every run has one colour across all figures; within a figure, the series of one run differ by
line style. A figure whose keys appear in no run is skipped, so old or partial runs still work.
Matplotlib's object API with the Agg canvas is used, never pyplot's global state.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlvr.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    COMPLETION_LEN_MEAN,
    ENTROPY,
    EVAL_ACCURACY,
    FRAC_NONZERO_ADVANTAGES,
    FRAC_ZERO_VARIANCE_GROUPS,
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
from rlvr.report.runs import RunData

LINE_STYLES = ("-", "--", ":", "-.")
# TIME_PARTS are stacked in the time figure; whatever time/iteration holds beyond them is "other".


@dataclass
class FigureSpec:
    name: str  # file stem of the PNG
    title: str
    render: Callable[[list[RunData], "FigureSpec"], Figure | None]
    keys: tuple[str, ...] = ()  # the metric keys a line figure plots
    ylabel: str = ""
    source: str = "metrics"  # "metrics" (metrics.jsonl) or "evals" (eval.jsonl)


def run_colors(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(count)]


def _new_figure(width: float = 7.0, height: float = 3.6) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_lines(runs: list[RunData], keys: list[str], title: str, ylabel: str, source: str = "metrics") -> Figure | None:
    """One line per (run, key) that has data; None when no run has any of the keys."""
    colors = run_colors(len(runs))
    figure, axes, drawn = _new_figure(), None, 0
    for run, color in zip(runs, colors):
        for style, key in zip(LINE_STYLES * (len(keys) // len(LINE_STYLES) + 1), keys):
            xs, ys = run.series(key, source=source)
            if not ys:
                continue
            axes = axes or figure.subplots()
            label = run.label if len(keys) == 1 else (f"{run.label}: {key}" if len(runs) > 1 else key)
            axes.plot(xs, ys, linestyle=style, marker="o", markersize=3, color=color, label=label)
            drawn += 1
    if axes is None:
        return None
    axes.set_title(title)
    axes.set_xlabel(ITERATION)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    if drawn > 1 or len(runs) > 1:
        axes.legend(fontsize=7)
    return figure


def _line_figure(runs: list[RunData], spec: FigureSpec) -> Figure | None:
    return plot_lines(runs, list(spec.keys), spec.title, spec.ylabel, spec.source)


def _reward_components(runs: list[RunData], spec: FigureSpec) -> Figure | None:
    keys = sorted({k for run in runs for k in run.keys() if k.startswith(REWARD_PREFIX)} - set(REWARD_SUMMARIES))
    return plot_lines(runs, keys, spec.title, spec.ylabel) if keys else None


def _eval_accuracy(runs: list[RunData], spec: FigureSpec) -> Figure | None:
    # eval.jsonl holds the step-0 eval too; runs without it fall back to metrics.jsonl.
    if any(run.series(EVAL_ACCURACY, source="evals")[1] for run in runs):
        return plot_lines(runs, [EVAL_ACCURACY], spec.title, spec.ylabel, source="evals")
    return plot_lines(runs, [EVAL_ACCURACY], spec.title, spec.ylabel)


def time_parts(record: dict) -> dict[str, float]:
    """Seconds per part of one iteration; "other" is time/iteration minus the named parts."""
    parts = {key.removeprefix(TIME_PREFIX): float(record[key]) for key in TIME_PARTS
             if isinstance(record.get(key), (int, float))}
    total = record.get(TIME_ITERATION)
    if isinstance(total, (int, float)):
        parts["other"] = max(0.0, float(total) - sum(parts.values()))
    return parts


def _time_stacked(runs: list[RunData], spec: FigureSpec) -> Figure | None:
    """Stacked bars per iteration, one panel per run (stacks cannot be overlaid)."""
    timed = [run for run in runs if any(time_parts(r) for r in run.metrics)]
    if not timed:
        return None
    names = [key.removeprefix(TIME_PREFIX) for key in TIME_PARTS] + ["other"]
    colors = run_colors(len(names))
    figure = _new_figure(7.0, 2.4 * len(timed) + 1.0)
    panels = figure.subplots(len(timed), 1, sharex=True, squeeze=False)[:, 0]
    for axes, run in zip(panels, timed):
        records = [r for r in run.metrics if time_parts(r)]
        xs = [r.get(ITERATION, i) for i, r in enumerate(records)]
        bottom = [0.0] * len(records)
        for name, color in zip(names, colors):
            heights = [time_parts(r).get(name, 0.0) for r in records]
            if not any(heights):
                continue
            axes.bar(xs, heights, bottom=bottom, color=color, label=name, width=0.8)
            bottom = [b + h for b, h in zip(bottom, heights)]
        axes.set_title(f"{spec.title}: {run.label}" if len(timed) > 1 else spec.title, fontsize=10)
        axes.set_ylabel(spec.ylabel)
        axes.grid(alpha=0.3, axis="y")
        axes.legend(fontsize=7, loc="upper right")
    panels[-1].set_xlabel(ITERATION)
    panels[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure


FIGURES: list[FigureSpec] = [
    FigureSpec("reward", "Rollout reward (mean over the batch)", _line_figure, (REWARD_MEAN,), "reward"),
    FigureSpec("reward_components", "Reward components", _reward_components, (), "mean component"),
    FigureSpec("eval_accuracy", "Eval accuracy (greedy, held-out)", _eval_accuracy, (EVAL_ACCURACY,), "accuracy"),
    FigureSpec("advantage_signal", "Groups without contrast and rows with a learning signal", _line_figure,
               (FRAC_ZERO_VARIANCE_GROUPS, FRAC_NONZERO_ADVANTAGES), "fraction"),
    FigureSpec("kl", "KL to the reference policy", _line_figure, (KL,), "KL (per token)"),
    FigureSpec("clip_frac", "Clipped token fraction", _line_figure, (CLIP_FRAC_LOW, CLIP_FRAC_HIGH), "fraction"),
    FigureSpec("entropy", "Policy entropy", _line_figure, (ENTROPY,), "nats / token"),
    FigureSpec("grad_norm", "Gradient norm (before clipping)", _line_figure, (GRAD_NORM,), "norm"),
    FigureSpec("truncated_frac", "Completions that hit max_new_tokens", _line_figure, (TRUNCATED_FRAC,), "fraction"),
    FigureSpec("completion_len", "Completion length", _line_figure, (COMPLETION_LEN_MEAN,), "tokens"),
    FigureSpec("time", "Time per iteration", _time_stacked, TIME_PARTS, "seconds"),
]


def render_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def render_figures(runs: list[RunData]) -> list[tuple[FigureSpec, bytes]]:
    """(spec, PNG bytes) for every figure that has data, in report order."""
    out = []
    for spec in FIGURES:
        figure = spec.render(runs, spec)
        if figure is not None:
            out.append((spec, render_png(figure)))
    return out
