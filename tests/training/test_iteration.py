"""The iteration pipeline (`rlvr.training.iteration`): the stages planned for each kind of config, the preparation
by hand, one plan run by `rlvr train`, `rlvr check` and `rlvr check --mechanism`, and a rollout source defined
here, outside rlvr, trained on by the loop as it stands.
"""

from __future__ import annotations

import pickle

import pytest
import torch

import rlvr.training.iteration as iteration
import rlvr.training.rl as rl
from rlvr.algorithms import ALGORITHMS
from rlvr.check.one_batch import run_check
from rlvr.check.mechanism import run_mechanism
from rlvr.config import load_config
from rlvr.core import RolloutBatch
from rlvr.observe.metric_names import ELAPSED_S, TIME_LOGPROBS, TIME_PREFIX, TIME_VALUES
from rlvr.training.estimator_inputs import EstimatorInputs
from rlvr.training.iteration import AdvantageInputs, Learner, Rollout, Stage, plan_iteration, prepare, timed
from rlvr.training.reference import needs_reference_logprobs
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

LORA = {"model.lora_rank": 4, "model.lora_alpha": 8}


def _plan(*overrides: str):
    return plan_iteration(load_config(None, list(overrides)))


@pytest.mark.parametrize(("overrides", "stages"), [
    ((), ("sampling", "advantages", "update")),
    (("algorithm.kl_coef=0.05",), ("sampling", "reference_logprobs", "advantages", "update")),
    (("algorithm.log_kl=true",), ("sampling", "reference_logprobs", "advantages", "update")),
    (("algorithm.name=ppo",), ("sampling", "old_values", "advantages", "update")),
    (("algorithm.name=ppo", "algorithm.kl_in_reward=0.05"),
     ("sampling", "reference_logprobs", "old_values", "advantages", "update")),
    (("algorithm.name=remax",), ("sampling", "estimator_inputs", "advantages", "update")),
    (("algorithm.name=remax", "algorithm.kl_coef=0.05"),
     ("sampling", "estimator_inputs", "reference_logprobs", "advantages", "update")),
])
def test_the_plan_lists_the_stages_each_kind_of_config_needs(overrides, stages):
    plan = _plan(*overrides)
    assert plan.names == stages
    assert plan.needs_reference == ("reference_logprobs" in stages)
    assert plan.needs_value_model == ("old_values" in stages)
    assert plan.estimator_inputs == (("reward_baselines",) if "estimator_inputs" in stages else ())
    # Timed under the metrics the loop has always logged them as; the advantages are not timed.
    assert {stage.name: stage.seconds_metric for stage in plan.preparation} == {
        name: metric for name, metric in (("reference_logprobs", TIME_LOGPROBS), ("old_values", TIME_VALUES),
                                          ("advantages", None)) if name in stages}


@pytest.mark.parametrize("preset", ALGORITHMS.names())
def test_every_presets_plan_asks_for_the_models_its_stages_run_on(preset):
    config = load_config(None, [f"algorithm.name={preset}"])
    plan = plan_iteration(config)
    assert plan.needs_reference == needs_reference_logprobs(config.algorithm)
    assert plan.needs_value_model == (config.algorithm.value_model != "none")
    assert plan.names[0] == "sampling" and plan.names[-2:] == ("advantages", "update")


def test_timed_records_the_seconds_under_the_metric_only():
    timings: dict[str, float] = {}
    with timed(timings, "time/x"):
        pass
    with timed(timings, None):
        pass
    with timed(None, "time/y"):
        pass
    assert list(timings) == ["time/x"] and 0.0 <= timings["time/x"] < 1.0
    with pytest.raises(RuntimeError), timed(timings, "time/z"):
        raise RuntimeError("a failed stage")
    assert "time/z" not in timings  # a failed stage logs no seconds


def _batch(rewards: torch.Tensor, group_size: int) -> RolloutBatch:
    rows = rewards.numel()
    ids = torch.arange(rows * 4).view(rows, 4) % 7 + 1  # [N, 4]: prompt of 2, completion of 2
    return RolloutBatch(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_len=2,
                        completion_mask=torch.tensor([[0.0, 1.0, 1.0]]).repeat(rows, 1), old_logprobs=None,
                        ref_logprobs=None, rewards=torch.nan_to_num(rewards), advantages=None,
                        group_ids=torch.arange(rows) // group_size)


def test_prepare_runs_the_planned_stages_by_hand_and_leaves_its_input_alone():
    config = load_config(None, [])  # grpo: group mean and population std, no KL, no values
    plan = plan_iteration(config)
    learner = Learner(loaded=None, value_model=None, optimizer=None, scheduler=None, params=[], config=config)
    # Group 0: rewards 1 and 0: mean 0.5, std 0.5 -> +1, -1. Group 1: one unscorable row (NaN) gets 0, and its
    # partner, alone in its group then, gets 0 too. Group 2: 0.2 and 0.2, no contrast: 0 and 0.
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.2, 0.2])
    batch = _batch(rewards, group_size=2)
    timings: dict[str, float] = {}
    prepared = prepare(batch, AdvantageInputs(rewards), learner, plan, timings)
    assert prepared.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0], abs=1e-4)
    assert prepared.advantages[0] > 0.99  # not a zero vector that would pass the zeros
    assert batch.advantages is None and timings == {}  # a copy; the advantages stage is not timed


