"""A LoRA projection as one autograd function: the same numbers as PEFT's, in fewer passes.

PEFT's `lora.Linear` computes `base(x) + lora_B(lora_A(x)) * scaling`: three products, then a
multiply and an add over the whole [tokens, out] output, and in backward the multiply's and the
add's gradients again, each a pass over a [tokens, out] tensor. With SmolLM2's rank-16 adapter
on all seven projections those passes cost about as much as the adapter's products themselves.
`LoraLinear` folds the scaling into B (an [out, r] multiply) and accumulates the low-rank product
into the base product's output in place (`addmm_`); backward does the same for the input's
gradient. Saved for backward: the input and the [tokens, r] activation, as PEFT saves them.

`install_fused_lora(policy)` gives every plain LoRA projection of a PEFT model a forward that
takes this path when the layer is in its plain state (one active adapter, not merged, not
disabled, no dropout, no DoRA or other variant, no LoRA bias, a frozen `nn.Linear` base, input
in the adapter's dtype, no autocast) and PEFT's own forward otherwise, so merging the adapter for sampling and
disabling it for the reference work as before. It checks the first layer's output and gradients
against PEFT's on a random input, to a few ulps of the dtype (`rlvr.models.kernel_check`), before
keeping anything, and logs why when it keeps nothing.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.models.kernel_check import KernelCheck, compare
from rlvr.models.kernels import install_forward, own_forward

# Where a layer (and the model, for `base_product_dtype`) holds its base-product dtype, and a layer its copy.
BASE_DTYPE_ATTRIBUTE = "_rlvr_base_product_dtype"
_BASE_COPY_ATTRIBUTE = "_rlvr_base_product_copy"


def _base_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, in] W^T + b -> [M, out] in x's dtype; a W in another dtype (a reduced-precision copy) multiplies x
    rounded to that dtype, and the bias is added after the product is cast back."""
    if weight.dtype == x.dtype:
        return F.linear(x, weight, bias)
    out = F.linear(x.to(weight.dtype), weight).to(x.dtype)  # [M, out]
    return out if bias is None else out.add_(bias)


def _base_input_grad(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """grad [M, out] W [out, in] -> [M, in] in grad's dtype: `_base_product`'s input gradient, the gradient
    rounded to W's dtype when W is a reduced-precision copy."""
    if weight.dtype == grad.dtype:
        return grad @ weight
    return (grad.to(weight.dtype) @ weight).to(grad.dtype)


def lora_linear_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                        lora_b: torch.Tensor, scaling: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, in] -> (x W^T + b + (x A^T)(s B)^T [M, out], the low-rank activation x A^T [M, r], s B [out, r])."""
    low = x @ lora_a.t()  # [M, r]
    scaled_b = lora_b * scaling  # [out, r]
    out = _base_product(x, weight, bias)  # [M, out]
    out.addmm_(low, scaled_b.t())
    return out, low, scaled_b


def lora_linear_grads(grad: torch.Tensor, x: torch.Tensor | None, low: torch.Tensor, weight: torch.Tensor,
                      lora_a: torch.Tensor, scaled_b: torch.Tensor, scaling: float, need_x: bool, need_a: bool,
                      need_b: bool) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """`lora_linear_forward`'s gradients for the output's gradient `grad` [M, out] -> (x's [M, in], A's [r, in],
    B's [out, r]), None where not needed (x, the input, is only read for A's)."""
    grad = grad.contiguous()  # [M, out]
    grad_x = grad_a = grad_b = None
    if need_x or need_a:
        grad_low = grad @ scaled_b  # [M, r]
        if need_x:
            grad_x = _base_input_grad(grad, weight)  # [M, in]
            grad_x.addmm_(grad_low, lora_a)
        if need_a:
            grad_a = grad_low.t() @ x  # [r, in]
    if need_b:
        grad_b = (grad.t() @ low).mul_(scaling)  # [out, r]
    return grad_x, grad_a, grad_b


class LoraLinear(torch.autograd.Function):
    """x [M, in] -> x W^T + b + (x A^T)(s B)^T [M, out], with W [out, in] and b [out] frozen,
    A [r, in], B [out, r] and s a float. W may be a copy in a lower precision than x (the base
    products then run at that precision, `set_base_product_dtype`); A, B and the output are in x's."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
        out, low, scaled_b = lora_linear_forward(x, weight, bias, lora_a, lora_b, scaling)
        ctx.save_for_backward(x, low, weight, lora_a, scaled_b)
        ctx.scaling = scaling
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, low, weight, lora_a, scaled_b = ctx.saved_tensors
        need_x, _, _, need_a, need_b, _ = ctx.needs_input_grad
        grad_x, grad_a, grad_b = lora_linear_grads(grad, x, low, weight, lora_a, scaled_b, ctx.scaling, need_x,
                                                   need_a, need_b)
        return grad_x, None, None, grad_a, grad_b, None


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
    """`LoraLinear` on x [..., in] -> [..., out]."""
    flat = x.reshape(-1, x.shape[-1])  # [M, in]
    out = LoraLinear.apply(flat, weight, bias, lora_a, lora_b, scaling)  # [M, out]
    return out.view(*x.shape[:-1], out.shape[-1])


