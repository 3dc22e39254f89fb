"""From a run folder (or one of its checkpoints) back to the policy it trained, without exporting.

A run folder holds `config.yaml` (its `model` section names the base model, the dtype and whether
LoRA was on) and `checkpoints/iter_NNNNNN/model/` (the trainable weights, `trainable.json` says
which kind) with a `latest` pointer. `load_policy_from_run` accepts the run folder (latest
checkpoint, or `checkpoint=`), a checkpoint folder or its `model/` folder, loads the base model
and puts the trained weights in: the same policy `rlvr train --resume` continues from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from torch import nn

from rlvr.models.checkpoints.files import CHECKPOINTS, LATEST  # noqa: F401
from rlvr.models.policy import LoadedModel, LoraSettings, load_policy, resolve_dtype
from rlvr.models.checkpoints.locate import (RUN_CONFIG, DamagedCheckpointError, RunCheckpoint,  # noqa: F401
                                            check_inference_spec, find_checkpoint, is_run_path, latest_checkpoint,
                                            names_a_run, open_checkpoint)
from rlvr.models.checkpoints.weights import load_trainable, read_adapter_config


def lora_settings_from_checkpoint(model_dir: Path) -> LoraSettings:
    """The adapter shape saved with a LoRA checkpoint (older string-form `target_modules` included)."""
    config = read_adapter_config(model_dir)
    return LoraSettings(rank=int(config["r"]), alpha=config["lora_alpha"], dropout=float(config.get("lora_dropout", 0)),
                        target_modules=tuple(config["target_modules"]))


def load_policy_from_run(path: str | os.PathLike, *, checkpoint: Optional[str] = None, dtype: Optional[str] = None,
                         device: str = "cpu", base_model: Optional[str] = None, memory_kernels: bool = True,
                         _seen: tuple[Path, ...] = ()) -> LoadedModel:
    """The policy a run trained, ready to sample from: base model (the run's `model.name`, or
    `base_model`) with the checkpoint's weights, in eval mode. LoRA stays an unmerged adapter.

    A run started from another run's weights (`model.init_from` in its config.yaml) sits on those:
    they are rebuilt first (`merged_model_from_run`, down the whole chain), then this run's weights go in.
    dtype: the run's `model.dtype` by default; another dtype casts the loaded weights.
    """
    with open_checkpoint(path, checkpoint) as found:  # verified, and pinned until its weights are read
        if found.run_dir.resolve() in _seen:
            raise ValueError(f"model.init_from chain loops back to {found.run_dir}")
        run_dtype = found.model_settings.get("dtype", "float32")
        lora = lora_settings_from_checkpoint(found.model_dir) if found.kind == "lora" else None
        initial = None
        if found.model_settings.get("init_from"):
            initial = merged_model_from_run(found.model_settings["init_from"], dtype=run_dtype, device=device,
                                            base_model=base_model, _seen=_seen + (found.run_dir.resolve(),))
        loaded = load_policy(base_model or found.model_settings["name"], dtype=run_dtype, device=device, lora=lora,
                             memory_kernels=memory_kernels, initial_model=initial)
        load_trainable(loaded, found.model_dir)
    if dtype is not None and resolve_dtype(dtype) != loaded.dtype:
        loaded.policy.to(resolve_dtype(dtype))
        loaded.dtype = resolve_dtype(dtype)
    loaded.policy.eval().requires_grad_(False)
    return loaded


def merged_model_from_run(path: str | os.PathLike, *, dtype: str = "float32", device: str = "cpu",
                          base_model: Optional[str] = None, _seen: tuple[Path, ...] = ()) -> nn.Module:
    """The weights a run (its latest checkpoint) or a checkpoint trained, as one plain transformers model: a
    LoRA adapter merged into its base, full weights as they are. `model.init_from` starts a run from this."""
    loaded = load_policy_from_run(path, dtype=dtype, device=device, base_model=base_model, memory_kernels=False,
                                  _seen=_seen)
    return loaded.policy.merge_and_unload() if loaded.is_lora else loaded.policy


def load_model_for_inference(spec: str | os.PathLike, *, dtype: str = "float32", device: str = "cpu",
                             memory_kernels: bool = True) -> LoadedModel:
    """`spec` as `rlvr eval --model` takes it: a run or checkpoint folder gives its trained policy,
    anything else (embedded name, model folder, .gguf, cached hub id) goes to `load_policy`."""
    if names_a_run(spec):
        return load_policy_from_run(spec, dtype=dtype, device=device, memory_kernels=memory_kernels)
    return load_policy(spec, dtype=dtype, device=device, lora=None, memory_kernels=memory_kernels)
