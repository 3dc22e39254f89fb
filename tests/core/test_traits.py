"""Traits declared where an estimator or a loss is registered (`rlvr.core.traits`), and the registry that keeps them.

Each trait a consumer relies on is checked against what the registered function does: an estimator
declaring `centring` gives groups that sum to 0, a loss declaring `sequence_level` gives every token of a
row the same loss, and an undeclared one is shown to differ on the same input.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.core import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, EstimatorTraits, LossTraits
from rlvr.core.advantages import estimator_options
from rlvr.registry import Registry


def test_a_registry_keeps_declared_traits_and_gives_the_default_otherwise():
    registry: Registry[int] = Registry("widget", traits=LossTraits())
    registry.add("plain", 1)
    registry.add("whole", 2, LossTraits(sequence_level=True))

    @registry.register("decorated", traits=LossTraits(sequence_level=True))
    def decorated():
        return 3

    assert registry.traits("plain") == LossTraits() and registry.traits("whole").sequence_level
    assert registry.names_where(lambda traits: traits.sequence_level) == ["decorated", "whole"]
    with pytest.raises(TypeError, match="widget 'odd': traits must be a LossTraits, got EstimatorTraits"):
        registry.add("odd", 4, EstimatorTraits())
    assert "odd" not in registry
    registry.remove("whole")
    registry.add("whole", 5)  # registered again without traits: the old ones are gone
    assert registry.traits("whole") == LossTraits()
    registry.rename("entire", "whole")
    with pytest.raises(KeyError, match="widget 'entire' was renamed to 'whole'"):
        registry.traits("entire")
    with pytest.raises(KeyError, match="unknown widget 'nope'.*valid choices: decorated, plain, whole"):
        registry.traits("nope")
    bare: Registry[int] = Registry("bare")  # a registry without traits answers None
    bare.add("one", 1)
    assert bare.traits("one") is None


def test_the_declared_estimator_traits():
    traits = ADVANTAGE_ESTIMATORS.traits
    assert ADVANTAGE_ESTIMATORS.names_where(lambda t: t.group_baseline) == [
        "gpg", "grpo", "grpo_passk", "mean_centered", "opo", "reinforce_plus_plus_baseline", "rloo"]
    assert ADVANTAGE_ESTIMATORS.names_where(lambda t: t.value_baseline) == ["gae"]
    assert ADVANTAGE_ESTIMATORS.names_where(lambda t: t.centring) == ["grpo", "mean_centered", "rloo"]
    assert ADVANTAGE_ESTIMATORS.names_where(lambda t: t.inputs) == ["remax"]
    assert traits("remax").inputs == ("reward_baselines",) and traits("no_baseline") == EstimatorTraits()
    # A declared input is an option every estimator accepts (and ignores when it means nothing to it),
    # listed after the common ones as before.
    assert estimator_options() == ("std", "eps", "completion_mask", "values", "gamma", "lam", "reward_baselines")
    with pytest.raises(TypeError, match=r"valid: \['std', 'eps', 'completion_mask', 'values', 'gamma', 'lam', "
                                        r"'reward_baselines'\]"):
        ADVANTAGE_ESTIMATORS.get("grpo")(torch.zeros(2), group_size=2, scale_by="std")


def test_estimators_declaring_centring_give_groups_that_sum_to_zero():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=generator)  # [12]: 3 groups of 4, every group with contrast
    group_ids = torch.arange(12) // 4
    extra = dict(completion_mask=torch.ones(12, 3), reward_baselines=torch.rand(12, generator=generator))
    sums = {}
    for name in ADVANTAGE_ESTIMATORS.names_where(lambda t: not t.value_baseline):
        advantages = ADVANTAGE_ESTIMATORS.get(name)(rewards, group_ids=group_ids, **extra)  # [12]
        sums[name] = torch.zeros(3).index_add(0, group_ids, advantages).abs().max().item()
    for name in ADVANTAGE_ESTIMATORS.names_where(lambda t: t.centring):
        assert sums[name] < 1e-5, name
    # The check can fail: without a group baseline (or with REINFORCE++'s batch whitening) the sums are not 0.
    for name in ("no_baseline", "remax", "reinforce_plus_plus", "grpo_passk"):
        assert sums[name] > 1e-2, name


def test_losses_declaring_sequence_level_give_every_token_of_a_row_the_same_loss():
    generator = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(3, 5, generator=generator, dtype=torch.float64)  # [3, 5]
    old_logprobs = logprobs + 0.05 * torch.randn(3, 5, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.float64)
    declared = POLICY_LOSSES.names_where(lambda traits: traits.sequence_level)
    assert declared == ["geo_mean", "gspo"]
    for name in declared:
        loss, _ = POLICY_LOSSES.get(name)(logprobs, old_logprobs, advantages, mask)  # [3, 5]
        assert torch.allclose(loss, loss[:, :1].expand_as(loss)), name
    # A token-level loss differs from token to token on the same input.
    loss, _ = POLICY_LOSSES.get("grpo_clip")(logprobs, old_logprobs, advantages, mask)
    assert not torch.allclose(loss, loss[:, :1].expand_as(loss))
    assert POLICY_LOSSES.traits("grpo_clip") == LossTraits()
