"""More outcome-reward advantage estimators, registered in `ADVANTAGE_ESTIMATORS` under verl's names:
REINFORCE++ and REINFORCE++-baseline, ReMax, OPO, GRPO pass@k and GPG.

Same call as `rlvr.core.advantages`: fn(rewards [N], group_size=None, group_ids=None, **options)
-> advantages [N], one scalar per completion (the reward is one per completion, so verl's
per-token returns with gamma = 1 are that scalar on every token). Options used here:
`completion_mask` [N, T] (token-weighted statistics) and `reward_baselines` [N] (ReMax's greedy
completion's reward: an input ReMax declares in its traits, which the training loop's input provider
makes). As for the other group estimators, groups without reward contrast give exactly 0 (verl
gives a group of one its raw reward instead).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    _check_options,
    _check_rewards,
    _no_contrast_of,
    _group_index,
    _group_statistics,
)
from rlvr.core.groups import NO_CONTRAST_EPS
from rlvr.core.masks import masked_mean_per_row
from rlvr.core.traits import EstimatorTraits
from rlvr.core.value import masked_whiten


def _required(name: str, options: dict[str, Any], key: str, num_samples: int) -> torch.Tensor:
    value = options.get(key)
    if value is None:
        raise ValueError(f"advantage estimator {name!r} needs the option {key!r}")
    value = torch.as_tensor(value)
    if value.shape[0] != num_samples:
        raise ValueError(f"{name}: {key} has {value.shape[0]} rows, the rewards {num_samples}")
    return value


def token_weighted_whiten(values: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """z-score of per-completion values over the batch's completion tokens (each row weighs its length). [N] -> [N].

    Every token of row i carries values[i]; `masked_whiten` over those tokens (population std);
    a row without tokens gets 0.
    """
    token_values = values.unsqueeze(-1).expand(completion_mask.shape).to(torch.promote_types(values.dtype,
                                                                                              torch.float32))
    return masked_mean_per_row(masked_whiten(token_values, completion_mask), completion_mask)  # [N]


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
def reinforce_plus_plus_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """REINFORCE++ (Hu et al. 2025, arXiv 2501.03262): the reward whitened over the batch's tokens.

    A_i = (r_i - mu) / sigma with mu, sigma over all completion tokens (a long completion counts
    once per token), no group baseline. Options: completion_mask (required); groups are ignored.
    """
    _check_options("reinforce_plus_plus", options)
    rewards = _check_rewards(rewards)
    mask = _required("reinforce_plus_plus", options, "completion_mask", rewards.shape[0])
    return token_weighted_whiten(rewards, mask)  # [N]


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline", traits=EstimatorTraits(group_baseline=True))
def reinforce_plus_plus_baseline_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262): r_i - mean_g, then whitened over the batch's tokens. [N] -> [N].

    The group mean removes the prompt's difficulty, the token-level whitening sets the scale
    (instead of GRPO's per-group std). Options: completion_mask (required), eps. Groups without
    contrast give 0 (they still count, at 0, in the whitening statistics).
    """
    _check_options("reinforce_plus_plus_baseline", options)
    rewards = _check_rewards(rewards)
    mask = _required("reinforce_plus_plus_baseline", options, "completion_mask", rewards.shape[0])
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    no_contrast_row = _no_contrast_of(stats, options.get("eps", NO_CONTRAST_EPS))[index]  # [N]
    centred = torch.where(no_contrast_row, torch.zeros_like(rewards), rewards - stats["means"][index])  # [N]
    return torch.where(no_contrast_row, torch.zeros_like(rewards), token_weighted_whiten(centred, mask))


@ADVANTAGE_ESTIMATORS.register("remax", traits=EstimatorTraits(inputs=("reward_baselines",)))
def remax_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """ReMax (Li et al. 2023, arXiv 2310.10505): r_i minus the reward of the prompt's greedy completion. [N] -> [N].

    Options: reward_baselines [N] (required: the training loop decodes one greedy completion per
    prompt and scores it); groups are ignored, so group_size 1 works.
    """
    _check_options("remax", options)
    rewards = _check_rewards(rewards)
    baselines = _check_rewards(_required("remax", options, "reward_baselines", rewards.shape[0]))
    return rewards - baselines.to(rewards.dtype)  # [N]


@ADVANTAGE_ESTIMATORS.register("opo", traits=EstimatorTraits(group_baseline=True))
def opo_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """OPO (Hao et al. 2025, arXiv 2505.23585): r_i minus the length-weighted group mean. [N] -> [N].

    b_g = sum_j L_j r_j / sum_j L_j over the group (L_j: completion tokens), the optimal
    baseline when gradient norms grow with length. Options: completion_mask (required), eps.
    """
    _check_options("opo", options)
    rewards = _check_rewards(rewards)
    mask = _required("opo", options, "completion_mask", rewards.shape[0])
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    lengths = (mask != 0).sum(-1).to(rewards.dtype)  # [N]
    zeros = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)  # [G]
    weighted = zeros.index_add(0, index, lengths * rewards)  # [G]
    tokens = zeros.index_add(0, index, lengths)  # [G]
    baseline = torch.where(tokens > 0, weighted / tokens.clamp(min=1), stats["means"])  # [G]
    advantages = rewards - baseline[index]  # [N]
    no_contrast_row = _no_contrast_of(stats, options.get("eps", NO_CONTRAST_EPS))[index]  # [N]
    return torch.where(no_contrast_row, torch.zeros_like(advantages), advantages)


@ADVANTAGE_ESTIMATORS.register("grpo_passk", traits=EstimatorTraits(group_baseline=True))
def grpo_passk_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """Pass@k training (Chen et al. 2025, arXiv 2503.19595 as verl cites it): only the group's best counts. [N] -> [N].

    The single best completion of a group gets (r_max - r_second) / (std_g + eps), everyone else
    0; a tie for the best gives the group 0. std_g as `grpo` (option std: population or sample;
    verl uses the sample std). Options: std, eps. A group of one gives 0.
    """
    _check_options("grpo_passk", options)
    rewards = _check_rewards(rewards)
    eps = options.get("eps", NO_CONTRAST_EPS)
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    sample_std = options.get("std", "population") == "sample"
    advantages = torch.zeros_like(rewards)  # [N]
    for group in range(num_groups):
        rows = (index == group).nonzero().flatten()  # [n_g]
        if rows.numel() < 2:
            continue
        top = torch.topk(rewards[rows], 2)
        gap = top.values[0] - top.values[1]
        if gap <= 0:
            continue
        degrees = rows.numel() - 1 if sample_std else rows.numel()
        std = (stats["squared_deviations"][group] / degrees).sqrt()
        advantages[rows[top.indices[0]]] = gap / (std + eps)
    return advantages


@ADVANTAGE_ESTIMATORS.register("gpg", traits=EstimatorTraits(group_baseline=True))
def gpg_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """GPG (Chu et al. 2025, arXiv 2504.02546): alpha * (r_i - mean_g), no std. [N] -> [N].

    alpha = N / (number of non-zero rewards in the batch, at least 1), verl's reading of GPG's
    correction for the share of the batch that carries signal (f_norm = 1). Options: eps.
    """
    _check_options("gpg", options)
    rewards = _check_rewards(rewards)
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    alpha = rewards.shape[0] / (rewards != 0).sum().clamp(min=1).to(rewards.dtype)  # scalar
    advantages = alpha * (rewards - stats["means"][index])  # [N]
    no_contrast_row = _no_contrast_of(stats, options.get("eps", NO_CONTRAST_EPS))[index]  # [N]
    return torch.where(no_contrast_row, torch.zeros_like(advantages), advantages)
