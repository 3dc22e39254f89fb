"""The advantage stage of an RL iteration: rewards in, advantages out, nothing else touched.

1. A completion no weighted reward component could judge (a non-finite reward) gets a group of
   its own, so its advantage is exactly 0 and it moves no other completion's baseline.
2. The preset's estimator (`algorithm.advantage_estimator`, `algorithm.std`) runs on each
   prompt's group, with the extra inputs it declares (`EstimatorTraits.inputs`, made by
   `rlvr.training.estimator_inputs`; a row where one is not finite is unscorable, as in 1.);
   groups without reward contrast give exactly 0 (`rlvr.core.no_contrast`).
3. Optionally a batch z-score (`algorithm.normalize_advantages`, over every rank's rows) and a
   clip |A| <= `algorithm.advantage_clip`.

Rewards are one per sequence, [N], for the group estimators. PPO's `gae` takes per-token
rewards [N, T] (the reward on the last completion token, minus the KL penalty when
`algorithm.kl_in_reward` > 0) with the completion mask and the sampling-time values, and returns
[N, T], which the batch and the losses accept as they are; `with_advantages` also stores the GAE
returns, the value targets. Normalization then whitens over the completion tokens.
"""

from __future__ import annotations

import torch

from rlvr.core import (
    ADVANTAGE_ESTIMATORS,
    RolloutBatch,
    gae_advantages,
    masked_whiten,
    maybe_normalize_advantages,
    per_token_rewards,
)
from rlvr.parallel.distributed import SINGLE, Dist, normalize_advantages_global


def with_advantages(batch: RolloutBatch, rewards: torch.Tensor, algo, dist: Dist = SINGLE,
                    **inputs: torch.Tensor) -> RolloutBatch:
    """A copy of `batch` with its advantages; with PPO's old values also the returns. rewards [N], NaN: unscorable.

    Without old values: one advantage per sequence from `rewards`, the groups and the completion
    mask (token-weighted estimators), and the estimator's declared `inputs`, each [N] (ReMax's
    `reward_baselines`: the greedy completion's reward, NaN where it could not be judged: that row
    gets 0). With them: the per-token rewards go through GAE against the old values; returns
    [N, T] = GAE advantages + old values before any normalization, and an unscorable row keeps its
    old values as targets (no value error to learn from).
    """
    if batch.old_values is None:
        return batch.replace(advantages=compute_advantages(rewards, batch.group_ids, algo, dist,
                                                           completion_mask=batch.completion_mask, **inputs))
    mask = batch.completion_mask  # [N, T]
    token_rewards = per_token_rewards(rewards, mask, kl_coef=algo.kl_in_reward, logprobs=batch.old_logprobs,
                                      ref_logprobs=batch.ref_logprobs)  # [N, T], NaN on an unscorable row's last token
    advantages = compute_advantages(token_rewards, batch.group_ids, algo, dist, completion_mask=mask,
                                    values=batch.old_values, **inputs)  # [N, T]
    scorable = torch.isfinite(token_rewards).all(-1, keepdim=True)  # [N, 1]
    safe_rewards = torch.where(scorable, token_rewards, torch.zeros_like(token_rewards))
    _, returns = gae_advantages(safe_rewards, batch.old_values, mask, algo.gae_gamma, algo.gae_lambda)  # [N, T]
    returns = torch.where(scorable, returns, batch.old_values * mask)
    return batch.replace(advantages=advantages, returns=returns)


def compute_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, algo, dist: Dist = SINGLE,
                       completion_mask: torch.Tensor | None = None,
                       values: torch.Tensor | None = None,
                       **inputs: torch.Tensor) -> torch.Tensor:
    """rewards [N] (NaN: unscorable) or [N, T], group_ids [N] -> advantages shaped like rewards.

    `algo` is the config's algorithm section; `completion_mask` [N, T] is needed for per-token
    rewards (normalization runs over the masked tokens, and the estimator receives it) and for the
    token-weighted sequence estimators (REINFORCE++, OPO; unscorable rows are left out of it);
    `values` [N, T] are a value model's, for GAE (with `algo.gae_gamma` and `algo.gae_lambda`);
    `inputs` are the estimator's declared extra inputs, each [N] (ReMax's `reward_baselines`, its greedy
    rewards): a row where one is not finite is unscorable, and the estimator sees 0 there.
    Data-parallel (`dist`): groups never straddle ranks; only the normalization is global.
    """
    per_token = rewards.dim() == 2
    if per_token and (completion_mask is None or completion_mask.shape != rewards.shape):
        raise ValueError(f"per-token rewards {tuple(rewards.shape)} need a completion_mask of the same shape")
    scorable = torch.isfinite(rewards).all(-1) if per_token else torch.isfinite(rewards)  # [N]
    for value in inputs.values():
        scorable = scorable & torch.isfinite(value)  # [N]
    row_scorable = scorable[:, None] if per_token else scorable  # broadcasts over tokens
    unscorable_rows = (~scorable).nonzero().flatten()
    first_free_id = int(group_ids.max()) + 1 if group_ids.numel() else 0
    own_groups = group_ids.clone()  # [N]
    own_groups[unscorable_rows] = first_free_id + torch.arange(unscorable_rows.numel())
    safe_rewards = torch.where(row_scorable, rewards, torch.zeros_like(rewards))
    options = {"std": algo.std}
    if completion_mask is not None:
        options["completion_mask"] = completion_mask if per_token else completion_mask * scorable[:, None]
    for name, value in inputs.items():
        options[name] = torch.where(scorable, value, torch.zeros_like(value))  # [N]
    if values is not None:
        options.update(values=values, gamma=algo.gae_gamma, lam=algo.gae_lambda)
    estimator = ADVANTAGE_ESTIMATORS.get(algo.advantage_estimator)
    advantages = estimator(safe_rewards, group_ids=own_groups, **options)
    advantages = torch.where(row_scorable, advantages, torch.zeros_like(advantages))
    if algo.normalize_advantages:
        advantages = _normalize(advantages, completion_mask if per_token else None, dist)
    if algo.advantage_clip > 0:
        advantages = advantages.clamp(-algo.advantage_clip, algo.advantage_clip)
    return advantages


def _normalize(advantages: torch.Tensor, completion_mask: torch.Tensor | None, dist: Dist) -> torch.Tensor:
    """Batch z-score over every rank's values; per-token advantages over the masked tokens only (0 elsewhere)."""
    if not dist.enabled:
        if completion_mask is None:
            return maybe_normalize_advantages(advantages, True)  # [N]
        return masked_whiten(advantages, completion_mask)  # [N, T]
    keep = None if completion_mask is None else completion_mask != 0  # [N, T]
    values = normalize_advantages_global(dist, advantages if keep is None else advantages[keep], True)  # [n]
    if keep is None:
        return values
    return torch.zeros_like(advantages).masked_scatter(keep, values)
