"""REINFORCE++, REINFORCE++-baseline, ReMax, OPO, GRPO pass@k and GPG against float64 loops written
from the papers' formulas as verl computes them (verl is not importable here without ray,
tensordict and omegaconf: see tests/core/test_new_policy_losses.py).

The batch: three groups of four with ragged lengths, one group without reward contrast, groups
given out of order by group_ids.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import ADVANTAGE_ESTIMATORS
from rlvr.core.value import WHITEN_EPS

REWARDS = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.2, 0.2, 0.2, 0.2, 0.0, 2.0, 0.0, 0.5], dtype=torch.float64)
GROUP_IDS = torch.tensor([2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1])
LENGTHS = [5, 1, 3, 2, 4, 4, 1, 6, 2, 6, 3, 1]
EPS = 1e-6


def _mask(width: int = 6) -> torch.Tensor:
    mask = torch.zeros(len(LENGTHS), width, dtype=torch.float64)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    return mask


def _groups() -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(GROUP_IDS.tolist()):
        groups.setdefault(group, []).append(row)
    return groups


def _call(name: str, **options) -> torch.Tensor:
    return ADVANTAGE_ESTIMATORS.get(name)(REWARDS, group_ids=GROUP_IDS, completion_mask=_mask(), eps=EPS, **options)


def _token_whiten(values: list[float]) -> list[float]:
    """z-score over tokens: value i repeated LENGTHS[i] times, population std."""
    tokens = [v for v, length in zip(values, LENGTHS) for _ in range(length)]
    mean = sum(tokens) / len(tokens)
    std = math.sqrt(sum((v - mean) ** 2 for v in tokens) / len(tokens))
    return [(v - mean) / (std + WHITEN_EPS) for v in values]


def _close(actual: torch.Tensor, expected: list[float]) -> None:
    assert actual.tolist() == pytest.approx(expected, abs=1e-9)


def test_reinforce_plus_plus_whitens_over_tokens():
    advantages = _call("reinforce_plus_plus")
    expected = _token_whiten(REWARDS.tolist())
    _close(advantages, expected)
    # Whitening per sequence (each completion once) is a different estimator on ragged lengths.
    rewards = REWARDS.tolist()
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    assert max(abs(a - (r - mean) / std) for a, r in zip(advantages.tolist(), rewards)) > 1e-2
    with pytest.raises(ValueError, match="completion_mask"):
        ADVANTAGE_ESTIMATORS.get("reinforce_plus_plus")(REWARDS, group_ids=GROUP_IDS)


def test_reinforce_plus_plus_baseline_centres_by_group_then_whitens_over_tokens():
    advantages = _call("reinforce_plus_plus_baseline")
    groups = _groups()
    centred = [0.0] * len(LENGTHS)
    for rows in groups.values():
        mean = sum(REWARDS[r].item() for r in rows) / len(rows)
        for r in rows:
            centred[r] = REWARDS[r].item() - mean
    expected = _token_whiten(centred)
    for r in groups[0]:  # the group without contrast gives exactly 0 (verl: -mean / std)
        expected[r] = 0.0
    _close(advantages, expected)
    assert advantages[groups[0]].eq(0).all()


def test_remax_subtracts_the_greedy_reward():
    baselines = torch.tensor([0.5] * 4 + [1.0] * 4 + [0.0] * 4, dtype=torch.float64)
    advantages = ADVANTAGE_ESTIMATORS.get("remax")(REWARDS, group_size=1, reward_baselines=baselines)
    _close(advantages, [r - b for r, b in zip(REWARDS.tolist(), baselines.tolist())])
    with pytest.raises(ValueError, match="reward_baselines"):
        ADVANTAGE_ESTIMATORS.get("remax")(REWARDS, group_size=1)


def test_opo_baseline_is_the_length_weighted_group_mean():
    advantages = _call("opo")
    expected = [0.0] * len(LENGTHS)
    for rows in _groups().values():
        baseline = sum(LENGTHS[r] * REWARDS[r].item() for r in rows) / sum(LENGTHS[r] for r in rows)
        for r in rows:
            expected[r] = REWARDS[r].item() - baseline
    _close(advantages, expected)
    # The unweighted group mean (Dr. GRPO) gives other values on these ragged lengths.
    dr_grpo = ADVANTAGE_ESTIMATORS.get("mean_centered")(REWARDS, group_ids=GROUP_IDS)
    assert (dr_grpo - advantages).abs().max() > 1e-2


@pytest.mark.parametrize("std", ["sample", "population"])
def test_grpo_passk_rewards_only_a_unique_best(std):
    advantages = _call("grpo_passk", std=std)
    expected = [0.0] * len(LENGTHS)
    for rows in _groups().values():
        values = sorted((REWARDS[r].item() for r in rows), reverse=True)
        best = [r for r in rows if REWARDS[r].item() == values[0]]
        if len(best) != 1:
            continue  # a tie for the best (group 2 has two 1.0s): no signal
        mean = sum(values) / len(values)
        degrees = len(values) - 1 if std == "sample" else len(values)
        group_std = math.sqrt(sum((v - mean) ** 2 for v in values) / degrees)
        expected[best[0]] = (values[0] - values[1]) / (group_std + EPS)
    _close(advantages, expected)
    assert torch.count_nonzero(advantages) == 1  # only group 1 has a single best (2.0)


def test_gpg_scales_the_group_centred_reward_by_the_share_with_signal():
    advantages = _call("gpg")
    nonzero = sum(1 for r in REWARDS.tolist() if r != 0)
    alpha = len(LENGTHS) / nonzero
    expected = [0.0] * len(LENGTHS)
    for group, rows in _groups().items():
        mean = sum(REWARDS[r].item() for r in rows) / len(rows)
        for r in rows:
            expected[r] = 0.0 if group == 0 else alpha * (REWARDS[r].item() - mean)
    _close(advantages, expected)
    assert alpha > 1.2  # the scale matters on this batch


def test_hand_worked_values():
    # REINFORCE++-baseline: groups [1, 0] and [2, 2] (no contrast), lengths 1, 3, 2, 2. Centred:
    # 0.5, -0.5, 0, 0; over the 8 tokens mean (0.5 - 1.5) / 8 = -0.125, population std
    # sqrt((0.625^2 + 3 * 0.375^2 + 4 * 0.125^2) / 8) = sqrt(0.109375) = 0.33072: 0.625 / 0.33072 = 1.88982,
    # -0.375 / 0.33072 = -1.13389, and exactly 0 for the group without contrast (not 0.125 / 0.33072).
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.float64)
    advantages = ADVANTAGE_ESTIMATORS.get("reinforce_plus_plus_baseline")(rewards, group_size=2, completion_mask=mask)
    assert advantages.tolist() == pytest.approx([1.8898223, -1.1338934, 0.0, 0.0], abs=1e-6)
    # OPO: group [1, 0] with lengths 1 and 3: baseline (1 * 1 + 3 * 0) / 4 = 0.25: A = 0.75, -0.25.
    opo = ADVANTAGE_ESTIMATORS.get("opo")(rewards[:2], group_size=2, completion_mask=mask[:2])
    assert opo.tolist() == pytest.approx([0.75, -0.25], abs=1e-12)
    # Pass@k: group [1, 0.5, 0]: the best (1) gets (1 - 0.5) / sample std 0.5 = 1 (population std
    # 0.4082 would give 1.2247); the others 0.
    passk = ADVANTAGE_ESTIMATORS.get("grpo_passk")(torch.tensor([1.0, 0.5, 0.0]), group_size=3, std="sample")
    assert passk.tolist() == pytest.approx([0.5 / (0.5 + 1e-6), 0.0, 0.0], abs=1e-6)
    # GPG: rewards [1, 0, 0, 0] in groups of two: 1 of 4 non-zero, alpha 4: A = 4 * [0.5, -0.5, 0, 0].
    gpg = ADVANTAGE_ESTIMATORS.get("gpg")(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=2)
    assert gpg.tolist() == [2.0, -2.0, 0.0, 0.0]
