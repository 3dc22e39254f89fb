"""Saving and restoring exactly the weights training changes, for checkpoints and resume.

LoRA saves only the adapter (a few MB) exactly as PEFT's own `save_pretrained` lays it out
(`adapter_model.safetensors`, `adapter_config.json` with `target_modules` a sorted list), so
`PeftModel.from_pretrained(base, folder)` loads it; full fine-tuning saves the whole state dict.
Older checkpoints wrote `target_modules` as the text of a Python set; `read_adapter_config` reads both.
Every file is written to a temporary name and renamed, so a crash never leaves half a file.
An FSDP-sharded model is saved in the same files, with full tensors (`trainable_tensors` gathers
them, a collective), and each rank keeps its own slice when loading.
"""

from __future__ import annotations

import ast
import copy
import json
import os
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file, save_model

from rlvr.models.checkpoints.files import TRAINABLE_INFO_FILE
from rlvr.models.policy import LoadedModel, dtype_name
from rlvr.parallel.sharding import full_tensor, is_dtensor, slice_like
from rlvr.utils import current_umask

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
FULL_WEIGHTS_FILE = "model.safetensors"


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        os.chmod(temporary, 0o666 & ~current_umask())  # safetensors creates 0o600; make it a plain file's mode
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _write_json(path: Path, data: dict, **dump_options) -> None:
    _write_atomically(path, lambda target: target.write_text(json.dumps(data, indent=2, **dump_options) + "\n"))


def adapter_config_dict(peft_config, base_model_name_or_path: str | None = None) -> dict:
    """What PEFT's `PeftModel.save_pretrained` writes as `adapter_config.json`, sets as sorted lists.

    PEFT saves the config with `inference_mode` true and the base model's path filled in
    (`base_model_name_or_path` replaces it when given); its writer turns sets into lists in
    arbitrary order, sorted here so that equal configs give equal files.
    """
    config = copy.deepcopy(peft_config)
    if base_model_name_or_path:
        config.base_model_name_or_path = base_model_name_or_path
    config.inference_mode = True
    data = config.to_dict()
    return {key: sorted(value) if isinstance(value, (set, frozenset)) else value for key, value in data.items()}


def write_adapter(tensors: dict[str, torch.Tensor], peft_config, folder: str | os.PathLike,
                  base_model_name_or_path: str | None = None) -> None:
    """`adapter_model.safetensors` and `adapter_config.json` in `folder`, as PEFT writes them, each atomically."""
    folder = Path(folder)
    adapter = {name: tensor.contiguous() for name, tensor in tensors.items()}
    _write_atomically(folder / ADAPTER_WEIGHTS_FILE,
                      lambda target: save_file(adapter, str(target), metadata={"format": "pt"}))
    _write_json(folder / ADAPTER_CONFIG_FILE, adapter_config_dict(peft_config, base_model_name_or_path),
                sort_keys=True)


def read_adapter_config(folder: str | os.PathLike) -> dict:
    """`adapter_config.json` of `folder`, with `target_modules` a list also when an older rlvr wrote it
    as the text of a Python set (`"{'q_proj', 'v_proj'}"`, which PEFT would read as a regular expression)."""
    data = json.loads((Path(folder) / ADAPTER_CONFIG_FILE).read_text())
    modules = data.get("target_modules")
    if isinstance(modules, str) and modules.startswith(("{", "[")):
        try:
            parsed = ast.literal_eval(modules)
        except (ValueError, SyntaxError):
            parsed = None
        if isinstance(parsed, (set, list, tuple)) and all(isinstance(m, str) for m in parsed):
            data["target_modules"] = sorted(parsed)
    return data


def _kind(loaded: LoadedModel) -> str:
    return "lora" if loaded.is_lora else "full"


class _StateDictView:
    """Stands in for the module in safetensors' `save_model`, which dedups tied tensors by storage."""

    def __init__(self, tensors: dict):
        self.tensors = tensors

    def state_dict(self) -> dict:
        return dict(self.tensors)


def trainable_tensors(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    """The tensors `save_trainable` writes, by name: the adapter with LoRA, else the whole state dict.

    FSDP-sharded tensors are gathered whole, which is a collective: every rank must call this.
    Tied tensors (lm_head / embed_tokens) still share storage in the result.
    """
    policy = loaded.policy
    if loaded.is_lora:
        from peft import get_peft_model_state_dict

        tensors = get_peft_model_state_dict(policy)
    else:
        tensors = policy.state_dict()
    return {name: full_tensor(tensor).detach() for name, tensor in tensors.items()}


def save_trainable(loaded: LoadedModel, folder: str | os.PathLike, tensors: dict | None = None) -> Path:
    """Save the trainable weights of `loaded.policy` into `folder` (created if needed).

    `tensors`: what `trainable_tensors(loaded)` returned; pass it when the model is FSDP-sharded
    (gathered on every rank, written by one).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy = loaded.policy
    tensors = trainable_tensors(loaded) if tensors is None else tensors
    if loaded.is_lora:
        write_adapter(tensors, policy.peft_config["default"], folder)
    else:
        # save_model stores each shared tensor (tied lm_head / embed_tokens) once.
        _write_atomically(folder / FULL_WEIGHTS_FILE,
                          lambda target: save_model(_StateDictView(tensors), str(target)))
    _write_json(
        folder / TRAINABLE_INFO_FILE,
        {"kind": _kind(loaded), "dtype": dtype_name(loaded.dtype), "tensors": len(tensors)},
    )
    return folder


def _shard_like(tensors: dict, current: dict) -> dict:
    """Loaded full tensors, each cut to this rank's slice where the live tensor is an FSDP DTensor."""
    return {name: slice_like(tensor, current[name]) if name in current else tensor for name, tensor in tensors.items()}


def _storage(tensor: torch.Tensor) -> int:
    return (tensor.to_local() if is_dtensor(tensor) else tensor).data_ptr()


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
        result = set_peft_model_state_dict(loaded.policy, _shard_like(tensors, current))
        if result.unexpected_keys:
            raise ValueError(f"adapter tensors not used by the model: {', '.join(result.unexpected_keys[:5])}")
        return

    tensors = load_file(str(folder / FULL_WEIGHTS_FILE), device=str(device))
    current = loaded.policy.state_dict()
    _check_tensors(tensors, current, folder)
    # A name absent from the file must share storage with a saved tensor (tied weights).
    saved_storage = {_storage(current[name]) for name in tensors}
    missing = sorted(name for name in set(current) - set(tensors) if _storage(current[name]) not in saved_storage)
    if missing:
        raise ValueError(f"checkpoint in {folder} lacks tensors: {', '.join(missing[:5])}")
    tensors = _shard_like(tensors, current)
    with torch.no_grad():
        for name, tensor in tensors.items():
            current[name].copy_(tensor)
