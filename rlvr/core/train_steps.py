"""CS336 assignment 5 microbatch steps: loss, scaling for gradient accumulation, backward.

Each step divides its loss by `gradient_accumulation_steps`, so the gradients accumulated over
that many microbatches of equal size equal the gradient of the mean loss of the whole batch.
These two functions call `backward()`; everything else in `rlvr.core` is side-effect free.
"""

from __future__ import annotations

import torch

from rlvr.core.masks import masked_mean, masked_normalize
from rlvr.core.policy_losses import Metrics, compute_policy_gradient_loss


def _check_accumulation(gradient_accumulation_steps: int) -> None:
    if isinstance(gradient_accumulation_steps, bool) or gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps!r}")


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Policy-gradient loss of one microbatch, backpropagated. -> (scaled loss, metadata).

    loss = mean_i [ masked mean over sequence i's response tokens of the per-token loss ]
           / gradient_accumulation_steps
    policy_log_probs [B, T], response_mask [B, T]; the other arguments as in
    `compute_policy_gradient_loss`. metadata adds the unscaled `policy_loss`.
    """
    _check_accumulation(gradient_accumulation_steps)
    per_token_loss, metadata = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )  # [B, T]
    per_sequence = masked_mean(per_token_loss, response_mask, dim=-1)  # [B]
    batch_loss = per_sequence.mean()
    loss = batch_loss / gradient_accumulation_steps
    loss.backward()
    return loss, {**metadata, "policy_loss": batch_loss.detach()}


def sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """Negative log-likelihood of the response tokens of one microbatch, backpropagated.

    loss = -mean_i [ sum_t m_it logp_it / normalize_constant ] / gradient_accumulation_steps
    policy_log_probs [B, T], response_mask [B, T] -> (scaled loss, metadata).
    """
    _check_accumulation(gradient_accumulation_steps)
    per_sequence = masked_normalize(
        policy_log_probs, response_mask, dim=-1, normalize_constant=normalize_constant
    )  # [B]
    batch_loss = -per_sequence.mean()
    loss = batch_loss / gradient_accumulation_steps
    loss.backward()
    metadata = {
        "nll": batch_loss.detach(),
        "num_response_tokens": response_mask.sum().detach(),
    }
    return loss, metadata