def test_the_learners_update_hands_update_policy_the_batch_the_models_and_the_warm_up(monkeypatch):
    calls = []
    monkeypatch.setattr(iteration, "update_policy", lambda *args, **kwargs: calls.append((args, kwargs)))
    config = load_config(None, ["rollout.storage_device=cpu"])
    value_model, optimizer, scheduler, dist = (object() for _ in range(4))
    learner = Learner(loaded=type("Loaded", (), {"policy": "the policy"})(), value_model=value_model,
                      optimizer=optimizer, scheduler=scheduler, params=["p"], config=config, dist=dist)
    batch = _batch(torch.tensor([1.0, 0.0]), group_size=2)
    for warmup in (True, False):
        learner.update(batch, value_warmup=warmup)
    for (args, kwargs), warmup in zip(calls, (True, False)):
        assert args[:3] == ("the policy", optimizer, scheduler) and args[4:] == (config, ["p"])
        assert torch.equal(args[3].input_ids, batch.input_ids)
        assert kwargs == {"dist": dist, "value_model": value_model, "value_warmup": warmup}


def test_one_plan_is_run_by_train_check_and_the_mechanism_check(tiny_model_dir, tmp_path, monkeypatch):
    """A stage added to PREPARATION_STAGES reaches all three without a change to any of them."""
    seen: list[tuple[str, int, bool]] = []

    def recorded(batch, scored, learner):
        seen.append((learner.config.task.name, len(batch), batch.advantages is not None))
        return batch

    stages = (*iteration.PREPARATION_STAGES, Stage("recorded", lambda algo: True, recorded))
    monkeypatch.setattr(iteration, "PREPARATION_STAGES", stages)
    assert plan_iteration(load_config(None, [])).names[-2:] == ("recorded", "update")
    rl.train(load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "run", **{
        "train.iterations": 2, "train.eval_size": 0, **LORA})))
    assert seen == [("char_count", 8, True)] * 2
    seen.clear()
    run_check(load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "check", **LORA)))
    assert seen == [("char_count", 8, True)]
    seen.clear()
    run_mechanism(load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "mech", **{
        "task.name": "format_copy"})))
    assert seen == [("format_copy", 8, True)]  # 2 prompts x 4 candidates


def test_the_mechanism_check_runs_the_reference_stage_log_kl_asks_for(tiny_model_dir, tmp_path):
    """It used to load the reference only for a KL term, and then failed in the update with log_kl."""
    config = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "mech", **{
        "task.name": "format_copy", "algorithm.log_kl": "true"}))
    result = run_mechanism(config)
    assert result.update.metrics["kl"] == 0.0  # logged, first epoch: the fresh adapter is the reference
    assert result.update.skipped_nonfinite_updates == 0


class RecordingSource:
    """Wraps the loop's own source and keeps each rollout it hands over."""

    def __init__(self, inner) -> None:
        self.inner, self.rollouts = inner, []

    def take(self, iteration: int) -> Rollout:
        rollout = self.inner.take(iteration)
        self.rollouts.append(rollout)
        return rollout

    def prefetch(self, iteration: int) -> None:
        self.inner.prefetch(iteration)

    def wait(self) -> None:
        self.inner.wait()

    def checkpoint_state(self) -> dict:
        return self.inner.checkpoint_state()


class ReplayedRollouts:
    """A rollout source of this test's own: it samples nothing and hands over rollouts recorded earlier (as a
    server streaming finished episodes would), and rlvr is not told about it beyond the loop's four calls."""

    def __init__(self, rollouts: list[Rollout]) -> None:
        self.rollouts, self.taken = rollouts, []

    def take(self, iteration: int) -> Rollout:
        self.taken.append(iteration)
        return self.rollouts[iteration]

    def prefetch(self, iteration: int) -> None:
        """Nothing: the rollouts exist already."""

    def wait(self) -> None:
        """Nothing runs in the background."""

    def checkpoint_state(self) -> dict:
        return {}


def _without_times(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIME_PREFIX)
             and k not in (ELAPSED_S, "tokens_per_second", "peak_rss_bytes")} for r in records]


def test_a_rollout_source_defined_outside_rlvr_runs_through_the_same_preparation_and_update(
        tiny_model_dir, tmp_path, monkeypatch):
    """Replaying an on-policy run's rollouts trains the same weights step by step: the same metrics, KL included
    (the reference stage ran on the replayed batches), and the loop asked nothing else of the source."""
    overrides = {"train.iterations": 3, "train.eval_size": 0, "algorithm.kl_coef": 0.05, **LORA}
    real_schedule, recorded = rl.rollout_schedule, []

    def recording_schedule(*args, **kwargs):
        recorded.append(RecordingSource(real_schedule(*args, **kwargs)))
        return recorded[0]

    monkeypatch.setattr(rl, "rollout_schedule", recording_schedule)
    rl.train(load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "sampled", **overrides)))
    replayed = ReplayedRollouts(recorded[0].rollouts)
    monkeypatch.setattr(rl, "rollout_schedule", lambda *args, **kwargs: replayed)
    rl.train(load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "replayed", **overrides)))
    assert replayed.taken == [0, 1, 2]
    sampled, again = (read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("sampled", "replayed"))
    assert len(again) == 3 and all(record["kl"] > 0 for record in again[1:])
    assert _without_times(again) == _without_times(sampled)
    assert TIME_LOGPROBS in again[0]


def test_a_pending_rollout_pickled_under_its_old_module_still_loads():
    """Rollout moved from async_rollout to iteration; trainer_state.pt of an earlier async run names the old one."""
    rollout = Rollout(collected=None, batch=None, inputs=EstimatorInputs({}, 0.5), policy_version=2)
    data = pickle.dumps(rollout, protocol=0)  # text opcodes: the class's module is spelled out
    assert b"rlvr.training.iteration" in data
    old = data.replace(b"rlvr.training.iteration", b"rlvr.training.async_rollout")
    loaded = pickle.loads(old)
    assert isinstance(loaded, Rollout) and loaded.policy_version == 2 and loaded.inputs.seconds == 0.5
