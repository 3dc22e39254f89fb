"""Conformance of `rlvr.tasks.weighted_total` with how TRL's GRPOTrainer combines reward functions.

TRL's part runs in two steps. `GRPOTrainer._calculate_rewards` (TRL's own code, called here on a
trainer created without its constructor and given the few attributes the method reads) puts each
reward function's outputs in a column, a None becoming NaN. The combination is inside the
600-line `_generate_and_score_completions`, which cannot run without a model, so its two lines
are reproduced here (`trl_total`), and `test_trl_still_combines_rewards_this_way` checks that
TRL's source still holds them: the weighted columns are nansum'd per row, and a row where every
function gave None is set back to NaN (unscorable).

The same values (None, NaN, all-None rows, weights 1, 0 and negative) go to `weighted_total` as
components, NaN for None. The totals agree everywhere except in one documented place: a row
where only weight-0 functions gave a value. TRL sums 0 * value = 0 and scores it 0 (it enters
the group baseline); rlvr returns NaN, because no component that carries weight was judged
(`weighted_total`'s docstring: such a completion has no meaningful total and must not be scored
as 0). `KNOWN_DIFFERENCES` pins those rows, so a change on either side shows up here.
"""

from __future__ import annotations

import inspect
import logging
import math
import re
from types import SimpleNamespace

import pytest
import torch
import trl.trainer.grpo_trainer as trl_grpo  # the test extra installs TRL, as for tests/core/test_trl_conformance.py
from trl.trainer.grpo_trainer import GRPOTrainer

from rlvr.tasks import weighted_total

NAMES = ("answer", "format", "penalty")
WEIGHTS = (1.0, 0.0, -0.5)  # a weighted function, a logged-only one (weight 0) and a negative one
NAN = float("nan")
# Each row: what the three reward functions return for one completion (None: "cannot judge this one").
ROWS = {
    "all judged": (1.0, 1.0, 1.0),  # 1 + 0 - 0.5 = 0.5
    "answer judged, format None": (0.0, None, 1.0),  # -0.5
    "answer None": (None, 1.0, 1.0),  # -0.5
    "all None": (None, None, None),  # NaN: unscorable
    "answer only": (1.0, None, None),  # 1
    "negative values": (-1.0, 1.0, 0.5),  # -1 - 0.25 = -1.25
    "fractions": (0.25, 0.5, None),  # 0.25
    "penalty only": (None, None, 2.0),  # -1
    "NaN returned instead of None": (NAN, 1.0, 0.0),  # a NaN is treated as None by both: 0
    "only the weight-0 function judged": (None, 1.0, None),  # TRL 0, rlvr NaN (KNOWN_DIFFERENCES)
    "only the weight-0 function judged, a zero": (None, 0.0, None),  # TRL 0, rlvr NaN
}
BY_HAND = {"all judged": 0.5, "answer judged, format None": -0.5, "answer None": -0.5, "answer only": 1.0,
           "negative values": -1.25, "fractions": 0.25, "penalty only": -1.0, "NaN returned instead of None": 0.0}
KNOWN_DIFFERENCES = {"only the weight-0 function judged", "only the weight-0 function judged, a zero"}


@pytest.fixture(autouse=True)
def _plain_trl_logger(monkeypatch):
    """TRL logs through accelerate's logger, which refuses to log before an Accelerator exists; a plain logger
    receives the same warning."""
    monkeypatch.setattr(trl_grpo, "logger", logging.getLogger("trl.trainer.grpo_trainer.test"))


def _reward_function(index: int):
    def reward(prompts, completions, completion_ids, **kwargs):
        return [ROWS[completion][index] for completion in completions]  # the completion text names its row

    reward.__name__ = NAMES[index]
    return reward


