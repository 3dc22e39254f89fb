"""PPO's value side (`rlvr.core.value`): per-token rewards, GAE, whitening, the clipped value loss
and explained variance, against values worked out by hand and a second, naive implementation.

Masked columns hold garbage (large values, NaN) on purpose: a computation that reads them gives a
clearly different number, which each test asserts for the plausible wrong version too.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import (
    ADVANTAGE_ESTIMATORS,
    explained_variance,
    explained_variance_from_sums,
    explained_variance_sums,
    gae_advantages,
    masked_whiten,
    maybe_normalize_advantages,
    per_token_rewards,
    terminal_token_rewards,
    value_loss,
)

GAMMA, LAM = 0.9, 0.8  # gamma * lam = 0.72

# Two rows laid out like completion log-probs: column 0 is a prompt column (mask 0), row 0 has
# three completion tokens, row 1 two, then right padding whose "value" is garbage (7).
MASK = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
VALUES = torch.tensor([[9.0, 0.5, 0.4, 0.2], [9.0, 0.3, 0.6, 7.0]], dtype=torch.float64)
REWARDS = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0]], dtype=torch.float64)


def _gae_through_padding(rewards, values, mask, gamma, lam):
    """The plausible wrong GAE: the recursion runs over every column and masks afterwards, so the
    last real token bootstraps from the padding's value."""
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = delta + gamma * lam * next_advantage
        next_value = values[:, t]
        advantages[:, t] = next_advantage
    return advantages * mask


def _compact_gae(rewards, values, mask, gamma, lam):
    """A second implementation: pull each row's completion tokens out, run textbook GAE on them."""
    advantages = torch.zeros_like(values)
    for row in range(values.shape[0]):
        index = mask[row].nonzero().flatten().tolist()
        running = 0.0
        for k in reversed(range(len(index))):
            following = float(values[row, index[k + 1]]) if k + 1 < len(index) else 0.0
            delta = float(rewards[row, index[k]]) + gamma * following - float(values[row, index[k]])
            running = delta + gamma * lam * running
            advantages[row, index[k]] = running
    return advantages


