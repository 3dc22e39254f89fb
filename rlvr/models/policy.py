"""Loading a policy for RL training: dtype checked, optional LoRA, and a frozen reference for the KL term.

With LoRA the reference policy is the same network with its adapter switched off, so no second
copy is held; full fine-tuning keeps a frozen deep copy only when asked. Dropout is switched off:
the ratio pi_new / pi_old only means something if two forwards on the same tokens agree.
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rlvr.models.conversion import resolve_model_path
from rlvr.models.embedded import EMBEDDED_MODELS
from rlvr.models.kernels import apply_memory_kernels
from rlvr.models.lora_kernel import install_fused_lora, set_base_product_dtype
from rlvr.models.lora_mlp import install_fused_lora_mlp

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,  # slow, but exact enough to test gradients and ratios against
}

# Non-reentrant checkpointing works with frozen inputs and `torch.no_grad` reference passes.
GRADIENT_CHECKPOINTING_KWARGS = {"use_reentrant": False}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """`torch.dtype` for a name in `DTYPES` (a `torch.dtype` among them is accepted too)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unknown dtype {dtype!r}; valid choices: {', '.join(DTYPES)}")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter shape. Defaults adapt every attention and MLP projection of a Llama-style model.

    rank: adapter rank r. alpha: scale numerator; the update is (alpha / rank) * B @ A.
    dropout: 0 by default, because dropout makes two forwards on the same tokens disagree,
    which breaks the importance ratio against the rollout policy.
    """

    rank: int = 16
    alpha: float = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be at least 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("LoRA target_modules is empty; name at least one module, e.g. 'q_proj'")


@dataclass
class LoadedModel:
    """A policy ready to train, its tokenizer, and how to get reference log-probs from it.

    reference: a frozen copy for full fine-tuning with `need_reference`; None with LoRA (the
    reference is the policy with its adapter disabled; see `reference_context`) or when not asked.
    """

    policy: nn.Module
    tokenizer: object
    reference: nn.Module | None
    dtype: torch.dtype
    is_lora: bool
    model_path: str = ""


def load_tokenizer(path: str | os.PathLike, *, gguf_file: str | None = None):
    """The tokenizer at `path`, padding on the left (for batched generation), with a pad token.

    A tokenizer without a pad token gets its EOS token as pad. Then pad and EOS share an id
    (SmolLM2 ships that way), so masks must come from lengths or attention masks, never from
    comparing ids with `pad_token_id`.
    """
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(os.fspath(path), **kwargs)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer at {path} has neither a pad token nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def eos_token_ids(tokenizer, model=None) -> set[int]:
    """Every id that ends a completion: the tokenizer's EOS and the model's generation config's (one or a list)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, (list, tuple)):
        ids.update(int(i) for i in config_eos)
    return ids


def load_causal_lm(path: str, gguf_file: str | None, dtype: torch.dtype) -> PreTrainedModel:
    """`AutoModelForCausalLM.from_pretrained` in `dtype`. Its result's dtype is checked by the caller."""
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)


def verify_parameter_dtype(model: nn.Module, dtype: torch.dtype, what: str = "model") -> None:
    """Raise unless every floating-point parameter of `model` is in `dtype`.

    Some transformers versions silently ignore the requested dtype, and a float32 model that was
    meant to be bfloat16 (or the reverse) trains, slowly or imprecisely, without any other sign.
    """
    found = Counter(param.dtype for param in model.parameters() if param.is_floating_point())
    if set(found) - {dtype}:
        summary = ", ".join(f"{dtype_name(kind)} ({count} tensors)" for kind, count in found.most_common())
        raise RuntimeError(f"{what} was requested in {dtype_name(dtype)} but its parameters are in: {summary}")


def disable_dropout(model: nn.Module) -> int:
    """Set every dropout probability in `model` to 0, in train mode too. Returns how many were on.

    Covers `nn.Dropout` modules and float attributes such as Llama's `attention_dropout`.
    """
    switched_off = 0
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            module.p = 0.0
            switched_off += 1
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float) and value > 0:
                setattr(module, name, 0.0)
                switched_off += 1
    return switched_off


def _enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    # transformers 5 renamed the method; the old name still works there but warns.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=GRADIENT_CHECKPOINTING_KWARGS)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=GRADIENT_CHECKPOINTING_KWARGS)


def _wrap_with_lora(model: PreTrainedModel, lora: LoraSettings) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    # autocast_adapter_dtype=False keeps the adapter in the model's dtype, so the requested dtype
    # holds for every parameter (PEFT would otherwise upcast bfloat16/float16 adapters to float32).
    return get_peft_model(model, config, autocast_adapter_dtype=False)