def trl_rewards_per_func(rows: list[str]) -> torch.Tensor:
    """TRL's `_calculate_rewards` itself on a stub trainer. -> [N, F], NaN where a function returned None."""
    trainer = object.__new__(GRPOTrainer)  # skip __init__: no model, dataset or accelerator
    attributes = {
        "accelerator": SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        "args": SimpleNamespace(report_to=[]),
        "state": SimpleNamespace(global_step=0),
        "reward_funcs": [_reward_function(i) for i in range(len(NAMES))],
        "reward_processing_classes": [None] * len(NAMES),
        "reward_func_names": list(NAMES),
        "reward_weights": torch.tensor(WEIGHTS),
        "environments": None,
        "_log_completion_extra": lambda *args, **kwargs: None,
        "_log_metric": lambda *args, **kwargs: None,
    }
    for name, value in attributes.items():
        setattr(trainer, name, value)
    prompts = ["p"] * len(rows)
    inputs = [{"prompt": "p", "completion": row} for row in rows]
    return GRPOTrainer._calculate_rewards(trainer, inputs, prompts, list(rows), [[0]] * len(rows))


def trl_total(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The two lines of `_generate_and_score_completions` (sum_then_normalize) that combine the columns. -> [N]."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    return rewards


def rlvr_total(values: tuple) -> float:
    components = {name: (NAN if value is None else value) for name, value in zip(NAMES, values)}
    return weighted_total(components, dict(zip(NAMES, WEIGHTS)))


def test_trl_still_combines_rewards_this_way():
    source = re.sub(r"\s+", " ", inspect.getsource(GRPOTrainer._generate_and_score_completions))
    for line in ("unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
                 "rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)",
                 "rewards[unscorable_mask] = torch.nan"):
        assert line in source, f"TRL's reward combination changed: {line!r} is gone; update trl_total"


def test_trl_columns_hold_each_function_with_none_as_nan(caplog):
    rows = list(ROWS)
    with caplog.at_level(logging.WARNING):
        columns = trl_rewards_per_func(rows)  # [N, F]
    assert columns.shape == (len(rows), len(NAMES))
    for i, row in enumerate(rows):
        for j, value in enumerate(ROWS[row]):
            if value is None or math.isnan(value):
                assert math.isnan(columns[i, j])
            else:
                assert float(columns[i, j]) == pytest.approx(value)
    assert "All reward functions returned None" in caplog.text  # the all-None row warns


@pytest.mark.parametrize("row", sorted(set(ROWS) - KNOWN_DIFFERENCES))
def test_rlvr_total_equals_trls(row):
    rows = list(ROWS)
    trl = float(trl_total(trl_rewards_per_func(rows), torch.tensor(WEIGHTS))[rows.index(row)])
    ours = rlvr_total(ROWS[row])
    if math.isnan(trl):
        assert math.isnan(ours)
    else:
        assert ours == pytest.approx(trl, abs=1e-6)
        assert ours == pytest.approx(BY_HAND[row], abs=1e-6)


def test_a_row_judged_only_by_weight_0_functions_is_where_rlvr_and_trl_differ():
    rows = list(ROWS)
    trl = trl_total(trl_rewards_per_func(rows), torch.tensor(WEIGHTS))
    for row in KNOWN_DIFFERENCES:
        assert float(trl[rows.index(row)]) == 0.0  # TRL: scored 0, it enters the group's mean and std
        assert math.isnan(rlvr_total(ROWS[row]))  # rlvr: unscorable, its own group, advantage 0


def test_the_comparison_can_fail():
    """A naive combination (None as 0, plain sum) differs from TRL on the all-None row and the NaN one."""
    rows = list(ROWS)
    trl = trl_total(trl_rewards_per_func(rows), torch.tensor(WEIGHTS))

    def naive(values):
        return sum(weight * (0.0 if value is None else value) for weight, value in zip(WEIGHTS, values))

    assert naive(ROWS["all None"]) == 0.0 and math.isnan(float(trl[rows.index("all None")]))
    assert math.isnan(naive(ROWS["NaN returned instead of None"]))
    assert float(trl[rows.index("NaN returned instead of None")]) == 0.0
