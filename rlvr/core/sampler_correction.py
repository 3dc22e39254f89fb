"""The gap between the sampler's and the trainer's log-probs, and truncated importance sampling.

A rollout engine other than the training model (vLLM, other kernels, another precision) samples
from a distribution a little different from the one the trainer scores: pi_sampler != pi_old.
`sampler_gap` measures the gap per token; `tis_weights` is the correction verl and TRL call TIS
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"): each
token's policy loss is weighted by min(pi_old / pi_sampler, C), detached, so the gradient is the
on-policy one up to the truncation at C.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.core.kl import kl_per_token


@dataclass(frozen=True)
class SamplerGap:
    """Per-token differences between the sampler's and the trainer's log-probs of the sampled tokens."""

    abs_diff: torch.Tensor  # [B, T] |logp_sampler - logp_trainer|
    kl: torch.Tensor  # [B, T] k3 estimate of KL(pi_sampler || pi_trainer) on the sampler's own samples


def sampler_gap(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor) -> SamplerGap:
    """trainer_logprobs [B, T], sampler_logprobs [B, T] (the tokens were drawn from the sampler) -> [B, T] each.

    k3 = r - 1 - log r with r = pi_trainer / pi_sampler: unbiased for KL(sampler || trainer) under
    the sampler's samples and never negative (Schulman, "Approximating KL divergence").
    """
    trainer_logprobs = trainer_logprobs.detach().float()
    sampler_logprobs = sampler_logprobs.detach().float()
    abs_diff = (sampler_logprobs - trainer_logprobs).abs()  # [B, T]
    kl = kl_per_token(sampler_logprobs, trainer_logprobs, estimator="k3")  # [B, T]
    return SamplerGap(abs_diff=abs_diff, kl=kl)


def tis_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """min(exp(logp_old - logp_sampler), cap), detached: old_logprobs [B, T], sampler_logprobs [B, T] -> [B, T].

    Multiplies the per-token policy loss. `cap` > 0 bounds the variance a token the sampler found
    unlikely (and the trainer likely) can add; the weight is not truncated from below.
    """
    if not cap > 0:
        raise ValueError(f"tis_weights: cap must be > 0, got {cap!r}")
    log_ratio = old_logprobs.detach().float() - sampler_logprobs.detach().float()  # [B, T]
    return torch.exp(log_ratio).clamp(max=cap)  # [B, T]; an overflow to inf is clamped to cap too
