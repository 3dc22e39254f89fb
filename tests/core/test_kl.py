"""Tests for the KL(policy || reference) estimators k1, k2, k3."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import KL_ESTIMATORS, approx_kl, kl_per_token


def _exact_kl(p: torch.Tensor, q: torch.Tensor) -> float:
    return float((p * (p / q).log()).sum())


def _sample_logprobs(policy: torch.Tensor, reference: torch.Tensor, num_draws: int, seed: int):
    """Draw tokens from the policy; return (log pi(x), log pi_ref(x)) as [1, num_draws]."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.multinomial(policy, num_draws, replacement=True, generator=generator)
    return policy.log()[tokens].unsqueeze(0), reference.log()[tokens].unsqueeze(0)


def test_k3_stays_nonnegative_where_k1_goes_negative():
    generator = torch.Generator().manual_seed(0)
    logp_new = torch.randn(8, 16, generator=generator, dtype=torch.float64) - 2.0
    logp_ref = logp_new + 0.5 * torch.randn(8, 16, generator=generator, dtype=torch.float64)
    k1 = kl_per_token(logp_new, logp_ref, "k1")
    k2 = kl_per_token(logp_new, logp_ref, "k2")
    k3 = kl_per_token(logp_new, logp_ref, "k3")
    assert (k3 >= 0).all() and (k2 >= 0).all()
    assert (k1 < 0).sum() > 20  # the naive estimator is negative on many of the same samples
    assert (k3 > 0).sum() > 100


def test_all_estimators_zero_when_policy_equals_reference():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.125], [0.9, 0.05, 0.01]], dtype=torch.float64))
    mask = torch.ones_like(logp)
    for name in ("k1", "k2", "k3"):
        assert torch.equal(kl_per_token(logp, logp, name), torch.zeros_like(logp))
        assert approx_kl(logp, logp, mask, name).item() == 0.0


def test_estimators_by_hand():
    # pi(x) = 0.5, pi_ref(x) = 0.25: d = log(0.25 / 0.5) = -log 2.
    logp_new = torch.full((1, 2), math.log(0.5), dtype=torch.float64)
    logp_ref = torch.full((1, 2), math.log(0.25), dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0]])
    log2 = math.log(2.0)
    expected = {"k1": log2, "k2": log2**2 / 2, "k3": 0.5 + log2 - 1.0}  # k3 = e^d - d - 1 = 0.1931
    for name, value in expected.items():
        assert approx_kl(logp_new, logp_ref, mask, name).item() == pytest.approx(value, abs=1e-12)
    # With the ratio the wrong way round (d = +log 2), k3 would be 2 - log 2 - 1 = 0.3069.
    assert abs((2.0 - log2 - 1.0) - expected["k3"]) > 0.1


def test_k3_grows_with_divergence():
    logp_new = torch.zeros(1, 1, dtype=torch.float64)
    gaps = (0.1, 0.5, 1, 2, 4)
    values = [kl_per_token(logp_new, torch.full((1, 1), -gap, dtype=torch.float64)).item() for gap in gaps]
    assert all(later > earlier for earlier, later in zip(values, values[1:]))
    # k3 at d = -4: e^-4 + 4 - 1.
    assert values[-1] == pytest.approx(math.exp(-4) + 3.0, abs=1e-12)


