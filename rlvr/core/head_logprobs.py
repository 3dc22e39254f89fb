"""log p(target) through a causal LM's head, in row chunks, without keeping [rows, V] logits for backward.

`head_logprobs` applies the LM head (an `nn.Linear`-like module with a `weight` [V, H]) to hidden
states [R, H] and gathers the log-softmax at the targets [R]. Under autograd a frozen bias-free
head (LoRA) takes its gradient with respect to the hidden states in the forward pass
(`_FrozenHeadLogprob`: one [H] vector per row, no logits kept or recomputed); any other head
recomputes each chunk's logits in backward. Every path (the policy's with gradient, the old and
the reference passes without) computes the logits with `_head_logits` and the log-softmax with
`_log_softmax_at`, in the same row chunks, so equal weights give bitwise-equal log-probs (KL 0).

Precision: a plain `nn.Linear` head multiplies in fp32 (hidden states and weight upcast before the
product), not in the model's dtype then upcast. The product of two bf16 numbers is exact in fp32
and the sum accumulates in fp32, so these are the logits of the bf16 weights without a rounding;
a bf16 product rounds each logit to 8 significant bits (0.03 to 0.06 at |z| of 8 to 16), an error
as large as the per-token log-ratio a PPO step moves. The policy's path (the one with gradients)
already multiplied in fp32; the cost is one fp32 copy of the head weight per call and fp32 products
in the no-grad passes. A head that is not a plain `nn.Linear` (a PEFT-wrapped one) runs in its own
dtype and is upcast after, the same way for policy and reference.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

# Row chunks of the LM head: [r, V] fp32 logits of at most this many bytes each (and at most `max_chunk_bytes`).
# Every path uses the same chunks: a product's rounding may depend on its number of rows (kernel choice).
GRAD_CHUNK_BYTES = 2**25


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def _head_logits(head, hidden, weight_c, bias_c, out=None) -> torch.Tensor:
    """fp32 (or wider) logits of a row chunk. hidden [r, H], weight_c [V, H] upcast (None: call `head`) -> [r, V].

    With a weight: the hidden states are upcast before the product (see the module docstring)."""
    if weight_c is None:
        return _upcast(head(hidden))  # [r, V], a wrapped head: its own dtype, upcast after
    logits = torch.mm(hidden.to(weight_c.dtype), weight_c.t(), out=out)  # [r, V]
    return logits if bias_c is None else logits + bias_c


def _log_softmax_at(logits, targets, temperature: float, with_entropy: bool):
    """log p(target), detached entropy, e_v = exp(z_v - max) and their sums.
    logits [r, V] fp32 -> [r], [r], [r, V], [r].

    Logits that need no gradient are overwritten (with e_v); otherwise the same operations out of
    place, so both give bitwise-equal numbers. H = -sum_v p_v log p_v = log S - sum_v e_v log e_v / S.
    """
    in_place = not logits.requires_grad
    if temperature != 1.0:
        logits = logits.div_(temperature) if in_place else logits / temperature
    target_logits = logits.gather(-1, targets[:, None]).squeeze(-1)  # [r]
    row_max = logits.detach().amax(dim=-1)  # [r]
    shifted = logits.sub_(row_max[:, None]) if in_place else logits - row_max[:, None]  # [r, V]
    exps = shifted.exp_() if in_place else shifted.exp()  # [r, V]
    sums = exps.sum(-1)  # [r]
    log_sums = sums.log()  # [r]
    logprobs = target_logits - (row_max + log_sums)  # logsumexp without another [r, V] temporary
    with torch.no_grad():  # logged, not optimised
        entropy = log_sums - torch.xlogy(exps, exps).sum(-1) / sums if with_entropy else torch.zeros_like(logprobs)
    return logprobs, entropy, exps, sums


def _chunk_scores(head, weight_c, bias_c, hidden, targets, temperature: float, with_entropy: bool):
    """LM head on a row chunk, then log p(target) and (detached) entropy. hidden [r, H] -> [r], [r]."""
    logits = _head_logits(head, hidden, weight_c, bias_c)  # [r, V] fp32
    logprobs, entropy, _, _ = _log_softmax_at(logits, targets, temperature, with_entropy)
    return logprobs, entropy


class _FrozenHeadLogprob(torch.autograd.Function):
    """log p(target) through a frozen, bias-free LM head, its gradient taken in the forward pass.

    d log p(t) / d h = (w_t - sum_v p_v w_v) / T is one [H] vector per row, so the forward keeps
    that [r, H] Jacobian instead of [r, V] logits, and backward is one multiply: no logits are
    kept and none are recomputed. hidden [r, H], weight_c [V, H] upcast, targets [r] -> ([r], [r]).
    """

    @staticmethod
    def forward(ctx, hidden, weight_c, targets, temperature: float, with_entropy: bool, rows_per_chunk: int):
        # One [rows, V] buffer serves every chunk (logits, then probabilities, in place): the
        # allocator sees one allocation instead of two per chunk, so the peak does not depend
        # on how it reuses freed blocks.
        buffer = hidden.new_empty((min(rows_per_chunk, hidden.shape[0]), weight_c.shape[0]), dtype=weight_c.dtype)
        logprob_parts, entropy_parts, jacobian_parts = [], [], []
        for start in range(0, hidden.shape[0], rows_per_chunk):
            chunk = hidden[start : start + rows_per_chunk]  # [r, H]
            chunk_targets = targets[start : start + rows_per_chunk]
            logits = _head_logits(None, chunk, weight_c, None, out=buffer[: chunk.shape[0]])  # [r, V]
            logprobs, entropy, exps, sums = _log_softmax_at(logits, chunk_targets, temperature, with_entropy)
            logprob_parts.append(logprobs)
            entropy_parts.append(entropy)
            probs = exps.div_(sums[:, None])  # [r, V]
            expected = probs @ weight_c  # [r, H]: sum_v p_v w_v
            jacobian_parts.append((weight_c[chunk_targets] - expected) / temperature)
        del buffer
        logprobs = torch.cat(logprob_parts)  # [R]
        entropy = torch.cat(entropy_parts)  # [R]
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
    its gradient in the forward pass (`_FrozenHeadLogprob`, chunks in one reused buffer, so the
    transient stays small at the activation peak); any other head recomputes each chunk's logits
    in backward (activation checkpointing). Chunks hold at most min(`max_chunk_bytes`,
    `GRAD_CHUNK_BYTES`) of fp32 logits on every path.
    """
    compute_dtype = torch.promote_types(hidden.dtype, torch.float32)
    bytes_per_row = head.weight.shape[0] * torch.empty((), dtype=compute_dtype).element_size()
    num_rows = hidden.shape[0]
    if num_rows == 0:
        empty = hidden.new_zeros(0, dtype=compute_dtype)
        return empty, empty
    rows_per_chunk = max(1, min(max_chunk_bytes, GRAD_CHUNK_BYTES) // bytes_per_row)
    plain = type(head) is torch.nn.Linear
    weight_c = head.weight.to(compute_dtype) if plain else None  # [V, H], the same tensor when already fp32
    bias_c = head.bias.to(compute_dtype) if plain and head.bias is not None else None  # [V]
    head_grad = weight_c is not None and weight_c.requires_grad
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or head_grad)
    if needs_grad and _frozen_linear_head(head):
        return _FrozenHeadLogprob.apply(hidden, weight_c, targets, temperature, with_entropy, rows_per_chunk)
    logprob_parts, entropy_parts = [], []
    for start in range(0, num_rows, rows_per_chunk):
        stop = min(start + rows_per_chunk, num_rows)
        args = (head, weight_c, bias_c, hidden[start:stop], targets[start:stop], temperature, with_entropy)
        if needs_grad:
            logprobs, entropy = checkpoint(_chunk_scores, *args, use_reentrant=False)
        else:
            logprobs, entropy = _chunk_scores(*args)
        logprob_parts.append(logprobs)
        entropy_parts.append(entropy)
    return torch.cat(logprob_parts), torch.cat(entropy_parts)
