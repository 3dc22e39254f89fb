"""CISPO, SAPO, GMPO (geo_mean), dual-clip, GPG, Clip-Cov and KL-Cov against float64 loops written
straight from the papers' formulas (verl's semantics, its option names and defaults).

verl itself is not imported: `verl.trainer.ppo.core_algos` pulls in `verl/__init__.py`, which
imports ray and tensordict, and the module itself needs omegaconf and verl's worker configs.
Inputs are ragged completions with garbage (NaN, inf) under the padding, old log-probs far enough
from the new ones that the clip ranges are crossed on both sides, and advantages of both signs.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from rlvr.config import AlgorithmConfig
from rlvr.core import LOSS_OPTIONS, POLICY_LOSSES, aggregate_loss, draws_tokens_at_random, loss_options

LENGTHS = [6, 2, 5, 1, 4, 3]


def _rollout(seed: int = 0, width: int = 6, lengths=LENGTHS, spread: float = 0.5):
    generator = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    logprobs = -torch.rand(batch, width, generator=generator, dtype=torch.float64) * 3 - 0.1
    old = logprobs + spread * torch.randn(batch, width, generator=generator, dtype=torch.float64)
    advantages = torch.randn(batch, generator=generator, dtype=torch.float64) * 1.5
    mask = torch.zeros(batch, width, dtype=torch.float64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    # Garbage under the padding: a loss or a statistic that reads it turns NaN.
    logprobs = torch.where(mask.bool(), logprobs, torch.full_like(logprobs, float("nan")))
    old = torch.where(mask.bool(), old, torch.full_like(old, -float("inf")))
    return logprobs, old, advantages, mask


def _valid(mask):
    return [(b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t] != 0]


def _token_mean_grad(name, logprobs, old, advantages, mask, **options):
    """Per-token loss, and the gradient of its token mean with respect to the log-probs."""
    logprobs = logprobs.clone().requires_grad_(True)
    per_token, metrics = POLICY_LOSSES.get(name)(logprobs, old, advantages, mask, **options)
    loss = aggregate_loss(per_token, mask, "token_mean")
    loss.backward()
    return per_token.detach(), loss.item(), torch.nan_to_num(logprobs.grad), metrics


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_cispo_matches_the_loop_and_keeps_the_gradient_of_clipped_tokens():
    logprobs, old, advantages, mask = _rollout()
    low, high = 0.2, 0.28
    per_token, loss, grad, metrics = _token_mean_grad("cispo", logprobs, old, advantages, mask,
                                                      clip_low=low, clip_high=high)
    count = mask.sum().item()
    expected_loss, clipped = 0.0, 0
    for b, t in _valid(mask):
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        weight = min(max(ratio, 1 - low), 1 + high)
        a = advantages[b].item()
        assert per_token[b, t].item() == pytest.approx(-weight * a * logprobs[b, t].item(), abs=1e-12)
        # d/dlogp of -sg(w) A logp is -w A: the weight is a constant.
        assert grad[b, t].item() == pytest.approx(-weight * a / count, abs=1e-12)
        assert metrics["clipped"][b, t].item() == float(ratio != weight)
        expected_loss += -weight * a * logprobs[b, t].item() / count
        clipped += ratio != weight
    assert loss == pytest.approx(expected_loss, abs=1e-12)
    assert clipped >= 3
    # PPO's clip zeroes exactly those gradients; CISPO keeps every one of them.
    _, _, ppo_grad, ppo_metrics = _token_mean_grad("grpo_clip", logprobs, old, advantages, mask,
                                                   clip_low=low, clip_high=high)
    active = ppo_metrics["clipped"].bool()
    assert active.any() and (ppo_grad[active] == 0).all() and (grad[active].abs() > 1e-4).all()


def test_sapo_matches_the_loop_and_is_the_policy_gradient_on_policy():
    logprobs, old, advantages, mask = _rollout(1)
    tau_pos, tau_neg = 1.0, 1.05
    per_token, loss, grad, _ = _token_mean_grad("sapo", logprobs, old, advantages, mask,
                                                tau_pos=tau_pos, tau_neg=tau_neg)
    count = mask.sum().item()
    for b, t in _valid(mask):
        a = advantages[b].item()
        tau = tau_pos if a > 0 else tau_neg
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        gate = _sigmoid(tau * (ratio - 1)) * 4 / tau
        assert per_token[b, t].item() == pytest.approx(-gate * a, abs=1e-12)
        # d gate / d logp = 4 s (1 - s) * ratio, s = sigmoid(tau (ratio - 1)).
        s = _sigmoid(tau * (ratio - 1))
        assert grad[b, t].item() == pytest.approx(-a * 4 * s * (1 - s) * ratio / count, abs=1e-12)
    # On-policy (ratio 1) the gate's slope is 1: the gradient is exactly -A per token.
    _, _, on_policy_grad, _ = _token_mean_grad("sapo", logprobs, logprobs.detach(), advantages, mask)
    expected = -advantages[:, None].expand_as(mask) * mask / count
    assert torch.allclose(on_policy_grad, expected, atol=1e-12)
    # A wrong temperature for negative advantages (tau_pos everywhere) changes the value.
    same_tau, _ = POLICY_LOSSES.get("sapo")(logprobs, old, advantages, mask, tau_pos=1.0, tau_neg=1.0)
    negative = (advantages < 0)[:, None] & mask.bool()
    assert (same_tau[negative] - per_token[negative]).abs().max() > 1e-3


def test_geo_mean_matches_the_loop_under_sequence_mean():
    logprobs, old, advantages, mask = _rollout(2, spread=0.6)
    low, high = 0.4, 0.3
    leaf = logprobs.clone().requires_grad_(True)
    per_token, metrics = POLICY_LOSSES.get("geo_mean")(leaf, old, advantages, mask, clip_low=low, clip_high=high)
    loss = aggregate_loss(per_token, mask, "seq_mean_token_mean")
    loss.backward()
    expected_loss, expected_grad, clipped = 0.0, torch.zeros_like(mask), 0
    rows = mask.shape[0]
    for b in range(rows):
        a = advantages[b].item()
        tokens = [t for t in range(mask.shape[1]) if mask[b, t] != 0]
        kept, live = [], []
        for t in tokens:
            log_ratio = logprobs[b, t].item() - old[b, t].item()
            if a > 0:  # the pessimistic side: the clip binds only above
                value = min(log_ratio, high)
            else:  # and only below for a negative advantage
                value = max(log_ratio, -low)
            kept.append(value)
            live.append(value == log_ratio)
            clipped += value != log_ratio
        sequence_ratio = math.exp(sum(kept) / len(tokens))
        expected_loss += -a * sequence_ratio / rows
        for t, is_live in zip(tokens, live):
            expected_grad[b, t] = -a * sequence_ratio / len(tokens) / rows if is_live else 0.0
        assert metrics["ratio"][b, 0].item() == pytest.approx(sequence_ratio, abs=1e-12)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    assert torch.allclose(torch.nan_to_num(leaf.grad), expected_grad, atol=1e-12)
    assert clipped >= 2 and metrics["clipped"].sum() == clipped
    # The arithmetic mean of the ratios (GRPO's token ratios averaged) is a different loss here.
    ratios = torch.exp(torch.nan_to_num(logprobs - old).clamp(-low, high)) * mask
    arithmetic = -(advantages * ratios.sum(-1) / mask.sum(-1)).mean()
    assert abs(arithmetic.item() - expected_loss) > 1e-3


def test_dual_clip_bounds_negative_advantages_only():
    logprobs, old, advantages, mask = _rollout(3, spread=1.5)
    c = 3.0
    per_token, loss, grad, metrics = _token_mean_grad("dual_clip", logprobs, old, advantages, mask,
                                                      clip_low=0.2, clip_high=0.2, clip_ratio_c=c)
    bound_active = 0
    for b, t in _valid(mask):
        a = advantages[b].item()
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        ppo = max(-a * ratio, -a * min(max(ratio, 0.8), 1.2))
        expected = min(ppo, -a * c) if a < 0 else ppo
        assert per_token[b, t].item() == pytest.approx(expected, abs=1e-12)
        if a < 0 and ppo > -a * c:
            bound_active += 1
            assert grad[b, t].item() == 0.0 and metrics["dual_clipped"][b, t].item() == 1.0
        else:
            assert metrics["dual_clipped"][b, t].item() == 0.0
    assert bound_active >= 1
    # The plain clipped surrogate differs exactly where the bound is active.
    plain, _ = POLICY_LOSSES.get("grpo_clip")(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2)
    differs = ((plain - per_token).abs() > 1e-9) & mask.bool()
    assert torch.equal(differs, metrics["dual_clipped"].bool())
    with pytest.raises(ValueError, match="clip_ratio_c > 1"):
        POLICY_LOSSES.get("dual_clip")(logprobs, old, advantages, mask, clip_ratio_c=1.0)


def test_gpg_loss_is_reinforce():
    logprobs, old, advantages, mask = _rollout(4)
    per_token, _, grad, _ = _token_mean_grad("gpg", logprobs, old, advantages, mask)
    for b, t in _valid(mask):
        assert per_token[b, t].item() == pytest.approx(-advantages[b].item() * logprobs[b, t].item(), abs=1e-12)
        assert grad[b, t].item() == pytest.approx(-advantages[b].item() / mask.sum().item(), abs=1e-12)


def _covariances(logprobs, advantages, mask):
    """(A - mean A)(log pi - mean log pi) per valid token, the means over the valid tokens, in float64 loops."""
    valid = _valid(mask)
    mean_a = sum(advantages[b].item() for b, _ in valid) / len(valid)
    mean_l = sum(logprobs[b, t].item() for b, t in valid) / len(valid)
    return {(b, t): (advantages[b].item() - mean_a) * (logprobs[b, t].item() - mean_l) for b, t in valid}


def _wide_rollout(seed):
    lengths = [40, 12, 33, 25, 7, 40]
    return _rollout(seed, width=40, lengths=lengths, spread=0.3)


def test_clip_cov_detaches_a_seeded_draw_of_its_candidates():
    logprobs, old, advantages, mask = _wide_rollout(5)
    advantages = advantages * 2
    options = dict(clip_low=0.2, clip_high=0.2, clip_cov_ratio=0.05, clip_cov_lb=0.3, clip_cov_ub=5.0)
    generator = torch.Generator().manual_seed(11)
    per_token, _, grad, metrics = _token_mean_grad("clip_cov", logprobs, old, advantages, mask,
                                                   generator=generator, **options)
    covariance = _covariances(logprobs, advantages, mask)
    candidates = []
    for b, t in _valid(mask):  # row-major, as the draw indexes them
        a = advantages[b].item()
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        unclipped, clipped = -a * ratio, -a * min(max(ratio, 0.8), 1.2)
        if not clipped > unclipped and 0.3 < covariance[(b, t)] < 5.0:
            candidates.append((b, t))
    budget = max(int(0.05 * len(covariance)), 1)
    assert len(candidates) > budget  # the draw chooses among more candidates than it takes
    order = torch.randperm(len(candidates), generator=torch.Generator().manual_seed(11))
    chosen = {candidates[i] for i in order[:budget].tolist()}
    for b, t in _valid(mask):
        a = advantages[b].item()
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        expected = 0.0 if (b, t) in chosen else max(-a * ratio, -a * min(max(ratio, 0.8), 1.2))
        assert per_token[b, t].item() == pytest.approx(expected, abs=1e-12)
        assert metrics["cov_clipped"][b, t].item() == float((b, t) in chosen)
        if (b, t) in chosen:
            assert grad[b, t].item() == 0.0
    # The same seed picks the same tokens (a resumed run); another seed picks others.
    again, _ = POLICY_LOSSES.get("clip_cov")(logprobs, old, advantages, mask,
                                            generator=torch.Generator().manual_seed(11), **options)
    other, other_metrics = POLICY_LOSSES.get("clip_cov")(logprobs, old, advantages, mask,
                                                         generator=torch.Generator().manual_seed(12), **options)
    assert torch.equal(torch.nan_to_num(again), torch.nan_to_num(per_token))
    assert not torch.equal(other_metrics["cov_clipped"], metrics["cov_clipped"])


def test_kl_cov_penalizes_the_top_covariance_tokens():
    logprobs, old, advantages, mask = _wide_rollout(6)
    coef, share = 0.7, 0.04
    per_token, _, _, metrics = _token_mean_grad("kl_cov", logprobs, old, advantages, mask,
                                                kl_cov_ratio=share, ppo_kl_coef=coef)
    covariance = _covariances(logprobs, advantages, mask)
    count = max(1, int(len(covariance) * share))
    top = set(sorted(covariance, key=covariance.get, reverse=True)[:count])
    assert count >= 4
    for b, t in _valid(mask):
        a = advantages[b].item()
        log_ratio = logprobs[b, t].item() - old[b, t].item()
        expected = -a * math.exp(log_ratio) + (coef * abs(log_ratio) if (b, t) in top else 0.0)
        assert per_token[b, t].item() == pytest.approx(expected, abs=1e-12)
        assert metrics["kl_penalized"][b, t].item() == float((b, t) in top)
    # Penalizing the lowest-covariance tokens instead would give another loss.
    bottom = set(sorted(covariance, key=covariance.get)[:count])
    assert top != bottom


def test_loss_options_reach_only_the_losses_that_declare_them_and_defaults_match_the_config():
    declared = {}
    for name in POLICY_LOSSES.names():
        parameters = inspect.signature(POLICY_LOSSES.get(name)).parameters
        for option in LOSS_OPTIONS:
            if option in parameters:
                declared.setdefault(option, set()).add(name)
                # The loss's default is the config's (one value, written in two places, kept equal here).
                assert parameters[option].default == AlgorithmConfig.__dataclass_fields__[option].default, option
    assert declared == {"clip_ratio_c": {"dual_clip"}, "tau_pos": {"sapo"}, "tau_neg": {"sapo"},
                        "clip_cov_ratio": {"clip_cov"}, "clip_cov_lb": {"clip_cov"}, "clip_cov_ub": {"clip_cov"},
                        "kl_cov_ratio": {"kl_cov"}, "ppo_kl_coef": {"kl_cov"}}
    everything = {option: 1.5 for option in LOSS_OPTIONS}
    assert loss_options(POLICY_LOSSES.get("sapo"), everything) == {"tau_pos": 1.5, "tau_neg": 1.5}
    assert loss_options(POLICY_LOSSES.get("grpo_clip"), everything) == {}
    assert [n for n in POLICY_LOSSES.names() if draws_tokens_at_random(POLICY_LOSSES.get(n))] == ["clip_cov"]


def test_hand_worked_values():
    one = torch.ones(1, 2, dtype=torch.float64)
    # GMPO, A = +1, log-ratios 0.5 and -0.6, clip 0.2 / 0.2: only the upper clip binds for A > 0, so
    # the kept log-ratios are 0.2 and -0.6, mean -0.2: loss -exp(-0.2) = -0.818731 on both tokens.
    # (Clipping both sides would give 0.2 and -0.2, mean 0: loss -1.)
    old = torch.tensor([[-1.5, -0.4]], dtype=torch.float64)
    new = old + torch.tensor([[0.5, -0.6]], dtype=torch.float64)
    loss, _ = POLICY_LOSSES.get("geo_mean")(new, old, torch.tensor([1.0], dtype=torch.float64), one,
                                            clip_low=0.2, clip_high=0.2)
    assert loss.flatten().tolist() == pytest.approx([-0.8187307531, -0.8187307531], abs=1e-9)
    # Dual clip, c = 3, ratio e^1.5 = 4.4817 on both rows. A = -1: PPO's loss max(4.48, 1.2) = 4.48,
    # capped at -A * c = 3. A = +1: PPO's loss max(-4.48, -1.2) = -1.2, and no cap applies.
    old = torch.zeros(2, 1, dtype=torch.float64)
    new = torch.full((2, 1), 1.5, dtype=torch.float64)
    loss, metrics = POLICY_LOSSES.get("dual_clip")(new, old, torch.tensor([-1.0, 1.0], dtype=torch.float64),
                                                   torch.ones(2, 1), clip_ratio_c=3.0)
    assert loss.flatten().tolist() == pytest.approx([3.0, -1.2], abs=1e-12)
    assert metrics["dual_clipped"].flatten().tolist() == [1.0, 0.0]
    # KL-Cov, A = [1, -1], log-probs [[-1, -2], [-3, -0.5]]: means 0 and -1.625, covariances
    # [[0.625, -0.375], [1.375, -1.125]]; a share of 0.25 of 4 tokens penalizes one: row 1, token 0.
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, -0.5]], dtype=torch.float64)
    _, metrics = POLICY_LOSSES.get("kl_cov")(logprobs, logprobs - 0.1, torch.tensor([1.0, -1.0], dtype=torch.float64),
                                             torch.ones(2, 2), kl_cov_ratio=0.25, ppo_kl_coef=1.0)
    assert metrics["kl_penalized"].tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_clip_cov_with_a_full_budget_detaches_exactly_the_candidates():
    """clip_cov_ratio 1: every candidate is drawn, so the detached set is the candidate rule itself."""
    logprobs, old, advantages, mask = _wide_rollout(7)
    advantages = advantages * 2
    _, metrics = POLICY_LOSSES.get("clip_cov")(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2,
                                               clip_cov_ratio=1.0, clip_cov_lb=0.2, clip_cov_ub=3.0,
                                               generator=torch.Generator().manual_seed(0))
    covariance = _covariances(logprobs, advantages, mask)
    clipped_by_ppo = 0
    for b, t in _valid(mask):
        a = advantages[b].item()
        ratio = math.exp(logprobs[b, t].item() - old[b, t].item())
        ppo_clipped = -a * min(max(ratio, 0.8), 1.2) > -a * ratio
        in_range = 0.2 < covariance[(b, t)] < 3.0
        clipped_by_ppo += ppo_clipped and in_range
        assert metrics["cov_clipped"][b, t].item() == float(in_range and not ppo_clipped), (b, t)
    assert clipped_by_ppo >= 1  # a token in range that PPO's clip already handles is left alone
    assert 5 <= metrics["cov_clipped"].sum() < len(covariance)
