"""CS336 assignment 5 functions (`rlvr.compat.cs336`): the course's definitions, edge cases included.

Where the course differs from the loop's safe variants (an empty mask gives NaN in the course's
`masked_mean`, 0 in `rlvr.core.masked_mean`), both are checked side by side.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.compat.cs336 import (
    compute_group_normalized_rewards,
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
    sft_microbatch_train_step,
)
from rlvr.core import POLICY_LOSSES, compute_per_token_logprobs
from rlvr.core import masked_mean as safe_masked_mean
from rlvr.core import masked_normalize as safe_masked_normalize

def _reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Answer reward 1 if the answer (after an optional '<' format marker) is right, format reward 0.5."""
    formatted = response.startswith("<")
    correct = float(response.lstrip("<") == ground_truth)
    return {"reward": correct + 0.5 * formatted, "format_reward": float(formatted), "answer_reward": correct}


def test_cs336_group_normalized_rewards_by_hand():
    responses = ["a", "<b", "<a", "c", "<c", "<c"]
    truths = ["a", "a", "a", "c", "c", "c"]
    advantages, raw, metadata = compute_group_normalized_rewards(
        _reward_fn, responses, truths, group_size=3, advantage_eps=1e-6, normalize_by_std=True
    )
    # Rewards: group 0 = [1, 0.5, 1.5] (mean 1, sample std 0.5), group 1 = [1, 1.5, 1.5] (mean 4/3, sample std 0.2887).
    assert raw.tolist() == [1.0, 0.5, 1.5, 1.0, 1.5, 1.5]
    std1 = math.sqrt(((1 - 4 / 3) ** 2 + 2 * (1.5 - 4 / 3) ** 2) / 2)
    expected = [0.0, -0.5 / 0.500001, 0.5 / 0.500001]
    expected += [(reward - 4 / 3) / (std1 + 1e-6) for reward in (1.0, 1.5, 1.5)]
    assert torch.allclose(advantages, torch.tensor(expected), atol=1e-5)
    assert metadata["reward_max"] == 1.5 and metadata["reward_min"] == 0.5
    assert metadata["reward_mean"] == pytest.approx(7 / 6)
    assert metadata["format_reward_mean"] == pytest.approx(4 / 6)
    assert metadata["answer_reward_mean"] == pytest.approx(5 / 6)
    # The population std (0.408 for group 0) would give +-1.2247 instead of +-1.
    assert abs(0.5 / math.sqrt(1 / 6) - 1.0) > 0.2


def test_cs336_group_normalized_rewards_without_std():
    responses = ["a", "<b", "<a", "c", "<c", "<c"]
    truths = ["a", "a", "a", "c", "c", "c"]
    advantages, raw, _ = compute_group_normalized_rewards(
        _reward_fn, responses, truths, group_size=3, advantage_eps=1e-6, normalize_by_std=False
    )
    assert torch.allclose(advantages, torch.tensor([0.0, -0.5, 0.5, -1 / 3, 1 / 6, 1 / 6]), atol=1e-6)
    # Groups taken the wrong way round ([1, 1], [0.5, 1.5], [1.5, 1.5]) would centre differently.
    wrong = raw.view(3, 2) - raw.view(3, 2).mean(1, keepdim=True)
    assert not torch.allclose(wrong.reshape(-1), advantages)


def test_naive_policy_gradient_is_minus_reward_times_logp():
    policy_log_probs = torch.tensor([[-0.5, -1.5, -3.0]], requires_grad=True)
    per_token = compute_naive_policy_gradient_loss(torch.tensor([[-4.0]]), policy_log_probs)  # [B, 1] rewards
    # -(-4) * logp = 4 logp; a version that forgot the reward would give [0.5, 1.5, 3].
    assert per_token.tolist() == [[-2.0, -6.0, -12.0]]
    (gradient,) = torch.autograd.grad(per_token.sum(), policy_log_probs)
    assert gradient.tolist() == [[4.0, 4.0, 4.0]]


