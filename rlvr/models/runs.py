"""From a run folder (or one of its checkpoints) back to the policy it trained, without exporting.

A run folder holds `config.yaml` (its `model` section names the base model, the dtype and whether
LoRA was on) and `checkpoints/iter_NNNNNN/model/` (the trainable weights, `trainable.json` says
which kind) with a `latest` pointer. `load_policy_from_run` accepts the run folder (latest
checkpoint, or `checkpoint=`), a checkpoint folder or its `model/` folder, loads the base model
and puts the trained weights in: the same policy `rlvr train --resume` continues from.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import yaml
from torch import nn

from rlvr.models.checkpoint_files import (CHECKPOINTS, LATEST, checkpoint_candidates,  # noqa: F401
                                          checkpoint_folders, checkpoint_iteration, checkpoint_root, pinned,
                                          verify_checkpoint)
from rlvr.models.conversion import check_model_spec
from rlvr.models.policy import LoadedModel, LoraSettings, load_policy, resolve_dtype
from rlvr.models.trainable_state import TRAINABLE_INFO_FILE, load_trainable, read_adapter_config

RUN_CONFIG = "config.yaml"


class DamagedCheckpointError(FileNotFoundError):
    """The checkpoint asked for failed verification: it is named with the reason and never loaded."""


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint to load first (unverified): the one a usable `latest` pointer names, else the newest `iter_*`."""
    candidates, _ = checkpoint_candidates(run_dir)
    return candidates[0] if candidates else None


@dataclass
class RunCheckpoint:
    """Where a trained policy lives: its run, the checkpoint, and the weights folder in it."""

    run_dir: Path
    checkpoint_dir: Path
    model_dir: Path
    model_settings: dict  # the `model` section of the run's config.yaml

    @property
    def kind(self) -> str:
        return json.loads((self.model_dir / TRAINABLE_INFO_FILE).read_text())["kind"]


def is_run_path(path: str | os.PathLike) -> bool:
    """True for a run folder, a checkpoint folder or a checkpoint's `model/` folder."""
    path = Path(path).expanduser()
    return path.is_dir() and ((path / RUN_CONFIG).is_file() and (path / CHECKPOINTS).is_dir()
                              or (path / TRAINABLE_INFO_FILE).is_file()
                              or (path / "model" / TRAINABLE_INFO_FILE).is_file())


def _named_checkpoint(run_dir: Path, checkpoint: str) -> Path:
    folders = checkpoint_folders(checkpoint_root(run_dir))
    match = re.fullmatch(r"(?:iter_)?0*(\d+)", str(checkpoint))
    for folder in folders:
        if folder.name == checkpoint or match and checkpoint_iteration(folder) == int(match.group(1)):
            return folder
    raise FileNotFoundError(f"{run_dir} has no checkpoint {checkpoint!r}; valid choices: "
                            f"{', '.join(f.name for f in reversed(folders)) or '(none)'}")


def _locate(path: Path, checkpoint: Optional[str]) -> tuple[Path, list[Path]]:
    """The run folder and the checkpoints to try for `path`, in order (one, unless the run's latest is wanted)."""
    if (path / TRAINABLE_INFO_FILE).is_file():
        path = path.parent
    if (path / "model" / TRAINABLE_INFO_FILE).is_file() or path.parent.name == CHECKPOINTS:
        if checkpoint is not None:
            raise ValueError(f"{path} is a checkpoint already; pass its run folder to choose another checkpoint")
        return path.parent.parent, [path]
    if (path / RUN_CONFIG).is_file():
        if checkpoint is not None:
            return path, [_named_checkpoint(path, checkpoint)]
        candidates, pointer_problem = checkpoint_candidates(path)
        if pointer_problem:
            print(f"warning: {pointer_problem}; using the newest checkpoint folder instead", file=sys.stderr)
        if not candidates:
            raise FileNotFoundError(f"run {path} has no checkpoint yet ({CHECKPOINTS}/ is empty)")
        return path, candidates
    raise FileNotFoundError(f"{path} is neither a run folder (with {RUN_CONFIG} and {CHECKPOINTS}/) nor a "
                            f"checkpoint folder (with model/{TRAINABLE_INFO_FILE})")


