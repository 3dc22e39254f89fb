"""The sampled eval (`train.eval_samples` = n > 1, `rlvr eval --samples N`): the config refuses n > 1 when
greedy, the records reduce to pass@k, mean@n and maj@n by prompt, `rlvr eval` and the in-training eval write
them (tiny random model), and `rlvr report` plots pass@k."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.observe.metric_names import (EVAL_ACCURACY, EVAL_EXAMPLES, EVAL_NUM_EXAMPLES, EVAL_SAMPLES_PER_PROMPT,
                                       eval_maj_at, eval_mean_at, eval_pass_at)
from rlvr.training.evaluation import eval_metrics, summarize
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

# A task on which a random character-level model is right now and then: the first digit of the completion is
# its answer, right when below 5. Written to a file and loaded as `FILE:DigitTask`, as a user's task is.
DIGIT_TASK = '''
from rlvr.tasks.task import Example, Verdict


class DigitTask:
    name = "digit"
    component_names = ("answer",)
    extracts_answers = True
    stop_strings = ()

    def __init__(self, reward_weights=None, use_chat_template=False, seed=0):
        self.use_chat_template = use_chat_template

    def examples(self, split, count, seed):
        return [Example(prompt=f"digit {i} ", ground_truth="<5") for i in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 16, 0))

    def score(self, completion, example):
        digits = [ch for ch in completion if ch.isdigit()]
        answer = digits[0] if digits else None
        right = answer is not None and int(answer) < 5
        return Verdict(components={"answer": float(right)}, total=float(right), status="ok", verifier="digit",
                       version="1", correct=right, answer=answer)
'''


@pytest.fixture
def digit_task(tmp_path):
    path = tmp_path / "digit_task.py"
    path.write_text(DIGIT_TASK)
    return f"{path}:DigitTask"


def test_more_than_one_sample_needs_a_temperature():
    with pytest.raises(ConfigError) as error:
        load_config(None, ["train.eval_samples=4"])
    message = str(error.value)
    assert "train.eval_samples=4" in message and "train.eval_temperature" in message
    with pytest.raises(ConfigError, match="train.eval_samples"):
        load_config(None, ["train.eval_samples=0", "train.eval_temperature=1"])
    config = load_config(None, ["train.eval_samples=4", "train.eval_temperature=0.8"])
    assert (config.train.eval_samples, load_config().train.eval_samples) == (4, 1)  # greedy, one sample: the default


def test_rlvr_eval_refuses_samples_without_temperature(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--model", str(tiny_model_dir), "--task", "char_count", "--samples", "4"]) == 2
    assert "train.eval_samples=4 needs sampling" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_verdicts_carry_the_answer_the_vote_counts(tmp_path):
    from rlvr.tasks import build_task
    from rlvr.tasks.task import extracts_answers

    copy = build_task("format_copy", use_chat_template=False)
    example = copy.examples("eval", 1, 0)[0]
    assert extracts_answers(copy) and copy.score("<answer>12</answer> more", example).answer == "12"
    assert copy.score("no tags", example).answer is None  # no answer found: no vote
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "q?", "answer": "1 + 1\n#### 2"}) + "\n")
    gsm8k = build_task("gsm8k", options={"path": str(data), "eval_size": 1}, use_chat_template=False)
    example = gsm8k.iter_eval().__next__()
    assert extracts_answers(gsm8k)
    assert gsm8k.score(" </think> <answer>3</answer>", example).answer == "3"  # wrong answers vote too
    assert not extracts_answers(object())  # the default: no maj@n


def _records(rows: list[list[tuple[bool, str | None]]]) -> list[dict]:
    """Eval records of prompts (index) x samples from (right, answer) pairs."""
    return [{"index": index, "sample": sample, "ground_truth": "g", "completion": f"c{index}.{sample}",
             "category": "correct" if right else "formatted_wrong", "truncated": False, "completion_tokens": 3,
             "verdict": {"components": {"answer": float(right)}, "total": float(right), "correct": right,
                         "answer": answer, "detail": ""}}
            for index, row in enumerate(rows) for sample, (right, answer) in enumerate(row)]


def test_sampled_records_reduce_by_prompt():
    records = _records([
        [(True, "1"), (False, "2"), (False, "2"), (False, None)],  # c = 1; "2" wins the vote, wrong
        [(True, "9"), (True, "9"), (False, "8"), (False, "8")],  # c = 2; a tie, "9" appears first: right
    ])
    metrics = eval_metrics(records, 1.0, majority=True)
    # pass@1 = (1/4 + 2/4) / 2 = 0.375; pass@2 = ((1 - 3/6) + (1 - 1/6)) / 2 = 2/3; pass@4 = 1.
    assert metrics[eval_pass_at(1)] == 0.375 and metrics[eval_pass_at(2)] == pytest.approx(2 / 3)
    assert metrics[eval_pass_at(4)] == 1.0 and eval_pass_at(3) not in metrics  # reported: 1, 2, 4
    assert metrics[EVAL_ACCURACY] == metrics[eval_mean_at(4)] == metrics[eval_pass_at(1)]  # accuracy is mean@n
    assert metrics[eval_maj_at(4)] == 0.5
    assert (metrics[EVAL_SAMPLES_PER_PROMPT], metrics[EVAL_NUM_EXAMPLES]) == (4, 2)  # prompts, not completions
    assert [e["completion"] for e in metrics[EVAL_EXAMPLES]] == ["c0.0", "c1.0"]  # each prompt's first sample
    assert eval_maj_at(4) not in eval_metrics(records, 1.0)  # a task without answers: no maj@n
    summary = summarize(records, majority=True)
    assert (summary["num_examples"], summary["num_completions"], summary["samples_per_prompt"]) == (2, 8, 4)
    assert summary["accuracy"] == 0.375 and summary["counts"]["correct"] == 3
    assert list(summary["sampled"]) == ["pass@1", "pass@2", "pass@4", "mean@4", "maj@4"]
    assert summary["prompt_outcomes"] == {"all_right": 0, "some_right": 2, "none_right": 0}
    # One sample per prompt: the eval.jsonl record of before, no pass@k.
    single = eval_metrics(records[::4], 1.0, majority=True)
    assert not any(key.startswith("eval/pass@") for key in single) and single[EVAL_NUM_EXAMPLES] == 2
    assert summarize(records[::4])["sampled"] == {}


def _naive_pass_at(n: int, c: int, k: int) -> float:
    return 1 - math.comb(n - c, k) / math.comb(n, k)  # exact binomials: fine at these sizes


def _naive_vote(answers: list, right: list) -> bool:
    keys = [None if a is None else a.strip() for a in answers]  # no answer is a vote, for a wrong "no answer"
    counts = Counter(keys)
    winner = next(key for key in keys if counts[key] == max(counts.values()))  # ties: the first to appear
    return winner is not None and right[keys.index(winner)]


def test_rlvr_eval_with_samples_reports_pass_at_k(tiny_model_dir, digit_task, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--task", digit_task, "--model", str(tiny_model_dir), "--chat-template", "off",
                 "--samples", "4", "--temperature", "1.0", "--limit", "6", "--max-new-tokens", "6",
                 "--batch-size", "8", "--output", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["decoding"], printed["samples_per_prompt"], printed["num_examples"]) == ("sampled", 4, 6)
    sampled = printed["sampled"]
    assert list(sampled) == ["pass@1", "pass@2", "pass@4", "mean@4", "maj@4"]
    assert sampled["pass@1"] == sampled["mean@4"] == printed["accuracy"]  # the same number, by definition
    assert sampled["pass@1"] <= sampled["pass@2"] <= sampled["pass@4"]
    # Recomputed from generations.jsonl: 6 prompts x 4 samples, exact binomials and a naive vote.
    records = read_jsonl(out / "generations.jsonl")
    assert [(r["index"], r["sample"]) for r in records] == [(i, j) for i in range(6) for j in range(4)]
    rows = [[r["verdict"]["correct"] for r in records if r["index"] == i] for i in range(6)]
    answers = [[r["verdict"]["answer"] for r in records if r["index"] == i] for i in range(6)]
    for k in (1, 2, 4):
        assert sampled[f"pass@{k}"] == pytest.approx(sum(_naive_pass_at(4, sum(row), k) for row in rows) / 6)
    assert sampled["maj@4"] == pytest.approx(sum(_naive_vote(a, r) for a, r in zip(answers, rows)) / 6)
    if any(0 < sum(row) < 4 for row in rows):  # a prompt right in some samples: pass@4 is above pass@1
        assert sampled["pass@4"] > sampled["pass@1"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"][eval_pass_at(4)] == sampled["pass@4"] and summary["num_completions"] == 24
    assert set(summary["sampled_ci95"]) == set(sampled)
    assert all(0 <= low <= sampled[name] <= high <= 1 for name, (low, high) in summary["sampled_ci95"].items())


def test_in_training_eval_writes_pass_at_k(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", *tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 1, "train.eval_every": 0, "train.eval_size": 3, "train.eval_samples": 2,
        "train.eval_temperature": 1.0, "model.lora_rank": 4, "model.lora_alpha": 8})]) == 0
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert len(evals) == 2  # before training and after the last iteration
    for record in evals:
        assert record[EVAL_SAMPLES_PER_PROMPT] == 2 and record[EVAL_NUM_EXAMPLES] == 3
        assert record[EVAL_ACCURACY] == record[eval_mean_at(2)] == record[eval_pass_at(1)]
        assert record[eval_pass_at(1)] <= record[eval_pass_at(2)]
        assert eval_maj_at(2) not in record  # char_count (tests/conftest.py) extracts no answers: no maj@n


def test_report_plots_pass_at_k_beside_the_accuracy(tmp_path):
    from rlvr.report.figures import select_figures
    from rlvr.report.run_data import RunData

    sampled = RunData("sampled", tmp_path, evals=[
        {"iteration": i, EVAL_ACCURACY: 0.1 * i, eval_pass_at(1): 0.1 * i, eval_pass_at(2): 0.15 * i,
         eval_pass_at(8): 0.3 * i} for i in (0, 2, 4)])
    (figure,) = [d for d in select_figures([sampled]) if d.name == "eval_accuracy"]
    assert [s.label for s in figure.series] == [EVAL_ACCURACY, eval_pass_at(1), eval_pass_at(2), eval_pass_at(8)]
    assert "pass@k" in figure.title
    greedy = RunData("greedy", tmp_path, evals=[{"iteration": i, EVAL_ACCURACY: 0.1 * i} for i in (0, 2)])
    (figure,) = [d for d in select_figures([greedy]) if d.name == "eval_accuracy"]
    assert [s.label for s in figure.series] == ["greedy"] and "greedy" in figure.title
