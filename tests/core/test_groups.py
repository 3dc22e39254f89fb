"""`no_contrast` / `no_contrast_groups`: the one rule for a group without reward contrast, by hand.

A group has no contrast when fewer than two rewards are finite, or when max - min <= eps * s with
s = max(|max|, |min|, 1): an absolute tolerance of eps below a reward scale of 1, a relative one
above it. The cases sit on either side of that line, and some of them flip under either of the
plausible wrong rules (a purely absolute eps, or a purely relative one without the floor of 1).
"""

from __future__ import annotations

import math

import torch

from rlvr.core import NO_CONTRAST_EPS, no_contrast_groups, no_contrast_rows

NAN = math.nan
# (rewards of one group, no contrast?) with eps = 1e-6.
GROUPS = [
    ([1000.0, 1000.0005], True),  # spread 5e-4 <= 1e-6 * 1000 = 1e-3: float noise at this scale
    ([1000.0, 1000.002], False),  # 2e-3 > 1e-3
    ([-2e5, -2e5 + 0.1], True),  # 0.1 <= 0.2: the scale is |min|
    ([0.5, 0.5 + 5e-7], True),  # below scale 1 the tolerance is 1e-6 itself
    ([0.5, 0.5 + 2e-6], False),
    ([1e-3, 1e-3 + 5e-7], True),  # not 1e-9: the scale never drops below 1
    ([3.0, NAN, NAN], True),  # one finite reward
    ([NAN, NAN], True),
    ([1.0, NAN, 0.0], False),  # NaN left out, the rest have contrast
    ([2.0, 2.0, 2.0], True),
]


def _no_contrast(values: list[float], tolerance) -> bool:
    """The rule written out for one group, with `tolerance(high, low)` the allowed spread."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return True
    high, low = max(finite), min(finite)
    return high - low <= tolerance(high, low)


def rlvr_rule(high, low):
    return 1e-6 * max(abs(high), abs(low), 1.0)


def absolute_rule(high, low):
    return 1e-6


def relative_rule(high, low):
    return 1e-6 * max(abs(high), abs(low))


def test_no_contrast_is_absolute_below_scale_one_and_relative_above():
    rewards = torch.tensor([r for group, _ in GROUPS for r in group], dtype=torch.float64)
    group_index = torch.tensor([g for g, (group, _) in enumerate(GROUPS) for _ in group])
    expected = [flag for _, flag in GROUPS]
    assert NO_CONTRAST_EPS == 1e-6
    assert no_contrast_groups(rewards, group_index, len(GROUPS)).tolist() == expected
    assert [_no_contrast(group, rlvr_rule) for group, _ in GROUPS] == expected
    # The wrong rules disagree: an absolute 1e-6 sees contrast in groups 0 and 2, a relative one
    # without the floor of 1 sees it in group 5.
    flipped = {name: [g for g, (group, flag) in enumerate(GROUPS) if _no_contrast(group, rule) != flag]
               for name, rule in (("absolute", absolute_rule), ("relative", relative_rule))}
    assert flipped == {"absolute": [0, 2], "relative": [5]}


def test_rows_and_shuffled_group_ids_give_the_same_answer():
    rows = torch.tensor([[1000.0, 1000.0005], [1000.0, 1000.002], [0.5, 0.5 + 5e-7], [0.0, 1.0]], dtype=torch.float64)
    assert no_contrast_rows(rows).tolist() == [True, False, True, False]
    # The same rewards with their group ids interleaved (group g holds elements g and g + 4).
    rewards = torch.cat([rows[:, 0], rows[:, 1]])  # [8]
    group_index = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    assert no_contrast_groups(rewards, group_index, 4).tolist() == [True, False, True, False]
    assert no_contrast_rows(rows, eps=0.0).tolist() == [False, False, False, False]  # eps 0: any spread counts


def test_the_dynamic_sampling_filters_read_rewards_or_correctness():
    """`reward` keeps reward contrast whatever the verdicts say; `correctness` keeps a mix of right and wrong
    whatever the rewards say (a group all right, 1.2 and 1.0, has reward contrast and no correctness contrast)."""
    from rlvr.core import DYNAMIC_SAMPLING_FILTERS

    reward, correctness = DYNAMIC_SAMPLING_FILTERS.get("reward"), DYNAMIC_SAMPLING_FILTERS.get("correctness")
    cases = [  # rewards, correct, kept by reward, kept by correctness
        ([1.2, 1.0], [True, True], True, False),
        ([0.0, 0.0], [False, False], False, False),
        ([1.0, 0.0], [True, False], True, True),
        ([1.0, 1.0], [True, False], False, True),  # a verdict may be right without a reward of its own
        ([float("nan"), 1.0], [False, True], False, True),  # one finite reward: no reward contrast
    ]
    for rewards, correct, by_reward, by_correctness in cases:
        rewards, correct = torch.tensor(rewards), torch.tensor(correct)
        assert reward(rewards, correct) is by_reward and correctness(rewards, correct) is by_correctness
