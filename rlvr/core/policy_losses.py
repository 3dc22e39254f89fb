"""Per-token policy-gradient losses of the GRPO family, in the registry `POLICY_LOSSES`.

Every registered loss has one signature,
    fn(logprobs [B, T], old_logprobs [B, T], advantages [B] or [B, 1], mask [B, T], *,
       clip_low=0.2, clip_high=None) -> (per_token_loss [B, T], metrics)
and returns the loss per token, unreduced: aggregation (`rlvr.core.aggregation`) is a separate
choice. `metrics` holds detached [B, T] tensors `ratio`, `clipped_low`, `clipped_high`, `clipped`
(float 0/1 flags), so the caller computes clip fractions with its own mask.
A loss may declare more keyword options (`LOSS_OPTIONS`: verl's config names, e.g. `clip_ratio_c`,
`tau_pos`) and a `generator` when it draws tokens at random; the caller passes it only the ones it
declares (`loss_options`). What a consumer asks of a loss by name is declared where it is
registered (`LossTraits`, read by `POLICY_LOSSES.traits(name)`: e.g. `sequence_level`).
Losses beyond the GRPO family live in `surrogate_losses.py` (CISPO, SAPO, GMPO, dual-clip, GPG)
and `covariance_losses.py` (Clip-Cov, KL-Cov).
CS336 assignment 5's function names and signatures for these losses are in `rlvr.compat.cs336`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from rlvr.core.masks import masked_mean_per_row
from rlvr.core.traits import LossTraits
from rlvr.registry import Registry

LOG_RATIO_CLIP = 20.0  # exp(20) ~ 5e8: a ratio this far from 1 is already clipped or meaningless
Metrics = dict[str, torch.Tensor]
PolicyLossFn = Callable[..., tuple[torch.Tensor, Metrics]]

# Each loss's traits (`LossTraits`: e.g. sequence_level) are declared where it is registered.
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss", traits=LossTraits())

# Keyword options beyond clip_low / clip_high that some losses declare, named as verl's config names
# them; the defaults are in each loss's signature and in the `algorithm` config section
# (`rlvr/config/schema.py`; a test keeps the two equal). `generator` is the torch.Generator of a loss that
# picks tokens at random.
LOSS_OPTIONS = ("clip_ratio_c", "tau_pos", "tau_neg", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub",
                "kl_cov_ratio", "ppo_kl_coef")


def loss_options(loss_fn: PolicyLossFn, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of `values` that `loss_fn` declares as keyword parameters (the rest mean nothing to it)."""
    declared = inspect.signature(loss_fn).parameters
    return {name: value for name, value in values.items() if name in declared}


def draws_tokens_at_random(loss_fn: PolicyLossFn) -> bool:
    """Whether `loss_fn` takes a `generator` (it selects tokens at random, e.g. clip_cov)."""
    return "generator" in inspect.signature(loss_fn).parameters


def _as_column(advantages: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1]; [B, 1] and [B, T] pass through."""
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def _log_ratio(policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    """log(pi / pi_old) per token, clamped to +-LOG_RATIO_CLIP before any exp. [B, T] -> [B, T].

    The old policy is a constant of the objective: no gradient may reach it.
    """
    if policy_log_probs.shape != old_log_probs.shape:
        raise ValueError(
            f"policy_log_probs {tuple(policy_log_probs.shape)} and old_log_probs "
            f"{tuple(old_log_probs.shape)} differ in shape"
        )
    log_ratio = policy_log_probs - old_log_probs.detach()  # [B, T]
    return log_ratio.clamp(-LOG_RATIO_CLIP, LOG_RATIO_CLIP)


def _no_clip_flags(like: torch.Tensor) -> Metrics:
    zeros = torch.zeros_like(like, dtype=torch.float32)  # [B, T]
    return {"clipped_low": zeros, "clipped_high": zeros.clone(), "clipped": zeros.clone()}


@POLICY_LOSSES.register("grpo_clip")
def grpo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """PPO/GRPO clipped surrogate (Schulman et al. 2017; Shao et al. 2024). [B, T] -> [B, T].

    loss = -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A), rho = exp(clamp(logp - old)).
    clip_high defaults to clip_low; a larger clip_high is DAPO's clip-higher. advantages [B], [B, 1]
    or [B, T]; old_logprobs are detached here; the mask is not needed (the loss is per token).
    Flags where the clipped branch is active: clipped_low (A < 0 and rho < 1 - clip_low),
    clipped_high (A > 0 and rho > 1 + clip_high), clipped (either); and the detached ratio.
    """
    clip_high = clip_low if clip_high is None else clip_high
    advantages = _as_column(advantages)  # [B, 1]
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))  # [B, T]
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T]
    unclipped_objective = ratio * advantages  # [B, T]
    clipped_objective = clipped_ratio * advantages  # [B, T]
    loss = -torch.min(unclipped_objective, clipped_objective)  # [B, T]
    clipped_low = (ratio < 1.0 - clip_low) & (advantages < 0)  # [B, T]
    clipped_high = (ratio > 1.0 + clip_high) & (advantages > 0)  # [B, T]
    return loss, clip_metrics(ratio, clipped_low, clipped_high)


def clip_metrics(ratio: torch.Tensor, clipped_low: torch.Tensor, clipped_high: torch.Tensor) -> Metrics:
    """A clipped loss's metrics: the ratio and the tokens each side of the clip held, [B, T] each."""
    return {
        "ratio": ratio.detach(),
        "clipped_low": clipped_low.float(),
        "clipped_high": clipped_high.float(),
        "clipped": (clipped_low | clipped_high).float(),
    }


