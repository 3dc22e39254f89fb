"""The health warnings of a run, read back for the report: which fired, over which iterations, and why.

metrics.jsonl records the names of the warnings active at each iteration (`health/warnings`). Each
streak of one warning becomes a `WarningSpan`; its message is the warning check's own, recomputed on
the records up to the streak's first iteration with the run's saved `health.*` thresholds, so the
report says what `rlvr train` printed. A span marks the figures that plot the metric it is about.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlvr.config import HealthConfig
from rlvr.observe.metric_names import (
    CLIP_FRAC_HIGH,
    DISTINCT_COMPLETIONS_FRAC,
    ELAPSED_S,
    ENTROPY,
    EXPLAINED_VARIANCE,
    FRAC_NO_CONTRAST_GROUPS,
    GRAD_NORM,
    HEALTH_WARNINGS,
    ITERATION,
    KL,
    REWARD_MEAN,
    TRUNCATED_FRAC,
)
from rlvr.report.figures import FIGURES, FigureData, Marker
from rlvr.report.run_data import RunData
from rlvr.observe.health import HEALTH_CHECKS

# The metric each warning is about; its markers go on every figure that plots it. A skipped update
# (nonfinite) is marked where the gradient norm is drawn.
WARNING_METRICS: dict[str, str] = {
    "truncation": TRUNCATED_FRAC,
    "no_contrast": FRAC_NO_CONTRAST_GROUPS,
    "clip_fraction": CLIP_FRAC_HIGH,
    "kl_growth": KL,
    "nonfinite": GRAD_NORM,
    "entropy_collapse": ENTROPY,
    "identical_completions": DISTINCT_COMPLETIONS_FRAC,
    "reward_divergence": REWARD_MEAN,
    "value_not_learning": EXPLAINED_VARIANCE,  # no figure plots it: no marker
}
DEFAULT_PRIMARY_COMPONENT = "answer"  # the built-in tasks' component that says the answer is right


@dataclass
class WarningSpan:
    """One warning active over consecutive logged iterations `first`..`last`."""

    run: str  # the run's label
    name: str
    first: int
    last: int
    first_seconds: float | None  # elapsed_s at `first`
    message: str
    advice: str


def run_thresholds(run: RunData) -> HealthConfig:
    """The run's saved `health.*` keys as a HealthConfig (keys it lacks keep their defaults)."""
    names = {f.name for f in dataclasses.fields(HealthConfig)}
    saved = {key.split(".", 1)[1]: value for key, value in run.config.items()
             if key.startswith("health.") and key.split(".", 1)[1] in names}
    thresholds = HealthConfig(**saved)
    if not thresholds.primary_component:
        thresholds.primary_component = DEFAULT_PRIMARY_COMPONENT
    return thresholds


def warning_spans(run: RunData) -> list[WarningSpan]:
    """Every streak of every warning in `run`, in the order they started."""
    thresholds = run_thresholds(run)
    spans: list[WarningSpan] = []
    open_spans: dict[str, WarningSpan] = {}
    history: list[dict] = []
    for record in run.metrics:
        history.append({k: v for k, v in record.items() if k != HEALTH_WARNINGS})
        iteration = record.get(ITERATION, len(history))
        active = [name for name in record.get(HEALTH_WARNINGS) or [] if isinstance(name, str)]
        for name in list(open_spans):
            if name not in active:
                del open_spans[name]
        for name in active:
            if name in open_spans:
                open_spans[name].last = iteration
                continue
            found = HEALTH_CHECKS.get(name)(history, thresholds) if name in HEALTH_CHECKS else None
            span = WarningSpan(run.label, name, iteration, iteration, record.get(ELAPSED_S),
                               found.message if found else "", found.advice if found else "")
            open_spans[name] = span
            spans.append(span)
    return spans


def add_warning_markers(figures: list[FigureData], spans: list[WarningSpan], several_runs: bool) -> None:
    """A marker at the start of each span on the line figures that plot what its warning watches."""
    plotted = {spec.name: spec.keys for spec in FIGURES}
    for span in spans:
        metric = WARNING_METRICS.get(span.name)
        label = f"{span.run}: {span.name}" if several_runs else span.name
        for figure in figures:
            if figure.kind == "lines" and metric in plotted.get(figure.name, ()):
                figure.markers.append(Marker(span.first, span.first_seconds, label))
