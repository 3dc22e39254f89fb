"""Optional metric sinks (TensorBoard, Weights & Biases) that mirror metrics.jsonl.

metrics.jsonl stays the source of truth; a sink only copies the numeric values of each record
to another viewer. Each sink's package is an optional extra and is imported only when the sink
is asked for, so a missing package is an error for that sink alone.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from rlvr.metric_names import ITERATION
from rlvr.registry import Registry

SINKS: Registry = Registry("logger sink")


class MissingSinkPackage(ValueError):
    """A requested sink's package is not installed; the message says how to install it."""


def _require(module: str, sink: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingSinkPackage(
            f"train.loggers asks for {sink!r} but the {module.split('.')[0]!r} package is not installed "
            f"({exc}); install it with `pip install 'rlvr[{extra}]'` or remove {sink!r} from train.loggers"
        ) from None


def numeric_items(record: dict) -> dict[str, float]:
    """The finite numeric values of a record (strings, lists, NaN and bools are left out)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


@SINKS.register("tensorboard")
class TensorBoardSink:
    """Scalars under RUN_DIR/tensorboard, one event per metric and iteration."""

    packages = ("tensorboard", "torch.utils.tensorboard")  # the extra `rlvr[tensorboard]`

    def __init__(self, run_dir: Path, config) -> None:
        _require("tensorboard", "tensorboard", "tensorboard")
        tensorboard = _require("torch.utils.tensorboard", "tensorboard", "tensorboard")
        self.writer = tensorboard.SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, record: dict, step: int, prefix: str = "") -> None:
        for key, value in numeric_items(record).items():
            if key != ITERATION:
                self.writer.add_scalar(prefix + key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@SINKS.register("wandb")
class WandbSink:
    """One W&B run per rlvr run; `train.wandb_mode` offline (default) needs no network."""

    packages = ("wandb",)  # the extra `rlvr[wandb]`

    def __init__(self, run_dir: Path, config) -> None:
        wandb = _require("wandb", "wandb", "wandb")
        train = config.train
        self.run = wandb.init(
            project=train.wandb_project, name=Path(run_dir).name, dir=str(run_dir),
            mode=train.wandb_mode, config=dataclasses.asdict(config),
        )

    def log(self, record: dict, step: int, prefix: str = "") -> None:
        values = {prefix + k: v for k, v in numeric_items(record).items() if k != ITERATION}
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def require_sink_packages(config) -> None:
    """Fail now, before any model loads or file is written, if a requested sink's package is missing."""
    for name in config.train.loggers:
        for module in SINKS.get(name).packages:
            _require(module, name, name)


def build_sinks(config, run_dir: Path) -> list:
    """One sink per name in `config.train.loggers` (validated against SINKS at config load)."""
    return [SINKS.get(name)(Path(run_dir), config) for name in config.train.loggers]
