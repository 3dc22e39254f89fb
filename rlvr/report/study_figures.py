"""A study's figures: one PNG per `study.figures` entry, one panel per metric against iterations (or, with
`x: seconds`, against each record's elapsed seconds: a leaderboard's accuracy over time).

Each condition has one colour: a thin line per run (its seeds) and a thick line for their mean, so
the spread between seeds is seen beside the difference between conditions. Matplotlib's object API
with the Agg canvas, as in png.py; the caller writes the bytes atomically.
"""

from __future__ import annotations

import io
import math
import statistics

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlvr.report.figures import ITERATION_AXIS, X_LABELS, key_series, run_colors
from rlvr.report.run_data import RunData
from rlvr.report.study_numbers import metric_source, moving_mean
from rlvr.report.study_spec import FigureSpec, Panel

PANEL_COLUMNS = 3


def mean_over_seeds(series: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float]]:
    """(xs, means): at each x some run logged, the mean of the runs' finite values there (a run that has no value
    at that x, unfinished or not evaluated there, is left out of that point's mean)."""
    by_x: dict[float, list[float]] = {}
    for xs, ys in series:
        for x, y in zip(xs, ys):
            if y is not None and math.isfinite(y):
                by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    return xs, [statistics.fmean(by_x[x]) for x in xs]


def panel_series(run: RunData, metric: str, x: str) -> tuple[list[float], list[float]]:
    """(xs, values) of `metric` in one run against iterations or, with x "seconds", each record's elapsed_s (the
    records without it left out)."""
    if x == ITERATION_AXIS:
        return run.series(metric, metric_source(run, metric))
    series = key_series(run, metric, metric_source(run, metric), run.label, "", 0)
    if series is None:
        return [], []
    pairs = [(second, value) for second, value in zip(series.seconds, series.values) if second is not None]
    return [second for second, _ in pairs], [value for _, value in pairs]


def _draw_panel(axes, panel: Panel, groups: list[tuple[str, list[RunData]]], colors: list[str], x: str) -> None:
    for (label, runs), color in zip(groups, colors):
        seeds = []
        for run in runs:
            xs, ys = panel_series(run, panel.metric, x)
            if xs:
                ys = moving_mean(ys, panel.smooth)
                # Against seconds no two runs share an x, so there is no mean line: each run is drawn whole.
                axes.plot(xs, ys, color=color, linewidth=0.8 if x == ITERATION_AXIS else 1.6,
                          alpha=0.35 if x == ITERATION_AXIS else 0.9,
                          label=None if x == ITERATION_AXIS or seeds else f"{label} ({len(runs)} runs)")
                seeds.append((xs, ys))
        if seeds and x == ITERATION_AXIS:
            mean_xs, mean_ys = mean_over_seeds(seeds)
            axes.plot(mean_xs, mean_ys, color=color, linewidth=2.0, label=f"{label} ({len(seeds)} runs)")
    smoothed = f" ({panel.smooth}-point trailing mean)" if panel.smooth > 1 else ""
    axes.set_title(panel.title + smoothed, fontsize=10)
    axes.set_xlabel(X_LABELS[x])
    axes.set_ylabel(panel.metric)
    if x == ITERATION_AXIS:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)


def render_study_figure(spec: FigureSpec, groups: list[tuple[str, list[RunData]]]) -> bytes:
    """The PNG of one figure entry; `groups` is (condition, its runs) in the study's order."""
    columns = min(PANEL_COLUMNS, len(spec.panels))
    rows = math.ceil(len(spec.panels) / columns)
    figure = Figure(figsize=(4.8 * columns + 2.4, 3.4 * rows + 0.4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, columns, squeeze=False)
    panels = [axes for row in grid for axes in row]
    colors = run_colors(len(groups))
    for axes, panel in zip(panels, spec.panels):
        _draw_panel(axes, panel, groups, colors, spec.x)
    for axes in panels[len(spec.panels):]:
        axes.set_visible(False)
    for axes in panels:  # the first panel with lines; beside the panels, where it covers none of them
        handles, labels = axes.get_legend_handles_labels()
        if handles:
            figure.legend(handles, labels, loc="outside right upper", fontsize=8)
            break
    if spec.title:
        figure.suptitle(spec.title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
