"""Log-probs of completion tokens only, with the prompt run once per group.

The G completions of a group share one prompt. `compute_completion_logprobs` runs that prompt
through the decoder once, repeats its keys and values G times (inside the autograd graph, since
LoRA changes the prompt's hidden states too), runs only the completion tokens against them, and
applies the LM head only at the positions that score completion tokens (P-1 .. L-2), in row
chunks (`rlvr.core.head_logprobs`). The [B, L, V] logits of the plain path are never built. The
numbers equal `rlvr.core.compute_per_token_logprobs` on the same rows (tested to float
tolerance, values and gradients). The transformers-specific calls (decoder / head split, the
KV cache) are in `rlvr.models.hf_cache`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from rlvr.core.head_logprobs import head_logprobs
from rlvr.core.logprobs import (
    DEFAULT_MAX_CHUNK_BYTES,
    compute_per_token_logprobs_and_entropy,
    position_ids_from_attention_mask,
)
from rlvr.models.hf_cache import cache_argument_name, decoder_and_head, output_cache


def compute_completion_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    *,
    group_size: int = 1,
    enable_grad: bool = True,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    with_entropy: bool = True,
    completion_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Completion log-probs and entropies laid out like `compute_per_token_logprobs`.

    input_ids, attention_mask [N, L]: prompt left-padded in columns [0, P), completion from
    column P, rows in prompt-major groups of `group_size` identical prompts (N = B * G).
    Returns (logprobs [N, L-1], entropy [N, L-1]); columns t < P-1 (which score prompt tokens)
    are 0 there, so multiply by the completion mask as usual. With `completion_mask` [N, L-1]
    the LM head runs only where it is 1 (right padding is not scored; those entries are 0).
    Entropy is computed only when `with_entropy` (all zeros otherwise). Falls back to the plain
    full-sequence path for models whose decoder or LM head cannot be separated.
    """
    num_rows, length = input_ids.shape
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} differ")
    if not 1 <= prompt_len < length:
        raise ValueError(f"prompt_len={prompt_len} must be in [1, L={length}): completions start at column prompt_len")
    if group_size < 1 or num_rows % group_size:
        raise ValueError(f"group_size={group_size} must divide the number of rows {num_rows}")
    decoder, head = decoder_and_head(model)
    if decoder is None:
        logprobs, entropy = compute_per_token_logprobs_and_entropy(
            model, input_ids, attention_mask, enable_grad=enable_grad, temperature=temperature,
            max_chunk_bytes=max_chunk_bytes,
        )
        return logprobs, entropy
    if group_size > 1:
        prompts = input_ids[:, :prompt_len].view(-1, group_size, prompt_len)
        if not bool((prompts == prompts[:, :1]).all()):
            raise ValueError("rows of a group must share the same prompt (prompt-major order, left-padded)")
    position_ids = position_ids_from_attention_mask(attention_mask)  # [N, L]
    grad_context = contextlib.nullcontext() if enable_grad else torch.no_grad()
    with grad_context:
        # 1. The prompt, once per group.
        prompt_rows = slice(None, None, group_size)
        prompt_out = decoder(
            input_ids=input_ids[prompt_rows, :prompt_len], attention_mask=attention_mask[prompt_rows, :prompt_len],
            position_ids=position_ids[prompt_rows, :prompt_len], use_cache=True,
        )
        cache = output_cache(prompt_out)
        last_prompt_hidden = prompt_out.last_hidden_state[:, -1:, :]  # [B, 1, H], scores completion token 0
        if group_size > 1:
            cache.batch_repeat_interleave(group_size)  # keys/values [B, ...] -> [N, ...], differentiable
            last_prompt_hidden = last_prompt_hidden.repeat_interleave(group_size, dim=0)  # [N, 1, H]
        # 2. The completions, attending to the shared prompt keys and values.
        completion_hidden = decoder(
            input_ids=input_ids[:, prompt_len:], attention_mask=attention_mask,
            position_ids=position_ids[:, prompt_len:], use_cache=True, **{cache_argument_name(decoder): cache},
        ).last_hidden_state  # [N, C, H]
        # Hidden states at positions P-1 .. L-2 score tokens P .. L-1.
        scoring_hidden = torch.cat([last_prompt_hidden, completion_hidden[:, :-1]], dim=1)  # [N, C, H]
        targets = input_ids[:, prompt_len:]  # [N, C]
        completion_len = targets.shape[1]
        flat_hidden = scoring_hidden.reshape(num_rows * completion_len, -1)  # [N*C, H]
        flat_targets = targets.reshape(-1)  # [N*C]
        if completion_mask is None:
            flat_logprobs, flat_entropy = head_logprobs(
                head, flat_hidden, flat_targets, temperature, max_chunk_bytes, with_entropy
            )  # [N*C] each
        else:
            keep = completion_mask[:, prompt_len - 1 :].reshape(-1).nonzero().squeeze(-1)  # [M]
            kept_logprobs, kept_entropy = head_logprobs(
                head, flat_hidden[keep], flat_targets[keep], temperature, max_chunk_bytes, with_entropy
            )  # [M] each
            flat_logprobs = kept_logprobs.new_zeros(num_rows * completion_len).index_put((keep,), kept_logprobs)
            flat_entropy = kept_entropy.new_zeros(num_rows * completion_len).index_put((keep,), kept_entropy)
    logprobs = flat_logprobs.new_zeros(num_rows, length - 1)  # [N, L-1]
    entropy = flat_entropy.new_zeros(num_rows, length - 1)  # [N, L-1]
    logprobs = torch.cat([logprobs[:, : prompt_len - 1], flat_logprobs.view(num_rows, completion_len)], dim=1)
    entropy = torch.cat([entropy[:, : prompt_len - 1], flat_entropy.view(num_rows, completion_len)], dim=1)
    return logprobs, entropy
