"""A SwiGLU MLP whose down projection is a LoRA layer: its product and the projection as one autograd function.

The MLP computes `down(silu(gate(x)) * up(x))`. Through `SiluMul` (`rlvr.models.kernels`) and
`LoraLinear` (`rlvr.models.lora_kernel`) autograd keeps gate(x) and up(x) for the product's
backward and, again, the product h = silu(gate(x)) * up(x) as the down projection's input (its
A gradient reads it): three [tokens, intermediate] activations per layer, the largest part of
what a LoRA update keeps (for SmolLM2, 1536 floats a token each, against 576 for the residual).
`SiluMulLoraLinear` keeps gate(x) and up(x) only and recomputes h in backward, an elementwise
pass and no product: one of the three less. The numbers are the same, h being the same
expression of the same tensors.

`install_fused_lora_mlp(policy)` gives every MLP that has the fused SwiGLU forward and a down
projection with the fused LoRA forward (install both first) a forward that takes this path when
the down projection is in its plain state (`plain_adapter`) and the two functions apart
otherwise (merged or disabled adapter). It checks the first MLP's output and gradients against
the separate functions' on a random input (to the dtype's rounding) before keeping anything.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.models.kernels import _swiglu_forward, install_forward, own_forward, silu_mul, silu_mul_grads
from rlvr.models.lora_kernel import (
    _fused_forward,
    base_product_weight,
    lora_linear_forward,
    lora_linear_grads,
    plain_adapter,
    random_lora_b,
    same_outputs_and_gradients,
)


class SiluMulLoraLinear(torch.autograd.Function):
    """gate, up [M, I] -> h W^T + b + (h A^T)(s B)^T [M, out] with h = silu(gate) * up, W [out, I] and b [out]
    frozen (W possibly a reduced-precision copy, as in `LoraLinear`), A [r, I], B [out, r], s a float."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
        hidden = F.silu(gate) * up  # [M, I]
        out, low, scaled_b = lora_linear_forward(hidden, weight, bias, lora_a, lora_b, scaling)
        ctx.save_for_backward(gate, up, low, weight, lora_a, scaled_b)  # not hidden: recomputed in backward
        ctx.scaling = scaling
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gate, up, low, weight, lora_a, scaled_b = ctx.saved_tensors
        need_gate, need_up, _, _, need_a, need_b, _ = ctx.needs_input_grad
        hidden = F.silu(gate) * up if need_a else None  # [M, I]
        grad_hidden, grad_a, grad_b = lora_linear_grads(grad, hidden, low, weight, lora_a, scaled_b, ctx.scaling,
                                                        need_gate or need_up, need_a, need_b)
        del hidden
        grad_gate = grad_up = None
        if grad_hidden is not None:
            grad_gate, grad_up = silu_mul_grads(grad_hidden, gate, up, need_gate, need_up)
        return grad_gate, grad_up, None, None, grad_a, grad_b, None


def _swiglu_lora_forward(self, x: torch.Tensor) -> torch.Tensor:
    gate, up = self.gate_proj(x), self.up_proj(x)  # [..., I] each
    down = self.down_proj
    name = plain_adapter(down, gate)
    if name is None:
        return down(silu_mul(gate, up))
    out = SiluMulLoraLinear.apply(
        gate.reshape(-1, gate.shape[-1]), up.reshape(-1, up.shape[-1]), base_product_weight(down),
        down.base_layer.bias, down.lora_A[name].weight, down.lora_B[name].weight, down.scaling[name],
    )  # [M, out]
    return out.view(*gate.shape[:-1], out.shape[-1])


def _fused_swiglu_with_fused_lora_down(module: nn.Module) -> bool:
    down = getattr(module, "down_proj", None)
    return own_forward(module) is _swiglu_forward and down is not None and own_forward(down) is _fused_forward


def _same_as_separate(mlp: nn.Module, fused_forward):
    """On a random input with a random B in the down projection: the fused output and gradients (input, every
    trainable parameter of the MLP) equal the separate functions' (to the dtype's rounding, `kernel_check`)."""
    down = mlp.down_proj
    weight = down.base_layer.weight
    x = torch.randn(3, 5, weight.shape[0], dtype=weight.dtype, device=weight.device)
    name = plain_adapter(down, x)
    if name is None:
        return True  # not in the plain state now: the fused path is not taken until it is
    with random_lora_b(down, name):
        return same_outputs_and_gradients(mlp.forward, fused_forward, x,
                                          [param for param in mlp.parameters() if param.requires_grad])


def install_fused_lora_mlp(model: nn.Module) -> int:
    """Give every fused SwiGLU MLP of `model` with a fused LoRA down projection the forward above; returns how
    many. Nothing is installed when the first one's check fails (logged, with the largest difference)."""
    return install_forward(model, _fused_swiglu_with_fused_lora_down, _swiglu_lora_forward, _same_as_separate,
                           replaces=_swiglu_forward)
