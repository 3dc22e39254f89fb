"""benchmarks/learning/judge_learning.py: the stub judge's rule is format_copy's `answer` component (checked against the
task's own verdicts on completions where a looser rule would differ), and a tiny run with the study's overrides
is rewarded by the judge alone: a judge that always says 5 gives a reward of exactly 0.5, `answer` logged beside."""

from __future__ import annotations

import math

import pytest

from benchmarks.learning.judge_learning import format_copy_rule
from rlvr.sweep import load_plan
from rlvr.tasks import build_task
from rlvr.tasks.verification.judge_stub import Reply, StubJudge
from rlvr.utils import read_jsonl

COMPLETIONS = ["<answer>42</answer>", "<answer> 42 </answer>", "<answer>7</answer><answer>42</answer>",
               "42", "<answer>42", "The answer is <answer>42</answer>.", "<answer>420</answer>", "<answer></answer>"]


def test_the_rule_pays_exactly_what_format_copys_answer_component_pays():
    judge = build_task("judge:format_copy", reward_weights={"answer": 0, "tag": 0, "strict": 0, "judge": 1},
                       options={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    base = build_task("format_copy")
    example = base.examples("train", 1, 0)[0]
    example = type(example)(prompt=example.prompt, ground_truth=42)
    scores = []
    for completion in COMPLETIONS:
        reply = format_copy_rule(judge.rendered(completion, example), 0)
        scores.append(10 if reply.text.endswith("Score: 10") else 0)
        assert reply.text.splitlines()[-1] in ("Score: 10", "Score: 0")
    expected = [10 * base.score(completion, example).components["answer"] for completion in COMPLETIONS]
    assert scores == expected
    assert 0 < sum(scores) < 10 * len(scores)  # both outcomes occur: a rule that always pays, or never, fails


def test_a_tiny_run_with_the_studys_overrides_is_rewarded_by_the_judge_alone(tiny_model_dir, tmp_path, monkeypatch):
    from rlvr.config import load_config
    from rlvr.training.rl import train
    from tests.conftest import tiny_overrides

    study = load_plan("configs/studies/judge_format_copy.yaml", [], [])
    with StubJudge(lambda prompt, count: Reply("Half right.\nScore: 5"), whole_prompt=True) as stub:
        monkeypatch.setenv("RLVR_JUDGE_BASE_URL", stub.base_url)
        monkeypatch.setenv("RLVR_JUDGE_MODEL", "stub")
        overrides = tiny_overrides(tiny_model_dir, tmp_path / "run", **{
            "train.eval_size": 2, "model.lora_rank": 4, "model.lora_alpha": 8})
        overrides += study.overrides + ["train.iterations=1"]  # after the study's own length
        train(load_config(None, overrides))
        assert stub.requests > 0
    (record,) = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert record["reward/judge"] == pytest.approx(0.5) and math.isfinite(record["reward/answer"])
    assert record["reward/mean"] == pytest.approx(0.5)  # the judge's score is the whole reward: the base's weigh 0
