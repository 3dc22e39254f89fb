"""A sweep file's `before:` runs: trained once, before its grid, into the sweep's output folder.

A warm-up that every grid run starts from (an SFT run on the task's demonstrations, then RL from
its weights) is part of the study it belongs to, so one command reproduces the whole of it:

    before:
      sft:                                   # the run's folder name in the sweep's output
        command: sft                         # train, sft, expert-iter or eval
        config: ../spell_backward_sft.yaml   # relative to the sweep file
        overrides: {sft.exclude_eval_seeds: [0, 1, 2]}
        init_from: true                      # every grid run gets model.init_from=OUTPUT/sft
        folder: runs/studies/spell_warm_up   # optional: where the run lives instead of OUTPUT (two studies
                                             # that name the same folder share one warm-up)

A finished run (its `sweep_done.json` written) is skipped, one with a checkpoint resumed, any other
trained from the start, as the grid's runs are (`rlvr.sweep_runs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import rlvr.observe.console as console
from rlvr.config import ConfigError
from rlvr.sweep_runs import RUN_COMMANDS, status_of, train_to_done

STAGE_KEYS = ("command", "config", "overrides", "init_from", "folder")


@dataclass
class Stage:
    name: str  # its folder in the sweep's output
    command: str  # a key of rlvr.sweep_runs.RUN_COMMANDS
    config: Path
    overrides: list[str] = field(default_factory=list)
    init_from: bool = False  # every grid run starts from this run's weights
    folder: Path | None = None  # the folder its run folder is in (None: the sweep's output)

    def run_dir(self, output_dir: Path) -> Path:
        return (self.folder if self.folder is not None else output_dir) / self.name


def parse_stages(given, sweep_file: str, value_text: Callable) -> list[Stage]:
    """`before:` of a sweep file -> its stages, in order; every key, command and name checked."""
    if given is None:
        return []
    if not isinstance(given, dict) or not given:
        raise ConfigError(f"sweep file {sweep_file}: before must map each run's name to a mapping with the keys "
                          f"{', '.join(STAGE_KEYS)}")
    stages = []
    for name, entry in given.items():
        where = f"sweep file {sweep_file}: before.{name}"
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", str(name)):
            raise ConfigError(f"{where}: a run name may hold only letters, digits and ._+-")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a mapping with the keys {', '.join(STAGE_KEYS)}")
        unknown = sorted(set(entry) - set(STAGE_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(STAGE_KEYS)}")
        if entry.get("command") not in RUN_COMMANDS:
            raise ConfigError(f"{where}: command {entry.get('command')!r} is not one of {', '.join(RUN_COMMANDS)}")
        if not entry.get("config"):
            raise ConfigError(f"{where}: name its config (a path relative to the sweep file)")
        overrides = entry.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise ConfigError(f"{where}: overrides must be a mapping of key: value")
        if not isinstance(entry.get("init_from", False), bool):
            raise ConfigError(f"{where}: init_from is true or false")
        folder = entry.get("folder")
        if folder is not None and (not isinstance(folder, str) or not folder):
            raise ConfigError(f"{where}: folder is a path (relative to the current folder, as --output is)")
        stages.append(Stage(str(name), entry["command"], Path(sweep_file).parent / entry["config"],
                            [f"{k}={value_text(v)}" for k, v in overrides.items()], entry.get("init_from", False),
                            Path(folder) if folder is not None else None))
    if sum(stage.init_from for stage in stages) > 1:
        raise ConfigError(f"sweep file {sweep_file}: at most one before run may set init_from")
    return stages


def grid_overrides(stages: list[Stage], output_dir: Path) -> list[str]:
    """What the stages add to every grid run's overrides: model.init_from for the one that sets init_from."""
    return [f"model.init_from={stage.run_dir(output_dir)}" for stage in stages if stage.init_from]


def run_stages(stages: list[Stage], output_dir: Path, command_line: list[str] = ()) -> None:
    """Train each stage that is not finished (resume it where it has a checkpoint), then mark it done.
    `command_line`: the sweep's command-line overrides (`model.num_threads=1`), applied to every stage after
    its own, as they are to every grid run."""
    from rlvr.config import load_config

    for stage in stages:
        run_dir = stage.run_dir(output_dir)
        config = load_config(stage.config, stage.overrides + list(command_line)
                             + [f"train.output_dir={run_dir.parent}", f"train.run_name={stage.name}"])
        command = RUN_COMMANDS[stage.command]  # parse_stages checked the name
        status = status_of(command, config, run_dir)
        console.say(config, f"sweep before: {stage.name} ({stage.command} {stage.config}): {status}")
        train_to_done(command, config, run_dir, status, {"before": stage.name, "command": stage.command,
                                                                "iterations": config.train.iterations})
