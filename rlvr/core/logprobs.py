"""Per-token log-probabilities and entropies of causal language models.

Every policy-gradient loss in rlvr starts from `log pi(token | prefix)`. These functions get the
alignment right (column t scores token t+1), upcast logits to at least fp32 before the softmax,
and process the vocabulary dimension in row chunks so the upcast copy stays small.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

DEFAULT_MAX_CHUNK_BYTES = 2**28  # 256 MiB of upcast logits per chunk (a few such temporaries are alive at once)


def _logprobs_and_entropy(
    logits: torch.Tensor,
    target_ids: torch.Tensor,
    temperature: float,
    max_chunk_bytes: int,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Shared kernel: log_softmax(logits / temperature) gathered at `target_ids`, in row chunks.

    logits [..., V], target_ids [...] -> (logprobs [...], entropy [...] or None).
    The output dtype is `promote_types(logits.dtype, float32)`: bf16/fp16 become fp32, fp64 stays.
    """
    if logits.shape[:-1] != target_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be target_ids {tuple(target_ids.shape)} plus a vocab dimension"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if max_chunk_bytes < 1:
        raise ValueError(f"max_chunk_bytes must be >= 1, got {max_chunk_bytes}")
    vocab_size = logits.shape[-1]
    compute_dtype = torch.promote_types(logits.dtype, torch.float32)
    flat_logits = logits.reshape(-1, vocab_size)  # [R, V], a view when logits are contiguous
    flat_targets = target_ids.reshape(-1)  # [R]
    num_rows = flat_logits.shape[0]
    bytes_per_row = vocab_size * torch.empty((), dtype=compute_dtype).element_size()
    rows_per_chunk = max(1, max_chunk_bytes // bytes_per_row)

    logprob_chunks: list[torch.Tensor] = []
    entropy_chunks: list[torch.Tensor] = []
    for start in range(0, num_rows, rows_per_chunk):
        stop = min(start + rows_per_chunk, num_rows)
        # Upcast BEFORE the softmax: a bf16 log_softmax loses about two decimal digits.
        chunk = flat_logits[start:stop].to(compute_dtype) / temperature  # [r, V]
        log_normalizer = torch.logsumexp(chunk, dim=-1)  # [r]
        target_logits = chunk.gather(-1, flat_targets[start:stop, None]).squeeze(-1)  # [r]
        logprob_chunks.append(target_logits - log_normalizer)  # [r]
        if with_entropy:
            with torch.no_grad():  # entropy is logged, not optimised
                entropy_chunks.append(_entropy(chunk.detach()))

    out_shape = target_ids.shape
    if num_rows == 0:
        empty = torch.zeros(out_shape, dtype=compute_dtype, device=logits.device)
        return empty, (empty.clone() if with_entropy else None)
    logprobs = torch.cat(logprob_chunks).reshape(out_shape)  # [...]
    entropy = torch.cat(entropy_chunks).reshape(out_shape) if with_entropy else None  # [...]
    return logprobs, entropy


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_v p_v log p_v over the last dimension. logits [..., V] -> [...].

    The max logit is subtracted first, so log p = shifted - logsumexp(shifted) stays exact even
    for logits of magnitude 1e4 in fp32 (where z - logsumexp(z) would round to the nearest 1e-3).
    """
    shift = logits.detach().amax(dim=-1, keepdim=True)  # [..., 1]
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    shifted = logits - shift  # [..., V], max 0
    logp = shifted - torch.logsumexp(shifted, dim=-1, keepdim=True)  # [..., V]
    probs = logp.exp()  # [..., V]
    # Where p == 0 (a -inf logit) the term p log p is 0; masking logp first keeps gradients finite too.
    safe_logp = torch.where(probs > 0, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    return -(probs * safe_logp).sum(-1)  # [...]


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dimension. logits [..., V] -> [...].

    H(p) = -sum_v p_v log p_v with log p = z - logsumexp(z) computed on max-shifted logits, which
    is stable for large logits and for -inf entries. Computed in `promote_types(logits.dtype,
    float32)` (CS336 assignment 5).
    """
    return _entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)))  # [...]


def logprobs_from_logits(
    logits: torch.Tensor,
    target_ids: torch.Tensor,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> torch.Tensor:
    """log softmax(logits / temperature)[target]. logits [..., V], target_ids [...] -> [...].

    The logits must already be aligned with their targets (no shift happens here). Computed in
    `promote_types(logits.dtype, float32)` in row chunks of at most `max_chunk_bytes`.
    """
    logprobs, _ = _logprobs_and_entropy(logits, target_ids, temperature, max_chunk_bytes, with_entropy=False)
    return logprobs


def position_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as HF `generate` builds them. [B, L] -> [B, L] long.

    position = (number of real tokens up to and including this one) - 1, clamped at 0 on padding.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, L]


def _next_token_targets(input_ids: torch.Tensor) -> torch.Tensor:
    """Targets aligned with the logits: column t holds input_ids[:, t+1]; the last column is a dummy 0."""
    dummy = torch.zeros_like(input_ids[:, :1])  # [B, 1], scored and then dropped
    return torch.cat([input_ids[:, 1:], dummy], dim=1)  # [B, L]


def _model_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    enable_grad: bool,
    temperature: float,
    max_chunk_bytes: int,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must both be [B, L]"
        )
    if input_ids.shape[1] < 2:
        raise ValueError("need at least 2 tokens per row: column t scores token t+1")
    grad_context = contextlib.nullcontext() if enable_grad else torch.no_grad()
    with grad_context:
        position_ids = position_ids_from_attention_mask(attention_mask)  # [B, L]
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits  # [B, L, V]
        targets = _next_token_targets(input_ids)  # [B, L]
        logprobs, entropy = _logprobs_and_entropy(logits, targets, temperature, max_chunk_bytes, with_entropy)
    # The last column scored the dummy target: drop it.
    return logprobs[:, :-1], (entropy[:, :-1] if entropy is not None else None)  # [B, L-1]


def compute_per_token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    enable_grad: bool = True,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> torch.Tensor:
    """log pi(input_ids[:, t+1] | input_ids[:, :t+1]) for every t. [B, L] -> [B, L-1].

    Column t is read from the logits at position t (the standard causal-LM shift). The model is
    called with `use_cache=False` and with position ids that skip left padding, so a left-padded
    row scores exactly like the same row without padding. Logits are divided by `temperature`
    (use the sampling temperature so the log-probs are those of the sampling distribution) and
    upcast to at least fp32 before the log-softmax. With `enable_grad=False` no autograd graph
    is built (reference and old-policy log-probs).
    """
    logprobs, _ = _model_logprobs(
        model, input_ids, attention_mask, enable_grad, temperature, max_chunk_bytes, with_entropy=False
    )
    return logprobs


def compute_per_token_logprobs_and_entropy(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    enable_grad: bool = True,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`compute_per_token_logprobs` plus the (detached) entropy of each next-token distribution.

    [B, L] -> (logprobs [B, L-1], entropy [B, L-1]); both come from the same upcast chunks.
    """
    logprobs, entropy = _model_logprobs(
        model, input_ids, attention_mask, enable_grad, temperature, max_chunk_bytes, with_entropy=True
    )
    assert entropy is not None
    return logprobs, entropy