def test_masked_garbage_changes_nothing():
    logp_new = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.1, 0.3]], dtype=torch.float64))
    logp_ref = torch.log(torch.tensor([[0.4, 0.4, 0.2], [0.2, 0.5, 0.3]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    clean = {name: approx_kl(logp_new, logp_ref, mask, name) for name in ("k1", "k2", "k3")}
    dirty_new, dirty_ref = logp_new.clone(), logp_ref.clone()
    dirty_new[0, 2], dirty_ref[0, 2] = float("nan"), float("inf")
    dirty_new[1, 1], dirty_ref[1, 1] = -1e30, 1e30
    dirty_new[1, 2], dirty_ref[1, 2] = float("-inf"), float("nan")
    dirty_new.requires_grad_(True)
    for name, value in clean.items():
        dirty = approx_kl(dirty_new, dirty_ref, mask, name)
        assert torch.isfinite(dirty) and dirty.item() == pytest.approx(value.item(), abs=1e-15)
    approx_kl(dirty_new, dirty_ref, mask, "k3").backward()
    assert torch.isfinite(dirty_new.grad).all()
    assert (dirty_new.grad[mask == 0] == 0).all()
    # Masked mean over the three real tokens, k3 by hand: d = log(ref/new).
    ratios = [0.4 / 0.5, 0.4 / 0.3, 0.2 / 0.6]
    by_hand = sum(r - math.log(r) - 1 for r in ratios) / 3
    assert clean["k3"].item() == pytest.approx(by_hand, abs=1e-12)


def test_log_ratio_is_clamped_before_exp():
    logp_new = torch.zeros(1, 2, dtype=torch.float64)
    logp_ref = torch.tensor([[-100.0, 100.0]], dtype=torch.float64)
    k3 = kl_per_token(logp_new, logp_ref)
    # d clamped to -20: e^-20 + 20 - 1; d clamped to +20: e^20 - 20 - 1.
    assert k3[0, 0].item() == pytest.approx(math.exp(-20) + 19.0, rel=1e-12)
    assert k3[0, 1].item() == pytest.approx(math.exp(20) - 21.0, rel=1e-12)
    # Unclamped values would be 99 and e^100 - 101.
    assert abs(99.0 - k3[0, 0].item()) > 50
    # The clip is a parameter: with 5, d = -5 gives e^-5 + 4.
    assert kl_per_token(logp_new, logp_ref, log_ratio_clip=5.0)[0, 0].item() == pytest.approx(math.exp(-5) + 4.0)


def test_extreme_log_ratio_stays_finite_in_fp32():
    logp_new = torch.tensor([[-1000.0, -0.1]])
    logp_ref = torch.tensor([[0.0, -0.1]])
    mask = torch.ones(1, 2)
    kl = approx_kl(logp_new, logp_ref, mask)
    assert torch.isfinite(kl)
    # (e^20 - 20 - 1 + 0) / 2 in fp32.
    assert kl.item() == pytest.approx((math.exp(20) - 21.0) / 2, rel=1e-5)
    assert not torch.isfinite(torch.exp(logp_ref - logp_new)).all()  # what an unclamped exp gives


def test_sample_means_match_forward_kl_not_reverse():
    # pi = policy (tokens are drawn from it), pi_ref = reference.
    policy = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    reference = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    forward, reverse = _exact_kl(policy, reference), _exact_kl(reference, policy)
    assert forward == pytest.approx(0.12567, abs=1e-4) and reverse == pytest.approx(0.16135, abs=1e-4)
    logp_new, logp_ref = _sample_logprobs(policy, reference, 400_000, seed=1)
    mask = torch.ones_like(logp_new)
    for name in ("k1", "k3"):  # unbiased estimators; standard errors ~7e-4 and ~4e-4 here
        estimate = approx_kl(logp_new, logp_ref, mask, name).item()
        assert estimate == pytest.approx(forward, abs=4e-3), name
        assert abs(estimate - reverse) > 0.03, name


def test_k2_sample_mean_is_its_second_order_expectation():
    # k2 is biased: E_pi[d^2 / 2] agrees with KL only to second order in d, and at that order
    # KL(pi || ref) and KL(ref || pi) agree too, so k2 cannot tell them apart. Check it against
    # its own closed form, and that it is close to KL for nearby distributions.
    policy = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    reference = torch.tensor([0.55, 0.3, 0.15], dtype=torch.float64)
    log_ratio = (reference / policy).log()
    closed_form = float((policy * log_ratio.square() / 2).sum())
    logp_new, logp_ref = _sample_logprobs(policy, reference, 400_000, seed=2)
    estimate = approx_kl(logp_new, logp_ref, torch.ones_like(logp_new), "k2").item()
    assert estimate == pytest.approx(closed_form, abs=2e-4)
    assert estimate == pytest.approx(_exact_kl(policy, reference), abs=1.5e-3)


def test_unknown_estimator_lists_valid_names():
    logp = torch.zeros(1, 1)
    with pytest.raises(KeyError, match="k1, k2, k3"):
        kl_per_token(logp, logp, "k4")
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]
