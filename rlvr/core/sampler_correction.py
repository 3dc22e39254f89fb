"""The gap between the sampler's and the trainer's log-probs, and the importance-sampling corrections for it.

A rollout engine other than the training model (vLLM, other kernels, another precision, a stale
copy) samples from a distribution a little different from the one the trainer scores:
pi_sampler != pi_old. `sampler_gap` measures the gap per token. `SAMPLER_CORRECTIONS` holds the
corrections (`rollout.correction`), each a detached weight [B, T] that multiplies the per-token
policy loss, with r_t = pi_old(y_t) / pi_sampler(y_t) and cap C (`rollout.tis_cap`):

  tis_token      min(r_t, C): truncated importance sampling, TIS (Yao et al. 2025, "Your efficient RL
                 framework secretly brings you off-policy RL training"; verl's and TRL's default)
  tis_sequence   min(prod_t r_t, C) on every token of the sequence: the sequence's own likelihood
                 ratio, unbiased for a sequence-level reward up to the truncation
  mask_token     1 where r_t lies in [1/C, C], else 0: masked IS (MIS), tokens the two disagree on
                 are dropped, the rest kept unweighted
  mask_sequence  1 on every token of a sequence whose geometric-mean ratio exp(mean_t log r_t) lies
                 in [1/C, C], else 0 (the product would drop almost every long sequence)

The weights of the truncating corrections are not truncated from below. Tokens outside `mask`
get weight 0 from the sequence-level ones and are never read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.core.kl import kl_per_token
from rlvr.registry import Registry

SAMPLER_CORRECTIONS: Registry = Registry("sampler correction")
# The band outside which a token's ratio counts as a large mismatch in `rollout/mismatch_ratio_out_frac`.
MISMATCH_BAND = (0.5, 2.0)


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


def _log_ratio(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor) -> torch.Tensor:
    return old_logprobs.detach().float() - sampler_logprobs.detach().float()  # [B, T]


def _check_cap(cap: float) -> None:
    if not cap > 0:
        raise ValueError(f"sampler correction: cap must be > 0, got {cap!r}")


def _sequence_log_ratio(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                        mean: bool) -> torch.Tensor:
    """Per sequence: the sum (or mean) over `mask` of log r_t. -> [B, 1]."""
    weights = mask.float()  # [B, T]
    log_ratio = torch.where(weights != 0, _log_ratio(old_logprobs, sampler_logprobs), torch.zeros_like(weights))
    total = log_ratio.sum(dim=-1, keepdim=True)  # [B, 1]
    if mean:
        total = total / weights.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return total  # [B, 1]


@SAMPLER_CORRECTIONS.register("tis_token")
def tis_token(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
              cap: float) -> torch.Tensor:
    """min(r_t, C) per token. [B, T] each -> [B, T]."""
    return tis_weights(old_logprobs, sampler_logprobs, cap)


@SAMPLER_CORRECTIONS.register("tis_sequence")
def tis_sequence(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                 cap: float) -> torch.Tensor:
    """min(prod_t r_t, C) on each of the sequence's tokens, 0 outside `mask`. [B, T] each -> [B, T]."""
    _check_cap(cap)
    sequence = torch.exp(_sequence_log_ratio(old_logprobs, sampler_logprobs, mask, mean=False)).clamp(max=cap)
    return sequence.expand_as(old_logprobs) * (mask != 0)  # [B, T]


@SAMPLER_CORRECTIONS.register("mask_token")
def mask_token(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
               cap: float) -> torch.Tensor:
    """1 where r_t is in [1/C, C], else 0. [B, T] each -> [B, T]."""
    _check_cap(cap)
    ratio = torch.exp(_log_ratio(old_logprobs, sampler_logprobs))  # [B, T]
    low, high = min(cap, 1.0 / cap), max(cap, 1.0 / cap)
    return ((ratio >= low) & (ratio <= high)).float()  # [B, T]


@SAMPLER_CORRECTIONS.register("mask_sequence")
def mask_sequence(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                  cap: float) -> torch.Tensor:
    """1 on a sequence whose geometric-mean ratio is in [1/C, C], else 0 (and 0 outside `mask`). -> [B, T]."""
    _check_cap(cap)
    mean_log_ratio = _sequence_log_ratio(old_logprobs, sampler_logprobs, mask, mean=True)  # [B, 1]
    bound = abs(math.log(cap))
    keep = (mean_log_ratio.abs() <= bound).float()  # [B, 1]
    return keep.expand_as(old_logprobs) * (mask != 0)  # [B, T]


def mismatch_ratio_out(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor) -> torch.Tensor:
    """1.0 where pi_trainer / pi_sampler leaves MISMATCH_BAND = [0.5, 2], else 0. [B, T] each -> [B, T]."""
    ratio = torch.exp(_log_ratio(trainer_logprobs, sampler_logprobs))  # [B, T]
    low, high = MISMATCH_BAND
    return ((ratio < low) | (ratio > high)).float()  # [B, T]
