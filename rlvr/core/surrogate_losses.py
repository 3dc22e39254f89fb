"""Policy losses that change the importance-ratio surrogate: CISPO, SAPO, GMPO (geo_mean), dual-clip
PPO, and GPG, registered in `POLICY_LOSSES` under verl's names.

Same signature and return as `rlvr.core.policy_losses`: per-token loss [B, T], unreduced, and
detached [B, T] metrics (`ratio`, the clip flags, and any flag of the loss's own, which the
training loop logs as `policy_loss/<name>`). Extra hyperparameters are keyword options named as
verl's config names them; their defaults are verl's.
"""

from __future__ import annotations

import torch

from rlvr.core.masks import masked_mean_per_row
from rlvr.core.policy_losses import (
    POLICY_LOSSES,
    Metrics,
    _as_column,
    _log_ratio,
    _no_clip_flags,
    clip_metrics,
    grpo_clip_loss,
    reinforce_loss,
)
from rlvr.core.traits import LossTraits


@POLICY_LOSSES.register("cispo")
def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): clip the importance weight, not the update. [B, T] -> [B, T].

    loss = -sg(clip(rho, 1 - clip_low, 1 + clip_high)) * A * log pi. The clipped weight is a
    constant, so every token keeps a REINFORCE gradient (PPO's clip zeroes the gradient of a
    clipped token). clip_low=1 removes the lower bound (MiniMax-M1 tunes only the upper one; TRL's
    epsilon_high=5.0 is clip_high=4.0 here). Flags: clipped_low (rho < 1 - clip_low),
    clipped_high (rho > 1 + clip_high), whatever the advantage's sign.
    """
    upper = clip_low if clip_high is None else clip_high
    advantages = _as_column(advantages)  # [B, 1]
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))  # [B, T]
    weight = ratio.clamp(1.0 - clip_low, 1.0 + upper).detach()  # [B, T]
    loss = -weight * advantages * logprobs  # [B, T]
    clipped_low = ratio < 1.0 - clip_low  # [B, T]
    clipped_high = ratio > 1.0 + upper  # [B, T]
    return loss, clip_metrics(ratio, clipped_low, clipped_high)


@POLICY_LOSSES.register("sapo")
def sapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, Metrics]:
    """SAPO (Qwen, arXiv 2511.20347): a smooth sigmoid gate instead of the hard clip. [B, T] -> [B, T].

    loss = -f(rho) * A with f(rho) = sigmoid(tau * (rho - 1)) * 4 / tau, tau = tau_pos where A > 0
    and tau_neg elsewhere. f(1) = 2 / tau and f'(1) = 1, so on-policy it is the plain policy
    gradient; away from rho = 1 the gradient decays smoothly (faster for negative advantages,
    tau_neg > tau_pos). The clip ranges are ignored. The paper aggregates with seq_mean_token_mean.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"sapo needs tau_pos > 0 and tau_neg > 0, got {tau_pos}, {tau_neg}")
    advantages = _as_column(advantages)  # [B, 1]
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))  # [B, T]
    positive = torch.full_like(ratio[:1, :1], tau_pos)  # [1, 1], the ratio's dtype
    negative = torch.full_like(ratio[:1, :1], tau_neg)  # [1, 1]
    tau = torch.where(advantages > 0, positive, negative)  # [B, 1] or [B, T]
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau  # [B, T]
    loss = -gate * advantages  # [B, T]
    return loss, {"ratio": ratio.detach(), **_no_clip_flags(logprobs)}


@POLICY_LOSSES.register("geo_mean", traits=LossTraits(sequence_level=True))
def geo_mean_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the geometric mean of clipped token ratios. [B, T] -> [B, T].

    Per token the log-ratio is clipped PPO-style in log space, range [-clip_low, clip_high]
    (pessimistic side only: sgn(A) * min(sgn(A) * l, sgn(A) * clip(l))); the sequence ratio is
    exp(masked mean of the clipped log-ratios) and the sequence loss is -A_i times it, A_i the
    masked mean of the row's advantages. Every token of row i carries that sequence loss, so
    seq_mean_token_mean aggregation gives GMPO's mean over sequences and its gradient. GMPO's
    clip range is wider than GRPO's (the paper: e^-0.4 .. e^0.4, clip_low = clip_high = 0.4).
    Flags where the clipped branch is active: clipped_high (A > 0, l > clip_high), clipped_low
    (A < 0, l < -clip_low).
    """
    upper = clip_low if clip_high is None else clip_high
    log_ratio = _log_ratio(logprobs, old_logprobs)  # [B, T]
    token_advantages = torch.broadcast_to(_as_column(advantages), log_ratio.shape)  # [B, T]
    sign = torch.sign(token_advantages)  # [B, T]
    clipped_log_ratio = log_ratio.clamp(-clip_low, upper)  # [B, T]
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped_log_ratio)  # [B, T]
    sequence_ratio = torch.exp(masked_mean_per_row(pessimistic, mask))  # [B]
    sequence_advantage = masked_mean_per_row(token_advantages, mask)  # [B]
    sequence_loss = -sequence_advantage * sequence_ratio  # [B]
    loss = sequence_loss.unsqueeze(-1).expand_as(log_ratio)  # [B, T]
    clipped_low = (log_ratio < -clip_low) & (token_advantages < 0)  # [B, T]
    clipped_high = (log_ratio > upper) & (token_advantages > 0)  # [B, T]
    return loss, clip_metrics(sequence_ratio.unsqueeze(-1).expand_as(log_ratio), clipped_low, clipped_high)


@POLICY_LOSSES.register("dual_clip")
def dual_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    clip_ratio_c: float = 3.0,
) -> tuple[torch.Tensor, Metrics]:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729; verl's clip_ratio_c). [B, T] -> [B, T].

    The clipped surrogate of `grpo_clip_loss`, and for A < 0 the loss is at most -A * clip_ratio_c:
    a token whose ratio has grown far above 1 while its advantage is negative (off-policy data)
    no longer contributes a loss, and a gradient, that grows with the ratio. clip_ratio_c > 1.
    Adds the flag dual_clipped (A < 0 and the bound is active).
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"dual_clip needs clip_ratio_c > 1 (the bound is -A * clip_ratio_c), got {clip_ratio_c}")
    loss, metrics = grpo_clip_loss(logprobs, old_logprobs, advantages, mask, clip_low=clip_low, clip_high=clip_high)
    advantages = _as_column(advantages)  # [B, 1]
    bound = -advantages * clip_ratio_c  # [B, 1], positive where A < 0
    negative = advantages < 0  # [B, 1]
    dual_clipped = negative & (loss > bound)  # [B, T]
    loss = torch.where(negative, torch.minimum(loss, bound), loss)  # [B, T]
    return loss, {**metrics, "dual_clipped": dual_clipped.float()}


# GPG (Chu et al. 2025, arXiv 2504.02546): plain -A * log pi with no ratio and no clip; what makes
# GPG is its advantage estimator (`gpg` in ADVANTAGE_ESTIMATORS), so the loss is REINFORCE's.
POLICY_LOSSES.add("gpg", reinforce_loss)