def test_gae_by_hand_on_a_right_padded_batch():
    advantages, returns = gae_advantages(REWARDS, VALUES, MASK, GAMMA, LAM)
    # Row 0 (tokens at columns 1-3, values 0.5, 0.4, 0.2, reward 1 on the last):
    #   t=3: delta = 1 + 0.9*0 - 0.2 = 0.8                     A = 0.8
    #   t=2: delta = 0 + 0.9*0.2 - 0.4 = -0.22                 A = -0.22 + 0.72*0.8 = 0.356
    #   t=1: delta = 0 + 0.9*0.4 - 0.5 = -0.14                 A = -0.14 + 0.72*0.356 = 0.11632
    # Row 1 (columns 1-2, values 0.3, 0.6, reward 2 on column 2; column 3 is padding, skipped):
    #   t=2: delta = 2 + 0.9*0 - 0.6 = 1.4                     A = 1.4
    #   t=1: delta = 0 + 0.9*0.6 - 0.3 = 0.24                  A = 0.24 + 0.72*1.4 = 1.248
    expected = torch.tensor([[0.0, 0.11632, 0.356, 0.8], [0.0, 1.248, 1.4, 0.0]], dtype=torch.float64)
    assert torch.allclose(advantages, expected, atol=1e-12)
    # Returns A + V on the tokens: [0.61632, 0.756, 1.0] and [1.548, 2.0].
    expected_returns = torch.tensor([[0.0, 0.61632, 0.756, 1.0], [0.0, 1.548, 2.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(returns, expected_returns, atol=1e-12)
    # Bootstrapping from the padding's value 7: row 1's last token gets 2 + 0.9*7 - 0.6 - 0.72*7 = 2.66.
    wrong = _gae_through_padding(REWARDS, VALUES, MASK, GAMMA, LAM)
    assert wrong[1, 2].item() == pytest.approx(2.66)
    assert (wrong - advantages).abs().max() > 1.0
    # The inputs are left as they were; gradients never reach the values through the targets.
    assert VALUES[1, 3] == 7.0 and not returns.requires_grad


def test_gae_matches_a_compact_per_row_implementation():
    generator = torch.Generator().manual_seed(3)
    rows, width, prompt = 6, 9, 3
    lengths = [1, 6, 3, 0, 5, 4]  # one empty completion
    mask = torch.zeros(rows, width, dtype=torch.float64)
    for row, length in enumerate(lengths):
        mask[row, prompt - 1 : prompt - 1 + length] = 1.0
    values = torch.randn(rows, width, generator=generator, dtype=torch.float64)
    values = torch.where(mask != 0, values, torch.full_like(values, 50.0))  # garbage off the mask
    rewards = torch.randn(rows, width, generator=generator, dtype=torch.float64) * mask
    for gamma, lam in ((1.0, 0.95), (0.9, 0.8), (0.99, 0.0)):
        advantages, returns = gae_advantages(rewards, values, mask, gamma, lam)
        expected = _compact_gae(rewards, values, mask, gamma, lam)
        assert torch.allclose(advantages, expected, atol=1e-12), (gamma, lam)
        assert torch.allclose(returns, (expected + values) * mask, atol=1e-12)
        assert torch.equal(advantages[3], torch.zeros(width))  # the empty completion
        wrong = _gae_through_padding(rewards, values, mask, gamma, lam)
        assert (wrong - expected).abs().max() > 1.0, (gamma, lam)


def test_gae_special_cases_monte_carlo_and_td0():
    # lam = 1, gamma = 1: A_t = (sum of the rewards from t on) - V_t, whatever the values after t.
    advantages, returns = gae_advantages(REWARDS, VALUES, MASK, 1.0, 1.0)
    # Row 0: rewards to go [1, 1, 1] on columns 1-3; row 1: [2, 2] on columns 1-2.
    assert torch.allclose(advantages, torch.tensor([[0.0, 0.5, 0.6, 0.8], [0.0, 1.7, 1.4, 0.0]],
                                                   dtype=torch.float64), atol=1e-12)
    assert torch.allclose(returns, torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 2.0, 2.0, 0.0]], dtype=torch.float64))
    # lam = 0: one-step TD errors, A_t = r_t + gamma * V_next - V_t; row 1's last token has V_next = 0, not 7.
    td, _ = gae_advantages(REWARDS, VALUES, MASK, 0.9, 0.0)
    assert torch.allclose(td, torch.tensor([[0.0, -0.14, -0.22, 0.8], [0.0, 0.24, 1.4, 0.0]],
                                           dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="gamma and lam"):
        gae_advantages(REWARDS, VALUES, MASK, 1.5, 0.9)
    with pytest.raises(ValueError, match=r"one \[B, T\] shape"):
        gae_advantages(REWARDS, VALUES[:, :3], MASK, 1.0, 0.9)


def test_gae_estimator_in_the_registry():
    gae = ADVANTAGE_ESTIMATORS.get("gae")
    advantages = gae(REWARDS, group_ids=torch.tensor([0, 1]), completion_mask=MASK, values=VALUES, gamma=GAMMA,
                     lam=LAM, std="population")
    assert torch.allclose(advantages[1], torch.tensor([0.0, 1.248, 1.4, 0.0], dtype=torch.float64), atol=1e-12)
    assert advantages[1, 2] != pytest.approx(2.66)  # not bootstrapped from the padding
    with pytest.raises(ValueError, match=r"\['values'\]"):
        gae(REWARDS, group_ids=torch.tensor([0, 1]), completion_mask=MASK, gamma=GAMMA, lam=LAM)


# Whitening: tokens 1..5 under the mask, garbage (99, -50, 7) outside it.
WHITEN_VALUES = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, -50.0, 7.0]], dtype=torch.float64)
WHITEN_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)


