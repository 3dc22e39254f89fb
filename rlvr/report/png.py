"""Draw a report figure's data as a PNG with matplotlib (the files beside the page, and the page's
figures when plotly is not installed).

Matplotlib's object API with the Agg canvas is used, never pyplot's global state.
"""

from __future__ import annotations

import io
import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlvr.report.figures import ITERATION_AXIS, WARNING_COLOR, X_LABELS, FigureData, Series

LINE_STYLES = ("-", "--", ":", "-.")
LEGEND_ROWS = 16  # legend entries inside the axes at most; more go beside them, this many per column
LEGEND_COLUMN_INCHES = 2.6


def _new_figure(width: float = 7.0, height: float = 3.6) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _points(series: Series, x: str) -> tuple[list[float], list[float]]:
    """The series' points that have an x value on this axis (old records may lack elapsed_s)."""
    pairs = [(px, y) for px, y in zip(series.xs(x), series.values) if px is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def draw_lines(data: FigureData, x: str = ITERATION_AXIS) -> Figure:
    labels = len({s.label for s in data.series})
    # A legend of many lines (a sweep of 15 runs x 3 reward components) goes beside the axes, in columns of
    # LEGEND_ROWS, and the figure widens for it; inside the axes it would cover them and collapse the layout.
    columns = math.ceil(labels / LEGEND_ROWS) if labels > LEGEND_ROWS else 0
    figure = _new_figure(7.0 + LEGEND_COLUMN_INCHES * columns)
    axes = figure.subplots()
    for series in data.series:
        xs, ys = _points(series, x)
        style = LINE_STYLES[series.style_index % len(LINE_STYLES)]
        axes.plot(xs, ys, linestyle=style, marker="o", markersize=3, color=series.color, label=series.label)
        if series.durations is not None and x == "seconds":  # each eval's duration, ending at its point
            spans = [d for d, px in zip(series.durations, series.xs(x)) if px is not None]
            axes.errorbar(xs, ys, xerr=[spans, [0.0] * len(spans)], fmt="none", ecolor=series.color, capsize=3)
    for marker in data.markers:
        at = marker.x(x)
        if at is not None:
            axes.axvline(at, color=WARNING_COLOR, linestyle="--", linewidth=1)
            axes.annotate(marker.label, (at, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                          color=WARNING_COLOR, ha="right", va="top")
    axes.set_title(data.title)
    axes.set_xlabel(X_LABELS[x])
    if x == ITERATION_AXIS:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(data.ylabel)
    axes.grid(alpha=0.3)
    if columns:
        figure.legend(loc="outside right upper", fontsize=6, ncols=columns)
    elif len(data.series) > 1 or labels > 1:
        axes.legend(fontsize=7)
    return figure


def draw_stacked(data: FigureData, x: str = ITERATION_AXIS) -> Figure:
    """Stacked bars, one panel per run (stacks cannot be overlaid)."""
    figure = _new_figure(7.0, 2.4 * len(data.panels) + 1.0)
    panels = figure.subplots(len(data.panels), 1, sharex=True, squeeze=False)[:, 0]
    for axes, (label, parts) in zip(panels, data.panels):
        bottom: dict[float, float] = {}
        for series in parts:
            xs, heights = _points(series, x)
            base = [bottom.get(px, 0.0) for px in xs]
            width = 0.8 if x == ITERATION_AXIS else max(1.0, 0.8 * _spacing(xs))
            axes.bar(xs, heights, bottom=base, color=series.color, label=series.label, width=width)
            for px, height in zip(xs, heights):
                bottom[px] = bottom.get(px, 0.0) + height
        axes.set_title(f"{data.title}: {label}" if len(data.panels) > 1 else data.title, fontsize=10)
        axes.set_ylabel(data.ylabel)
        axes.grid(alpha=0.3, axis="y")
        axes.legend(fontsize=7, loc="upper right")
    panels[-1].set_xlabel(X_LABELS[x])
    if x == ITERATION_AXIS:
        panels[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure


def _spacing(xs: list[float]) -> float:
    ordered = sorted(set(xs))
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return min(gaps) if gaps else 1.0


def render_png(data: FigureData, x: str = ITERATION_AXIS) -> bytes:
    figure = draw_stacked(data, x) if data.kind == "stacked" else draw_lines(data, x)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
