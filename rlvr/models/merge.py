"""Sample with the LoRA adapter merged into the base weights, then restore them exactly.

An unmerged adapter adds two small matmuls per adapted layer to every decoding step; merging
removes them (about 20% of sampling time for SmolLM2-135M on a CPU). PEFT's unmerge subtracts
the delta again, which is not bit-exact in floating point and would let the base weights (the
reference policy) drift a little every iteration, so the original weights are copied back.
Under FSDP the layer weights are DTensor shards that cannot be swapped: the adapter stays
unmerged and the layers are gathered whole for the block instead (rlvr/parallel/sharding.py).
"""

from __future__ import annotations

import contextlib

import torch

from rlvr.parallel.sharding import is_sharded, unsharded


def _named_lora_layers(model) -> list[tuple[str, object]]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover
        return []
    return [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]


def _lora_layers(model) -> list:
    return [module for _, module in _named_lora_layers(model)]


def _plain_lora(layer) -> bool:
    """A vanilla LoRA layer whose delta `get_delta_weight` gives (no DoRA or other variant)."""
    variants = getattr(layer, "lora_variant", {}) or {}
    return hasattr(layer, "get_delta_weight") and not any(a in variants for a in layer.active_adapters)


def _active(layer) -> list[str]:
    return [a for a in layer.active_adapters if a in layer.lora_A.keys()]


def merged_weight(layer) -> torch.Tensor:
    """A plain LoRA layer's base weight with its active adapters added, W + (alpha / r) B A, as a new tensor."""
    original = layer.get_base_layer().weight.data
    active = _active(layer)
    if not active:
        return original.clone()
    return original + sum(layer.get_delta_weight(a).to(original.dtype) for a in active)


def merged_weights(model) -> dict[str, torch.Tensor]:
    """The merged weight of each plain LoRA layer of `model`, by the layer's module name. Read from the
    parameters as they are: for an FSDP-sharded model, call inside `unsharded` (the layers gathered whole)."""
    merged = {}
    with torch.no_grad():
        for name, layer in _named_lora_layers(model):
            if not _plain_lora(layer):
                raise ValueError(f"{name}: only plain LoRA layers have a merged weight to read (not DoRA "
                                 "or another variant)")
            merged[name] = merged_weight(layer)
    return merged


def merges_in_place(model) -> bool:
    """Whether `merged_adapter(model)` writes into the base weights' own storage (an adapter other than plain
    LoRA, merged by PEFT) instead of swapping new tensors in; a copy sharing those weights must then sample unmerged."""
    layers = _lora_layers(model) if hasattr(model, "merge_adapter") else []
    return bool(layers) and not all(_plain_lora(layer) for layer in layers)


@contextlib.contextmanager
def merged_adapter(model, enabled: bool = True):
    """Inside the block the policy's adapter is merged; afterwards the weights are bit-identical.

    Plain LoRA layers get a new merged weight tensor (W + delta) swapped in, and the original
    tensor swapped back afterwards: one pass over the weights, no copy and no unmerge. Other
    adapter types are merged by PEFT and restored from a copy. An FSDP-sharded model samples with
    the unmerged adapter, its layers gathered once for the whole block (a collective).
    """
    if is_sharded(model):
        with unsharded(model):
            yield model
        return
    layers = _lora_layers(model) if enabled and hasattr(model, "merge_adapter") else []
    if not layers:
        yield model
        return
    if all(_plain_lora(layer) for layer in layers):
        swapped = []
        try:
            with torch.no_grad():
                for layer in layers:
                    base = layer.get_base_layer()
                    original = base.weight.data
                    swapped.append((layer, base, original, list(layer.merged_adapters)))
                    base.weight.data = merged_weight(layer)
                    layer.merged_adapters = _active(layer)  # PEFT's forward then runs the base layer only
            yield model
        finally:
            for layer, base, original, merged_before in swapped:
                base.weight.data = original
                layer.merged_adapters = merged_before
        return
    saved = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    with torch.no_grad():
        model.merge_adapter()
    try:
        yield model
    finally:
        with torch.no_grad():
            model.unmerge_adapter()
            for layer, weight in zip(layers, saved):
                layer.get_base_layer().weight.copy_(weight)
