"""benchmarks/learning/contrast_share.py: the binomial share of groups without contrast beside the measured one."""

from __future__ import annotations

import pytest

from benchmarks.learning.contrast_share import shares


def test_the_prediction_is_p_to_the_g_plus_its_complement_averaged_over_iterations():
    records = [{"correct_frac": 0.5, "frac_no_contrast_groups": 0.25},
               {"correct_frac": 0.1, "frac_no_contrast_groups": 0.75}]
    result = shares(records, group_size=4)
    assert result["p"] == pytest.approx(0.3) and result["measured"] == pytest.approx(0.5)
    # per iteration, then averaged: (0.5^4 + 0.5^4 + 0.1^4 + 0.9^4) / 2; the pooled p would give 0.2482
    assert result["predicted"] == pytest.approx((0.125 + 0.0001 + 0.6561) / 2)
    assert shares(records[:1], group_size=8)["predicted"] == pytest.approx(2 * 0.5 ** 8)
