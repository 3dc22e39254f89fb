"""Saving and restoring exactly the weights training changes, for checkpoints and resume.

LoRA saves only the adapter (a few MB, in PEFT's `adapter_model.safetensors` layout, with its
`adapter_config.json`, so PEFT can load it too); full fine-tuning saves the whole state dict.
Every file is written to a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file, save_model

from rlvr.models.policy import LoadedModel, dtype_name

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
FULL_WEIGHTS_FILE = "model.safetensors"
# Written after the weights; says which kind of checkpoint the folder holds.
TRAINABLE_INFO_FILE = "trainable.json"


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _write_json(path: Path, data: dict) -> None:
    _write_atomically(path, lambda target: target.write_text(json.dumps(data, indent=2, default=str) + "\n"))


def _kind(loaded: LoadedModel) -> str:
    return "lora" if loaded.is_lora else "full"


def save_trainable(loaded: LoadedModel, folder: str | os.PathLike) -> Path:
    """Save the trainable weights of `loaded.policy` into `folder` (created if needed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy = loaded.policy
    if loaded.is_lora:
        from peft import get_peft_model_state_dict

        adapter = {name: tensor.detach().contiguous() for name, tensor in get_peft_model_state_dict(policy).items()}
        _write_atomically(folder / ADAPTER_WEIGHTS_FILE, lambda target: save_file(adapter, str(target)))
        _write_json(folder / ADAPTER_CONFIG_FILE, policy.peft_config["default"].to_dict())
        tensor_count = len(adapter)
    else:
        # save_model stores each shared tensor (tied lm_head / embed_tokens) once.
        _write_atomically(folder / FULL_WEIGHTS_FILE, lambda target: save_model(policy, str(target)))
        tensor_count = len(policy.state_dict())
    _write_json(
        folder / TRAINABLE_INFO_FILE,
        {"kind": _kind(loaded), "dtype": dtype_name(loaded.dtype), "tensors": tensor_count},
    )
    return folder


def _check_tensors(loaded_tensors: dict, current: dict, folder: Path) -> None:
    problems = [f"unexpected {name}" for name in sorted(set(loaded_tensors) - set(current))]
    for name in sorted(set(loaded_tensors) & set(current)):
        saved, live = loaded_tensors[name], current[name]
        if saved.dtype != live.dtype or saved.shape != live.shape:
            problems.append(
                f"{name}: saved {dtype_name(saved.dtype)}{list(saved.shape)}, "
                f"model has {dtype_name(live.dtype)}{list(live.shape)}"
            )
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ValueError(f"checkpoint in {folder} does not fit this model: {shown}")


def load_trainable(loaded: LoadedModel, folder: str | os.PathLike) -> None:
    """Restore into `loaded.policy` exactly the weights `save_trainable` wrote to `folder`.

    The checkpoint must match the model: same kind (LoRA or full), names, shapes and dtypes;
    anything else is an error rather than a silent cast or a partial load.
    """
    folder = Path(folder)
    info_path = folder / TRAINABLE_INFO_FILE
    if not info_path.is_file():
        raise FileNotFoundError(f"{folder} holds no trainable-weights checkpoint ({TRAINABLE_INFO_FILE} missing)")
    info = json.loads(info_path.read_text())
    if info.get("kind") != _kind(loaded):
        raise ValueError(
            f"checkpoint in {folder} holds {info.get('kind')!r} weights but the model is set up for "
            f"{_kind(loaded)!r} training; load it with the same LoRA setting it was saved with"
        )
    device = next(loaded.policy.parameters()).device
    if loaded.is_lora:
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        tensors = load_file(str(folder / ADAPTER_WEIGHTS_FILE), device=str(device))
        current = get_peft_model_state_dict(loaded.policy)
        _check_tensors(tensors, current, folder)
        missing = sorted(set(current) - set(tensors))
        if missing:
            raise ValueError(f"checkpoint in {folder} lacks adapter tensors: {', '.join(missing[:5])}")
        result = set_peft_model_state_dict(loaded.policy, tensors)
        if result.unexpected_keys:
            raise ValueError(f"adapter tensors not used by the model: {', '.join(result.unexpected_keys[:5])}")
        return

    tensors = load_file(str(folder / FULL_WEIGHTS_FILE), device=str(device))
    current = loaded.policy.state_dict()
    _check_tensors(tensors, current, folder)
    # A name absent from the file must share storage with a saved tensor (tied weights).
    saved_storage = {current[name].data_ptr() for name in tensors}
    missing = sorted(name for name in set(current) - set(tensors) if current[name].data_ptr() not in saved_storage)
    if missing:
        raise ValueError(f"checkpoint in {folder} lacks tensors: {', '.join(missing[:5])}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            current[name].copy_(tensor)