POLICY_LOSSES.rename("ppo_clip", "grpo_clip")  # the same clipped surrogate serves PPO


@POLICY_LOSSES.register("grpo_no_clip")
def grpo_no_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Unclipped importance-weighted surrogate -rho * A (clip ranges ignored). [B, T] -> [B, T]."""
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))  # [B, T]
    loss = -ratio * _as_column(advantages)  # [B, T]
    return loss, {"ratio": ratio.detach(), **_no_clip_flags(logprobs)}


@POLICY_LOSSES.register("gspo", traits=LossTraits(sequence_level=True))
def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """GSPO (Zheng et al. 2025), token form. [B, T] -> [B, T].

    Sequence ratio s_i = exp(mean over the sequence's tokens of log(pi / pi_old)) (a geometric
    mean). Token form s_it = sg[s_i] * pi_t / sg[pi_t]: its value is s_i and its gradient is
    s_i * grad log pi_t, so with seq_mean_token_mean aggregation the gradient equals GSPO's
    sequence-level one. loss_it = -min(s_it * A_i, clip(s_it, 1 - clip_low, 1 + clip_high) * A_i).
    GSPO uses much smaller clip ranges than GRPO (the paper: 3e-4 / 4e-4); pass them explicitly.
    """
    upper = clip_low if clip_high is None else clip_high
    advantages = _as_column(advantages)  # [B, 1]
    log_ratio = _log_ratio(logprobs, old_logprobs)  # [B, T]
    sequence_log_ratio = masked_mean_per_row(log_ratio, mask).unsqueeze(-1)  # [B, 1]
    sequence_ratio = torch.exp(sequence_log_ratio)  # [B, 1]
    token_ratio = sequence_ratio.detach() * torch.exp(logprobs - logprobs.detach())  # [B, T], value s_i
    clipped_ratio = token_ratio.clamp(1.0 - clip_low, 1.0 + upper)  # [B, T]
    loss = -torch.min(token_ratio * advantages, clipped_ratio * advantages)  # [B, T]
    ones = torch.ones_like(logprobs, dtype=torch.float32)  # [B, T]
    clipped_low = ((sequence_ratio < 1.0 - clip_low) & (advantages < 0)).float() * ones  # [B, T]
    clipped_high = ((sequence_ratio > 1.0 + upper) & (advantages > 0)).float() * ones  # [B, T]
    metrics = {
        "ratio": token_ratio.detach(),
        "clipped_low": clipped_low,
        "clipped_high": clipped_high,
        "clipped": torch.maximum(clipped_low, clipped_high),
    }
    return loss, metrics


def reinforce_per_token(advantages: torch.Tensor, policy_log_probs: torch.Tensor) -> torch.Tensor:
    """REINFORCE surrogate -A * log pi per token (Williams 1992). advantages [B], [B, 1] or [B, T], [B, T] -> [B, T]."""
    advantages = _as_column(advantages)  # [B, 1]
    return -advantages * policy_log_probs  # [B, T]


def _reinforce_metrics(logprobs: torch.Tensor, old_logprobs: torch.Tensor | None) -> Metrics:
    if old_logprobs is None:
        ratio = torch.ones_like(logprobs).detach()
    else:
        ratio = torch.exp(_log_ratio(logprobs, old_logprobs)).detach()  # [B, T], logged only
    return {"ratio": ratio, **_no_clip_flags(logprobs)}


@POLICY_LOSSES.register("reinforce")
def reinforce_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """REINFORCE surrogate -A_i * log pi_t, no ratio, no clip. [B, T] -> [B, T].

    The loss is the same whatever the advantage: the raw reward (Williams 1992, preset
    no_baseline) or a group-relative one (presets gr_reinforce, rloo; with seq_mean_token_mean this
    is -A_i times the sequence's mean token log-prob). Only valid on-policy (one gradient step per
    batch); old_logprobs only feeds the logged ratio.
    """
    return reinforce_per_token(advantages, logprobs), _reinforce_metrics(logprobs, old_logprobs)


POLICY_LOSSES.rename("gr_reinforce", "reinforce")  # the loss of the gr_reinforce preset
