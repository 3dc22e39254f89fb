"""An estimator that needs a new input is one file: proved with an estimator and an input provider
defined here, registered for the test only, and run through `rlvr train` (on-policy and one step
off-policy), `rlvr check`, `rlvr check --mechanism`, the config checks and the advantage stage.

`prompt_code` gives each row the sum of its prompt's character codes (the same for a group's G rows),
and `prompt_code_grpo` is GRPO that records the input it was given; no package file names either.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.core import ADVANTAGE_ESTIMATORS, EstimatorTraits, compute_group_advantages
from rlvr.core.advantages import estimator_options
from rlvr.training.advantage_stage import compute_advantages
from rlvr.training.async_rollout import Rollout
from rlvr.training.collect import GreedyBaselines
from rlvr.training.estimator_inputs import (
    ESTIMATOR_INPUTS,
    EstimatorInputs,
    InputTraits,
    input_completions_per_prompt,
)
from tests.conftest import tiny_overrides

INPUT = "prompt_code"
ESTIMATOR = "prompt_code_grpo"
NEEDS = "each prompt's character codes"
MADE: list[tuple[torch.Tensor, list[str]]] = []  # per call of the provider: its value [N], the kept prompts
RECEIVED: list[torch.Tensor] = []  # per call of the estimator: the input it got [N]


def code(prompt: str) -> float:
    return float(sum(map(ord, prompt)))


def prompt_code(context) -> torch.Tensor:
    """The provider: the prompt's code for every row, prompt-major. -> [N]"""
    prompts = [group.prompt for group in context.collected.groups]
    value = torch.tensor([code(p) for p in prompts]).repeat_interleave(context.collected.group_size)  # [N]
    MADE.append((value.clone(), prompts))
    return value


def prompt_code_grpo(rewards, group_size=None, group_ids=None, **options):
    """GRPO's advantages; the input is only recorded."""
    RECEIVED.append(options[INPUT].clone())
    return compute_group_advantages(rewards, group_size, group_ids)


@pytest.fixture
def registered():
    MADE.clear()
    RECEIVED.clear()
    ESTIMATOR_INPUTS.add(INPUT, prompt_code, InputTraits(completions_per_prompt=0, needs=NEEDS))
    ADVANTAGE_ESTIMATORS.add(ESTIMATOR, prompt_code_grpo, EstimatorTraits(group_baseline=True, inputs=(INPUT,)))
    try:
        yield
    finally:
        ADVANTAGE_ESTIMATORS.remove(ESTIMATOR)
        ESTIMATOR_INPUTS.remove(INPUT)
    assert INPUT not in estimator_options()