def _run_checkpoint(run_dir: Path, checkpoint_dir: Path) -> RunCheckpoint:
    config_path = run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise FileNotFoundError(f"checkpoint {checkpoint_dir} is not inside a run folder: {config_path} is missing "
                                "(it names the base model)")
    settings = (yaml.safe_load(config_path.read_text()) or {}).get("model") or {}
    if not settings.get("name"):
        raise ValueError(f"{config_path} names no base model (model.name)")
    model_dir = checkpoint_dir / "model"
    if not (model_dir / TRAINABLE_INFO_FILE).is_file():
        raise DamagedCheckpointError(f"checkpoint {checkpoint_dir} is incomplete: model/{TRAINABLE_INFO_FILE} is "
                                     "missing")
    return RunCheckpoint(run_dir=run_dir, checkpoint_dir=checkpoint_dir, model_dir=model_dir, model_settings=settings)


@contextlib.contextmanager
def open_checkpoint(path: str | os.PathLike, checkpoint: Optional[str] = None, *,
                    fallback: bool = False) -> Iterator[RunCheckpoint]:
    """The verified checkpoint of `path`, pinned while the block reads it (a writing run keeps it).

    path: a run folder (its latest checkpoint, or `checkpoint`, e.g. `iter_4`), a checkpoint folder, or
    a checkpoint's `model/` folder. A checkpoint that fails `verify_checkpoint` raises
    DamagedCheckpointError naming it, the reason and the newest intact one; with `fallback`, the run's
    older checkpoints are tried instead (each reported) and the first intact one is used.
    """
    run_dir, candidates = _locate(Path(path).expanduser(), checkpoint)
    damaged = []
    for index, folder in enumerate(candidates):
        with pinned(folder):
            reason = verify_checkpoint(folder)
            if reason is None:
                found = _run_checkpoint(run_dir, folder)
                if damaged:
                    print(f"warning: using {folder.name} instead of the damaged {damaged[0][0].name}", file=sys.stderr)
                yield found
                return
        damaged.append((folder, reason))
        if not fallback:
            break
        print(f"warning: checkpoint {folder} is damaged: {reason}; trying the previous one", file=sys.stderr)
    if fallback:
        listed = "; ".join(f"{folder.name}: {why}" for folder, why in damaged)
        raise DamagedCheckpointError(f"{run_dir} has no intact checkpoint ({listed}); nothing was loaded")
    first, reason = damaged[0]
    intact = next((p for p in checkpoint_folders(checkpoint_root(run_dir))
                   if checkpoint_iteration(p) < checkpoint_iteration(first) and verify_checkpoint(p) is None), None)
    advice = (f"; the newest intact one before it is {intact.name}: name it (--checkpoint {intact.name}, or the "
              f"folder {intact}) or pass --fallback where the command has it" if intact is not None
              else "; the run has no older intact checkpoint")
    raise DamagedCheckpointError(f"checkpoint {first} is damaged: {reason}; it was not loaded{advice}")


def find_checkpoint(path: str | os.PathLike, checkpoint: Optional[str] = None, *,
                    fallback: bool = False) -> RunCheckpoint:
    """`open_checkpoint`'s verified checkpoint, not pinned beyond the check (for checks before a load)."""
    with open_checkpoint(path, checkpoint, fallback=fallback) as found:
        return found


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


def _names_a_run(spec: str | os.PathLike) -> bool:
    return is_run_path(spec) or (Path(spec).expanduser() / RUN_CONFIG).is_file()


def base_model_spec(spec: str | os.PathLike) -> str | os.PathLike:
    """The model `load_model_for_inference(spec)` builds on: a run or checkpoint folder's `model.name`
    (its checkpoint verified), anything else as it is."""
    return find_checkpoint(spec).model_settings["name"] if _names_a_run(spec) else spec


def check_inference_spec(spec: str | os.PathLike) -> None:
    """Raise now, loading nothing, if `load_model_for_inference(spec)` would find no model: a run folder
    needs a complete checkpoint and a base model that `check_model_spec` accepts."""
    check_model_spec(base_model_spec(spec))


def load_model_for_inference(spec: str | os.PathLike, *, dtype: str = "float32", device: str = "cpu",
                             memory_kernels: bool = True) -> LoadedModel:
    """`spec` as `rlvr eval --model` takes it: a run or checkpoint folder gives its trained policy,
    anything else (embedded name, model folder, .gguf, cached hub id) goes to `load_policy`."""
    if _names_a_run(spec):
        return load_policy_from_run(spec, dtype=dtype, device=device, memory_kernels=memory_kernels)
    return load_policy(spec, dtype=dtype, device=device, lora=None, memory_kernels=memory_kernels)
