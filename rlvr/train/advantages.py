"""The advantage stage of an RL iteration: rewards in, advantages out, nothing else touched.

1. A completion no weighted reward component could judge (a non-finite reward) gets a group of
   its own, so its advantage is exactly 0 and it moves no other completion's baseline.
2. The preset's estimator (`algorithm.advantage_estimator`, `algorithm.std`) runs on each
   prompt's group; groups without reward contrast give exactly 0 (`rlvr.core.no_contrast`).
3. Optionally a batch z-score (`algorithm.normalize_advantages`, over every rank's rows) and a
   clip |A| <= `algorithm.advantage_clip`.

Rewards are one per sequence, [N], for the registered estimators; a token-level estimator
(GAE, say) takes per-token rewards [N, T] with the completion mask and returns [N, T], which the
batch and the losses accept as they are.
"""

from __future__ import annotations

import torch

from rlvr.core import get_advantage_estimator, maybe_normalize_advantages
from rlvr.train.distributed import SINGLE, Dist, normalize_advantages_global


def compute_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, algo, dist: Dist = SINGLE,
                       completion_mask: torch.Tensor | None = None) -> torch.Tensor:
    """rewards [N] (NaN: unscorable) or [N, T], group_ids [N] -> advantages shaped like rewards.

    `algo` is the config's algorithm section; `completion_mask` [N, T] is needed for per-token
    rewards (normalization runs over the masked tokens, and the estimator receives it).
    Data-parallel (`dist`): groups never straddle ranks; only the normalization is global.
    """
    per_token = rewards.dim() == 2
    if per_token and (completion_mask is None or completion_mask.shape != rewards.shape):
        raise ValueError(f"per-token rewards {tuple(rewards.shape)} need a completion_mask of the same shape")
    scorable = torch.isfinite(rewards).all(-1) if per_token else torch.isfinite(rewards)  # [N]
    row_scorable = scorable[:, None] if per_token else scorable  # broadcasts over tokens
    unscorable_rows = (~scorable).nonzero().flatten()
    first_free_id = int(group_ids.max()) + 1 if group_ids.numel() else 0
    own_groups = group_ids.clone()  # [N]
    own_groups[unscorable_rows] = first_free_id + torch.arange(unscorable_rows.numel())
    safe_rewards = torch.where(row_scorable, rewards, torch.zeros_like(rewards))
    options = {"std": algo.std} if completion_mask is None else {"std": algo.std, "completion_mask": completion_mask}
    estimator = get_advantage_estimator(algo.advantage_estimator)
    advantages = estimator(safe_rewards, group_ids=own_groups, **options)
    advantages = torch.where(row_scorable, advantages, torch.zeros_like(advantages))
    if algo.normalize_advantages:
        advantages = _normalize(advantages, completion_mask if per_token else None, dist)
    if algo.advantage_clip > 0:
        advantages = advantages.clamp(-algo.advantage_clip, algo.advantage_clip)
    return advantages


def _normalize(advantages: torch.Tensor, completion_mask: torch.Tensor | None, dist: Dist) -> torch.Tensor:
    """Batch z-score over every rank's values; per-token advantages over the masked tokens only (0 elsewhere)."""
    keep = None if completion_mask is None else completion_mask != 0  # [N, T]
    values = advantages if keep is None else advantages[keep]  # [n]
    if dist.enabled:
        values = normalize_advantages_global(dist, values, True)
    else:
        values = maybe_normalize_advantages(values, True)
    if keep is None:
        return values
    return torch.zeros_like(advantages).masked_scatter(keep, values)
