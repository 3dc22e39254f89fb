"""The advantage stage of the RL loop (`rlvr.training.advantage_stage.compute_advantages`) and the one
definition of a group without reward contrast, which dynamic sampling, the rollout statistics and
the advantages share. No model needed: rewards go in, advantages come out.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rlvr.core import ADVANTAGE_ESTIMATORS, compute_group_advantages
from rlvr.training.advantage_stage import compute_advantages
from rlvr.core.groups import reward_contrast
from rlvr.observe.rollout_stats import no_contrast_fraction

NAN = float("nan")


def _algo(estimator="grpo", normalize=False, clip=0.0, std="population"):
    return SimpleNamespace(advantage_estimator=estimator, std=std, normalize_advantages=normalize,
                           advantage_clip=clip)


def test_unscorable_rows_get_zero_and_leave_their_group_alone():
    rewards = torch.tensor([1.0, 0.0, NAN, 1.0, 0.5, 0.5, 0.5, 0.5])
    group_ids = torch.arange(8) // 4
    kept_rewards, kept_ids = rewards.clone(), group_ids.clone()
    advantages = compute_advantages(rewards, group_ids, _algo())
    # Group 0 without its NaN row: [1, 0, 1], mean 2/3, population std sqrt(2)/3 = 0.4714.
    std = math.sqrt(2) / 3
    expected = [(1 / 3) / (std + 1e-6), (-2 / 3) / (std + 1e-6), 0.0, (1 / 3) / (std + 1e-6), 0.0, 0.0, 0.0, 0.0]
    assert torch.allclose(advantages, torch.tensor(expected), atol=1e-5)
    assert advantages[2] == 0.0 and torch.equal(advantages[4:], torch.zeros(4))
    # Scoring the NaN row as 0 instead would centre group 0 at 0.5: advantages +-1, and -1 for that row.
    wrong = compute_group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    assert torch.allclose(wrong, torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    assert not torch.allclose(advantages[:4], wrong, atol=0.1)
    # The stage changes nothing it was given.
    assert torch.equal(rewards.isnan(), kept_rewards.isnan()) and torch.equal(group_ids, kept_ids)


def test_normalization_then_clip_by_hand():
    rewards = torch.tensor([1.0, 0.0, NAN, 1.0, 0.5, 0.5, 0.5, 0.5])
    group_ids = torch.arange(8) // 4
    raw = compute_advantages(rewards, group_ids, _algo())  # [a, -2a, 0, a, 0, 0, 0, 0], a = 0.7071
    a = float(raw[0])
    # Mean 0, population std sqrt(6 a^2 / 8): z-scores [1.1547, -2.3094, 0, 1.1547, 0, ...].
    std = math.sqrt(6 * a * a / 8)
    normalized = compute_advantages(rewards, group_ids, _algo(normalize=True))
    assert torch.allclose(normalized, raw / (std + 1e-8), atol=1e-5)
    assert normalized[1].item() == pytest.approx(-2 / math.sqrt(0.75), abs=1e-4)
    clipped = compute_advantages(rewards, group_ids, _algo(normalize=True, clip=1.5))
    assert clipped[1].item() == -1.5 and clipped[0].item() == pytest.approx(normalized[0].item())


def _token_level(rewards, group_size=None, group_ids=None, completion_mask=None, **options):
    """A made-up token-level estimator: each token gets its sequence's group-centred total reward."""
    totals = (rewards * completion_mask).sum(-1)  # [N]
    return compute_group_advantages(totals, group_ids=group_ids, scale="none")[:, None] * completion_mask  # [N, T]


