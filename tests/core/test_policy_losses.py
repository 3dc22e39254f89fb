"""Tests for the policy losses: GRPO clip quadrants, ratio-1 gradients, GSPO, REINFORCE, per-token advantages."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import (
    POLICY_LOSSES,
    aggregate_loss,
    compute_per_token_logprobs,
    grpo_clip_loss,
    reinforce_per_token,
)

def test_at_ratio_one_clip_gradient_equals_group_reinforce(make_tiny_llama, policy_batch, pop_gradients):
    model = make_tiny_llama(torch.float64)
    input_ids, attention_mask, mask, advantages = policy_batch()
    logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)  # [4, 6]
    # First step on fresh samples: the old log-probs are the current ones, passed undetached
    # as a careless caller would; the loss must still treat them as constants.
    per_token, metrics = POLICY_LOSSES.get("grpo_clip")(logprobs, logprobs, advantages, mask, clip_low=0.2)
    loss = aggregate_loss(per_token, mask, "seq_mean_token_mean")
    # rho = 1 on every token, so each sequence's mean loss is -A_i and the batch loss is -mean(A).
    assert loss.item() == pytest.approx(-advantages.mean().item(), abs=1e-12)
    assert metrics["clipped"].sum() == 0 and torch.all(metrics["ratio"] == 1.0)
    loss.backward()
    clip_grads = pop_gradients(model)

    logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)
    per_token, _ = POLICY_LOSSES.get("reinforce")(logprobs, logprobs.detach(), advantages, mask)
    aggregate_loss(per_token, mask, "seq_mean_token_mean").backward()
    reinforce_grads = pop_gradients(model)

    total = sum(g.abs().sum() for g in clip_grads)
    assert total > 1e-3  # the gradient is not trivially zero
    for clip_grad, reinforce_grad in zip(clip_grads, reinforce_grads):
        assert torch.allclose(clip_grad, reinforce_grad, atol=1e-9, rtol=0)


def test_old_logprobs_receive_no_gradient():
    logprobs = torch.log(torch.tensor([[0.5, 0.2], [0.3, 0.6]], dtype=torch.float64)).requires_grad_(True)
    old = torch.log(torch.tensor([[0.45, 0.25], [0.3, 0.5]], dtype=torch.float64)).requires_grad_(True)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    for name in ("grpo_clip", "grpo_no_clip", "gspo"):
        per_token, _ = POLICY_LOSSES.get(name)(logprobs, old, advantages, mask, clip_low=0.2)
        per_token.sum().backward()
        assert old.grad is None, name
        assert logprobs.grad is not None and logprobs.grad.abs().sum() > 0, name
        logprobs.grad = None
    # Same with [B, 1] and per-token [B, T] advantages.
    for shaped in (advantages[:, None], advantages[:, None].expand(2, 2)):
        loss, _ = grpo_clip_loss(logprobs, old, shaped, None, clip_low=0.2)
        loss.sum().backward()
        assert old.grad is None


@pytest.mark.parametrize(
    "advantage, ratio, expected_loss, gradient_is_zero, flag",
    [
        # A > 0, rho = 1.5 > 1.2: min(1.5A, 1.2A) = 1.2A -> loss -1.2 * 2, clipped: no gradient.
        (2.0, 1.5, -2.4, True, "clipped_high"),
        # A > 0, rho = 0.5 < 0.8: min(0.5A, 0.8A) = 0.5A -> loss -1.0, gradient -A * rho = -1.
        (2.0, 0.5, -1.0, False, None),
        # A < 0, rho = 1.5: min(-3, -2.4) = -3 -> loss 3.0, gradient -A * rho = 3.
        (-2.0, 1.5, 3.0, False, None),
        # A < 0, rho = 0.5 < 0.8: min(-1.0, -1.6) = -1.6 -> loss 1.6, clipped: no gradient.
        (-2.0, 0.5, 1.6, True, "clipped_low"),
    ],
)
def test_clip_quadrants(advantage, ratio, expected_loss, gradient_is_zero, flag):
    old = torch.full((1, 1), math.log(0.4), dtype=torch.float64)
    logprobs = (old + math.log(ratio)).clone().requires_grad_(True)
    advantages = torch.tensor([advantage], dtype=torch.float64)
    loss, metadata = grpo_clip_loss(logprobs, old, advantages, None, clip_low=0.2)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    loss.sum().backward()
    if gradient_is_zero:
        assert logprobs.grad.item() == 0.0
    else:
        # d/dlogp of -rho * A is -rho * A.
        assert logprobs.grad.item() == pytest.approx(-ratio * advantage, abs=1e-12)
        assert abs(logprobs.grad.item()) > 0.5
    for name in ("clipped_low", "clipped_high"):
        assert metadata[name].item() == (1.0 if name == flag else 0.0)
    assert metadata["clipped"].item() == (1.0 if flag else 0.0)
    assert metadata["ratio"].item() == pytest.approx(ratio, abs=1e-12)


def test_clip_higher_and_registered_clip_by_hand():
    old = torch.zeros(1, 4, dtype=torch.float64)
    ratios = torch.tensor([[1.1, 1.25, 1.3, 0.7]], dtype=torch.float64)
    logprobs = ratios.log()
    advantages = torch.tensor([1.0], dtype=torch.float64)
    mask = torch.ones(1, 4)
    symmetric, metrics = POLICY_LOSSES.get("grpo_clip")(logprobs, old, advantages, mask, clip_low=0.2)
    # eps = 0.2 both sides: min(rho, clip(rho, 0.8, 1.2)) = [1.1, 1.2, 1.2, 0.7].
    assert torch.allclose(symmetric, -torch.tensor([[1.1, 1.2, 1.2, 0.7]], dtype=torch.float64), atol=1e-12)
    assert metrics["clipped_high"].tolist() == [[0.0, 1.0, 1.0, 0.0]]
    # DAPO clip-higher eps_high = 0.28: [1.1, 1.25, 1.28, 0.7].
    higher, metrics = POLICY_LOSSES.get("grpo_clip")(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.28)
    assert torch.allclose(higher, -torch.tensor([[1.1, 1.25, 1.28, 0.7]], dtype=torch.float64), atol=1e-12)
    assert metrics["clipped_high"].tolist() == [[0.0, 0.0, 1.0, 0.0]]
    # Unclipped: -rho * A.
    no_clip, _ = POLICY_LOSSES.get("grpo_no_clip")(logprobs, old, advantages, mask)
    assert torch.allclose(no_clip, -ratios, atol=1e-12)


def test_log_ratio_is_clamped_before_exp():
    logprobs = torch.tensor([[0.0, -200.0]], requires_grad=True)
    old = torch.tensor([[-200.0, 0.0]])
    loss, metadata = grpo_clip_loss(logprobs, old, torch.tensor([-1.0]), None, clip_low=0.2)
    assert torch.isfinite(loss).all()
    assert metadata["ratio"][0, 0].item() == pytest.approx(math.exp(20), rel=1e-5)
    assert metadata["ratio"][0, 1].item() == pytest.approx(math.exp(-20), rel=1e-5)


def test_naive_policy_gradient_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]], requires_grad=True)
    rewards = torch.tensor([[3.0], [-2.0]])
    loss = reinforce_per_token(rewards, logprobs)
    assert loss.tolist() == [[3.0, 6.0], [-1.0, -8.0]]  # -A * logp
    loss.sum().backward()
    assert logprobs.grad.tolist() == [[-3.0, -3.0], [2.0, 2.0]]
    # The registered REINFORCE loss agrees, with [B] advantages too.
    per_token, metrics = POLICY_LOSSES.get("reinforce")(logprobs, logprobs.detach(), rewards[:, 0], torch.ones(2, 2))
    assert per_token.tolist() == [[3.0, 6.0], [-1.0, -8.0]]
    assert metrics["clipped"].sum() == 0


def test_gspo_ratio_by_hand():
    old = torch.zeros(2, 3, dtype=torch.float64)
    logprobs = torch.tensor([[0.3, -0.1, 0.4], [0.2, 9.0, 9.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    per_token, metrics = POLICY_LOSSES.get("gspo")(logprobs, old, advantages, mask, clip_low=0.3, clip_high=0.4)
    # s_0 = exp((0.3 - 0.1 + 0.4) / 3) = exp(0.2) = 1.2214 (in [0.7, 1.4]); s_1 = exp(0.2) too,
    # the masked 9.0s do not count (a sum would give exp(0.6) = 1.82 for row 0 and clip it).
    s = math.exp(0.2)
    assert torch.allclose(metrics["ratio"], torch.full((2, 3), s, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(per_token[0], torch.full((3,), -s, dtype=torch.float64), atol=1e-12)
    assert per_token[1, 0].item() == pytest.approx(s, abs=1e-12)
    assert metrics["clipped"].sum() == 0
    # Tight ranges clip row 0 on the high side: loss -(1 + 0.1) * A.
    per_token, metrics = POLICY_LOSSES.get("gspo")(logprobs, old, advantages, mask, clip_low=0.1, clip_high=0.1)
    assert torch.allclose(per_token[0], torch.full((3,), -1.1, dtype=torch.float64), atol=1e-12)
    assert metrics["clipped_high"][0].tolist() == [1.0, 1.0, 1.0]


def test_gspo_token_form_gradient_equals_sequence_objective():
    generator = torch.Generator().manual_seed(4)
    old = -torch.rand(3, 5, generator=generator, dtype=torch.float64) - 0.5
    logprobs = (old + 0.05 * torch.randn(3, 5, generator=generator, dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[1.0] * 5, [1.0, 1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    per_token, _ = POLICY_LOSSES.get("gspo")(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2)
    aggregate_loss(per_token, mask, "seq_mean_token_mean").backward()
    token_form_grad = logprobs.grad.clone()
    # Sequence-level GSPO objective written directly: s_i differentiable, one term per sequence.
    logprobs.grad = None
    lengths = mask.sum(-1)
    s = torch.exp(((logprobs - old) * mask).sum(-1) / lengths)
    objective = torch.min(s * advantages, s.clamp(0.8, 1.2) * advantages)
    (-objective.mean()).backward()
    assert token_form_grad.abs().sum() > 0.1
    assert torch.allclose(token_form_grad, logprobs.grad, atol=1e-12, rtol=0)


def test_registered_losses_share_one_signature():
    assert set(POLICY_LOSSES.names()) == {"grpo_clip", "grpo_no_clip", "gspo", "reinforce",
                                          "cispo", "sapo", "geo_mean", "gpg", "clip_cov", "kl_cov", "dual_clip"}
    generator = torch.Generator().manual_seed(5)
    logprobs = -torch.rand(3, 4, generator=generator)
    old = logprobs + 0.3 * torch.randn(3, 4, generator=generator)
    mask = torch.ones(3, 4)
    for name in POLICY_LOSSES.names():
        for advantages in (torch.tensor([1.0, -1.0, 0.5]), torch.tensor([[1.0], [-1.0], [0.5]])):
            per_token, metrics = POLICY_LOSSES.get(name)(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.3)
            assert per_token.shape == (3, 4), name
            for key in ("ratio", "clipped_low", "clipped_high", "clipped"):
                assert metrics[key].shape == (3, 4), (name, key)
                assert not metrics[key].requires_grad
    with pytest.raises(KeyError, match="geo_mean, gpg, grpo_clip, grpo_no_clip, gspo, kl_cov, reinforce, sapo"):
        POLICY_LOSSES.get("ppo")


def test_retired_loss_names_name_their_replacement():
    for old, new in (("ppo_clip", "grpo_clip"), ("gr_reinforce", "reinforce")):
        assert old not in POLICY_LOSSES and POLICY_LOSSES.renamed[old] == new
        with pytest.raises(KeyError, match=f"policy loss '{old}' was renamed to '{new}'; use '{new}'"):
            POLICY_LOSSES.get(old)


def test_a_retired_name_cannot_be_registered_again_nor_retire_a_registered_one():
    from rlvr.registry import Registry

    registry = Registry("widget")
    registry.add("round", 1)
    registry.rename("circle", "round")
    with pytest.raises(ValueError, match="widget 'circle' is already registered"):
        registry.add("circle", 2)
    with pytest.raises(ValueError, match="widget 'round' is already registered"):
        registry.rename("round", "disc")
    assert registry.names() == ["round"] and "circle" not in registry
    assert registry.renamed_error("circle") == "widget 'circle' was renamed to 'round'"
    assert registry.renamed_error("round") is None


def test_per_token_advantages_weigh_each_token():
    """A token-level estimator's [B, T] advantages reach each token; [B] broadcasts one value per row."""
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.2]], dtype=torch.float64)).requires_grad_(True)
    per_token = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    for name in ("grpo_clip", "reinforce"):
        loss, _ = POLICY_LOSSES.get(name)(logprobs, logprobs.detach(), per_token, mask, clip_low=0.2)
        (gradient,) = torch.autograd.grad(loss.sum(), logprobs)
        # At ratio 1 both losses have d/dlogp = -A_t per token.
        assert gradient.tolist() == [[-1.0, 2.0, -0.5]], name
        row, _ = POLICY_LOSSES.get(name)(logprobs, logprobs.detach(), per_token.mean(-1), mask, clip_low=0.2)
        (row_gradient,) = torch.autograd.grad(row.sum(), logprobs)
        assert torch.allclose(row_gradient, torch.full((1, 3), 0.5 / 3, dtype=torch.float64)), name
