"""Log-probs of completion tokens only, with the prompt run once per group.

The G completions of a group share one prompt. `compute_completion_logprobs` runs that prompt
through the decoder once, repeats its keys and values G times (inside the autograd graph, since
LoRA changes the prompt's hidden states too), runs only the completion tokens against them, and
applies the LM head only at the positions that score completion tokens (P-1 .. L-2), in row
chunks. The [B, L, V] logits of the plain path are never built. The numbers equal
`compute_per_token_logprobs` on the same rows (tested to float tolerance, values and gradients).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rlvr.core.logprobs import (
    DEFAULT_MAX_CHUNK_BYTES,
    compute_per_token_logprobs_and_entropy,
    position_ids_from_attention_mask,
)

# Row chunks of a frozen LM head under autograd: [r, V] logits of at most this many bytes each.
GRAD_CHUNK_BYTES = 2**25


def _decoder_and_head(model: Any):
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


def _chunk_scores(head, hidden, targets, temperature: float, with_entropy: bool):
    """LM head on a row chunk, then log p(target) and (detached) entropy. hidden [r, H] -> [r], [r]."""
    logits = head(hidden)  # [r, V]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # upcast before the softmax
    if temperature != 1.0:
        logits = logits / temperature
    log_normalizer = torch.logsumexp(logits, dim=-1)  # [r]
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - log_normalizer  # [r]
    if not with_entropy:
        return logprobs, torch.zeros_like(logprobs).detach()
    with torch.no_grad():  # logged, not optimised: H = -sum_v p_v log p_v, one exp over the vocabulary
        log_p = logits.detach() - log_normalizer.detach()[:, None]  # [r, V]
        entropy = -(log_p.exp() * log_p).sum(-1)  # [r]
    return logprobs, entropy


class _FrozenHeadLogprob(torch.autograd.Function):
    """log p(target) through a frozen, bias-free LM head, its gradient taken in the forward pass.

    d log p(t) / d h = (w_t - sum_v p_v w_v) / T is one [H] vector per row, so the forward keeps
    that [r, H] Jacobian instead of [r, V] logits, and backward is one multiply: no logits are
    kept and none are recomputed. hidden [r, H], weight [V, H], targets [r] -> ([r], [r]).
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, with_entropy: bool, rows_per_chunk: int):
        compute_dtype = torch.promote_types(hidden.dtype, torch.float32)
        weight_c = weight.to(compute_dtype)  # [V, H] (the same tensor when already fp32)
        # One [rows, V] buffer serves every chunk (logits, then probabilities, in place): the
        # allocator sees one allocation instead of two per chunk, so the peak does not depend
        # on how it reuses freed blocks.
        buffer = hidden.new_empty((min(rows_per_chunk, hidden.shape[0]), weight.shape[0]), dtype=compute_dtype)
        logprob_parts, entropy_parts, jacobian_parts = [], [], []
        for start in range(0, hidden.shape[0], rows_per_chunk):
            chunk = hidden[start : start + rows_per_chunk].to(compute_dtype)  # [r, H]
            chunk_targets = targets[start : start + rows_per_chunk]
            logits = torch.mm(chunk, weight_c.t(), out=buffer[: chunk.shape[0]])  # [r, V], fp32 before the softmax
            if temperature != 1.0:
                logits.div_(temperature)
            target_logits = logits.gather(-1, chunk_targets[:, None]).squeeze(-1)  # [r]
            row_max = logits.amax(dim=-1)  # [r]
            exps = logits.sub_(row_max[:, None]).exp_()  # [r, V], e_v = exp(z_v - max), in the buffer
            sums = exps.sum(-1)  # [r]
            log_sums = sums.log()  # [r]
            logprob_parts.append(target_logits - (row_max + log_sums))  # logsumexp without a [r, V] temporary
            if with_entropy:  # H = -sum_v p_v log p_v = log S - sum_v e_v log e_v / S
                entropy_parts.append(log_sums - torch.xlogy(exps, exps).sum(-1) / sums)
            probs = exps.div_(sums[:, None])  # [r, V]
            expected = probs @ weight_c  # [r, H]: sum_v p_v w_v
            jacobian_parts.append((weight_c[chunk_targets] - expected) / temperature)
        del buffer
        logprobs = torch.cat(logprob_parts)  # [R]
        entropy = torch.cat(entropy_parts) if with_entropy else torch.zeros_like(logprobs)
        ctx.save_for_backward(torch.cat(jacobian_parts))  # [R, H]
        ctx.hidden_dtype = hidden.dtype
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        (jacobian,) = ctx.saved_tensors
        grad_hidden = (grad_logprobs[:, None].to(jacobian.dtype) * jacobian).to(ctx.hidden_dtype)  # [R, H]
        return grad_hidden, None, None, None, None, None