def test_masked_whiten_by_hand():
    whitened = masked_whiten(WHITEN_VALUES, WHITEN_MASK)
    # Mean 3; population variance (4 + 1 + 0 + 1 + 4) / 5 = 2, std 1.41421: z = (x - 3) / 1.41421.
    std = math.sqrt(2.0)
    expected = torch.tensor([[-2 / std, -1 / std, 0.0, 0.0], [1 / std, 2 / std, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(whitened, expected, atol=1e-7)
    kept = whitened[WHITEN_MASK != 0]
    assert kept.mean().abs() < 1e-12 and kept.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-7)
    # The sample variance (divide by 4: 2.5) would give -2 / 1.58114 = -1.26491 for the first token.
    assert whitened[0, 0].item() != pytest.approx(-2 / math.sqrt(2.5), abs=1e-3)
    # Whitening every column, garbage included: mean 71/8, nothing like the above.
    everything = (WHITEN_VALUES - WHITEN_VALUES.mean()) / WHITEN_VALUES.std(unbiased=False)
    assert (everything * WHITEN_MASK - expected).abs().max() > 0.5
    # With every entry kept it is the batch z-score of the advantage stage.
    flat = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    assert torch.allclose(maybe_normalize_advantages(flat, True), masked_whiten(flat, torch.ones_like(flat)))


def test_masked_whiten_keeping_the_mean():
    kept_mean = masked_whiten(WHITEN_VALUES, WHITEN_MASK, shift_mean=False)
    # (x - 3) / 1.41421 + 3: only the spread is scaled.
    std = math.sqrt(2.0)
    expected = torch.tensor([[3 - 2 / std, 3 - 1 / std, 3.0, 0.0], [3 + 1 / std, 3 + 2 / std, 0.0, 0.0]],
                            dtype=torch.float64)
    assert torch.allclose(kept_mean, expected, atol=1e-7)
    assert kept_mean[WHITEN_MASK != 0].mean().item() == pytest.approx(3.0)


def test_masked_whiten_constant_and_empty():
    values = torch.tensor([[0.1 + 0.2, 0.1 + 0.2, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    assert torch.equal(masked_whiten(values, mask), torch.zeros(1, 3, dtype=torch.float64))
    assert torch.allclose(masked_whiten(values, mask, shift_mean=False), torch.tensor([[0.3, 0.3, 0.0]],
                                                                                      dtype=torch.float64))
    assert torch.equal(masked_whiten(values, torch.zeros_like(mask)), torch.zeros_like(values))


# Value loss: row 0 has three tokens and padding holding 5.0, row 1 two tokens; clip range 0.2.
V_NEW = torch.tensor([[0.5, 1.0, 0.0, 5.0], [0.3, -0.2, 9.0, 9.0]], dtype=torch.float64)
V_OLD = torch.tensor([[0.0, 0.9, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
V_RETURNS = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
V_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
# Per token, 0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clamp(V - V_old, -0.2, 0.2):
#   (0,0): V_clip 0.2: max(0.25, 0.64) = 0.64 -> 0.32 (the clipped term is larger: counted as clipped)
#   (0,1): V_clip 1.0 = V: 1.0 -> 0.5;   (0,2): V_clip 0 = V: 4.0 -> 2.0
#   (1,0): V_clip 0.2: max(0.09, 0.04) = 0.09 -> 0.045;   (1,1): V_clip -0.2 = V: 0.04 -> 0.02
PER_TOKEN = [[0.32, 0.5, 2.0], [0.045, 0.02]]


def test_value_loss_by_hand():
    loss, metrics = value_loss(V_NEW, V_OLD, V_RETURNS, V_MASK, 0.2, "token_mean")
    assert loss.item() == pytest.approx((0.32 + 0.5 + 2.0 + 0.045 + 0.02) / 5)  # 0.577
    sequence_mean, _ = value_loss(V_NEW, V_OLD, V_RETURNS, V_MASK, 0.2, "seq_mean_token_mean")
    assert sequence_mean.item() == pytest.approx(((0.32 + 0.5 + 2.0) / 3 + (0.045 + 0.02) / 2) / 2)  # 0.48625
    assert metrics["clip_frac"].item() == pytest.approx(1 / 5)
    assert metrics["clipped"].tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert torch.allclose(metrics["per_token_loss"][V_MASK != 0], torch.tensor(sum(PER_TOKEN, []), dtype=torch.float64))
    assert metrics["value_mean"].item() == pytest.approx((0.5 + 1.0 + 0.0 + 0.3 - 0.2) / 5)
    # The optimistic min instead of max: (0,0) gives 0.125, (1,0) 0.02 -> token mean 0.532.
    assert loss.item() != pytest.approx((0.125 + 0.5 + 2.0 + 0.02 + 0.02) / 5, abs=1e-3)
    # Without a clip range the plain squared error: (0.125 + 0.5 + 2 + 0.045 + 0.02) / 5 = 0.538.
    unclipped, unclipped_metrics = value_loss(V_NEW, V_OLD, V_RETURNS, V_MASK, None, "token_mean")
    assert unclipped.item() == pytest.approx(0.538)
    assert unclipped_metrics["clip_frac"].item() == 0.0


def test_value_loss_gradient_stops_where_the_clip_binds():
    values = V_NEW.clone().requires_grad_(True)
    loss, _ = value_loss(values, V_OLD, V_RETURNS, V_MASK, 0.2, "token_mean")
    loss.backward()
    # d/dV of 0.5 (V - R)^2 / 5 = (V - R) / 5 on the unclipped tokens; 0 at (0,0), where the clipped
    # term wins and its V is pinned at V_old + 0.2; 0 off the mask.
    expected = torch.tensor([[0.0, 1.0 / 5, -2.0 / 5, 0.0], [0.3 / 5, -0.2 / 5, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(values.grad, expected, atol=1e-12)
    # With min the (0,0) token would pull towards the return: (0.5 - 1) / 5 = -0.1.
    assert values.grad[0, 0].item() != pytest.approx(-0.1)
    # The old values and the returns are targets: no gradient reaches them.
    old = V_OLD.clone().requires_grad_(True)
    returns = V_RETURNS.clone().requires_grad_(True)
    value_loss(V_NEW.clone().requires_grad_(True), old, returns, V_MASK, 0.2, "token_mean")[0].backward()
    assert old.grad is None and returns.grad is None
    with pytest.raises(KeyError, match="token_mean"):
        value_loss(V_NEW, V_OLD, V_RETURNS, V_MASK, 0.2, "sum")


def test_explained_variance_by_hand():
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]], dtype=torch.float64)  # Var[R] = 1.25 on the mask
    # Errors [0, 0, 0, 1]: Var = 0.25 - 0.0625 = 0.1875, so 1 - 0.1875 / 1.25 = 0.85.
    near = torch.tensor([[1.0, 2.0, 3.0, 3.0, -100.0]], dtype=torch.float64)
    assert explained_variance(near, returns, mask).item() == pytest.approx(0.85)
    assert explained_variance(torch.zeros_like(returns), returns, mask).item() == pytest.approx(0.0)
    assert explained_variance(torch.full_like(returns, 2.5), returns, mask).item() == pytest.approx(0.0)
    # V = -R: errors 2R, Var 5, so 1 - 5 / 1.25 = -3: worse than a constant.
    assert explained_variance(-returns, returns, mask).item() == pytest.approx(-3.0)
    # Constant returns: nothing to explain.
    assert math.isnan(explained_variance(near, torch.ones_like(returns), mask).item())
    # Sums of two halves give the whole (what data-parallel ranks add up).
    halves = explained_variance_sums(near[:, :2], returns[:, :2], mask[:, :2]) + \
        explained_variance_sums(near[:, 2:], returns[:, 2:], mask[:, 2:])
    assert explained_variance_from_sums(halves).item() == pytest.approx(0.85)
    _, metrics = value_loss(near, near, returns, mask, 0.2, "token_mean")
    assert metrics["explained_variance"].item() == pytest.approx(0.85)


def test_terminal_and_kl_shaped_token_rewards():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    rewards = torch.tensor([2.0, 3.0, float("nan")])
    token_rewards = terminal_token_rewards(rewards, mask)
    # The reward sits on each row's last completion token; the empty row has none; NaN stays on its token.
    assert token_rewards[:2].tolist() == [[0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert token_rewards[2, :3].tolist() == [0.0, 0.0, 0.0] and math.isnan(token_rewards[2, 3])
    # KL in the reward: k1 = log pi - log pi_ref = [0.5, -1] on the two tokens, beta 0.1:
    # [-0.05, 1 + 0.1] (k3 would give exp(d) - d - 1 = [0.1065, 0.7183] instead).
    logprobs = torch.tensor([[0.0, -1.0, -2.0, 0.0]])
    ref_logprobs = torch.tensor([[0.0, -1.5, -1.0, 3.0]])
    shaped = per_token_rewards(torch.tensor([1.0]), mask[:1], kl_coef=0.1, logprobs=logprobs,
                               ref_logprobs=ref_logprobs)
    assert torch.allclose(shaped, torch.tensor([[0.0, -0.05, 1.1, 0.0]]))
    assert torch.equal(per_token_rewards(torch.tensor([1.0]), mask[:1]), torch.tensor([[0.0, 0.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="reference log-probs"):
        per_token_rewards(torch.tensor([1.0]), mask[:1], kl_coef=0.1)
