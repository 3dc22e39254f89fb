"""`rlvr study`: run a study's grid of configs x seeds with `rlvr sweep`, then write the tables and figures its
results page shows.

A study file (configs/studies/NAME.yaml) is a sweep file plus a `study:` section (rlvr/report/study_spec.py):
`rlvr sweep` runs it as it is, into the same run folders, and `rlvr study` adds OUTPUT/summary.md,
OUTPUT/summary.json and the figures. A rerun skips finished runs, so it writes the same page again;
`summary_only` summarises the runs that exist and names the ones missing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from rlvr.observe.console import SweepSummary
from rlvr.report.run_data import RunData, load_run
from rlvr.report.study_figures import render_study_figure
from rlvr.report.study_numbers import (
    StudySummary,
    condition_ratio,
    pool_condition,
    resume_iterations,
    run_numbers,
)
from rlvr.report.study_spec import SEED_KEY, StudyError, StudySpec, check_ratios, parse_study
from rlvr.report.study_tables import summary_markdown
from rlvr.sweep import DONE_FILE, SweepPlan, grid_points, load_plan, short_names, sweep
from rlvr.utils import atomic_write_bytes, atomic_write_text

STUDIES_DIR = Path("configs") / "studies"  # `rlvr study NAME` reads configs/studies/NAME.yaml (from the current folder)
SUMMARY_MD = "summary.md"
SUMMARY_JSON = "summary.json"


@dataclass(frozen=True)
class PlannedRun:
    name: str  # its folder in the study's output: the sweep's name for the grid point
    condition: str  # its values of the group_by keys, as `short_key=value` joined by `__`
    seed: object  # its train.seed value in the grid (None: the grid has no train.seed; read from its config)


@dataclass(frozen=True)
class Study:
    path: Path
    plan: SweepPlan
    spec: StudySpec
    runs: tuple[PlannedRun, ...]
    conditions: tuple[str, ...]  # in grid order


@dataclass(frozen=True)
class StudyResult:
    summary: StudySummary
    written: tuple[Path, ...]  # summary.md, summary.json, then the figures
    sweep: SweepSummary | None  # None with summary_only


def study_names(studies_dir: Path = STUDIES_DIR) -> list[str]:
    return sorted(path.stem for path in Path(studies_dir).glob("*.yaml"))


def resolve_study(name_or_file: str, studies_dir: Path = STUDIES_DIR) -> Path:
    """A path to a study file as it is; a bare name is studies_dir/NAME.yaml (unknown: an error listing the names)."""
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        if not path.is_file():
            raise FileNotFoundError(f"study file {name_or_file} does not exist")
        return path
    candidate = Path(studies_dir) / f"{name_or_file}.yaml"
    if candidate.is_file():
        return candidate
    names = study_names(studies_dir)
    raise StudyError(f"no study named {name_or_file!r} in {studies_dir}/; the studies: {', '.join(names) or '(none)'}")


def _grid_value(text: str):
    return yaml.safe_load(text)  # "0" -> 0, as the config reads it


def load_study(path: str | Path) -> Study:
    """The study file's plan (as `rlvr sweep` reads it), its checked `study:` section and each run's condition."""
    path = Path(path)
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "grid" not in data:
        raise StudyError(f"{path} is not a study file: it needs a grid (it is a sweep file: base, overrides, grid) "
                         "and may have a study section")
    plan = load_plan(str(path), [], [])
    try:
        spec = parse_study(data.get("study"), [k for keys, _ in plan.grid for k in keys], path.stem)
    except StudyError as error:
        raise StudyError(f"{path}: {error}") from None
    short = short_names(plan)
    grouped = [index for index, (keys, _) in enumerate(plan.grid) if set(keys) & set(spec.group_by)]
    runs = []
    for (name, _), values in zip(grid_points(plan), itertools.product(*[values for _, values in plan.grid])):
        condition = "__".join(f"{'+'.join(short[k] for k in plan.grid[i][0])}={values[i]}" for i in grouped)
        seed = next((_grid_value(v) for (keys, _), v in zip(plan.grid, values) if SEED_KEY in keys), None)
        runs.append(PlannedRun(name, condition or "all", seed))
    conditions = tuple(dict.fromkeys(run.condition for run in runs))
    try:
        check_ratios(spec, list(conditions))
    except StudyError as error:
        raise StudyError(f"{path}: {error}") from None
    return Study(path, plan, spec, tuple(runs), conditions)


def _sweep_done(folder: Path) -> int | None:
    """The iterations the sweep finished the run with (sweep_done.json, written also after a health stop)."""
    done = folder / DONE_FILE
    return json.loads(done.read_text()).get("iterations") if done.exists() else None


def summarize_study(study: Study, output: Path) -> tuple[StudySummary, dict[str, list[RunData]]]:
    """The numbers of the runs that exist in `output` (missing ones named), and each condition's runs."""
    spec = study.spec
    numbers, by_condition = [], {condition: [] for condition in study.conditions}
    missing = {condition: [] for condition in study.conditions}
    for planned in study.runs:
        folder = output / planned.name
        if not ((folder / "metrics.jsonl").exists() or (folder / "eval.jsonl").exists()):
            missing[planned.condition].append(planned.name)
            continue
        run = load_run(folder)
        seed = planned.seed if planned.seed is not None else run.config.get(SEED_KEY)
        numbers.append(run_numbers(run, planned.name, planned.condition, seed, _sweep_done(folder), spec.metrics,
                                   spec.thresholds, spec.last, resume_iterations(folder)))
        by_condition[planned.condition].append(run)
    if not numbers:
        raise StudyError(f"none of the {len(study.runs)} runs of {study.path} is in {output}: run `rlvr study "
                         f"{study.path}` without --summary-only to train them (or give --output)")
    conditions = [pool_condition(c, [n for n in numbers if n.condition == c], missing[c], spec.metrics, spec.thresholds)
                  for c in study.conditions]
    named = {c.label: c for c in conditions}
    summary = StudySummary(
        title=spec.title, study_file=str(study.path), output=str(output), page=spec.page,
        grid=[f"{'+'.join(keys)}={','.join(values)}" for keys, values in study.plan.grid],
        group_by=list(spec.group_by), last=spec.last, metrics=list(spec.metrics),
        thresholds=[t.label for t in spec.thresholds], planned=len(study.runs),
        missing=[name for c in study.conditions for name in missing[c]],
        unfinished=[n.name for n in numbers if not n.finished], runs=numbers, conditions=conditions,
        ratios=[condition_ratio(named[a], named[b], spec.thresholds) for a, b in spec.ratios],
        figures=[str(figure.path) for figure in spec.figures])
    return summary, by_condition


