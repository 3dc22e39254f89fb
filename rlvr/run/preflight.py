"""The start-up checks that need no torch: the task is known, its data files can be read, `model.name`
(and `model.init_from`) name a model that can load, `sft.data_path` is there.

The command line runs them on a config built with `check=False` (keys and types checked, nothing heavy
imported) before the full config check and the training loops import torch and transformers (about
6 s of CPU), so a typo in a model name or a data path fails in a fraction of a second.
`rlvr.run.setup.prepare_task` runs them again for callers from Python.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config import Config, ConfigError, check_task_family, load_config, load_run_config
from rlvr.models.checkpoints.locate import check_inference_spec, find_checkpoint
from rlvr.models.model_spec import check_model_spec
from rlvr.tasks import check_data_files


def check_model_source(config: Config, *, inference: bool = False) -> None:
    """`model.name` names a model that can load, checked without loading it (`inference`: a run folder too)."""
    try:
        (check_inference_spec if inference else check_model_spec)(config.model.name)
    except (ValueError, OSError, ImportError) as exc:  # ImportError: an embedded model's package is missing
        raise ConfigError(f"model.name: {exc}") from None


def check_init_from(config: Config) -> None:
    """`model.init_from` names a run or checkpoint trained from `model.name`, checked without loading it."""
    if not config.model.init_from:
        return
    try:
        found = find_checkpoint(config.model.init_from)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"model.init_from: {exc}") from None
    trained_from = found.model_settings["name"]
    if trained_from != config.model.name:
        raise ConfigError(f"model.init_from {config.model.init_from!r} was trained from model {trained_from!r} but "
                          f"model.name is {config.model.name!r}; set model.name={trained_from}")


def check_sft_data(config: Config) -> Path:
    """`sft.data_path`: a file that can be read (its rows are checked as `rlvr sft` reads them)."""
    if not config.sft.data_path:
        raise FileNotFoundError("sft.data_path is empty: give a jsonl of prompt / response pairs (or set "
                                "sft.demonstrations=N to train on N of the task's own demonstrations)")
    path = Path(config.sft.data_path)
    if not path.is_file():
        raise FileNotFoundError(f"sft.data_path {str(path)!r} does not exist")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ValueError(f"sft.data_path {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    return path


def check_sources(config: Config, *, inference: bool = False, sft: bool = False, init_from: bool = True) -> None:
    """Every check that needs no torch, in the order a user meets them: task, data, model (`inference`: the
    model may be a run folder; `sft`: the pairs file too; `init_from`: model.init_from too, off where a run
    before this one writes it)."""
    check_task_family(config)
    check_data_files(config.task.name, config.task.options)
    if sft and not config.sft.demonstrations:
        check_sft_data(config)
    check_model_source(config, inference=inference)
    if init_from:
        check_init_from(config)


def load_checked_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (), *,
                        inference: bool = False, sft: bool = False) -> Config:
    """`load_config(path, overrides)`, after `check_sources` on the same config built without torch."""
    check_sources(load_config(path, overrides, check=False), inference=inference, sft=sft)
    return load_config(path, overrides)


def load_checked_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
                            sft: bool = False) -> Config:
    """`load_run_config(run_dir, overrides)` (a resume), after `check_sources` as for `load_checked_config`."""
    check_sources(load_run_config(run_dir, overrides, check=False), sft=sft)
    return load_run_config(run_dir, overrides)
