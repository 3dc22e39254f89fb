"""Sample with the LoRA adapter merged into the base weights, then restore them exactly.

An unmerged adapter adds two small matmuls per adapted layer to every decoding step; merging
removes them (about 20% of sampling time for SmolLM2-135M on a CPU). PEFT's unmerge subtracts
the delta again, which is not bit-exact in floating point and would let the base weights (the
reference policy) drift a little every iteration, so the original weights are copied back.
"""

from __future__ import annotations

import contextlib

import torch


def _lora_layers(model) -> list:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover
        return []
    return [module for module in model.modules() if isinstance(module, LoraLayer)]


@contextlib.contextmanager
def merged_adapter(model, enabled: bool = True):
    """Inside the block the policy's adapter is merged; afterwards the weights are bit-identical."""
    layers = _lora_layers(model) if enabled and hasattr(model, "merge_adapter") else []
    if not layers:
        yield model
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
