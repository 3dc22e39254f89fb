"""Metric sinks (TensorBoard, Weights & Biases, MLflow, Aim) that mirror metrics.jsonl.

metrics.jsonl stays the source of truth; a sink only copies the finite numeric values of each
record to another viewer. The writing is done by Accelerate's maintained trackers
(`accelerate.tracking`); this file only says how each one is built for a run folder. Each
sink's package is an optional extra, imported only when the sink is asked for, so a missing
package is an error for that sink alone, raised before the model loads.
"""

from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlvr.observe.metric_names import ITERATION
from rlvr.registry import Registry


class MissingSinkPackage(ValueError):
    """A requested sink's package is not installed; the message says how to install it.

    A ValueError, not a `rlvr.config.ConfigError`: config.py validates logger names against
    `SINKS`, so this module does not import config (that would be an import cycle).
    """


@dataclass(frozen=True)
class SinkSpec:
    """How to build one accelerate tracker for a run: the package it needs and its constructor."""

    package: str  # imported first, so a missing one fails with the install hint
    extra: str  # pip install 'rlvr[extra]'
    build: Callable  # (run_dir, config) -> accelerate.tracking.GeneralTracker, not started yet
    log_config: bool = False  # log the flattened config as the run's parameters


SINKS: Registry[SinkSpec] = Registry("logger sink")


def _tensorboard(run_dir: Path, config):
    from accelerate.tracking import TensorBoardTracker

    return TensorBoardTracker(run_name="tensorboard", logging_dir=str(run_dir))  # events in RUN_DIR/tensorboard


def _wandb(run_dir: Path, config):
    from accelerate.tracking import WandBTracker

    train = config.train
    return WandBTracker(run_name=train.wandb_project, name=run_dir.name, dir=str(run_dir), mode=train.wandb_mode,
                        config=config.as_dict())


def _mlflow(run_dir: Path, config):
    import mlflow
    from accelerate.tracking import MLflowTracker

    uri = config.train.mlflow_tracking_uri
    if not uri:
        # A plain folder, no server and no network. MLflow 3 asks for an explicit opt-in to its file store.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        uri = (run_dir / "mlflow").resolve().as_uri()
    mlflow.set_tracking_uri(uri)
    return MLflowTracker(experiment_name=config.train.mlflow_experiment, run_name=run_dir.name)


def _aim(run_dir: Path, config):
    from accelerate.tracking import AimTracker

    return AimTracker(run_name=run_dir.name, logging_dir=config.train.aim_repo or str(run_dir / "aim"))


SINKS.add("tensorboard", SinkSpec("tensorboard", "tensorboard", _tensorboard))
SINKS.add("wandb", SinkSpec("wandb", "wandb", _wandb))  # the config goes to wandb.init
SINKS.add("mlflow", SinkSpec("mlflow", "mlflow", _mlflow, log_config=True))
SINKS.add("aim", SinkSpec("aim", "aim", _aim, log_config=True))


def numeric_items(record: dict) -> dict[str, float]:
    """The finite numeric values of a record (strings, lists, NaN and bools are left out)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


class TrackerSink:
    """One started accelerate tracker, fed the numeric values of each record at step = iteration."""

    def __init__(self, name: str, tracker) -> None:
        self.name = name
        self.tracker = tracker

    def log(self, record: dict, step: int) -> None:
        values = {key: value for key, value in numeric_items(record).items() if key != ITERATION}
        if values:
            self.tracker.log(values, step=step)

    def close(self) -> None:
        self.tracker.finish()


def _require(spec: SinkSpec, name: str) -> None:
    for module in ("accelerate", spec.package):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingSinkPackage(
                f"train.loggers asks for {name!r} but the {module!r} package is not installed ({exc}); install it "
                f"with `pip install 'rlvr[{spec.extra}]'` or remove {name!r} from train.loggers"
            ) from None


def require_sink_packages(config) -> None:
    """Fail now, before any model loads or file is written, if a requested sink's package is missing."""
    for name in config.train.loggers:
        _require(SINKS.get(name), name)


def build_sinks(config, run_dir: Path) -> list[TrackerSink]:
    """One started sink per name in `config.train.loggers` (names validated at config load).

    Only the main process calls this, so the trackers' own main-process checks always pass;
    accelerate's shared state is created here if the run did not already create it.
    """
    if not config.train.loggers:
        return []
    require_sink_packages(config)
    from accelerate import PartialState

    PartialState()  # accelerate's trackers and their logging read the process layout from it
    sinks = []
    for name in config.train.loggers:
        spec = SINKS.get(name)
        tracker = spec.build(Path(run_dir), config)
        tracker.start()
        if spec.log_config:
            tracker.store_init_configuration({k: v if isinstance(v, (int, float, str, bool)) else str(v)
                                              for k, v in config.flat().items()})
        sinks.append(TrackerSink(name, tracker))
    return sinks
