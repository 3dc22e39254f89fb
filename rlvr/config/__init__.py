"""One typed configuration for every rlvr command, loaded from YAML plus dotted overrides.

The sections and their keys are in `schema.py` (each key's default, help, range and names declared
once), the generic reading, checking and printing in `loading.py`, the cross-field invariants in
`checks.py`. Unknown keys, wrong types and bad names fail at load, naming the key and the valid
choices; the resolved config (algorithm preset applied) is what gets saved with every run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import loading
from rlvr.config.checks import check_task_family, resolve, validate
from rlvr.config.loading import (Bounds, ConfigError, KeyDescription, field_help, flatten, read_yaml_file, type_name,
                                 yaml_value)
from rlvr.config.schema import (REMOVED_KEYS, RENAMED_KEYS, AlgorithmConfig, Config, ExpertIterationConfig,
                                HealthConfig, ModelConfig, OptimConfig, RolloutConfig, SFTConfig, TaskConfig,
                                TrainConfig, preset_settings)

__all__ = [
    "AlgorithmConfig", "Bounds", "check_task_family", "Config", "ConfigError", "ExpertIterationConfig", "HealthConfig",
    "KeyDescription", "ModelConfig", "OptimConfig", "RolloutConfig", "SFTConfig", "TaskConfig", "TrainConfig",
    "apply_override", "describe_config", "field_help", "flatten", "format_config", "load_config", "load_run_config",
    "preset_settings", "resolve", "save_config", "saved_run_data", "section_summary", "type_name", "validate",
    "yaml_value",
]


def apply_override(data: dict, dotted: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict of raw config values (`loading.apply_override`)."""
    loading.apply_override(Config, data, dotted, REMOVED_KEYS)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), *,
                check: bool = True) -> Config:
    """Load a YAML config (none: every default), apply `key=value` overrides, resolve, validate.

    `check=False` checks keys and types but neither ranges nor names nor invariants, and imports no
    torch (`rlvr.run.preflight` reads model and task sources from it first).
    """
    data = read_yaml_file(path) if path is not None else {}
    return Config.from_dict(data, overrides, check=check)


def save_config(config: Config, path: str | Path) -> None:
    from rlvr.utils import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(config.as_dict(), sort_keys=False))


def load_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
                    check: bool = True) -> Config:
    """The resolved config saved in a run folder, with `key=value` overrides applied (for resume);
    `check` as for `load_config`. A registry name retired since the run was saved reads as its successor
    (with `check`, which imports the registries)."""
    config_path = Path(run_dir) / "config.yaml"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder: config.yaml is missing")
    data = saved_run_data(yaml.safe_load(config_path.read_text()))
    if check:
        data = loading.with_current_names(Config, data)
    return Config.from_dict(data, overrides, check=check)


def saved_run_data(data: Any) -> Any:
    """A saved config.yaml's data with renamed keys under their new names (`RENAMED_KEYS`) and without the
    removed keys it holds at their off value (0, false, empty).

    A saved config writes every key, so a run from before a key was removed holds it; only a value that
    did something is an error (the removed key's message names its replacement)."""
    data = dict(data) if isinstance(data, dict) else data
    for old, new in RENAMED_KEYS.items():  # the same knob under its new name
        (section, name), (new_section, new_name) = old.split("."), new.split(".")
        if isinstance(data, dict) and isinstance(data.get(section), dict) and name in data[section]:
            value = data[section][name]
            data[section] = {k: v for k, v in data[section].items() if k != name}
            if isinstance(data.get(new_section), dict) and new_name not in data[new_section]:
                data[new_section] = {**data[new_section], new_name: value}
    for key in REMOVED_KEYS:
        section, name = key.split(".")
        if isinstance(data, dict) and isinstance(data.get(section), dict) and not data[section].get(name, 1):
            data[section] = {k: v for k, v in data[section].items() if k != name}
    return data


def describe_config(config: Config | None = None) -> list[KeyDescription]:
    """Every leaf key with its type, range or names, default and help; an algorithm key's default is its
    preset's setting where the preset sets it (what runs when the key is not set).

    `config=None` describes the keys alone, each value its default (the run without a config file),
    without building a config: the documentation's configuration reference (docs/gen_config.py) is made
    that way, with no torch."""
    name = config.algorithm.name if config is not None else _default_algorithm()
    return loading.describe_config(config, _preset_defaults(name), f"preset {name}", root=Config)


def section_summary(section: str) -> str:
    """The first line of a config section's docstring: `rlvr config show`'s heading for the section."""
    return loading.section_summary(Config, section)


def format_config(config: Config) -> str:
    """`rlvr config show`: each key = its resolved value, its type and default, a star when set, its help."""
    return loading.format_config(config, _preset_defaults(config.algorithm.name), f"preset {config.algorithm.name}")


def _default_algorithm() -> str:
    (name,) = [f.default for f in dataclasses.fields(AlgorithmConfig) if f.name == "name"]
    return name


def _preset_defaults(name: str) -> dict[str, Any]:
    return {f"algorithm.{key}": value for key, value in preset_settings(name).items()}
