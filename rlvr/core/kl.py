"""Sample-based estimators of KL(policy || reference) for the GRPO KL penalty.

Tokens are drawn from the policy pi, so with d = log pi_ref(x) - log pi(x) (Schulman, "Approximating
KL divergence", 2020):

* k1 = -d             unbiased, high variance, negative on many samples;
* k2 = d**2 / 2       biased (exact only to second order), low variance, always >= 0;
* k3 = exp(d) - d - 1 unbiased (E_pi[exp(d)] = 1) and always >= 0; GRPO (Shao et al. 2024) uses it.

d is clamped to [-log_ratio_clip, log_ratio_clip] first, so one wildly off token cannot make
exp(d) overflow. Estimators are registered in `KL_ESTIMATORS` under "k1", "k2", "k3".
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.core.masks import masked_mean
from rlvr.registry import Registry

KLEstimatorFn = Callable[[torch.Tensor], torch.Tensor]

KL_ESTIMATORS: Registry[KLEstimatorFn] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """k1 = -d, d = log pi_ref - log pi. [...] -> [...]."""
    return -log_ratio


@KL_ESTIMATORS.register("k2")
def kl_k2(log_ratio: torch.Tensor) -> torch.Tensor:
    """k2 = d**2 / 2. [...] -> [...]."""
    return 0.5 * log_ratio.square()


@KL_ESTIMATORS.register("k3")
def kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """k3 = exp(d) - d - 1, written with expm1 to keep precision when d is small. [...] -> [...]."""
    return torch.expm1(log_ratio) - log_ratio


def _clamped_log_ratio(
    logp_new: torch.Tensor,
    logp_ref: torch.Tensor,
    log_ratio_clip: float | None,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """d = clamp(logp_ref - logp_new); positions outside `keep` are set to 0 before anything else."""
    if logp_new.shape != logp_ref.shape:
        raise ValueError(f"logp_new {tuple(logp_new.shape)} and logp_ref {tuple(logp_ref.shape)} differ in shape")
    log_ratio = logp_ref - logp_new  # [B, T]: log(pi_ref / pi)
    if keep is not None:
        log_ratio = torch.where(keep, log_ratio, torch.zeros((), dtype=log_ratio.dtype, device=log_ratio.device))
    if log_ratio_clip is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)  # [B, T]
    return log_ratio


def kl_per_token(
    logp_new: torch.Tensor,
    logp_ref: torch.Tensor,
    estimator: str = "k3",
    log_ratio_clip: float | None = 20.0,
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate. logp_new [B, T] (pi, carries grad), logp_ref [B, T] -> [B, T]."""
    estimate = KL_ESTIMATORS.get(estimator)
    return estimate(_clamped_log_ratio(logp_new, logp_ref, log_ratio_clip))  # [B, T]


def approx_kl(
    logp_new: torch.Tensor,
    logp_ref: torch.Tensor,
    mask: torch.Tensor,
    estimator: str = "k3",
    log_ratio_clip: float | None = 20.0,
) -> torch.Tensor:
    """Masked mean over all completion tokens of the per-token KL(pi || pi_ref) estimate.

    logp_new [B, T], logp_ref [B, T], mask [B, T] -> scalar. Masked positions may hold anything.
    """
    estimate = KL_ESTIMATORS.get(estimator)
    if mask.shape != logp_new.shape:
        raise ValueError(f"mask {tuple(mask.shape)} must match logp_new {tuple(logp_new.shape)}")
    per_token = estimate(_clamped_log_ratio(logp_new, logp_ref, log_ratio_clip, keep=mask != 0))  # [B, T]
    return masked_mean(per_token, mask)