def _assert_each_row_got_its_prompt_code(received: torch.Tensor, made: tuple[torch.Tensor, list[str]],
                                           group_size: int) -> None:
    value, prompts = made
    assert received.shape == (len(prompts) * group_size,)
    assert torch.equal(received, value)
    assert received.tolist() == [code(prompts[row // group_size]) for row in range(received.numel())]
    assert len(set(received.tolist())) > 1  # the prompts' codes differ: a row mixed up would show


@pytest.mark.parametrize("async_steps", [0, 1])
def test_train_makes_the_declared_input_and_the_estimator_receives_it(registered, tiny_model_dir, tmp_path,
                                                                      async_steps):
    run_dir = tmp_path / f"async{async_steps}"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "algorithm.advantage_estimator": ESTIMATOR, "rollout.async_steps": async_steps, "train.iterations": 2,
        "train.eval_size": 0, "model.lora_rank": 4, "model.lora_alpha": 8,
    })
    assert main(["train", *overrides]) == 0
    # One step off-policy samples one batch more (kept for a resume); each batch trained on carries its own input.
    assert len(MADE) == 2 + async_steps and len(RECEIVED) == 2
    for received, made in zip(RECEIVED, MADE):
        _assert_each_row_got_its_prompt_code(received, made, group_size=4)


def test_check_makes_the_input_as_train_does_and_the_mechanism_check_refuses_it(registered, tiny_model_dir,
                                                                                 tmp_path, capsys):
    overrides = tiny_overrides(tiny_model_dir, tmp_path / "run", **{
        "algorithm.advantage_estimator": ESTIMATOR, "model.lora_rank": 4, "model.lora_alpha": 8,
        "rollout.max_new_tokens": 24})  # room for the random tiny model to end some completions
    assert main(["check", *overrides]) == 0
    assert len(MADE) == 1 and len(RECEIVED) == 1
    _assert_each_row_got_its_prompt_code(RECEIVED[0], MADE[0], group_size=4)
    capsys.readouterr()
    assert main(["check", "--mechanism", *overrides]) == 2
    assert f"algorithm.advantage_estimator='{ESTIMATOR}' (grpo) needs {NEEDS}: run rlvr check without" in (
        capsys.readouterr().err)


def test_the_config_reads_the_estimators_declared_traits(registered):
    with pytest.raises(ConfigError, match=f"advantage_estimator='{ESTIMATOR}' compares each completion"):
        load_config(None, [f"algorithm.advantage_estimator={ESTIMATOR}", "rollout.group_size=1"])
    assert INPUT in estimator_options()  # a declared input is an option every estimator accepts


def test_a_row_whose_input_is_not_finite_gets_zero_and_the_estimator_sees_zero(registered):
    from types import SimpleNamespace

    algo = SimpleNamespace(advantage_estimator=ESTIMATOR, std="population", normalize_advantages=False,
                           advantage_clip=0.0)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 0.25])
    given = torch.tensor([3.0, 3.0, float("nan"), 7.0, 7.0, 7.0])
    advantages = compute_advantages(rewards, torch.arange(6) // 3, algo, **{INPUT: given})
    assert RECEIVED[0].tolist() == [3.0, 3.0, 0.0, 7.0, 7.0, 7.0]
    # Group 0 without its unscorable row: rewards [1, 0] -> +-1 / (0.5 + eps) * 0.5.
    assert advantages[2] == 0.0 and advantages[:2].tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert torch.equal(advantages[3:], compute_group_advantages(rewards[3:], group_size=3))


def test_a_provider_must_give_one_value_per_row(registered):
    from types import SimpleNamespace

    from rlvr.training.estimator_inputs import InputContext, estimator_inputs

    groups = [SimpleNamespace(prompt="a"), SimpleNamespace(prompt="b")]
    collected = SimpleNamespace(groups=groups, group_size=2)
    context = InputContext(backend=None, task=None, settings=None, collected=collected, batch=[0] * 3, config=None)
    with pytest.raises(ValueError, match=r"estimator input 'prompt_code' must be \[N\] = \(3,\).*gave \(4,\)"):
        estimator_inputs(ESTIMATOR, context)
    context = InputContext(backend=None, task=None, settings=None, collected=collected, batch=[0] * 4, config=None)
    assert estimator_inputs(ESTIMATOR, context).values[INPUT].tolist() == [97.0, 97.0, 98.0, 98.0]
    assert estimator_inputs("grpo", context).values == {}  # declares nothing: no provider runs
    assert len(MADE) == 2


def test_completions_per_prompt_are_counted_from_the_providers():
    assert input_completions_per_prompt("remax") == 1  # its greedy completion
    assert input_completions_per_prompt("grpo") == 0
    assert input_completions_per_prompt("retired_or_unknown") == 0
    ESTIMATOR_INPUTS.add("two_more", lambda context: None, InputTraits(completions_per_prompt=2))
    ADVANTAGE_ESTIMATORS.add("two_more_est", prompt_code_grpo,
                             EstimatorTraits(inputs=("two_more", "reward_baselines")))
    try:
        assert input_completions_per_prompt("two_more_est") == 3
    finally:
        ADVANTAGE_ESTIMATORS.remove("two_more_est")
        ESTIMATOR_INPUTS.remove("two_more")


def test_a_pending_remax_rollout_checkpointed_before_inputs_were_declared_still_loads():
    """trainer_state.pt of an older run (async_steps=1) pickled the pending batch with ReMax's `baselines`."""
    baselines = GreedyBaselines(rewards=torch.tensor([0.5, 0.5]), seconds=1.5)
    old = Rollout.__new__(Rollout)
    object.__setattr__(old, "__dict__", {"collected": None, "batch": None, "baselines": baselines,
                                         "policy_version": 3})
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.inputs.values.keys() == {"reward_baselines"} and loaded.inputs.seconds == 1.5
    assert torch.equal(loaded.inputs.values["reward_baselines"], baselines.rewards) and loaded.policy_version == 3
    object.__setattr__(old, "__dict__", {"collected": None, "batch": None, "baselines": None, "policy_version": 0})
    assert pickle.loads(pickle.dumps(old)).inputs == EstimatorInputs({})
    current = Rollout(collected=None, batch=None, inputs=EstimatorInputs({"x": torch.ones(1)}, 2.0), policy_version=1)
    assert pickle.loads(pickle.dumps(current)).inputs.seconds == 2.0
