"""`rlvr sweep`: train every point of a cartesian grid of overrides, then write one report.

Runs go one after another in this process, each in OUTPUT/<name from its grid values>. A rerun
is resumable: a finished run is skipped, a run with a checkpoint is resumed from it, and a run
that crashed before its first checkpoint starts over. A sweep file is a base config plus a grid, and
`command:` what makes each run (`train`, the default, or `sft`, `expert-iter`, `eval`: rlvr/sweep_runs.py).
"""

from __future__ import annotations

import gc
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import rlvr.observe.console as console
from rlvr.config import ConfigError, load_config
from rlvr.observe.console import SweepSummary
from rlvr.sweep_runs import DONE_FILE, RUN_COMMANDS, run_status, status_of, train_to_done  # noqa: F401 (run_status: the sweep's API)
from rlvr.sweep_stages import Stage, grid_overrides, parse_stages, run_stages

# A sweep file's top-level keys. `study` (a study file's summary: what `rlvr study` tabulates and draws, see
# rlvr/study.py) is accepted and ignored here, so `rlvr sweep` runs a study file as it is.
SWEEP_FILE_KEYS = ("base", "command", "overrides", "grid", "variants", "before", "study")
# `variants`: named sets of overrides, one more dimension of the grid (before the others), for
# one-at-a-time ablations that no cartesian grid of keys expresses. Its points are named variant=NAME.
VARIANT_KEY = "variant"