def _frozen_linear_base(layer: nn.Module, x: torch.Tensor) -> bool:
    """`layer`'s base is a frozen `nn.Linear` (weight and bias) that input `x` is in the dtype of, outside autocast."""
    base = layer.base_layer
    if type(base) is not nn.Linear or base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad):
        return False
    # autocast would cast the products inside the function, not its saved tensors
    return x.dtype == base.weight.dtype and not torch.is_autocast_enabled(x.device.type)


def plain_adapter(layer: nn.Module, x: torch.Tensor) -> str | None:
    """The name of `layer`'s one active adapter when the fused path computes what PEFT's forward would
    for input `x` (see the module docstring), else None."""
    if layer.disable_adapters or layer.merged or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    if name not in layer.lora_A or name in layer.lora_variant or not _frozen_linear_base(layer, x):
        return None
    if not isinstance(layer.lora_dropout[name], nn.Identity) or layer.lora_B[name].bias is not None:
        return None
    weight_a = layer.lora_A[name].weight
    if x.dtype != weight_a.dtype or x.device != weight_a.device:
        return None
    return name


def base_product_weight(layer: nn.Module) -> torch.Tensor:
    """The weight `layer`'s base product multiplies by: its frozen base weight, or (after
    `set_base_product_dtype`) a copy of it in that dtype, made at the first use and again whenever the base
    weight's tensor is another (a merge for sampling swaps it and swaps it back) or was written in place
    (its version counter moved; writes through `.data` do not move it and are not seen)."""
    weight = layer.base_layer.weight
    dtype = layer.__dict__.get(BASE_DTYPE_ATTRIBUTE)
    if dtype is None or dtype == weight.dtype:
        return weight
    key = (weight.data_ptr(), weight._version, weight.dtype)
    held = layer.__dict__.get(_BASE_COPY_ATTRIBUTE)
    if held is None or held[0] != key:
        with torch.no_grad():
            held = (key, weight.detach().to(dtype))
        layer.__dict__[_BASE_COPY_ATTRIBUTE] = held
    return held[1]


def _reduced_reference(layer: nn.Module, x: torch.Tensor) -> bool:
    """The adapter is disabled (the reference policy) on an otherwise plain layer whose base products run at
    a reduced precision: the reference then multiplies at that precision too, so policy and reference differ
    by the adapter alone."""
    if not layer.disable_adapters or layer.merged or layer.__dict__.get(BASE_DTYPE_ATTRIBUTE) is None:
        return False
    return _frozen_linear_base(layer, x)


