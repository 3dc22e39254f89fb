"""The sampler/trainer log-prob gap and truncated importance sampling, against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import sampler_gap, tis_weights


def test_tis_weight_is_the_trainer_over_sampler_ratio_truncated_at_the_cap():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])  # trainer (old policy) log-probs
    sampler = torch.tensor([[-1.0, -1.5, -2.0, -0.1]])
    weights = tis_weights(old, sampler, cap=2.0)
    # exp(0) = 1; exp(-0.5) = 0.6065; exp(1.5) = 4.48 -> capped at 2; exp(-2.9) = 0.0550 (not truncated from below)
    expected = torch.tensor([[1.0, math.exp(-0.5), 2.0, math.exp(-2.9)]])
    assert torch.allclose(weights, expected, atol=1e-6)
    # The reversed ratio (sampler over trainer) would give exp(0.5) = 1.65 for the second token.
    assert abs(float(weights[0, 1]) - math.exp(0.5)) > 1.0
    assert float(tis_weights(old, sampler, cap=10.0)[0, 2]) == pytest.approx(math.exp(1.5), rel=1e-6)


def test_tis_weights_carry_no_gradient_and_refuse_a_cap_that_is_not_positive():
    old = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    weights = tis_weights(old, torch.tensor([[-1.5, -1.0]]), cap=2.0)
    assert not weights.requires_grad
    assert float(tis_weights(torch.tensor([[0.0]]), torch.tensor([[-200.0]]), cap=3.0)) == 3.0  # exp overflow: cap
    with pytest.raises(ValueError, match="cap must be > 0"):
        tis_weights(old, old, cap=0.0)


def test_sampler_gap_is_the_absolute_difference_and_k3_of_the_sampler_against_the_trainer():
    trainer = torch.tensor([[-1.0, -2.0, -0.5]])
    sampler = torch.tensor([[-1.0, -1.5, -1.5]])
    gap = sampler_gap(trainer, sampler)
    assert torch.allclose(gap.abs_diff, torch.tensor([[0.0, 0.5, 1.0]]))
    # k3 with log r = logp_trainer - logp_sampler: r - 1 - log r. Token 2: log r = -0.5 -> e^-0.5 - 1 + 0.5 = 0.1065;
    # token 3: log r = 1 -> e - 2 = 0.7183. The swapped direction gives e^0.5 - 1.5 = 0.1487 and e^-1 = 0.3679.
    expected = torch.tensor([[0.0, math.exp(-0.5) - 0.5, math.e - 2.0]])
    assert torch.allclose(gap.kl, expected, atol=1e-6)
    assert bool((gap.kl >= 0).all())