@dataclass
class SweepPlan:
    base: Path | None  # the config every run starts from (None: rlvr train's defaults)
    overrides: list[str] = field(default_factory=list)  # applied to every run
    grid: list[tuple[tuple[str, ...], list[str]]] = field(default_factory=list)  # (keys, values)
    name: str = "sweep"
    variants: dict[str, list[str]] = field(default_factory=dict)  # variant name -> its overrides
    before: list[Stage] = field(default_factory=list)  # runs trained once before the grid (rlvr/sweep_stages.py)
    command: str = "train"  # what makes each grid run: a key of rlvr.sweep_runs.RUN_COMMANDS
    command_line: list[str] = field(default_factory=list)  # the command line's overrides: every run's, stages' too


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets, so `a,[b,c]` is two values."""
    values, depth, current = [], 0, ""
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    return [v for v in values if v != ""]


def _value_text(value) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return json.dumps(value)


def parse_grid_item(item: str) -> tuple[tuple[str, ...], list[str]]:
    """`key=v1,v2` (or `key_a+key_b=v1,v2`: both keys take each value) -> (keys, values)."""
    if "=" not in item:
        raise ConfigError(f"--grid {item!r} is not of the form key=v1,v2 (e.g. algorithm.ppo_epochs=1,2,4)")
    key, text = item.split("=", 1)
    keys = tuple(k.strip() for k in key.split("+") if k.strip())
    values = _split_values(text)
    if not keys or not values:
        raise ConfigError(f"--grid {item!r} needs at least one key and one value")
    if len(set(values)) != len(values):
        raise ConfigError(f"--grid {item!r} lists a value twice")
    return keys, values


def load_plan(config_path: str | None, overrides: list[str], grid_items: list[str]) -> SweepPlan:
    """A plain config file, or a sweep file (`base`, `overrides`, `grid`, `variants`), plus command-line items."""
    plan = SweepPlan(base=Path(config_path) if config_path else None,
                     name=Path(config_path).stem if config_path else "sweep")
    if config_path is not None and Path(config_path).is_file():
        data = yaml.safe_load(Path(config_path).read_text()) or {}
        if isinstance(data, dict) and "grid" in data:
            unknown = sorted(set(data) - set(SWEEP_FILE_KEYS))
            if unknown:
                raise ConfigError(f"sweep file {config_path}: unknown key {unknown[0]!r}; valid keys: "
                                  f"{', '.join(SWEEP_FILE_KEYS)}")
            base = data.get("base")
            plan.base = (Path(config_path).parent / base) if base else None
            given = data.get("overrides") or {}
            if not isinstance(given, dict) or not isinstance(data["grid"], dict):
                raise ConfigError(f"sweep file {config_path}: overrides and grid must be mappings of key: value(s)")
            plan.overrides = [f"{k}={_value_text(v)}" for k, v in given.items()]
            plan.variants = _variants(data.get("variants"), config_path)
            plan.before = parse_stages(data.get("before"), config_path, _value_text)
            plan.command = data.get("command", "train")
            if plan.command not in RUN_COMMANDS:
                raise ConfigError(f"sweep file {config_path}: command {plan.command!r} is not one of "
                                  f"{', '.join(RUN_COMMANDS)}")
            if plan.variants:
                plan.grid.append(((VARIANT_KEY,), list(plan.variants)))
            for key, values in data["grid"].items():
                values = values if isinstance(values, list) else [values]
                plan.grid.append(parse_grid_item(f"{key}={','.join(_value_text(v) for v in values)}"))
    plan.overrides += list(overrides)
    plan.command_line = list(overrides)
    plan.grid += [parse_grid_item(item) for item in grid_items]
    if not plan.grid:
        raise ConfigError("a sweep needs a grid: --grid key=v1,v2 (repeatable) or a sweep file with `grid:`")
    seen = [k for keys, _ in plan.grid for k in keys]
    if len(set(seen)) != len(seen):
        raise ConfigError(f"a key appears in two grid entries: {sorted(k for k in set(seen) if seen.count(k) > 1)}")
    return plan


def _variants(given, config_path: str) -> dict[str, list[str]]:
    """`variants:` of a sweep file -> {name: overrides}; each variant a mapping of key: value."""
    if given is None:
        return {}
    if not isinstance(given, dict) or not given or not all(isinstance(v, dict) and v for v in given.values()):
        raise ConfigError(f"sweep file {config_path}: variants must map each name to a mapping of key: value "
                          f"(e.g. variants: {{kl_up: {{algorithm.kl_coef: 0.16}}}})")
    bad = [name for name in given if not re.fullmatch(r"[A-Za-z0-9._+-]+", str(name))]
    if bad:
        raise ConfigError(f"sweep file {config_path}: variant name {bad[0]!r} may hold only letters, digits and ._+-")
    return {str(name): [f"{k}={_value_text(v)}" for k, v in overrides.items()] for name, overrides in given.items()}


def short_names(plan: SweepPlan) -> dict[str, str]:
    """The last part of each grid key, or the whole key where two last parts collide."""
    keys = [k for keys, _ in plan.grid for k in keys]
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def grid_points(plan: SweepPlan) -> list[tuple[str, list[str]]]:
    """(run name, overrides) for every point of the cartesian grid, in grid order."""
    short = short_names(plan)
    points = []
    for combination in itertools.product(*[values for _, values in plan.grid]):
        parts, overrides = [], []
        for (keys, _), value in zip(plan.grid, combination):
            parts.append(f"{'+'.join(short[k] for k in keys)}={value}")
            overrides += plan.variants[value] if keys == (VARIANT_KEY,) else [f"{k}={value}" for k in keys]
        name = re.sub(r"[^A-Za-z0-9._=+-]", "_", "__".join(parts))
        points.append((name, overrides))
    return points


def sweep(config_path: str | None, overrides: list[str], grid_items: list[str],
          output_dir: str | Path | None = None) -> SweepSummary:
    """Run (or resume, or skip) every grid point, then write OUTPUT/report.html; returns the end summary
    (each run's status and final and best eval, the report)."""
    from rlvr.run.preflight import check_init_from, check_sources

    plan = load_plan(config_path, overrides, grid_items)
    if output_dir is None:
        output_dir = Path(load_config(plan.base, plan.overrides, check=False).train.output_dir) / f"sweep-{plan.name}"
    output_dir = Path(output_dir)
    # Every point's config, model source, task and data are checked before the first run (and before the
    # `before:` stages): first what needs no torch (a wrong model name or data path fails at once), then the
    # rest. A model.init_from that a stage writes is checked once the stages have run.
    from_stage = any(stage.init_from for stage in plan.before)
    command = RUN_COMMANDS[plan.command]
    points = []
    for name, point in grid_points(plan):
        fixed = [f"train.output_dir={output_dir}", f"train.run_name={name}"] + grid_overrides(plan.before, output_dir)
        unchecked = load_config(plan.base, plan.overrides + point + fixed, check=False)
        check_sources(unchecked, inference=command.inference, sft=command.sft_data, init_from=not from_stage)
        points.append((name, point, plan.overrides + point + fixed))
    console.show_banner(unchecked, console.sweep_banner_lines(plan.grid, len(points), output_dir))
    configs = [(name, point, load_config(plan.base, items)) for name, point, items in points]
    run_stages(plan.before, output_dir, plan.command_line)
    if from_stage:
        for _, _, config in configs:
            check_init_from(config)
    from rlvr.report import build_report
    from rlvr.run.setup import prepare_task
    from rlvr.observe.sinks import require_sink_packages

    prepared = set()
    for _, _, config in configs:
        what = repr((config.model.name, config.task, config.train.seed, config.train.eval_size, config.train.loggers))
        if what not in prepared:  # points that differ only in training keys share one check
            require_sink_packages(config)
            prepare_task(config)
            prepared.add(what)
    done = []
    for number, (name, point, config) in enumerate(configs, start=1):
        run_dir = output_dir / name
        status = status_of(command, config, run_dir)
        console.say(config, f"sweep [{number}/{len(configs)}] {name}: {status}")
        train_to_done(command, config, run_dir, status, {"iterations": config.train.iterations, "grid": point})
        done.append((name, status, run_dir))
        gc.collect()
    report = build_report([run_dir for _, _, run_dir in done], output_dir / "report.html")
    return console.summarize_sweep(output_dir, plan.grid, done, report)