def _fused_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    name = None if args or kwargs else plain_adapter(self, x)
    if name is None:
        if not args and not kwargs and _reduced_reference(self, x):
            return _base_product(x, base_product_weight(self), self.base_layer.bias)
        return type(self).forward(self, x, *args, **kwargs)
    base = self.base_layer
    return lora_linear(x, base_product_weight(self), base.bias, self.lora_A[name].weight, self.lora_B[name].weight,
                       self.scaling[name])


def _is_lora_linear(module: nn.Module) -> bool:
    from peft.tuners.lora import Linear as PeftLoraLinear

    return isinstance(module, PeftLoraLinear) and type(module.base_layer) is nn.Linear


def _same_as_peft(layer: nn.Module, fused_forward) -> KernelCheck | bool:
    """On a random input with a random B: the fused output, input gradient and adapter gradients equal
    PEFT's forward's (to the dtype's rounding, `rlvr.models.kernel_check`)."""
    name = layer.active_adapters[0] if layer.active_adapters else None
    weight = layer.base_layer.weight
    x = torch.randn(3, 5, weight.shape[1], dtype=weight.dtype, device=weight.device)
    if name is None or plain_adapter(layer, x) is None:
        return True  # not in the plain state now: the fused path is not taken until it is
    lora_a, lora_b = layer.lora_A[name].weight, layer.lora_B[name].weight
    with random_lora_b(layer, name):
        return same_outputs_and_gradients(lambda inp: type(layer).forward(layer, inp), fused_forward, x,
                                          [param for param in (lora_a, lora_b) if param.requires_grad])


@contextlib.contextmanager
def random_lora_b(layer: nn.Module, name: str) -> Iterator[None]:
    """Inside: adapter `name`'s B of `layer` is random (PEFT initialises B to 0, and a zero B would hide a wrong B
    path in a check); restored at exit."""
    lora_b = layer.lora_B[name].weight
    saved_b = lora_b.detach().clone()
    try:
        with torch.no_grad():
            lora_b.copy_(torch.randn_like(lora_b) * 0.1)
        yield
    finally:
        with torch.no_grad():
            lora_b.copy_(saved_b)


def same_outputs_and_gradients(reference, candidate, x: torch.Tensor, params: list[torch.Tensor]) -> KernelCheck:
    """`candidate(x)` and its gradients (of the output's squares' sum, for x and `params`) against `reference`'s,
    each to its dtype's rounding (`rlvr.models.kernel_check.compare`)."""
    results = []
    for forward in (reference, candidate):
        inp = x.clone().requires_grad_(True)
        grads = torch.autograd.grad(forward(inp).square().sum(), [inp] + list(params))
        results.append((forward(x).detach(), *grads))
    names = ["output", "input gradient"] + [f"parameter gradient {index}" for index in range(len(params))]
    return compare([(name, ours, theirs) for name, ours, theirs in zip(names, results[1], results[0])])


def set_base_product_dtype(model: nn.Module, dtype: torch.dtype | None) -> int:
    """Run the frozen base products of every fused LoRA projection in `model` at `dtype` (None: the
    weight's own); returns how many projections. Each keeps a copy of its base weight in `dtype`; the
    input is rounded to `dtype` for the product and the result cast back, so activations, adapters,
    gradients and everything outside these products keep the model's dtype."""
    count = 0
    for module in model.modules():
        if _is_lora_linear(module) and own_forward(module) is _fused_forward:
            module.__dict__[BASE_DTYPE_ATTRIBUTE] = dtype
            module.__dict__.pop(_BASE_COPY_ATTRIBUTE, None)
            count += 1
    model.__dict__[BASE_DTYPE_ATTRIBUTE] = dtype
    return count


def base_product_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype `set_base_product_dtype` gave `model`'s base products, None when they run at the weights' own."""
    return model.__dict__.get(BASE_DTYPE_ATTRIBUTE)


def install_fused_lora(model: nn.Module) -> int:
    """Give every PEFT LoRA projection over an `nn.Linear` in `model` the fused forward; returns how many.
    Nothing is installed when the first one's check against PEFT fails (logged, with the largest difference)."""
    return install_forward(model, _is_lora_linear, _fused_forward, _same_as_peft)