def load_policy(
    spec: str | os.PathLike,
    *,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
    lora: LoraSettings | None = None,
    gradient_checkpointing: bool = False,
    need_reference: bool = False,
    turn_off_dropout: bool = True,
    memory_kernels: bool = True,
    fused_lora: bool = True,
    base_product_dtype: str = "model",
    initial_model: PreTrainedModel | None = None,
) -> LoadedModel:
    """Load the policy named by `spec` (see `resolve_model_path`) for RL training.

    dtype: one of `DTYPES`; checked on every parameter after loading.
    lora: train a LoRA adapter instead of all weights; the reference is the adapter-disabled policy.
    gradient_checkpointing: recompute activations in backward to save memory. transformers only
        checkpoints in train mode, so the policy is then left in train mode; with dropout off
        (`turn_off_dropout`) its forwards stay deterministic. Otherwise the policy is in eval mode.
    need_reference: full fine-tuning only: keep a frozen copy of the initial weights for the KL term.
    memory_kernels: grouped-query attention without copied key/value heads and a SwiGLU MLP that
        keeps one activation less for backward (`rlvr.models.kernels`); same numbers, less memory.
    fused_lora: each LoRA projection's base product, low-rank product and scaling as one autograd
        function (`rlvr.models.lora_kernel`); same numbers to fp32 rounding, fewer passes over the outputs.
        With memory_kernels, a LoRA down projection also takes the SwiGLU product into its function and
        recomputes it in backward instead of keeping it (`rlvr.models.lora_mlp`).
    base_product_dtype: "model", or a dtype name (bfloat16) the fused projections' frozen base products run
        in (`set_base_product_dtype`); needs `lora` and `fused_lora`.
    initial_model: start from these weights (a plain model of `spec`'s architecture, e.g. a trained run's
        weights from `rlvr.models.checkpoints.run_policy.merged_model_from_run`) instead of `spec`'s; the
        tokenizer is `spec`'s.
    """
    torch_dtype = resolve_dtype(dtype)
    if lora is None and base_product_dtype != "model":
        raise ValueError(f"base_product_dtype={base_product_dtype!r} applies to the frozen base weights under a LoRA "
                         "adapter; full fine-tuning (lora=None) trains every weight in its own dtype")
    path, gguf_file = resolve_model_path(spec)
    tokenizer = load_tokenizer(path, gguf_file=gguf_file)
    try:
        model = load_causal_lm(path, gguf_file, torch_dtype) if initial_model is None else initial_model
    except OSError as error:
        raise OSError(
            f"could not load model {os.fspath(spec)!r} (resolved to {path!r}); valid specs: an embedded "
            f"model name ({', '.join(EMBEDDED_MODELS.names())}), a model folder, a .gguf file, or a hub "
            f"id already in the local Hugging Face cache. Cause: {error}"
        ) from error
    verify_parameter_dtype(model, torch_dtype, f"model {os.fspath(spec)!r}")
    model.to(device)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if turn_off_dropout:
        disable_dropout(model)
    if memory_kernels:
        apply_memory_kernels(model)

    reference = None
    if lora is None:
        model.requires_grad_(True)
        if need_reference:
            reference = copy.deepcopy(model).eval().requires_grad_(False)
        if gradient_checkpointing:
            _enable_gradient_checkpointing(model)
        policy = model
    else:
        if gradient_checkpointing:
            _enable_gradient_checkpointing(model)
            model.enable_input_require_grads()  # so checkpointed blocks see an input that needs grad
        policy = _wrap_with_lora(model, lora)
        fused = install_fused_lora(policy) if fused_lora else 0
        if fused:
            install_fused_lora_mlp(policy)  # where the MLPs have the fused SwiGLU forward (memory_kernels)
        if base_product_dtype != "model":
            if not fused:
                raise ValueError(f"base_product_dtype={base_product_dtype!r} runs the fused LoRA projections' base "
                                 "products in another dtype, and this policy has none (fused_lora=false, or its "
                                 "projections are not plain LoRA over nn.Linear)")
            set_base_product_dtype(policy, resolve_dtype(base_product_dtype))

    policy.train(gradient_checkpointing)
    verify_parameter_dtype(policy, torch_dtype, "policy")
    return LoadedModel(
        policy=policy,
        tokenizer=tokenizer,
        reference=reference,
        dtype=torch_dtype,
        is_lora=lora is not None,
        model_path=path,
    )


@contextmanager
def reference_context(loaded: LoadedModel) -> Iterator[nn.Module]:
    """Yield the model that gives reference log-probs, under `torch.no_grad()`.

    LoRA: the policy itself inside `disable_adapter()` (the adapter is back on at exit).
    Full fine-tuning: the frozen copy kept by `load_policy(..., need_reference=True)`.
    """
    if loaded.is_lora:
        with loaded.policy.disable_adapter(), torch.no_grad():
            yield loaded.policy
    elif loaded.reference is not None:
        with torch.no_grad():
            yield loaded.reference
    else:
        raise ValueError(
            "no reference policy was kept: full fine-tuning keeps one only with "
            "load_policy(..., need_reference=True); LoRA needs none"
        )


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an optimizer should update (those with `requires_grad`)."""
    return [param for param in model.parameters() if param.requires_grad]


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """`(trainable, total)` element counts; tied weights are counted once."""
    total = trainable = 0
    for param in model.parameters():
        total += param.numel()
        if param.requires_grad:
            trainable += param.numel()
    return trainable, total
