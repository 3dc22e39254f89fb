"""The sampler/trainer log-prob gap and truncated importance sampling, against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import SAMPLER_CORRECTIONS, mismatch_ratio_out, sampler_gap, tis_weights


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


# ----------------------------------------------------------------------------- the corrections, by hand

OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-1.0, -1.0, 0.0, 0.0]])  # trainer (old policy) log-probs
SAMPLER = torch.tensor([[-1.0, -1.5, -2.0, -0.1], [-1.2, -0.9, 5.0, -9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])  # row 1: two tokens, then padding garbage


def test_each_correction_gives_its_weights_worked_out_by_hand():
    # Token log ratios, row 0: 0, -0.5, 1.5, -2.9; row 1: 0.2, -0.1 (then garbage under the mask).
    token = SAMPLER_CORRECTIONS.get("tis_token")(OLD, SAMPLER, MASK, 2.0)
    assert torch.allclose(token[0], torch.tensor([1.0, math.exp(-0.5), 2.0, math.exp(-2.9)]), atol=1e-6)
    # tis_sequence: row 0 sum = -1.9 -> e^-1.9 = 0.1496 on every token; row 1 sum = 0.1 -> e^0.1 = 1.105,
    # 0 on its padding (the garbage 5.0 / -9.0 would give e^14.1 capped at 2).
    sequence = SAMPLER_CORRECTIONS.get("tis_sequence")(OLD, SAMPLER, MASK, 2.0)
    assert torch.allclose(sequence, torch.tensor([[math.exp(-1.9)] * 4, [math.exp(0.1)] * 2 + [0.0, 0.0]]), atol=1e-6)


def test_the_masks_keep_or_drop_by_the_band_and_never_read_padding():
    # mask_token, band [1/2, 2]: ratios 1, 0.61, 4.48, 0.055 -> 1, 1, 0, 0.
    masked = SAMPLER_CORRECTIONS.get("mask_token")(OLD, SAMPLER, MASK, 2.0)
    assert masked[0].tolist() == [1.0, 1.0, 0.0, 0.0] and masked[1, :2].tolist() == [1.0, 1.0]
    # mask_sequence: geometric means e^(-1.9/4) = 0.62 (kept at C = 2, dropped at C = 1.5: band [0.67, 1.5])
    # and e^(0.1/2) = 1.05 (kept at both).
    kept = SAMPLER_CORRECTIONS.get("mask_sequence")(OLD, SAMPLER, MASK, 2.0)
    assert kept.tolist() == [[1.0] * 4, [1.0, 1.0, 0.0, 0.0]]
    tight = SAMPLER_CORRECTIONS.get("mask_sequence")(OLD, SAMPLER, MASK, 1.5)
    assert tight.tolist() == [[0.0] * 4, [1.0, 1.0, 0.0, 0.0]]
    # A product over row 0 (e^-1.9 = 0.15) would drop it even at C = 2; the geometric mean keeps it. Row 1's
    # padding garbage (log ratios -5 and 9) would make its mean 2.05 (ratio 7.8): dropped if it were read.
    assert math.exp(-1.9) < 0.5


def test_every_correction_is_detached_and_refuses_a_cap_that_is_not_positive():
    for name in SAMPLER_CORRECTIONS.names():
        weights = SAMPLER_CORRECTIONS.get(name)(OLD.clone().requires_grad_(), SAMPLER, MASK, 2.0)
        assert not weights.requires_grad and weights.shape == OLD.shape
        with pytest.raises(ValueError, match="cap must be > 0"):
            SAMPLER_CORRECTIONS.get(name)(OLD, SAMPLER, MASK, 0.0)
    with pytest.raises(KeyError, match="mask_sequence, mask_token, tis_sequence, tis_token"):
        SAMPLER_CORRECTIONS.get("tis")


def test_the_mismatch_share_counts_tokens_whose_ratio_leaves_half_to_double():
    trainer = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    sampler = torch.tensor([[-0.6, 0.6, -0.8, 0.8]])  # ratios e^0.6 = 1.82, 0.55, 2.23, 0.45
    assert mismatch_ratio_out(trainer, sampler).tolist() == [[0.0, 0.0, 1.0, 1.0]]


# ----------------------------------------------------------------------------- unbiasedness under a known mismatch

def _exact_and_estimated_gradients(correction: str | None, cap: float, samples: int = 400_000):
    """A two-token 'sequence' from independent 5-way categoricals: the policy softmax(theta), the sampler the
    same logits at temperature 1.6 (a known mismatch). Returns (exact on-policy gradient of E[r], the
    REINFORCE estimate from the sampler's draws with the correction's weights, its standard error)."""
    generator = torch.Generator().manual_seed(0)
    theta = torch.tensor([[0.5, -1.0, 1.5, 0.0, -0.3], [1.0, 0.2, -0.7, 0.4, -1.2]], dtype=torch.float64,
                         requires_grad=True)  # [T=2, V=5]
    reward = torch.arange(25, dtype=torch.float64).reshape(5, 5).remainder(7) / 7  # r(a1, a2)
    policy = torch.log_softmax(theta, dim=-1)  # [2, 5]
    exact_value = (policy[0].exp()[:, None] * policy[1].exp()[None, :] * reward).sum()
    exact = torch.autograd.grad(exact_value, theta, retain_graph=True)[0]
    sampler = torch.log_softmax(theta.detach() / 1.6, dim=-1)  # [2, 5]
    draws = torch.stack([torch.multinomial(sampler[t].exp(), samples, replacement=True, generator=generator)
                         for t in range(2)], dim=1)  # [M, 2]
    logp = policy.gather(1, draws.T).T  # [M, 2], with grad
    logp_sampler = sampler.gather(1, draws.T).T  # [M, 2]
    mask = torch.ones_like(logp_sampler)
    advantage = reward[draws[:, 0], draws[:, 1]]  # [M]
    weights = (torch.ones_like(mask) if correction is None
               else SAMPLER_CORRECTIONS.get(correction)(logp.detach(), logp_sampler, mask, cap))  # [M, 2]
    per_sample = (weights * advantage[:, None] * logp).sum(dim=1)  # [M]: sum over tokens of w * A * log pi
    estimate = torch.autograd.grad(per_sample.mean(), theta)[0]
    # Standard error of each gradient entry from the per-sample gradients' spread (score function by hand).
    scores = torch.zeros(samples, 2, 5, dtype=torch.float64)
    for t in range(2):
        scores[:, t] = torch.nn.functional.one_hot(draws[:, t], 5) - policy[t].detach().exp()
    per_sample_grad = (weights * advantage[:, None])[:, :, None] * scores  # [M, 2, 5]
    stderr = per_sample_grad.std(dim=0) / math.sqrt(samples)
    return exact, estimate, stderr


def test_sequence_tis_recovers_the_on_policy_gradient_where_no_correction_does_not():
    exact, uncorrected, stderr = _exact_and_estimated_gradients(None, 0.0)
    assert float(((uncorrected - exact).abs() / stderr).max()) > 20  # far outside the noise: biased
    # With a cap above every sequence ratio the weight is the exact likelihood ratio: unbiased.
    exact, corrected, stderr = _exact_and_estimated_gradients("tis_sequence", 1e6)
    assert float(((corrected - exact).abs() / stderr).max()) < 4.5
    # Per-token weights fix each token's own sampling but not the other token's: with a reward that couples
    # the two tokens, token-level TIS is closer than no correction, yet still biased.
    exact, token_level, stderr = _exact_and_estimated_gradients("tis_token", 1e6)
    token_error = float((token_level - exact).abs().max())
    assert token_error < 0.5 * float((uncorrected - exact).abs().max())
    # A cap of 1.2 truncates most weights (ratios here reach ~3): the truncation shows as a bias.
    exact, truncated, stderr = _exact_and_estimated_gradients("tis_sequence", 1.2)
    assert float(((truncated - exact).abs() / stderr).max()) > 10
