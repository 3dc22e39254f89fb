"""When a group of completions carries no learning signal: one definition for the whole loop.

A group is the set of completions sampled for one prompt. It has no reward contrast when fewer
than two of its rewards are finite, or when its finite rewards spread by no more than `eps`
relative to their scale: max - min <= eps * max(|max|, |min|, 1). Below a scale of 1 this is an
absolute tolerance of `eps`; for large rewards it is relative, so float noise in a reward of 1e4
is not mistaken for contrast. DAPO's dynamic sampling drops such groups, the rollout statistics
count them (`frac_no_contrast_groups`) and every advantage estimator gives them exactly 0, all
through `no_contrast`, so the three always agree.

Which groups DAPO's dynamic sampling keeps is a named rule (`DYNAMIC_SAMPLING_FILTERS`): `reward`
keeps a group with reward contrast (the rule above); `correctness` keeps a group whose completions
are neither all correct nor all wrong (the policy-gradient homework's filter: it drops a group that
differs only in a format bonus too, so it samples more).
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.registry import Registry

NO_CONTRAST_EPS = 1e-6  # relative spread below which a group's rewards count as all equal


def no_contrast(counts: torch.Tensor, highest: torch.Tensor, lowest: torch.Tensor,
                eps: float = NO_CONTRAST_EPS) -> torch.Tensor:
    """Per group: fewer than 2 members, or max - min within eps of the reward scale. [G] x3 -> bool [G].

    counts: finite rewards per group; highest / lowest: their max and min (anything where counts < 2).
    """
    scale = torch.maximum(highest.abs(), lowest.abs()).clamp(min=1.0)  # [G]
    no_spread = (highest - lowest) <= eps * scale  # [G]
    return (counts < 2) | no_spread  # [G]


def no_contrast_groups(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int,
                       eps: float = NO_CONTRAST_EPS) -> torch.Tensor:
    """Which groups have no reward contrast. rewards [N] (NaN = unscorable, ignored), group_index [N] -> bool [G].

    group_index holds each reward's group in [0, num_groups).
    """
    rewards = rewards.float() if not rewards.is_floating_point() else rewards
    finite = torch.isfinite(rewards)  # [N]
    zeros = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)  # [G]
    counts = zeros.index_add(0, group_index, finite.to(rewards.dtype))  # [G]
    inf = torch.tensor(float("inf"), dtype=rewards.dtype, device=rewards.device)
    highest = zeros.scatter_reduce(0, group_index, torch.where(finite, rewards, -inf), reduce="amax",
                                   include_self=False)  # [G]
    lowest = zeros.scatter_reduce(0, group_index, torch.where(finite, rewards, inf), reduce="amin",
                                  include_self=False)  # [G]
    return no_contrast(counts, highest, lowest, eps)


def no_contrast_rows(rewards: torch.Tensor, eps: float = NO_CONTRAST_EPS) -> torch.Tensor:
    """`no_contrast_groups` for prompt-major groups laid out as rows. rewards [B, G] -> bool [B]."""
    num_groups, group_size = rewards.shape
    index = torch.arange(num_groups, device=rewards.device).repeat_interleave(group_size)  # [B*G]
    return no_contrast_groups(rewards.reshape(-1), index, num_groups, eps)


# (rewards [G] float, NaN = unscorable; correct [G] bool) -> whether dynamic sampling keeps the group
GroupFilter = Callable[[torch.Tensor, torch.Tensor], bool]
DYNAMIC_SAMPLING_FILTERS: Registry[GroupFilter] = Registry("dynamic sampling filter")


@DYNAMIC_SAMPLING_FILTERS.register("reward")
def reward_contrast(rewards: torch.Tensor, correct: torch.Tensor) -> bool:
    """Keep a group whose rewards [G] have contrast (`no_contrast_rows`); correctness is not read."""
    return not bool(no_contrast_rows(rewards[None])[0])


@DYNAMIC_SAMPLING_FILTERS.register("correctness")
def correctness_contrast(rewards: torch.Tensor, correct: torch.Tensor) -> bool:
    """Keep a group with at least one correct and one not correct completion, correct [G] bool (an unjudgeable
    completion is not correct); rewards are not read."""
    return bool(correct.any()) and not bool(correct.all())
