"""A study file's `study:` section as typed data: what `rlvr study` tabulates and draws from its runs.

A study file is a sweep file (`base`, `overrides`, `grid`: `rlvr sweep` runs it as it is) plus this
section. Parsing checks every key, type, metric name and grid key and names the valid choices on a
mistake, so a typo fails before the first run trains instead of leaving an empty column hours later.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from rlvr.observe import metric_names
from rlvr.report.figures import ITERATION_AXIS, X_AXES
from rlvr.observe.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    ENTROPY,
    EVAL_ACCURACY,
    EVAL_PREFIX,
    EPISODE_TOOL_CALLS_PREFIX,
    EPISODE_TOOL_ERRORS_PREFIX,
    EPISODE_TRUNCATED_PREFIX,
    FRAC_NO_CONTRAST_GROUPS,
    KL,
    POLICY_LOSS_PREFIX,
    REWARD_MEAN,
    REWARD_PREFIX,
    STATUS_PREFIX,
    TIME_PREFIX,
)

SEED_KEY = "train.seed"  # the grid key whose values are pooled within a condition unless group_by names it
DEFAULT_METRICS = (REWARD_MEAN, EVAL_ACCURACY, KL, ENTROPY, CLIP_FRAC_LOW, CLIP_FRAC_HIGH, FRAC_NO_CONTRAST_GROUPS)
DEFAULT_LAST = 10  # "mean of the last K iterations": long enough to smooth one noisy batch, short enough to be the end
# Families whose names have a variable part (a reward component, a tool, a loss's own metric).
METRIC_FAMILIES = (REWARD_PREFIX, EVAL_PREFIX, STATUS_PREFIX, TIME_PREFIX, POLICY_LOSS_PREFIX,
                   EPISODE_TOOL_CALLS_PREFIX, EPISODE_TOOL_ERRORS_PREFIX, EPISODE_TRUNCATED_PREFIX)
STUDY_KEYS = ("title", "output", "page", "group_by", "metrics", "last", "thresholds", "ratios", "figures")
THRESHOLD_KEYS = ("metric", "value")
FIGURE_KEYS = ("path", "title", "panels", "smooth", "x")
PANEL_KEYS = ("metric", "title", "smooth")


class StudyError(ValueError):
    """A study file that cannot be summarised; the message names the file, the key and the valid choices."""


@dataclass(frozen=True)
class Threshold:
    """First iteration where `metric` >= `value` (and the completions and seconds spent by then)."""

    metric: str
    value: float

    @property
    def label(self) -> str:
        return f"{self.metric} >= {self.value:g}"


@dataclass(frozen=True)
class Panel:
    metric: str
    title: str
    smooth: int  # trailing mean over this many logged points (1: the values as logged)


@dataclass(frozen=True)
class FigureSpec:
    path: Path  # the PNG; a relative path is taken from the current folder, as `rlvr sweep --output` is
    title: str
    panels: tuple[Panel, ...]
    x: str = ITERATION_AXIS  # the x axis: iterations, or "seconds" (each record's elapsed_s: accuracy over time)


@dataclass(frozen=True)
class StudySpec:
    name: str  # the study file's stem
    title: str
    output: Path  # the default run folder (`rlvr study --output` overrides it)
    page: str | None  # the documentation page the summary feeds (informational)
    group_by: tuple[str, ...]  # grid keys that name a condition; the others (the seeds) are pooled
    metrics: tuple[str, ...]
    last: int  # K in "mean over the last K iterations"
    thresholds: tuple[Threshold, ...]
    ratios: tuple[tuple[str, str], ...]  # (numerator, denominator) condition labels
    figures: tuple[FigureSpec, ...]


def known_metric_names() -> set[str]:
    """Every fixed metric name rlvr writes (rlvr.observe.metric_names)."""
    names = set()
    for name, value in vars(metric_names).items():
        if name.isupper():
            names.update(value if isinstance(value, tuple) else (value,))
    return names


def check_metric(name, where: str) -> str:
    """`name` if rlvr writes it (a fixed name, or one of a family such as reward/<component>), else an error with
    the closest valid names."""
    known = known_metric_names()
    if isinstance(name, str) and (name in known or any(name.startswith(p) and name != p for p in METRIC_FAMILIES)):
        return name
    close = difflib.get_close_matches(str(name), sorted(known), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise StudyError(f"{where}: {name!r} is not a metric rlvr writes (a name of rlvr.observe.metric_names, or one "
                     f"of the families {', '.join(p + '...' for p in METRIC_FAMILIES)}){hint}")


def _check_keys(data, valid: tuple[str, ...], where: str) -> dict:
    if not isinstance(data, dict):
        raise StudyError(f"{where} must be a mapping with the keys {', '.join(valid)}")
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise StudyError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(valid)}")
    return data


def _positive_int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StudyError(f"{where} must be a whole number of at least 1, not {value!r}")
    return value


def _string_list(value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StudyError(f"{where} must be a list of names, e.g. [{REWARD_MEAN}, {EVAL_ACCURACY}]")
    return value


def _threshold(entry, where: str) -> Threshold:
    entry = _check_keys(entry, THRESHOLD_KEYS, where)
    if set(entry) != set(THRESHOLD_KEYS):
        raise StudyError(f"{where} needs both metric and value, e.g. {{metric: {EVAL_ACCURACY}, value: 0.5}}")
    value = entry["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StudyError(f"{where}: value must be a number, not {value!r}")
    return Threshold(check_metric(entry["metric"], f"{where}: metric"), float(value))


def _panel(entry, smooth: int, where: str) -> Panel:
    if isinstance(entry, str):
        entry = {"metric": entry}
    entry = _check_keys(entry, PANEL_KEYS, where)
    if "metric" not in entry:
        raise StudyError(f"{where} needs a metric")
    metric = check_metric(entry["metric"], f"{where}: metric")
    smooth = _positive_int(entry.get("smooth", smooth), f"{where}: smooth")
    return Panel(metric, str(entry.get("title", metric)), smooth)


def _figure(entry, index: int, name: str) -> FigureSpec:
    where = f"study.figures[{index}]"
    entry = _check_keys(entry, FIGURE_KEYS, where)
    if not entry.get("path") or not str(entry["path"]).lower().endswith(".png"):
        raise StudyError(f"{where}: path must name a PNG file, e.g. docs/figures/{name}.png")
    panels = entry.get("panels")
    if not isinstance(panels, list) or not panels:
        raise StudyError(f"{where}: panels must be a list of metrics (or {{metric, title, smooth}} mappings)")
    smooth = _positive_int(entry.get("smooth", 1), f"{where}: smooth")
    x = entry.get("x", ITERATION_AXIS)
    if x not in X_AXES:
        raise StudyError(f"{where}: x must be one of {', '.join(X_AXES)}, not {x!r}")
    return FigureSpec(Path(entry["path"]), str(entry.get("title", "")),
                      tuple(_panel(p, smooth, f"{where}.panels[{i}]") for i, p in enumerate(panels)), x)


def parse_study(section, grid_keys: list[str], name: str) -> StudySpec:
    """The `study:` section of study file `name` (None: every default), checked against the grid's keys."""
    data = _check_keys({} if section is None else section, STUDY_KEYS, "study")
    group_by = data.get("group_by")
    if group_by is None:
        group_by = [key for key in grid_keys if key != SEED_KEY]
    for key in _string_list(group_by, "study.group_by"):
        if key not in grid_keys:
            raise StudyError(f"study.group_by: {key!r} is not a grid key; the grid's keys: {', '.join(grid_keys)}")
    metrics = _string_list(data.get("metrics", list(DEFAULT_METRICS)), "study.metrics")
    thresholds = data.get("thresholds") or []
    ratios = data.get("ratios") or []
    figures = data.get("figures") or []
    for key, value in (("thresholds", thresholds), ("ratios", ratios), ("figures", figures)):
        if not isinstance(value, list):
            raise StudyError(f"study.{key} must be a list")
    for index, pair in enumerate(ratios):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise StudyError(f"study.ratios[{index}] must be a pair of condition names [A, B] (A / B is printed)")
    return StudySpec(
        name=name, title=str(data.get("title", name)), output=Path(data.get("output", f"runs/studies/{name}")),
        page=data.get("page"), group_by=tuple(group_by),
        metrics=tuple(check_metric(m, "study.metrics") for m in metrics),
        last=_positive_int(data.get("last", DEFAULT_LAST), "study.last"),
        thresholds=tuple(_threshold(t, f"study.thresholds[{i}]") for i, t in enumerate(thresholds)),
        ratios=tuple((a, b) for a, b in ratios),
        figures=tuple(_figure(f, i, name) for i, f in enumerate(figures)),
    )


def check_ratios(spec: StudySpec, conditions: list[str]) -> None:
    """Each ratio's two conditions are among the study's conditions (the labels its tables show)."""
    for index, pair in enumerate(spec.ratios):
        for label in pair:
            if label not in conditions:
                raise StudyError(f"study.ratios[{index}]: no condition {label!r}; the conditions: "
                                 f"{', '.join(conditions)}")