def write_study(study: Study, output: Path) -> tuple[StudySummary, tuple[Path, ...]]:
    """Write OUTPUT/summary.md, OUTPUT/summary.json and the figures, each atomically; returns what was written."""
    summary, by_condition = summarize_study(study, output)
    written = [output / SUMMARY_MD, output / SUMMARY_JSON]
    atomic_write_text(written[0], summary_markdown(summary))
    atomic_write_text(written[1], json.dumps(dataclasses.asdict(summary), indent=1, allow_nan=False) + "\n")
    groups = [(condition, runs) for condition, runs in by_condition.items()]
    for figure in study.spec.figures:
        atomic_write_bytes(figure.path, render_study_figure(figure, groups))
        written.append(figure.path)
    return summary, tuple(written)


def run_study(name_or_file: str, output: str | Path | None = None, summary_only: bool = False,
              studies_dir: Path = STUDIES_DIR, threads: int | None = None) -> StudyResult:
    """Run (or resume, or skip) every run of the study's grid with `rlvr sweep`, unless `summary_only`, then write its
    summary into `output` (default: the study's own `output`). `threads`: model.num_threads of every run (how
    fast, not what it computes: two studies side by side on a small machine want one thread each)."""
    study = load_study(resolve_study(name_or_file, studies_dir))
    output = Path(output) if output is not None else study.spec.output
    swept = None
    if not summary_only:
        swept = sweep(str(study.path), [f"model.num_threads={threads}"] if threads is not None else [], [], output)
    summary, written = write_study(study, output)
    return StudyResult(summary, written, swept)