def test_per_token_rewards_go_through_a_token_level_estimator(monkeypatch):
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS._items, "test_token_level", _token_level)  # registered for this test only
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # [N, T]
    rewards = torch.zeros(4, 3)
    rewards[0, 1], rewards[1, 0], rewards[2, 2] = 1.0, 0.0, 2.0  # the reward sits on each row's last token
    rewards[3, 0] = NAN  # an unscorable completion
    group_ids = torch.tensor([0, 0, 0, 0])
    advantages = compute_advantages(rewards, group_ids, _algo("test_token_level"), completion_mask=mask)
    # Totals of the scorable rows [1, 0, 2], mean 1: row advantages [0, -1, 1]; the NaN row 0.
    assert advantages.shape == (4, 3)
    assert advantages.tolist() == [[0.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    normalized = compute_advantages(rewards, group_ids, _algo("test_token_level", normalize=True),
                                    completion_mask=mask)
    tokens = normalized[mask != 0]  # 8 tokens, before: 0, 0, -1, 1, 1, 1, 0, 0 (mean 1/4)
    assert tokens.mean().abs() < 1e-6 and tokens.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(normalized[mask == 0], torch.zeros(int((mask == 0).sum())))
    with pytest.raises(ValueError, match="completion_mask"):
        compute_advantages(rewards, group_ids, _algo("test_token_level"))


# Groups of 4 rewards (float32, as the loop holds them). The first two are borderline: their spread
# is far above 1e-6 in absolute terms but below 1e-6 of their magnitude.
GROUPS = [
    ([1000.0, 1000.0001, 1000.0, 1000.0001], False),  # spread 6.1e-5 at scale 1e3: float noise
    ([2e5, 2e5 + 0.1, 2e5, 2e5], False),  # 0.094 at 2e5: 4.7e-7 relative
    ([2e5, 2e5 + 1.0, 2e5, 2e5], True),  # 5e-6 relative: real contrast
    ([0.5, 0.5 + 5e-7, 0.5, 0.5], False),  # below 1e-6 at scale 1
    ([0.0, 1.0, 0.0, 1.0], True),
    ([1.0, NAN, NAN, NAN], False),  # one judgeable reward
    ([1.0, 1.0, NAN, 0.5], True),
]


def test_dynamic_sampling_statistics_and_advantages_agree_on_borderline_groups():
    rewards = torch.tensor([r for group, _ in GROUPS for r in group], dtype=torch.float32)  # [7 * 4]
    group_ids = torch.arange(rewards.numel()) // 4
    expected_contrast = [contrast for _, contrast in GROUPS]
    # Dynamic sampling keeps exactly the groups with contrast.
    assert [reward_contrast(rewards[4 * g : 4 * g + 4], None) for g in range(len(GROUPS))] == expected_contrast
    # The statistics count the others.
    assert no_contrast_fraction(rewards, 4) == pytest.approx(expected_contrast.count(False) / len(GROUPS))
    # Every estimator gives exactly 0 to a group without contrast, and something else to the others.
    for name in ("grpo", "mean_centered", "rloo"):
        advantages = compute_advantages(rewards, group_ids, _algo(name)).view(-1, 4)
        nonzero = [bool(row.abs().max() > 0) for row in advantages]
        assert nonzero == expected_contrast, name
    # The absolute rule `max - min < 1e-6` would have kept the first two groups as having contrast.
    absolute = [float(torch.tensor(g, dtype=torch.float32).nan_to_num(nan=g[0]).max()
                      - torch.tensor(g, dtype=torch.float32).nan_to_num(nan=g[0]).min()) >= 1e-6 for g, _ in GROUPS[:2]]
    assert absolute == [True, True]


def test_remax_baselines_reach_the_estimator_and_an_unjudged_one_zeroes_its_row():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5])
    group_ids = torch.tensor([0, 0, 1, 1])
    baselines = torch.tensor([0.25, 0.25, NAN, NAN])  # prompt 1's greedy completion could not be judged
    advantages = compute_advantages(rewards, group_ids, _algo("remax"), reward_baselines=baselines)
    assert advantages.tolist() == [0.75, -0.25, 0.0, 0.0]


def test_token_weighted_estimators_leave_unscorable_rows_out_of_their_statistics():
    rewards = torch.tensor([1.0, 0.0, NAN, 0.5])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    advantages = compute_advantages(rewards, torch.arange(4), _algo("reinforce_plus_plus"), completion_mask=mask)
    # The tokens of the scorable rows: 1, 1, 1, 0, 0.5, 0.5 (mean 2/3), z-scored with the population std.
    tokens = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.5, 0.5])
    mean, std = tokens.mean(), (tokens - tokens.mean()).square().mean().sqrt()
    expected = [(1 - mean) / std, (0 - mean) / std, 0.0, (0.5 - mean) / std]
    assert torch.allclose(advantages, torch.tensor(expected), atol=1e-6)
    # Counting the unscorable row as three tokens of reward 0 would move the mean to 4/9.
    assert abs(mean.item() - 4 / 9) > 0.1


def test_remax_with_no_judged_baseline_learns_nothing():
    rewards = torch.tensor([1.0, 0.0])
    advantages = compute_advantages(rewards, torch.tensor([0, 0]), _algo("remax"),
                                    reward_baselines=torch.tensor([NAN, NAN]))
    assert advantages.tolist() == [0.0, 0.0]
