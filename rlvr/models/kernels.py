"""Memory-saving replacements for two pieces of a decoder layer; the numbers do not change.

- `sdpa_gqa` attention: on CPU, with a mask and several query heads per key/value head
  (grouped-query attention), scaled-dot-product attention runs with `enable_gqa=True` instead
  of copying every key and value head `num_key_value_groups` times first. The copies are what
  autograd would keep for backward: for SmolLM2 (9 query heads, 3 key/value heads) this cuts
  the attention's saved keys and values by 3x. Everywhere else it is transformers' `sdpa`. Its
  mask is the additive one (0 attended, -inf not) that `scaled_dot_product_attention` turns a
  boolean mask into, made once per forward: given the boolean mask, every layer makes that
  float copy again and autograd keeps each (30 for SmolLM2, [rows, queries, keys] fp32 apiece).
- A SwiGLU MLP (`down(silu(gate(x)) * up(x))`) whose product is one autograd function that
  keeps `gate(x)` and `up(x)` for backward and recomputes `silu` there, instead of also keeping
  `silu(gate(x))`: one [tokens, intermediate] activation less per layer.

`apply_memory_kernels(model)` installs both where they apply and checks each MLP swap on a
random input against the original forward before keeping it.

For sampling there is also `weight_major_linears(model)`: inside it, every `nn.Linear` on the
CPU computes `(W @ x^T)^T` instead of `x @ W^T` when more than `WEIGHT_MAJOR_ABOVE_ROWS` rows
(tokens) go through it. Same product; which orientation MKL runs faster depends on the row
count (see the constant), so prefill and 16-row decoding steps go weight-major, a few rows not.
"""

from __future__ import annotations

import contextlib
import logging
import types
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.models.kernel_check import compare

logger = logging.getLogger(__name__)

GQA_ATTENTION = "sdpa_gqa"
# Weight-major products only above this many rows: from 2 to 8 rows MKL runs (W x^T)^T as slowly as
# at 16 (about 35 ms for SmolLM2's layer linears on 2 threads) where x W^T takes 21 to 29 ms; at one
# row both are the same matrix-vector product (benchmarks/performance/decode_speed.py, "linears").
WEIGHT_MAJOR_ABOVE_ROWS = 8
# MLP classes whose forward is exactly down_proj(act_fn(gate_proj(x)) * up_proj(x)).
SWIGLU_MLP_CLASSES = frozenset({"LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP", "Olmo2MLP", "GraniteMLP"})
SILU_ACTIVATIONS = ("SiLUActivation", "SiLU")


def sdpa_gqa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                               is_causal=None, **kwargs):
    """query [B, Hq, q, D], key/value [B, Hkv, k, D] -> ([B, q, Hq, D], None), like transformers' sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = (
        groups > 1
        and query.shape[2] > 1
        and attention_mask is not None
        and query.device.type == "cpu"
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and not kwargs.get("output_attentions", False)
    )
    if not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )  # [B, Hq, q, D]; a mask is given, so not is_causal (as in transformers)
    return output.transpose(1, 2).contiguous(), None


def additive_sdpa_mask(*args, dtype: torch.dtype = torch.float32, **kwargs) -> torch.Tensor | None:
    """transformers' `sdpa` mask [B, 1, q, k] (True: attended) as the additive mask in `dtype` (the model's)
    that `scaled_dot_product_attention` would make of it in each call: 0 where True, -inf where False.
    None (no mask needed) stays None."""
    from transformers.masking_utils import sdpa_mask

    mask = sdpa_mask(*args, **kwargs)
    if mask is None or mask.dtype != torch.bool:
        return mask
    blocked = torch.full((), float("-inf"), dtype=dtype, device=mask.device)
    return torch.where(mask, torch.zeros((), dtype=dtype, device=mask.device), blocked)  # [B, 1, q, k]


def register_gqa_attention() -> str:
    """Make `sdpa_gqa` a transformers attention implementation (its mask: `additive_sdpa_mask`)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(GQA_ATTENTION, sdpa_gqa_attention_forward)
    if ALL_MASK_ATTENTION_FUNCTIONS.get(GQA_ATTENTION) is not additive_sdpa_mask:
        AttentionMaskInterface.register(GQA_ATTENTION, additive_sdpa_mask)
    return GQA_ATTENTION


