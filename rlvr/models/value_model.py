"""PPO's value model: a scalar head on a causal LM's last hidden state, on the policy's backbone or its own.

`shared` (the default): the head reads the policy's own hidden states, so the LoRA adapter (or the
full weights) carries both the policy and the value function, and one forward pass gives
log-probs and values. The extra memory is the head, hidden_size + 1 parameters (577 for
SmolLM2-135M), and its gradient and Adam state. `separate`: a second copy of the base model with
its own LoRA adapter (or all its weights trainable, as the policy), plus the head; it costs one more
copy of the base weights (SmolLM2-135M in float32: 0.54 GB) and a second backbone pass in the
update, and keeps the value loss out of the policy's weights.

The head starts at zero (every value 0, no random numbers drawn), in at least float32. Checkpoints
hold it in `value_head.safetensors` and the separate model's trainable weights in `model/`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rlvr.models.policy import LoadedModel, trainable_parameters
from rlvr.models.checkpoints.weights import (_write_atomically, _write_json, load_trainable, save_trainable,
                                             trainable_tensors)

VALUE_MODEL_KINDS = ("none", "shared", "separate")  # `algorithm.value_model`
VALUE_HEAD_FILE = "value_head.safetensors"
VALUE_INFO_FILE = "value_model.json"
SEPARATE_MODEL_FOLDER = "model"


class ValueHead(nn.Module):
    """V(s_t) = w . h_t + b on the decoder's last hidden state h_t. [..., H] -> [...].

    Zero-initialised: the first values are all 0, so the first advantages are the plain returns,
    and making the head draws no random numbers (a run's random stream is the same with or without it).
    """

    def __init__(self, hidden_size: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        super().__init__()
        dtype = torch.promote_types(dtype, torch.float32)  # bfloat16 hidden states, float32 values
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=dtype, device=device))  # [H]
        self.bias = nn.Parameter(torch.zeros((), dtype=dtype, device=device))  # []

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.to(self.weight.dtype) @ self.weight + self.bias  # [...]


def hidden_size(model: nn.Module) -> int:
    """The width of a causal LM's last hidden state (a PEFT wrapper is looked through)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    size = getattr(getattr(base, "config", None), "hidden_size", None)
    if not isinstance(size, int):
        raise ValueError(f"{type(base).__name__} has no config.hidden_size: a value head needs the hidden width")
    return size


@dataclass
class ValueModel:
    """The value head and, for `separate`, the model under it (None when it shares the policy's)."""

    kind: str  # shared | separate
    head: ValueHead
    separate: LoadedModel | None = None

    def backbone(self, policy: nn.Module) -> nn.Module:
        """The causal LM whose hidden states the head reads: the policy itself, or the separate model."""
        return policy if self.separate is None else self.separate.policy

    def parameters(self) -> list[nn.Parameter]:
        """What the optimizer updates beside the policy: the head, and the separate model's trainable weights."""
        own = [] if self.separate is None else trainable_parameters(self.separate.policy)
        return [*own, self.head.weight, self.head.bias]

    def train(self, mode: bool) -> None:
        if self.separate is not None:
            self.separate.policy.train(mode)


def build_value_model(kind: str, policy_loaded: LoadedModel, load_separate=None) -> ValueModel:
    """The value model of `kind` (`VALUE_MODEL_KINDS` without none) for a loaded policy.

    `load_separate()` returns the separate model's `LoadedModel` (the same spec, dtype, device and
    LoRA settings as the policy); it is called only for `separate`.
    """
    if kind not in VALUE_MODEL_KINDS or kind == "none":
        raise ValueError(f"unknown value model {kind!r}; valid choices: shared, separate")
    policy = policy_loaded.policy
    device = next(policy.parameters()).device
    if kind == "shared":
        return ValueModel(kind, ValueHead(hidden_size(policy), policy_loaded.dtype, device))
    if load_separate is None:
        raise ValueError("a separate value model needs a loader for its own copy of the base model")
    separate = load_separate()
    return ValueModel(kind, ValueHead(hidden_size(separate.policy), separate.dtype, device), separate)


def value_model_tensors(value_model: ValueModel) -> dict:
    """What `save_value_model` writes: the head, and the separate model's trainable tensors (full
    even when FSDP-sharded, which makes this a collective: call it on every rank)."""
    separate = None if value_model.separate is None else trainable_tensors(value_model.separate)
    head = {"weight": value_model.head.weight.detach(), "bias": value_model.head.bias.detach()}
    return {"head": head, "separate": separate}


def save_value_model(value_model: ValueModel, folder: str | os.PathLike, tensors: dict | None = None) -> Path:
    """Write the head (and the separate model's trainable weights) into `folder`; returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = value_model_tensors(value_model) if tensors is None else tensors
    head = {name: tensor.contiguous() for name, tensor in tensors["head"].items()}
    _write_atomically(folder / VALUE_HEAD_FILE, lambda target: save_file(head, str(target)))
    if value_model.separate is not None:
        save_trainable(value_model.separate, folder / SEPARATE_MODEL_FOLDER, tensors=tensors["separate"])
    _write_json(folder / VALUE_INFO_FILE, {"kind": value_model.kind})
    return folder


def load_value_model(value_model: ValueModel, folder: str | os.PathLike) -> None:
    """Restore what `save_value_model` wrote; a different kind, shape or dtype is an error."""
    folder = Path(folder)
    info_path = folder / VALUE_INFO_FILE
    if not info_path.is_file():
        raise FileNotFoundError(f"{folder} holds no value model ({VALUE_INFO_FILE} missing)")
    saved_kind = json.loads(info_path.read_text()).get("kind")
    if saved_kind != value_model.kind:
        raise ValueError(f"checkpoint in {folder} holds a {saved_kind!r} value model, this run has "
                         f"algorithm.value_model={value_model.kind!r}")
    head = value_model.head
    saved = load_file(str(folder / VALUE_HEAD_FILE), device=str(head.weight.device))
    for name, live in (("weight", head.weight), ("bias", head.bias)):
        if name not in saved or saved[name].shape != live.shape or saved[name].dtype != live.dtype:
            found = None if name not in saved else (saved[name].dtype, tuple(saved[name].shape))
            raise ValueError(f"value head {name} in {folder} is {found}, "
                             f"the model has {(live.dtype, tuple(live.shape))}")
    with torch.no_grad():
        head.weight.copy_(saved["weight"])
        head.bias.copy_(saved["bias"])
    if value_model.separate is not None:
        load_trainable(value_model.separate, folder / SEPARATE_MODEL_FOLDER)
