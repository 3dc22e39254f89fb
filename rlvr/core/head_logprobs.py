"""log p(target) through a causal LM's head, in row chunks, without keeping [rows, V] logits for backward.

`head_logprobs` applies the LM head (an `nn.Linear`-like module with a `weight` [V, H]) to hidden
states [R, H] and gathers the log-softmax at the targets [R]. Under autograd a frozen bias-free
head (LoRA) takes its gradient with respect to the hidden states in the forward pass
(`_FrozenHeadLogprob`: one [H] vector per row, no logits kept or recomputed); any other head
recomputes each chunk's logits in backward. Logits are upcast to at least fp32 before the softmax.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

# Row chunks of a frozen LM head under autograd: [r, V] logits of at most this many bytes each.
GRAD_CHUNK_BYTES = 2**25


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


def head_logprobs(head, hidden, targets, temperature, max_chunk_bytes, with_entropy):
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
