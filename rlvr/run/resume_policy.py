"""What a resume may change: the config saved in the run folder is the truth.

A resume may change only the keys in `RESUME_MUTABLE_KEYS` (how long the run goes, how often it
evaluates, saves and logs, where metrics go, monitoring thresholds, CPU threads): none of them
changes what the next optimizer step computes. Any other difference from the saved config.yaml is
refused with the list of changed and allowed keys, unless forced (`--force-config-change`), and
every resume is appended to RUN_DIR/resumes.jsonl with its changes, time, checkpoint and whether
it was forced. Nothing is written here until the resume has loaded its checkpoint.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import Config, ConfigError, saved_run_data
from rlvr.observe.metric_names import ITERATION, UNIX_TIME
from rlvr.utils import append_jsonl

RESUMES_FILE = "resumes.jsonl"

# Dotted keys (or whole sections, ending in ".") a resume may change, with why that is safe.
RESUME_MUTABLE_KEYS: dict[str, str] = {
    "train.iterations": "how long the run goes (a linear or cosine schedule is stretched to the new end)",
    "sft.epochs": "how long an sft run goes (its schedule is stretched likewise)",
    "train.eval_every": "eval cadence",
    "sft.eval_every": "eval cadence (sft)",
    "train.save_every": "checkpoint cadence",
    "sft.save_every": "checkpoint cadence (sft)",
    "train.keep_checkpoints": "how many checkpoints stay on disk",
    "train.samples_every": "samples.jsonl cadence",
    "train.samples_per_iteration": "completions written to samples.jsonl",
    "sft.log_generations": "eval prompts written to generations.jsonl",
    "train.progress": "console progress bar",
    "train.loggers": "extra metric sinks (metrics.jsonl is always written)",
    "train.wandb_project": "extra metric sinks",
    "train.wandb_mode": "extra metric sinks",
    "train.stop_on": "early-stop rules",
    "train.stop_after": "early-stop rules",
    "train.time_budget_minutes": "how long the run goes (a wall-clock budget)",
    "health.": "warning thresholds (monitoring only)",
    "model.num_threads": "CPU threads",
    "train.fsdp": "the same step with the decoder layers sharded (memory layout only)",
}

# Said beside a refused key whose effect surprises.
REFUSAL_NOTES = {
    "algorithm.name": "the saved estimator, loss and epochs would keep running: a preset is applied only "
                      "when a run starts",
    "rollout.group_size": "the batch would change mid-run",
    "rollout.batch_size": "the batch would change mid-run",
}


def mutable(key: str) -> bool:
    return any(key == allowed or (allowed.endswith(".") and key.startswith(allowed)) for allowed in RESUME_MUTABLE_KEYS)


def config_changes(saved: dict, config: Config) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (saved value, new value)} for every key where `config` differs from the saved data."""
    before = Config.from_dict(saved_run_data(saved), check=False).flat()
    after = config.flat()
    return {key: (before.get(key), after[key]) for key in after if before.get(key) != after[key]}


@dataclass
class ResumePlan:
    """A checked resume: what config.yaml will hold, how it differs from the saved one, and if forced."""

    run_dir: Path
    config: Config  # a copy, as checked: config.yaml holds this once the checkpoint is loaded
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    forced: bool = False


def read_saved_config(run_dir: Path) -> dict:
    config_path = Path(run_dir) / "config.yaml"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder: config.yaml is missing")
    try:
        data = yaml.safe_load(config_path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{config_path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{config_path} must hold a mapping at the top level")
    return data


def plan_resume(run_dir: str | Path, config: Config, force: bool = False) -> ResumePlan:
    """Compare `config` with the run's saved config; refuse a change outside RESUME_MUTABLE_KEYS unless forced."""
    run_dir = Path(run_dir)
    changes = config_changes(read_saved_config(run_dir), config)
    refused = sorted(key for key in changes if not mutable(key))
    if refused and not force:
        listed = "; ".join(f"{key}: {changes[key][0]!r} -> {changes[key][1]!r}"
                           + (f" ({REFUSAL_NOTES[key]})" if key in REFUSAL_NOTES else "") for key in refused)
        raise ConfigError(
            f"--resume {run_dir}: the saved config.yaml is what this run trains with, and these changes would "
            f"alter the next steps: {listed}. A resume may change only: "
            f"{', '.join(key + '*' if key.endswith('.') else key for key in RESUME_MUTABLE_KEYS)}. "
            f"Start a new run for the change, or pass --force-config-change to resume with "
            f"it anyway (recorded in {RESUMES_FILE})"
        )
    return ResumePlan(run_dir=run_dir, config=copy.deepcopy(config), changes=changes, forced=bool(refused))


def record_resume(plan: ResumePlan, restored: dict, notes: list[str]) -> dict:
    """Append this resume to RUN_DIR/resumes.jsonl: time, checkpoint, changes, forced, what was repaired."""
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), UNIX_TIME: time.time(),
        "checkpoint": Path(restored["checkpoint"]).name, ITERATION: restored["iteration"],
        "changes": {key: {"saved": old, "new": new} for key, (old, new) in plan.changes.items()},
        "forced": plan.forced,
        "skipped_checkpoints": restored.get("skipped", []),
        "notes": notes,
    }
    append_jsonl(plan.run_dir / RESUMES_FILE, [record])
    return record
