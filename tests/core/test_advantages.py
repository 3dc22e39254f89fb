"""Tests for group-relative advantage estimators (GRPO, Dr. GRPO, RLOO, none) and the no-contrast rule."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    compute_rloo_advantages,
    maybe_normalize_advantages,
)


def test_prompt_major_groups_not_transposed():
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])  # prompt 0: all wrong, prompt 1: all right
    advantages = compute_group_advantages(rewards, group_size=3)
    assert torch.equal(advantages, torch.zeros(6))
    # Reshaping the wrong way round, [G, N/G] = [3, 2], mixes prompts: rows [0,0], [0,1], [1,1].
    transposed = rewards.view(3, 2)
    spread = transposed.std(1, unbiased=False, keepdim=True).clamp(min=1e-6)
    wrong = (transposed - transposed.mean(1, keepdim=True)) / spread
    assert wrong.abs().max() == 1.0


def test_group_size_and_equivalent_group_ids_agree():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, generator=generator, dtype=torch.float64)
    group_ids = torch.arange(12) // 4
    by_size = compute_group_advantages(rewards, group_size=4)
    by_ids = compute_group_advantages(rewards, group_ids=group_ids)
    assert torch.allclose(by_size, by_ids, atol=1e-12)
    # Independent naive per-group computation.
    expected = torch.cat([(g - g.mean()) / (g.std(unbiased=False) + 1e-6) for g in rewards.view(3, 4)])
    assert torch.allclose(by_size, expected, atol=1e-12)


def test_shuffled_group_ids_give_the_same_advantages():
    generator = torch.Generator().manual_seed(1)
    rewards = torch.randn(9, generator=generator, dtype=torch.float64)
    group_ids = torch.tensor([7, 7, 7, 3, 3, 3, 5, 5, 5])
    sorted_advantages = compute_group_advantages(rewards, group_ids=group_ids)
    permutation = torch.randperm(9, generator=generator)
    shuffled = compute_group_advantages(rewards[permutation], group_ids=group_ids[permutation])
    assert torch.allclose(shuffled, sorted_advantages[permutation], atol=1e-12)
    assert sorted_advantages.abs().max() > 0.5


def test_groups_without_contrast_give_exact_zeros():
    # Group 0 all equal (0.1 is not exact in binary: naive std is ~1e-9, not 0), group 1 has one
    # member, group 2 is normal.
    rewards = torch.tensor([0.1, 0.1, 0.1, 5.0, 1.0, 0.0])
    group_ids = torch.tensor([0, 0, 0, 1, 2, 2])
    for scale in ("std", "none"):
        for std in ("population", "sample"):
            advantages = compute_group_advantages(rewards, group_ids=group_ids, scale=scale, std=std)
            assert torch.isfinite(advantages).all()
            assert advantages[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
            assert advantages[4] > 0 > advantages[5]
    assert compute_rloo_advantages(rewards, group_ids=group_ids)[:4].tolist() == [0.0] * 4
    # Near-zero spread (float noise) also gives 0 instead of a blown-up noise advantage.
    noisy = torch.tensor([1.0, 1.0 + 1e-9, 1.0 - 1e-9], dtype=torch.float64)
    assert compute_group_advantages(noisy, group_size=3).tolist() == [0.0, 0.0, 0.0]
    # Empty input.
    assert compute_group_advantages(torch.zeros(0), group_size=4).shape == (0,)
    assert compute_group_advantages(torch.zeros(0), group_ids=torch.zeros(0, dtype=torch.long)).shape == (0,)
    assert compute_rloo_advantages(torch.zeros(0), group_size=2).shape == (0,)


def test_population_and_sample_std_by_hand():
    rewards = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    # mean 3, deviations [-2, -1, 0, 3], sum of squares 14.
    population_std, sample_std = math.sqrt(14 / 4), math.sqrt(14 / 3)  # 1.8708, 2.1602
    deviations = torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64)
    population = compute_group_advantages(rewards, group_size=4)
    sample = compute_group_advantages(rewards, group_size=4, std="sample")
    assert torch.allclose(population, deviations / (population_std + 1e-6), atol=1e-12, rtol=0)
    assert torch.allclose(sample, deviations / (sample_std + 1e-6), atol=1e-12, rtol=0)
    assert (population - sample).abs().max() > 0.1  # 3/1.87 = 1.604 vs 3/2.16 = 1.389


def test_eps_is_added_to_std_by_hand():
    rewards = torch.tensor([0.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    # Group [0, 1]: population std 0.5 -> A = +-0.5 / (0.5 + 0.5) = +-0.5 (without eps: +-1).
    advantages = compute_group_advantages(rewards, group_size=2, eps=0.5)
    assert advantages.tolist() == [-0.5, 0.5, 0.0, 0.0]


def test_mean_centered_centres_without_scaling():
    rewards = torch.tensor([1.0, 2.0, 3.0, 6.0, 0.0, 4.0], dtype=torch.float64)
    advantages = ADVANTAGE_ESTIMATORS.get("mean_centered")(rewards, group_size=3)
    # Means 2 and 10/3.
    expected = [-1.0, 0.0, 1.0, 6 - 10 / 3, -10 / 3, 4 - 10 / 3]
    assert torch.allclose(advantages, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_rloo_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0])
    # Leave-one-out baselines: (0+0+3)/3 = 1, (1+0+3)/3 = 4/3, 4/3, (1+0+0)/3 = 1/3.
    expected = torch.tensor([0.0, -4 / 3, -4 / 3, 3 - 1 / 3])
    rloo = compute_rloo_advantages(rewards, group_size=4)
    assert torch.allclose(rloo, expected, atol=1e-6)
    assert torch.allclose(ADVANTAGE_ESTIMATORS.get("rloo")(rewards, group_size=4), expected, atol=1e-6)
    # A baseline that includes the sample itself (the group mean, 1) gives [0, -1, -1, 2].
    assert (rloo - (rewards - rewards.mean())).abs().max() > 0.3


def test_rloo_is_rescaled_mean_centring_on_ragged_groups():
    generator = torch.Generator().manual_seed(2)
    rewards = torch.randn(10, generator=generator, dtype=torch.float64)
    group_ids = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2, 2, 3])  # sizes 3, 2, 4, 1
    sizes = torch.bincount(group_ids).double()[group_ids]
    centred = compute_group_advantages(rewards, group_ids=group_ids, scale="none")
    expected = torch.where(sizes > 1, sizes / (sizes - 1).clamp(min=1) * centred, torch.zeros_like(centred))
    assert torch.allclose(compute_rloo_advantages(rewards, group_ids=group_ids), expected, atol=1e-12)
    assert compute_rloo_advantages(rewards, group_ids=group_ids)[9] == 0.0  # group of one


def test_non_finite_rewards_raise_with_indices():
    with pytest.raises(ValueError, match=r"\[2, 4\]"):
        compute_group_advantages(torch.tensor([0.0, 1.0, float("nan"), 1.0, float("inf"), 0.0]), group_size=3)
    with pytest.raises(ValueError, match=r"\[1\]"):
        compute_rloo_advantages(torch.tensor([0.0, float("-inf")]), group_size=2)


def test_bad_grouping_arguments_raise():
    rewards = torch.zeros(6)
    with pytest.raises(ValueError, match="does not divide"):
        compute_group_advantages(rewards, group_size=4)
    with pytest.raises(ValueError, match="exactly one"):
        compute_group_advantages(rewards)
    with pytest.raises(ValueError, match="exactly one"):
        compute_group_advantages(rewards, group_size=3, group_ids=torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="shape"):
        compute_group_advantages(rewards, group_ids=torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="scale"):
        compute_group_advantages(rewards, group_size=3, scale="max")


def test_registry_and_no_baseline():
    assert set(ADVANTAGE_ESTIMATORS.names()) == {"grpo", "mean_centered", "rloo", "no_baseline", "gae",
                                                 "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
                                                 "opo", "grpo_passk", "gpg"}
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    assert torch.equal(ADVANTAGE_ESTIMATORS.get("no_baseline")(rewards, group_size=2), rewards)
    assert torch.equal(ADVANTAGE_ESTIMATORS.get("no_baseline")(rewards), rewards)
    with pytest.raises(KeyError, match="advantage estimator 'none' was renamed to 'no_baseline'"):
        ADVANTAGE_ESTIMATORS.get("none")
    with pytest.raises(KeyError, match="advantage estimator 'dr_grpo' was renamed to 'mean_centered'"):
        ADVANTAGE_ESTIMATORS.get("dr_grpo")
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, group_size=2, std="sample")
    assert torch.allclose(grpo, compute_group_advantages(rewards, group_size=2, std="sample"))
    with pytest.raises(KeyError, match="gae, gpg, grpo, grpo_passk, mean_centered, no_baseline, opo"):
        ADVANTAGE_ESTIMATORS.get("ppo")
    # One call works for every sequence-level estimator (gae, token-level: tests/core/test_value.py);
    # unknown options are refused.
    # The token-weighted ones read the completion mask, ReMax its greedy rewards (the loop passes both).
    group_ids = torch.tensor([0, 0, 1, 1])
    extra = dict(completion_mask=torch.ones(4, 3), reward_baselines=torch.zeros(4))
    value_based = set(ADVANTAGE_ESTIMATORS.names_where(lambda traits: traits.value_baseline))
    for name in sorted(set(ADVANTAGE_ESTIMATORS.names()) - value_based):
        advantages = ADVANTAGE_ESTIMATORS.get(name)(rewards, group_ids=group_ids, std="sample", eps=1e-6, **extra)
        assert advantages.shape == (4,) and torch.isfinite(advantages).all()
        with pytest.raises(TypeError, match="scale_by"):
            ADVANTAGE_ESTIMATORS.get(name)(rewards, group_ids=group_ids, scale_by="std")


def test_maybe_normalize_advantages():
    advantages = torch.tensor([1.0, 3.0], dtype=torch.float64)
    assert torch.equal(maybe_normalize_advantages(advantages, enabled=False), advantages)
    # mean 2, population std 1 -> [-1, 1].
    normalized = maybe_normalize_advantages(advantages, enabled=True)
    assert torch.allclose(normalized, torch.tensor([-1.0, 1.0], dtype=torch.float64))
    assert maybe_normalize_advantages(torch.full((4,), 2.5), enabled=True).tolist() == [0.0] * 4


def test_mixed_batch_by_hand_with_a_solved_prompt():
    # Prompt 0 solved by every sample; its rewards carry float noise (0.1 + 0.2 != 0.3), which a
    # plain (r - mean) / (std + eps) turns into advantages of ~1e-11 instead of exactly 0.
    rewards = torch.tensor([0.3, 0.1 + 0.2, 0.3, 1.0, 0.0, 0.0], dtype=torch.float64)
    assert rewards[0] != rewards[1]
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, group_size=3)
    # Prompt 1: mean 1/3, population std sqrt(2)/3 = 0.4714 -> [2/3, -1/3, -1/3] / 0.4714.
    std = math.sqrt(2) / 3
    expected = torch.tensor([0.0, 0.0, 0.0] + [c / (std + 1e-6) for c in (2 / 3, -1 / 3, -1 / 3)], dtype=torch.float64)
    assert torch.equal(grpo[:3], torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(grpo, expected, atol=1e-12, rtol=0)
    dr_grpo = ADVANTAGE_ESTIMATORS.get("mean_centered")(rewards, group_size=3)
    assert torch.equal(dr_grpo[:3], torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(dr_grpo[3:], torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=torch.float64), atol=1e-12)
    naive = (rewards[:3] - rewards[:3].mean()) / (rewards[:3].std(unbiased=False) + 1e-6)
    assert (naive != 0).any()