def _frozen_linear_head(head) -> bool:
    return type(head) is torch.nn.Linear and head.bias is None and not head.weight.requires_grad


def _head_logprobs(head, hidden, targets, temperature, max_chunk_bytes, with_entropy):
    """LM head + log-softmax gather per row chunk. hidden [R, H], targets [R] -> [R] (and [R]).

    Under autograd no [r, V] logits are kept for backward: a frozen bias-free head (LoRA) takes
    its gradient in the forward pass (`_FrozenHeadLogprob`, chunks of at most `GRAD_CHUNK_BYTES`
    in one reused buffer, so the transient stays small at the activation peak); any other head
    recomputes each chunk's logits in backward (activation checkpointing).
    """
    vocab = head.weight.shape[0]
    compute_dtype = torch.promote_types(hidden.dtype, torch.float32)
    bytes_per_row = vocab * torch.empty((), dtype=compute_dtype).element_size()
    needs_grad = torch.is_grad_enabled() and hidden.requires_grad
    num_rows = hidden.shape[0]
    if num_rows == 0:
        empty = hidden.new_zeros(0, dtype=compute_dtype)
        return empty, empty
    if needs_grad and _frozen_linear_head(head):
        rows_per_chunk = max(1, min(max_chunk_bytes, GRAD_CHUNK_BYTES) // bytes_per_row)
        return _FrozenHeadLogprob.apply(hidden, head.weight, targets, temperature, with_entropy, rows_per_chunk)
    rows_per_chunk = max(1, max_chunk_bytes // bytes_per_row)
    logprob_parts, entropy_parts = [], []
    for start in range(0, num_rows, rows_per_chunk):
        stop = min(start + rows_per_chunk, num_rows)
        args = (head, hidden[start:stop], targets[start:stop], temperature, with_entropy)
        if needs_grad:
            logprobs, entropy = checkpoint(_chunk_scores, *args, use_reentrant=False)
        else:
            logprobs, entropy = _chunk_scores(*args)
        logprob_parts.append(logprobs)
        entropy_parts.append(entropy)
    return torch.cat(logprob_parts), torch.cat(entropy_parts)


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
    decoder, head = _decoder_and_head(model)
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
            flat_logprobs, flat_entropy = _head_logprobs(
                head, flat_hidden, flat_targets, temperature, max_chunk_bytes, with_entropy
            )  # [N*C] each
        else:
            keep = completion_mask[:, prompt_len - 1 :].reshape(-1).nonzero().squeeze(-1)  # [M]
            kept_logprobs, kept_entropy = _head_logprobs(
                head, flat_hidden[keep], flat_targets[keep], temperature, max_chunk_bytes, with_entropy
            )  # [M] each
            flat_logprobs = kept_logprobs.new_zeros(num_rows * completion_len).index_put((keep,), kept_logprobs)
            flat_entropy = kept_entropy.new_zeros(num_rows * completion_len).index_put((keep,), kept_entropy)
    logprobs = flat_logprobs.new_zeros(num_rows, length - 1)  # [N, L-1]
    entropy = flat_entropy.new_zeros(num_rows, length - 1)  # [N, L-1]
    logprobs = torch.cat([logprobs[:, : prompt_len - 1], flat_logprobs.view(num_rows, completion_len)], dim=1)
    entropy = torch.cat([entropy[:, : prompt_len - 1], flat_entropy.view(num_rows, completion_len)], dim=1)
    return logprobs, entropy