def test_cs336_dispatch_by_hand():
    logprobs = torch.log(torch.tensor([[0.5, 0.25]], dtype=torch.float64))
    old = torch.log(torch.tensor([[0.25, 0.5]], dtype=torch.float64))  # ratios [2, 0.5]
    rewards = torch.tensor([[2.0]], dtype=torch.float64)
    advantages = torch.tensor([[-1.0]], dtype=torch.float64)
    loss, _ = compute_policy_gradient_loss(logprobs, "no_baseline", raw_rewards=rewards)
    assert torch.allclose(loss, -2.0 * logprobs)
    loss, _ = compute_policy_gradient_loss(logprobs, "reinforce_with_baseline", advantages=advantages)
    assert torch.allclose(loss, logprobs)
    # grpo_clip, A = -1, eps 0.2: rho 2 -> min(-2, -1.2) = -2 -> 2; rho 0.5 -> min(-0.5, -0.8) -> 0.8.
    loss, metadata = compute_policy_gradient_loss(
        logprobs, "grpo_clip", advantages=advantages, old_log_probs=old, cliprange=0.2
    )
    assert torch.allclose(loss, torch.tensor([[2.0, 0.8]], dtype=torch.float64))
    assert metadata["clipped_low"].tolist() == [[0.0, 1.0]]
    loss, _ = compute_policy_gradient_loss(logprobs, "grpo_no_clip", advantages=advantages, old_log_probs=old)
    assert torch.allclose(loss, torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="raw_rewards"):
        compute_policy_gradient_loss(logprobs, "no_baseline", advantages=advantages)
    with pytest.raises(ValueError, match="cliprange"):
        compute_policy_gradient_loss(logprobs, "grpo_clip", advantages=advantages, old_log_probs=old)
    with pytest.raises(ValueError, match="no_baseline, reinforce_with_baseline, grpo_clip, grpo_no_clip"):
        compute_policy_gradient_loss(logprobs, "ppo", advantages=advantages)


def test_grpo_microbatch_train_step_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([[2.0], [-1.0]])
    loss, metadata = grpo_microbatch_train_step(logprobs, mask, 2, "reinforce_with_baseline", advantages=advantages)
    # Per-token -A * logp: row 0 [2, 4] -> mean 3; row 1 [-1] -> mean -1; batch mean 1; / 2 steps.
    assert loss.item() == pytest.approx(0.5)
    assert metadata["policy_loss"].item() == pytest.approx(1.0)
    # d/dlogp: row 0 -A / (2 tokens * 2 rows * 2 steps) = -0.25; row 1 +1 / (1 * 2 * 2) = 0.25.
    assert logprobs.grad.tolist() == [[-0.25, -0.25, 0.0], [0.25, 0.0, 0.0]]


def test_grpo_microbatch_accumulation_equals_full_batch(make_tiny_llama, policy_batch, pop_gradients):
    model = make_tiny_llama(torch.float64)
    input_ids, attention_mask, mask, advantages = policy_batch(seed=1)
    with torch.no_grad():
        old = compute_per_token_logprobs(model, input_ids, attention_mask) + 0.1 * torch.randn(
            4, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64
        )
    kwargs = {"loss_type": "grpo_clip", "cliprange": 0.2}
    logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)
    full_loss, _ = grpo_microbatch_train_step(
        logprobs, mask, 1, advantages=advantages[:, None], old_log_probs=old, **kwargs
    )
    full_grads = pop_gradients(model)
    accumulated_loss = 0.0
    for rows in (slice(0, 2), slice(2, 4)):
        logprobs = compute_per_token_logprobs(model, input_ids[rows], attention_mask[rows])
        loss, _ = grpo_microbatch_train_step(
            logprobs, mask[rows], 2, advantages=advantages[rows, None], old_log_probs=old[rows], **kwargs
        )
        accumulated_loss += loss.item()
    accumulated_grads = pop_gradients(model)
    assert accumulated_loss == pytest.approx(full_loss.item(), abs=1e-12)
    assert sum(g.abs().sum() for g in full_grads) > 1e-3
    for full, accumulated in zip(full_grads, accumulated_grads):
        assert torch.allclose(full, accumulated, atol=1e-10, rtol=0)
    # Without the division by the number of steps the accumulated gradient would be twice as large.
    assert not torch.allclose(full_grads[0], 2 * accumulated_grads[0])


