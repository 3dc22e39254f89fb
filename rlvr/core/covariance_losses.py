"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models", arXiv 2505.22617), registered in `POLICY_LOSSES` as verl names them.

Policy entropy falls where tokens with a high covariance between their log-prob and their
advantage get updated; both losses find those tokens within the batch the loss sees and damp
their update: Clip-Cov detaches a random few of them, KL-Cov adds a |log ratio| penalty to the
top ones. The covariance is centred over that batch's completion tokens (one minibatch when the
update is split). Same signature and return as `rlvr.core.policy_losses`.
"""

from __future__ import annotations

import torch

from rlvr.core.masks import masked_mean
from rlvr.core.policy_losses import POLICY_LOSSES, Metrics, _as_column, _log_ratio, _no_clip_flags, clip_metrics


def token_covariance(advantages: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(A - mean A) * (log pi - mean log pi), means over the masked tokens, log pi detached. [B, T] -> [B, T]."""
    logprobs = logprobs.detach()
    return (advantages - masked_mean(advantages, mask)) * (logprobs - masked_mean(logprobs, mask))  # [B, T]


@POLICY_LOSSES.register("clip_cov")
def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Clip-Cov: the PPO clipped surrogate with a few high-covariance tokens detached. [B, T] -> [B, T].

    Candidates: completion tokens that PPO's clip leaves alone and whose covariance
    (`token_covariance`) lies in (clip_cov_lb, clip_cov_ub). max(1, int(clip_cov_ratio * tokens))
    of them, drawn uniformly without replacement with `generator` (so a run and its resume pick
    the same tokens), get loss 0 and no gradient. Adds the flag cov_clipped (the detached tokens).
    """
    if not clip_cov_ratio > 0:
        raise ValueError(f"clip_cov needs clip_cov_ratio > 0, got {clip_cov_ratio}")
    upper = clip_low if clip_high is None else clip_high
    advantages = torch.broadcast_to(_as_column(advantages), logprobs.shape)  # [B, T]
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))  # [B, T]
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + upper)  # [B, T]
    valid = mask != 0  # [B, T]
    clipped_by_ppo = (clipped > unclipped) & valid  # [B, T]
    covariance = token_covariance(advantages, logprobs, mask)  # [B, T]
    candidates = valid & ~clipped_by_ppo & (covariance > clip_cov_lb) & (covariance < clip_cov_ub)  # [B, T]
    budget = max(int(clip_cov_ratio * int(valid.sum())), 1)
    candidate_index = candidates.flatten().nonzero().flatten()  # [n], row-major order
    order = torch.randperm(candidate_index.numel(), generator=generator)  # [n], on the generator's device (CPU)
    chosen = candidate_index[order[:budget].to(candidate_index.device)]  # [<= budget]
    detached = torch.zeros(candidates.numel(), dtype=torch.bool, device=logprobs.device)  # [B*T]
    detached[chosen] = True
    detached = detached.view_as(candidates)  # [B, T]
    loss = torch.where(detached, torch.zeros_like(unclipped), torch.maximum(unclipped, clipped))  # [B, T]
    clipped_low = (ratio < 1.0 - clip_low) & (advantages < 0)  # [B, T]
    clipped_high = (ratio > 1.0 + upper) & (advantages > 0)  # [B, T]
    return loss, {**clip_metrics(ratio, clipped_low, clipped_high), "cov_clipped": detached.float()}


@POLICY_LOSSES.register("kl_cov")
def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    kl_cov_ratio: float = 2e-4,
    ppo_kl_coef: float = 0.1,
) -> tuple[torch.Tensor, Metrics]:
    """KL-Cov: -rho * A, plus ppo_kl_coef * |log rho| on the highest-covariance tokens. [B, T] -> [B, T].

    No ratio clip (the clip ranges are ignored). The max(1, int(kl_cov_ratio * tokens)) completion
    tokens with the largest covariance (`token_covariance`) get the penalty; the choice is
    deterministic (top-k), so this loss needs no generator. Adds the flag kl_penalized.
    """
    if not kl_cov_ratio > 0:
        raise ValueError(f"kl_cov needs kl_cov_ratio > 0, got {kl_cov_ratio}")
    advantages = torch.broadcast_to(_as_column(advantages), logprobs.shape)  # [B, T]
    log_ratio = _log_ratio(logprobs, old_logprobs)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    loss = -advantages * ratio  # [B, T]
    valid = mask != 0  # [B, T]
    valid_index = valid.flatten().nonzero().flatten()  # [n]
    penalized = torch.zeros(valid.numel(), dtype=torch.bool, device=logprobs.device)  # [B*T]
    if valid_index.numel() > 0:
        covariance = token_covariance(advantages, logprobs, mask).flatten()[valid_index]  # [n]
        count = max(1, int(valid_index.numel() * kl_cov_ratio))
        penalized[valid_index[torch.topk(covariance, count).indices]] = True
    penalized = penalized.view_as(valid)  # [B, T]
    loss = torch.where(penalized, loss + ppo_kl_coef * log_ratio.abs(), loss)  # [B, T]
    return loss, {"ratio": ratio.detach(), **_no_clip_flags(logprobs), "kl_penalized": penalized.float()}
