"""The update's policy terms: every metric a loss returns reaches the logged sums, each loss gets
exactly the options it declares, the top-entropy selection zeroes the policy loss of the other
tokens (the KL term stays on all), and a loss that draws tokens at random gets a generator seeded
from torch's global RNG (which checkpoints save) while the others leave that RNG alone.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import AlgorithmConfig
from rlvr.observe.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    CLIP_FRAC_TRUST_REGION,
    ENTROPY,
    ENTROPY_SELECTED_FRAC,
    KL,
    POLICY_LOSS_PER_TOKEN,
    RATIO_MEAN,
    SURPRISAL,
    policy_loss_metric,
)
from rlvr.observe.metrics import MetricSums
from rlvr.training.reference import needs_reference_logprobs
from rlvr.training.update import _policy_terms, log_loss_metrics, token_generator


def _algo(**fields):
    preset = dataclasses.asdict(AlgorithmConfig())
    preset.update(policy_loss="grpo_clip", clip_low=0.2, clip_high=0.2, kl_coef=0.0, kl_estimator="k3",
                  entropy_coef=0.0)
    preset.update(fields)
    return SimpleNamespace(**preset)


def _inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(4, 5, generator=generator, dtype=torch.float64) * 2 - 0.1
    old = logprobs + 1.2 * torch.randn(4, 5, generator=generator, dtype=torch.float64)
    old[1] = logprobs[1] - 1.0  # ratio e on a row with a negative advantage: dual-clip's bound binds
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    entropy = torch.rand(4, 5, generator=generator, dtype=torch.float64)
    scores = SimpleNamespace(logprobs=logprobs, entropy=entropy)
    minibatch = SimpleNamespace(completion_mask=mask, sampler_logprobs=None,
                                advantages=torch.tensor([1.0, -2.0, 0.5, -1.0]),
                                ref_logprobs=logprobs + 0.3)
    return scores, old, minibatch


def test_every_loss_metric_is_logged_under_its_name():
    scores, old, minibatch = _inputs()
    sums = MetricSums()
    _policy_terms(scores, old, minibatch, _algo(policy_loss="dual_clip", clip_ratio_c=1.5), 0, sums)
    logged = sums.reduce()
    for name in (RATIO_MEAN, CLIP_FRAC_LOW, CLIP_FRAC_HIGH, policy_loss_metric("clipped"),
                 policy_loss_metric("dual_clipped")):
        assert name in logged, name
    assert logged[policy_loss_metric("dual_clipped")] > 0  # the bound is active somewhere on this input
    # Scalars and [b, T] tensors alike, under the family name, whatever the key.
    sums = MetricSums()
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    log_loss_metrics(sums, {"anything": torch.tensor([[1.0, 0.0, 7.0]]), "scalar": torch.tensor(0.25)}, mask)
    assert sums.reduce() == {policy_loss_metric("anything"): 0.5, policy_loss_metric("scalar"): 0.25}


def test_each_loss_gets_the_options_it_declares():
    scores, old, minibatch = _inputs()
    values = {}
    for tau_neg in (1.05, 3.0):
        sums = MetricSums()
        per_token, _ = _policy_terms(scores, old, minibatch, _algo(policy_loss="sapo", tau_neg=tau_neg), 0, sums)
        values[tau_neg] = per_token
    negative = (minibatch.advantages < 0)[:, None] & minibatch.completion_mask.bool()
    assert (values[1.05][negative] - values[3.0][negative]).abs().max() > 1e-3  # the option reached the loss
    # grpo_clip declares none of them: an unrelated knob changes nothing (and is not an error).
    plain = _policy_terms(scores, old, minibatch, _algo(), 0, MetricSums())[0]
    knobbed = _policy_terms(scores, old, minibatch, _algo(tau_neg=3.0, clip_ratio_c=9.0), 0, MetricSums())[0]
    assert torch.equal(plain, knobbed)


def test_top_entropy_selection_zeroes_the_policy_loss_of_the_others_but_not_the_kl():
    scores, old, minibatch = _inputs(1)
    mask = minibatch.completion_mask
    full_sums, top_sums = MetricSums(), MetricSums()
    full, _ = _policy_terms(scores, old, minibatch, _algo(kl_coef=0.1), 0, full_sums)
    top, _ = _policy_terms(scores, old, minibatch, _algo(kl_coef=0.1, entropy_top_fraction=0.3), 0, top_sums)
    kl = 0.1 * (torch.exp(minibatch.ref_logprobs - scores.logprobs) - (minibatch.ref_logprobs - scores.logprobs) - 1)
    valid = mask.bool()
    entropies = scores.entropy[valid]
    threshold = torch.quantile(entropies, 0.7)
    selected = valid & (scores.entropy >= threshold)
    assert 0 < selected.sum() < valid.sum()
    assert torch.allclose(top[selected], full[selected])
    assert torch.allclose(top[valid & ~selected], kl[valid & ~selected])  # only the KL term is left
    logged = top_sums.reduce()
    assert logged[ENTROPY_SELECTED_FRAC] == pytest.approx(selected.sum().item() / valid.sum().item())
    assert ENTROPY_SELECTED_FRAC not in full_sums.reduce()
    assert logged[KL] == pytest.approx(full_sums.reduce()[KL])
    assert logged[POLICY_LOSS_PER_TOKEN] != pytest.approx(full_sums.reduce()[POLICY_LOSS_PER_TOKEN])


def test_token_generator_is_seeded_from_the_global_rng_and_only_for_random_losses():
    torch.manual_seed(3)
    assert token_generator(_algo(policy_loss="grpo_clip")) is None
    untouched = torch.rand(1)
    torch.manual_seed(3)
    assert token_generator(_algo(policy_loss="kl_cov")) is None  # top-k: nothing random
    assert torch.equal(torch.rand(1), untouched)  # the global stream is where it was
    draws = []
    for _ in range(2):
        torch.manual_seed(3)  # a resumed run restores this state from its checkpoint
        draws.append(torch.randperm(50, generator=token_generator(_algo(policy_loss="clip_cov"))))
    assert torch.equal(draws[0], draws[1])
    torch.manual_seed(4)
    assert not torch.equal(torch.randperm(50, generator=token_generator(_algo(policy_loss="clip_cov"))), draws[0])


def test_clip_cov_and_kl_cov_updates_log_their_selected_share():
    scores, old, minibatch = _inputs(2)
    for loss, key in (("clip_cov", "cov_clipped"), ("kl_cov", "kl_penalized")):
        sums = MetricSums()
        algo = _algo(policy_loss=loss, clip_cov_lb=-10.0, clip_cov_ub=10.0)
        _policy_terms(scores, old, minibatch, algo, 0, sums, token_generator(algo))
        tokens = minibatch.completion_mask.sum().item()
        assert sums.reduce()[policy_loss_metric(key)] == pytest.approx(1 / tokens)  # max(1, int(2e-4 * 12)) = 1


def test_a_smaller_entropy_fraction_leaves_fewer_tokens_with_a_policy_loss():
    scores, old, minibatch = _inputs(3)
    nonzero = []
    for fraction in (1.0, 0.6, 0.2):
        per_token, _ = _policy_terms(scores, old, minibatch, _algo(entropy_top_fraction=fraction), 0, MetricSums())
        nonzero.append(int(((per_token != 0) & minibatch.completion_mask.bool()).sum()))
    assert nonzero[0] == 12 and nonzero[0] > nonzero[1] > nonzero[2] >= 1


def test_consecutive_updates_draw_different_seeds():
    torch.manual_seed(0)
    algo = _algo(policy_loss="clip_cov")
    first, second = token_generator(algo), token_generator(algo)
    assert not torch.equal(torch.randperm(50, generator=first), torch.randperm(50, generator=second))


def test_trust_region_clip_fraction_counts_either_branch():
    """The courses' clipfrac (ratio outside (1 - eps_low, 1 + eps_high), any branch) against rlvr's clip_frac/*
    (the clipped branch is the active one). One token a row, eps 0.2:
      A = -1, rho 1.5: min takes the unclipped branch: clip_frac 0, trust region 1
      A = +1, rho 1.5: clipped high: both 1
      A = +1, rho 1.1: inside: both 0
      A = -1, rho 0.5: clipped low: both 1
      A = +1, rho 0.5: unclipped branch: clip_frac 0, trust region 1
    -> trust region 4/5; clip_frac/high 1/5, clip_frac/low 1/5 (their sum 2/5, not 4/5)."""
    scores, old, minibatch = _five_ratios()
    sums = MetricSums()
    _policy_terms(scores, old, minibatch, _algo(), 0, sums)
    logged = sums.reduce()
    assert logged[CLIP_FRAC_TRUST_REGION] == pytest.approx(4 / 5)
    assert (logged[CLIP_FRAC_HIGH], logged[CLIP_FRAC_LOW]) == (pytest.approx(1 / 5), pytest.approx(1 / 5))


def _five_ratios():
    ratios = torch.tensor([1.5, 1.5, 1.1, 0.5, 0.5], dtype=torch.float64)
    old = -torch.ones(5, 1, dtype=torch.float64)
    scores = SimpleNamespace(logprobs=old + ratios.log()[:, None], entropy=torch.zeros(5, 1, dtype=torch.float64))
    minibatch = SimpleNamespace(completion_mask=torch.ones(5, 1, dtype=torch.float64), sampler_logprobs=None,
                                advantages=torch.tensor([-1.0, 1.0, 1.0, -1.0, 1.0], dtype=torch.float64),
                                ref_logprobs=None)
    return scores, old, minibatch


def test_trust_region_reads_each_sides_own_bound():
    """clip_high 0.6 takes rho 1.5 inside, clip_low 0.2 keeps rho 0.5 outside: 2/5 (a symmetric range at
    clip_low would say 4/5, one at clip_high 0/5; the upper side alone 0/5)."""
    scores, old, minibatch = _five_ratios()
    sums = MetricSums()
    _policy_terms(scores, old, minibatch, _algo(clip_high=0.6), 0, sums)
    assert sums.reduce()[CLIP_FRAC_TRUST_REGION] == pytest.approx(2 / 5)


def test_surprisal_is_the_sampled_tokens_and_entropy_the_whole_distribution():
    """Surprisal: mean -log pi_old of the sampled tokens under the mask (the courses' "entropy"); `entropy` is the
    full-distribution entropy the scores carry. A masked-out position with a huge surprisal must not count."""
    old = torch.tensor([[-0.1, -3.0, -50.0], [-2.0, -50.0, -50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.float64)
    entropy = torch.full((2, 3), 0.7, dtype=torch.float64)
    scores = SimpleNamespace(logprobs=old.clone(), entropy=entropy)
    minibatch = SimpleNamespace(completion_mask=mask, sampler_logprobs=None, ref_logprobs=None,
                                advantages=torch.tensor([1.0, -1.0], dtype=torch.float64))
    sums = MetricSums()
    _policy_terms(scores, old, minibatch, _algo(), 0, sums)
    logged = sums.reduce()
    assert logged[SURPRISAL] == pytest.approx((0.1 + 3.0 + 2.0) / 3)
    assert logged[ENTROPY] == pytest.approx(0.7)
    sums = MetricSums()  # a later epoch does not log it again
    _policy_terms(scores, old, minibatch, _algo(), 1, sums)
    assert SURPRISAL not in sums.reduce()


def test_log_kl_logs_the_kl_without_changing_the_loss():
    scores, old, minibatch = _inputs()
    plain, with_kl = MetricSums(), MetricSums()
    loss, _ = _policy_terms(scores, old, minibatch, _algo(kl_coef=0.0, log_kl=False), 0, plain)
    loss_logged, _ = _policy_terms(scores, old, minibatch, _algo(kl_coef=0.0, log_kl=True), 0, with_kl)
    torch.testing.assert_close(loss_logged, loss, rtol=0, atol=0)
    assert KL not in plain.reduce()
    d = minibatch.ref_logprobs - scores.logprobs  # k3: exp(d) - d - 1, token mean under the mask
    k3 = (torch.exp(d) - d - 1) * minibatch.completion_mask
    assert with_kl.reduce()[KL] == pytest.approx(float(k3.sum() / minibatch.completion_mask.sum()))
    assert needs_reference_logprobs(_algo(kl_coef=0.0, kl_in_reward=0.0, log_kl=True))
    assert not needs_reference_logprobs(_algo(kl_coef=0.0, kl_in_reward=0.0, log_kl=False))