class SiluMul(torch.autograd.Function):
    """silu(gate) * up, keeping only gate and up for backward. gate, up [..., I] -> [..., I]."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gate, up = ctx.saved_tensors
        return silu_mul_grads(grad, gate, up, *ctx.needs_input_grad[:2])


def silu_mul_grads(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, need_gate: bool = True,
                   need_up: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of silu(gate) * up [..., I] for its output's gradient `grad` -> (gate's, up's), None where
    not needed."""
    sigmoid = torch.sigmoid(gate)
    grad_gate = grad_up = None
    if need_up:
        grad_up = grad * (gate * sigmoid)
    if need_gate:
        # d silu(x) / dx = sigmoid(x) * (1 + x * (1 - sigmoid(x)))
        grad_gate = grad * up * (sigmoid * (1 + gate * (1 - sigmoid)))
    return grad_gate, grad_up


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up; under autograd through `SiluMul` (one saved activation less)."""
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return SiluMul.apply(gate, up)
    return F.silu(gate) * up


def _swiglu_forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))


def _is_swiglu_mlp(module: nn.Module) -> bool:
    return (
        type(module).__name__ in SWIGLU_MLP_CLASSES
        and all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn"))
        and type(module.act_fn).__name__ in SILU_ACTIVATIONS
    )


@torch.no_grad()
def _same_output(module: nn.Module, fused_forward):
    """The fused output equals the module's on a random input, to its dtype's rounding (`kernel_check`)."""
    weight = module.gate_proj.weight
    x = torch.randn(2, 3, weight.shape[1], dtype=weight.dtype, device=weight.device)
    expected = module(x)
    return compare([("output", fused_forward(x), expected)])


def _checked_without_consuming_randomness(same_as_before, module: nn.Module, bound):
    """`same_as_before(module, bound)` with torch's random state restored afterwards: the check draws random
    inputs, and a run must sample the same completions whether or not a fused forward was installed."""
    device = next(module.parameters()).device
    devices = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return same_as_before(module, bound)


def own_forward(module: nn.Module):
    """The function behind the forward `module` was given as its own (`install_forward`), else None."""
    return getattr(vars(module).get("forward"), "__func__", None)


def install_forward(model: nn.Module, applies, forward, same_as_before, replaces=None) -> int:
    """Give every module of `model` for which `applies(module)` holds (and that has no forward of its own
    yet, or with `replaces` one bound from that function) `forward` as its own bound forward; returns how many.
    `same_as_before(module, bound)` checks the first one against the module's forward until then: when it
    fails, nothing is installed and one line says so (which forward, where, the check's `detail`)."""
    count = 0
    for module in model.modules():
        if not applies(module) or ("forward" in vars(module) and own_forward(module) is not replaces):
            continue
        bound = types.MethodType(forward, module)
        if count == 0:
            check = _checked_without_consuming_randomness(same_as_before, module, bound)
            if not check:  # not the forward we expect: leave the model alone
                detail = getattr(check, "detail", "its check against the module's own forward failed")
                logger.warning("fused forward %s not installed on %s: %s", forward.__name__, type(module).__name__,
                               detail)
                return 0
        module.forward = bound
        count += 1
    return count


def install_fused_mlp(model: nn.Module) -> int:
    """Swap the forward of every SwiGLU MLP in `model` for the fused one; returns how many."""
    return install_forward(model, _is_swiglu_mlp, _swiglu_forward, _same_output)


def apply_memory_kernels(model: nn.Module) -> list[str]:
    """Install `sdpa_gqa` attention (when the model uses sdpa) and the fused SwiGLU MLP.

    Call before wrapping with PEFT. Returns the names of what was installed.
    """
    installed = []
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) == "sdpa" and hasattr(
        model, "set_attn_implementation"
    ):
        model.set_attn_implementation(register_gqa_attention())
        installed.append(GQA_ATTENTION)
    if install_fused_mlp(model):
        installed.append("fused_swiglu")
    return installed


def _weight_major_forward(self, x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])  # [M, in]
    if flat.shape[0] <= WEIGHT_MAJOR_ABOVE_ROWS:
        return F.linear(x, self.weight, self.bias)
    out = torch.mm(self.weight, flat.t()).t()  # [M, out], computed as [out, in] @ [in, M]
    if self.bias is not None:
        out = out + self.bias
    return out.contiguous().view(*x.shape[:-1], out.shape[-1])


@contextlib.contextmanager
def weight_major_linears(model: nn.Module, enabled: bool = True) -> Iterator[int]:
    """Inside: CPU `nn.Linear`s of `model` multiply weight-major (see the module docstring).

    For inference (sampling): the result equals `F.linear` up to float summation order. Linears
    with a forward of their own, or off the CPU, are left alone. Yields how many were switched.
    """
    switched = []
    if enabled:
        for module in model.modules():
            if type(module) is nn.Linear and "forward" not in vars(module) and module.weight.device.type == "cpu":
                module.forward = types.MethodType(_weight_major_forward, module)
                switched.append(module)
    try:
        yield len(switched)
    finally:
        for module in switched:
            del module.forward
