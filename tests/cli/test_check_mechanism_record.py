"""`rlvr check --mechanism --record DIR` on the tiny model: both conditions' JSON records, their counts,
and a decision that flips when the mechanism is broken.

Expected numbers are worked out by hand from the fixed candidates' rewards (format_copy: correct 1.3,
wrong 0.2, badly formatted 1.2, no answer 0), or recomputed from the record's own per-response rows
by a second, naive route; the decision rule is also run on results built by hand, one broken
criterion at a time.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import rlvr.check.mechanism as mechanism
import rlvr.training.advantage_stage as advantages_stage
from rlvr.check.mechanism import (
    ACCEPT,
    DECISION_RULE,
    MECHANISM_CANDIDATES,
    MechanismResult,
    decide,
    decide_conditions,
)
from rlvr.check.mechanism_record import CONDITIONS, run_conditions, write_records
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.tasks import Verdict
from rlvr.training.update import UpdateResult

# Every field a record must hold (written out here, not read from the implementation).
RECORD_FIELDS = {
    "schema", "rlvr_version", "condition", "condition_description", "task", "model", "seed", "group_size", "prompts",
    "candidate_labels", "algorithm", "advantage_estimator", "policy_loss", "loss_aggregation", "learning_rate",
    "clip_low", "clip_high", "kl_coef", "planned_optimizer_steps", "lora_rank", "lora_alpha", "dtype", "device",
    "verifier", "correctness_component", "format_components", "correctness_pass_rate", "format_pass_rate",
    "component_pass_rates", "status_counts", "unjudgeable_count", "unscored_count", "reward_std_mean",
    "nonzero_advantages", "no_contrast_groups", "no_contrast_groups_zeroed", "all_equal_group_max_abs_advantage",
    "zero_variance_guard_passed", "policy_separation", "mean_clip_fraction", "optimizer_steps_taken",
    "skipped_nonfinite_steps", "update_seconds", "peak_memory_bytes", "peak_memory_source", "update_metrics",
    "responses", "decision", "criteria", "failed_criteria", "decision_rule", "mechanism_decision", "conditions",
    "highest_separation_condition",
}


def _overrides(model_dir, **extra):
    base = {"model.name": str(model_dir), "task.name": "format_copy", "task.use_chat_template": "false",
            "model.lora_rank": 4, "model.lora_alpha": 8, "optim.lr": 1e-3}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def _population_std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@pytest.fixture(scope="module")
def format_copy_records(tiny_model_dir, tmp_path_factory):
    """One `rlvr check --mechanism --record` run on format_copy: (exit code, folder, {condition: record})."""
    folder = tmp_path_factory.mktemp("mechanism") / "records"
    code = main(["check", "--mechanism", "--record", str(folder), *_overrides(tiny_model_dir)])
    records = {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}
    return code, folder, records


def test_the_record_command_writes_one_json_per_condition_with_every_field(format_copy_records, tiny_model_dir):
    code, folder, records = format_copy_records
    assert code == 0
    # no temp files
    assert sorted(path.name for path in folder.iterdir()) == ["expanded_group.json", "minimal_pair.json"]
    for name, group_size in (("minimal_pair", 2), ("expanded_group", 4)):
        record = records[name]
        assert set(record) == RECORD_FIELDS, name
        assert (record["condition"], record["group_size"], record["task"], record["model"], record["seed"]) == \
            (name, group_size, "format_copy", str(tiny_model_dir), 0)
        assert len(record["responses"]) == 2 * group_size
        assert record["decision"] == ACCEPT and record["failed_criteria"] == []
        assert record["mechanism_decision"] == ACCEPT
        assert record["optimizer_steps_taken"] == 4 and record["update_seconds"] > 0 and record["peak_memory_bytes"] > 0
    assert records["minimal_pair"]["candidate_labels"] == ["correct", "wrong"]


def test_the_counts_follow_the_candidates(format_copy_records):
    _, _, records = format_copy_records
    minimal, expanded = records["minimal_pair"], records["expanded_group"]
    # Every candidate of a group with contrast gets a non-zero advantage: 2 prompts x G.
    assert (minimal["nonzero_advantages"], expanded["nonzero_advantages"]) == (4, 8)
    # Correct: the tagged answer, and (expanded only) the tagged answer with extra words: 1 of 2, 2 of 4.
    assert minimal["correctness_pass_rate"] == 0.5 and expanded["correctness_pass_rate"] == 0.5
    # Format (tag and strict both 1): only the bare tagged answer passes: 1 of 2, 1 of 4.
    assert (minimal["format_pass_rate"], expanded["format_pass_rate"]) == (0.5, 0.25)
    assert expanded["component_pass_rates"] == {"answer": 0.5, "tag": 0.75, "strict": 0.25}
    # Population std of (1.3, 0.2) and of (1.3, 0.2, 1.2, 0); a sample std would give 0.778 and 0.670.
    assert minimal["reward_std_mean"] == pytest.approx(0.55, abs=1e-6)
    assert expanded["reward_std_mean"] == pytest.approx(_population_std([1.3, 0.2, 1.2, 0.0]), abs=1e-6)
    assert expanded["reward_std_mean"] == pytest.approx(0.580409, abs=1e-6)
    for record in (minimal, expanded):
        assert record["unjudgeable_count"] == 0 and record["status_counts"] == {"ok": 2 * record["group_size"]}
        assert record["no_contrast_groups"] == 0 and record["zero_variance_guard_passed"] is True


def test_the_record_agrees_with_its_own_responses_recomputed(format_copy_records):
    """Separation, non-zero advantages and reward spread recomputed from the per-response rows."""
    _, _, records = format_copy_records
    for record in records.values():
        rows = record["responses"]
        up = [r["logprob_change"] for r in rows if r["advantage"] > 1e-8]
        down = [r["logprob_change"] for r in rows if r["advantage"] < -1e-8]
        assert record["policy_separation"] == pytest.approx(sum(up) / len(up) - sum(down) / len(down), rel=1e-5)
        assert record["policy_separation"] > 0
        assert record["nonzero_advantages"] == len(up) + len(down)
        spreads = [_population_std([r["reward"] for r in rows if r["prompt"] == p]) for p in (0, 1)]
        assert record["reward_std_mean"] == pytest.approx(sum(spreads) / 2, abs=1e-6)
        # GRPO advantages are z-scores within each prompt: they sum to 0 there.
        for p in (0, 1):
            assert abs(sum(r["advantage"] for r in rows if r["prompt"] == p)) < 1e-4


def test_unjudgeable_and_unscored_counts_follow_the_no_answer_candidates(tiny_model_dir, tmp_path):
    """integer: "I do not know." holds no integer, so it is `unjudgeable`. With the default weights its `strict`
    (weight 0.2) is judged 0 and it is scored 0; with strict's weight 0 nothing weighted is judged, its total is
    NaN (unscored) and its advantage exactly 0, which leaves 3 of the 4 candidates per prompt with one."""
    for weights, unscored, nonzero in (([], 0, 8), (["task.reward_weights.strict=0"], 2, 6)):
        config = load_config(None, _overrides(tiny_model_dir, **{"task.name": "integer"}) + weights)
        runs = run_conditions(config)
        records = {path.stem: json.loads(path.read_text()) for path in write_records(runs, config, tmp_path)}
        minimal, expanded = records["minimal_pair"], records["expanded_group"]
        assert (minimal["unjudgeable_count"], minimal["unscored_count"], minimal["nonzero_advantages"]) == (0, 0, 4)
        assert (expanded["unjudgeable_count"], expanded["unscored_count"]) == (2, unscored), weights
        assert expanded["nonzero_advantages"] == nonzero, weights
        no_answer = [r for r in expanded["responses"] if r["label"] == "no answer"]
        assert [r["status"] for r in no_answer] == ["unjudgeable", "unjudgeable"]
        if unscored:
            assert all(r["reward"] is None and r["advantage"] == 0.0 for r in no_answer)  # NaN is written as null


def test_a_group_without_contrast_is_counted_and_zeroed(tiny_model_dir, tmp_path):
    """char_count scores the share of letters a-m: prompt 0's candidates all score 1 (no contrast), prompt 1's
    alternate 1, 0. The guard must count prompt 0 and give it advantage exactly 0."""
    def candidates(example):
        same = example.prompt.endswith(" 0")  # the first of the two training prompts
        return ["abc", "abc", "abc", "abc"] if same else ["abc", "xyz", "abc", "xyz"]

    MECHANISM_CANDIDATES.add("char_count", candidates)
    try:
        config = load_config(None, _overrides(tiny_model_dir, **{"task.name": "char_count"}))
        runs = run_conditions(config)
    finally:
        MECHANISM_CANDIDATES.remove("char_count")
    records = {path.stem: json.loads(path.read_text()) for path in write_records(runs, config, tmp_path)}
    for name, nonzero in (("minimal_pair", 2), ("expanded_group", 4)):
        record = records[name]
        assert (record["no_contrast_groups"], record["no_contrast_groups_zeroed"]) == (1, 1), name
        assert record["nonzero_advantages"] == nonzero, name
        assert all(r["advantage"] == 0.0 for r in record["responses"] if r["prompt"] == 0)
        assert record["zero_variance_guard_passed"] is True and record["criteria"]["reward_contrast"] is True


def test_a_stalled_optimizer_gives_no_separation_and_exit_code_1(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """The config refuses lr 0, so the optimizer's learning rate is set to 0 after it is built: the weights stay
    put, every log-prob change is exactly 0, and the decision flips to no_separation."""
    real = mechanism.make_optimizer

    def stalled(params, optim):
        optimizer = real(params, optim)
        for group in optimizer.param_groups:
            group["lr"] = 0.0
        return optimizer

    monkeypatch.setattr(mechanism, "make_optimizer", stalled)
    assert main(["check", "--mechanism", "--record", str(tmp_path), *_overrides(tiny_model_dir)]) == 1
    assert "rlvr check --mechanism: tune (minimal_pair no_separation, expanded_group no_separation)" in \
        capsys.readouterr().out
    for name in ("minimal_pair", "expanded_group"):
        record = json.loads((tmp_path / f"{name}.json").read_text())
        assert record["policy_separation"] == 0.0
        assert all(r["logprob_change"] == 0.0 for r in record["responses"])
        assert record["decision"] == "no_separation" and record["failed_criteria"] == ["policy_separation"]
        assert record["mechanism_decision"] == "tune"
        assert record["nonzero_advantages"] == 2 * record["group_size"]  # the signal was there; the update ignored it


def test_zero_advantages_give_no_advantage_signal(tiny_model_dir, tmp_path, monkeypatch):
    # The advantage stage the mechanism check runs, as the training loop does.
    monkeypatch.setattr(advantages_stage, "compute_advantages",
                        lambda rewards, *args, **kwargs: torch.zeros_like(rewards))
    config = load_config(None, _overrides(tiny_model_dir))
    runs = run_conditions(config, conditions=CONDITIONS[:1])
    record = json.loads(write_records(runs, config, tmp_path)[0].read_text())
    assert record["nonzero_advantages"] == 0
    assert record["policy_separation"] is None  # nothing pushed up or down: NaN, written as null
    assert record["decision"] == "no_advantage_signal"
    assert record["failed_criteria"] == ["advantage_signal", "policy_separation"]
    assert record["criteria"]["reward_contrast"] is True  # the verifier did give contrast


def test_record_needs_mechanism(tmp_path, capsys):
    assert main(["check", "--record", str(tmp_path)]) == 2
    assert "use it with --mechanism" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the rule alone, on results by hand


def _result(rewards, advantages, change, *, group_size=2, flat=0.0, skipped=0) -> MechanismResult:
    n = len(rewards)
    verdict = Verdict(components={"answer": 1.0}, total=1.0, status="ok", verifier="hand", version="1")
    return MechanismResult(
        group_size=group_size, labels=("correct", "wrong") * (n // 2), verdicts=(verdict,) * n,
        correctness_component="answer", rewards=torch.tensor(rewards), group_ids=torch.arange(n) // group_size,
        advantages=torch.tensor(advantages), logprob_change=torch.tensor(change), all_equal_advantage_max=flat,
        update=UpdateResult(metrics={}, optimizer_steps=4 - skipped, skipped_nonfinite_updates=skipped),
        update_seconds=1.0, peak_memory_bytes=1, peak_memory_source="process_peak_rss")


GOOD = dict(rewards=[1.0, 0.0, 1.0, 0.0], advantages=[1.0, -1.0, 1.0, -1.0], change=[0.5, -0.5, 0.25, -0.25])


@pytest.mark.parametrize("broken, expected", [
    ({}, ACCEPT),
    ({"change": [0.0, 0.0, 0.0, 0.0]}, "no_separation"),  # separation exactly 0 is not > 0
    ({"change": [-0.5, 0.5, -0.25, 0.25]}, "no_separation"),  # the wrong way
    ({"skipped": 1}, "non_finite_update"),
    ({"advantages": [0.0, 0.0, 0.0, 0.0]}, "no_advantage_signal"),
    ({"rewards": [1.0, 1.0, 0.0, 0.0], "advantages": [0.0, 0.0, 0.0, 0.0]}, "no_reward_contrast"),
    ({"flat": 0.5}, "guard_failed"),
    # prompt 1 has no contrast but kept non-zero advantages: the guard fails before anything else is judged
    ({"rewards": [1.0, 0.0, 1.0, 1.0]}, "guard_failed"),
])
def test_the_decision_rule_names_the_first_failed_criterion(broken, expected):
    decision = decide(_result(**{**GOOD, **broken}))
    assert decision.decision == expected
    assert list(decision.criteria) == [name for name, _, _ in DECISION_RULE]
    assert (decision.failed_criteria == []) == (expected == ACCEPT)


def test_the_separation_is_the_mean_change_of_pushed_up_minus_pushed_down_responses():
    # up: rows 0 and 2 (+0.5, +0.25), mean 0.375; down: rows 1 and 3 (-0.5, -0.25), mean -0.375: 0.75.
    result = _result(**GOOD)
    assert result.policy_separation == pytest.approx(0.75)
    assert result.nonzero_advantages == 4 and result.no_contrast_zeroed == 0
    zero_one_group = _result(**{**GOOD, "rewards": [1.0, 0.0, 1.0, 1.0], "advantages": [1.0, -1.0, 0.0, 0.0]})
    assert (int(zero_one_group.no_contrast.sum()), zero_one_group.no_contrast_zeroed) == (1, 1)
    assert zero_one_group.zero_variance_guard_passed and zero_one_group.nonzero_advantages == 2


def test_the_conditions_are_accepted_together_or_not_at_all():
    accepted, failed = decide(_result(**GOOD)), decide(_result(**{**GOOD, "skipped": 4}))
    assert decide_conditions([accepted, accepted]) == ACCEPT
    assert decide_conditions([accepted, failed]) == "tune"
    assert decide_conditions([]) == "tune"
