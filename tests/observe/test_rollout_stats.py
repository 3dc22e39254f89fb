"""The rollout part of an iteration's metrics, on rows built by hand: the advantages' spread."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.observe.metric_names import ADVANTAGE_ABS_MEAN, ADVANTAGE_STD
from rlvr.observe.rollout_stats import RolloutRows, rollout_stats
from rlvr.tasks.task import Verdict


def _rows(advantages: list[float], group_size: int = 2) -> RolloutRows:
    n = len(advantages)
    verdicts = [Verdict(components={"answer": 1.0}, total=1.0, status="ok", verifier="hand", version="1")] * n
    return RolloutRows(verdicts=verdicts, rewards=torch.tensor([1.0, 0.0] * (n // 2)),
                       advantages=torch.tensor(advantages), lengths=torch.full((n,), 3),
                       truncated=torch.zeros(n).bool(), group_size=group_size, sampled_groups=n // group_size,
                       filled_no_contrast=0, rounds=1,
                       samples=[{"completion": str(i)} for i in range(n)])


def test_advantage_std_is_the_sample_std_of_the_batch():
    """adv_std as "GRPO in 20 lines" logs it: the sample std (n - 1) over the batch's completions.
    [1, -1, 3, -3]: mean 0, squares sum 20: sample std sqrt(20 / 3) = 2.582; the population std would be
    sqrt(5) = 2.236 and the abs mean 2."""
    stats = rollout_stats(_rows([1.0, -1.0, 3.0, -3.0]), dynamic_sampling=False)
    assert stats[ADVANTAGE_STD] == pytest.approx(math.sqrt(20 / 3), rel=1e-6)
    assert stats[ADVANTAGE_STD] != pytest.approx(math.sqrt(5), rel=1e-3)
    assert stats[ADVANTAGE_ABS_MEAN] == pytest.approx(2.0)
    # Degenerate groups give exactly 0 advantages, and so a spread of exactly 0.
    assert rollout_stats(_rows([0.0, 0.0, 0.0, 0.0]), dynamic_sampling=False)[ADVANTAGE_STD] == 0.0


def test_advantage_std_of_two_rows_divides_by_one():
    """[2, 0]: sample std sqrt(2) = 1.414 (n - 1 = 1); the population std would be 1."""
    stats = rollout_stats(_rows([2.0, 0.0]), dynamic_sampling=False)
    assert stats[ADVANTAGE_STD] == pytest.approx(math.sqrt(2), rel=1e-6)
