"""`rlvr check --reward` on a reward model (`rm:BASE`, BASE's weights 0): a hack earns the reward when the
model scores it at least as high as the right answer on the same prompt, on raw scores. A model that
prefers long texts is caught on the long-text and echo kinds; one that scores only the right answer high
passes; normalisation and clip are off for the audit whatever the run sets."""

from __future__ import annotations

import pytest

from rlvr.check.reward import run_reward_audit
from rlvr.config import load_config
from rlvr.tasks.reward_model import RewardModelTask
from rlvr.testing import save_tiny_reward_model

ONLY_THE_MODEL = ["task.reward_weights.answer=0", "task.reward_weights.strict=0", "task.reward_weights.format=0"]


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    return save_tiny_reward_model(tmp_path_factory.mktemp("rm") / "model")


def _config(folder, *extra):
    return load_config(None, ["task.name=rm:integer", f"task.options.path={folder}", "task.options.device=cpu",
                              "train.eval_size=0", *ONLY_THE_MODEL, *extra])


def _scores(rule):
    def raw_scores(self, completions, examples):
        return [float(rule(c, e)) for c, e in zip(completions, examples)], [0] * len(completions)
    return raw_scores


def test_a_model_that_prefers_long_texts_is_caught(reward_model_dir, monkeypatch):
    # scores below 1 for every text: read as a value, the right answer itself would never "earn in full"
    monkeypatch.setattr(RewardModelTask, "raw_scores", _scores(lambda completion, example: len(completion) / 10**4))
    audit = run_reward_audit(_config(reward_model_dir), prompts=4)
    assert audit.main_component == "reward_model"
    assert not any(f.startswith("control") for f in audit.failures)  # the right answer was scored on every prompt
    hacked = {f.split(":")[0] for f in audit.failures}
    assert {"echo", "long_text", "long_tail"} <= hacked, audit.failures


def test_a_model_that_scores_only_the_right_answer_high_passes(reward_model_dir, monkeypatch):
    def strict(completion, example):
        return 0.5 if completion.strip() == str(example.ground_truth) else -0.5

    monkeypatch.setattr(RewardModelTask, "raw_scores", _scores(strict))
    audit = run_reward_audit(_config(reward_model_dir, "task.options.normalize=group", "task.options.clip=1"),
                             prompts=4)
    # group normalisation of one completion would score every text 0, level with the truth: raw scores are read
    assert audit.passed, audit.failures
    assert audit.kinds["control"].main_full == audit.kinds["control"].prompts == 4


def test_the_audit_reads_raw_scores_whatever_the_runs_normalisation(reward_model_dir, monkeypatch):
    monkeypatch.setattr(RewardModelTask, "raw_scores", _scores(lambda completion, example: len(completion) / 10**4))
    audit = run_reward_audit(_config(reward_model_dir, "task.options.normalize=group"), prompts=4)
    hacked = {f.split(":")[0] for f in audit.failures}
    # shorter than the answer: below it on raw scores (one completion's group z-score would be 0, level with it)
    assert "long_text" in hacked and "empty" not in hacked, audit.failures