def test_sft_microbatch_train_step_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -1.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    loss, metadata = sft_microbatch_train_step(logprobs, mask, gradient_accumulation_steps=4, normalize_constant=2.0)
    # Row sums -3 and -5, / 2 -> -1.5 and -2.5; negated mean 2.0; / 4 steps = 0.5.
    assert loss.item() == pytest.approx(0.5)
    assert metadata["nll"].item() == pytest.approx(2.0)
    # d/dlogp = -1 / (2 constant * 2 rows * 4 steps) = -1/16 on response tokens.
    assert logprobs.grad.tolist() == [[-0.0625, -0.0625, 0.0], [-0.0625, -0.0625, 0.0]]


def test_masked_mean_is_nan_where_the_mask_is_empty_as_in_the_course():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])  # column 1 is fully masked
    # Along dim 0: (1+4)/2, 0/0, 3/1.
    course = masked_mean(values, mask, dim=0)
    assert course[0].item() == 2.5 and course[2].item() == 3.0 and math.isnan(course[1].item())
    # The loop's variant gives 0 there instead.
    assert safe_masked_mean(values, mask, dim=0).tolist() == [2.5, 0.0, 3.0]
    # Along rows and over everything both agree: (1+3)/2, 4/1; (1+3+4)/3.
    assert masked_mean(values, mask, dim=1).tolist() == [2.0, 4.0] == safe_masked_mean(values, mask, dim=1).tolist()
    assert masked_mean(values, mask).item() == pytest.approx(8 / 3) == safe_masked_mean(values, mask).item()
    assert math.isnan(masked_mean(values, torch.zeros_like(mask)).item())


def test_masked_normalize_is_the_plain_formula():
    values = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    # sum(tensor * mask) / c: NaN * 0 and inf * 0 stay NaN in the course's formula.
    course = masked_normalize(values, mask, dim=-1, normalize_constant=2.0)
    assert all(math.isnan(v) for v in course.tolist())
    clean = torch.nan_to_num(values, nan=0.0, posinf=0.0)
    assert masked_normalize(clean, mask, dim=-1, normalize_constant=2.0).tolist() == [1.5, 5.0]
    # The loop's variant ignores what is under the mask.
    assert safe_masked_normalize(values, mask, dim=-1, normalize_constant=2.0).tolist() == [1.5, 5.0]


def test_grpo_microbatch_step_with_an_empty_row_is_nan_as_in_the_course():
    logprobs = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # row 1 has no response tokens
    loss, _ = grpo_microbatch_train_step(logprobs, mask, 1, "reinforce_with_baseline",
                                         advantages=torch.tensor([[1.0], [1.0]]))
    assert math.isnan(loss.item())


def test_grpo_clip_loss_is_the_registered_loop_loss():
    generator = torch.Generator().manual_seed(2)
    logprobs = -torch.rand(3, 5, generator=generator, dtype=torch.float64)
    old = logprobs + 0.4 * torch.randn(3, 5, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    course, course_meta = compute_grpo_clip_loss(advantages, logprobs, old, 0.2)
    loop, loop_meta = POLICY_LOSSES.get("grpo_clip")(logprobs, old, advantages, torch.ones(3, 5), clip_low=0.2)
    assert torch.equal(course, loop) and torch.equal(course_meta["clipped"], loop_meta["clipped"])
    assert course_meta["clipped"].sum() > 0  # the clip is active somewhere on this input
