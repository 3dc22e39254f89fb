"""transformers plumbing: split a causal LM into decoder body and LM head, and its KV-cache API.

Kept out of `rlvr.core` (pure tensor math): the names below changed across transformers
versions (`cache` vs `past_key_values`), and the rollout backends and the completion log-probs
path share them from here.
"""

from __future__ import annotations

import inspect
from typing import Any


def decoder_and_head(model: Any):
    """The transformer body and the LM head of a causal LM (a PEFT wrapper is looked through)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    # Models that post-process logits (soft-capping, scaling) are scored by the plain path.
    if config is None or getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None, None
    get_decoder = getattr(base, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or decoder is base:
        return None, None
    return decoder, head


def cache_argument_name(model: Any) -> str:
    """`cache` in recent transformers, `past_key_values` before (and for remote code)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def full_attention_only(model: Any) -> bool:
    """Whether every layer attends to the whole past (no sliding window), so keys and values computed
    earlier can be handed back to the model as a plain `DynamicCache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(kind == "full_attention" for kind in types)
    return not getattr(config, "sliding_window", None)


def cache_of(keys: list, values: list) -> Any:
    """A transformers `DynamicCache` holding per-layer keys and values [B, kv_heads, T, head_dim]."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer, (layer_keys, layer_values) in enumerate(zip(keys, values)):
        cache.update(layer_keys, layer_values, layer)
    return cache
