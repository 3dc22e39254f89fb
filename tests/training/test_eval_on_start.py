"""train.eval_on_start: false skips the evaluation of the starting weights in all three training commands
(train, sft, expert-iter); the periodic and final evals still run, and true (the default) keeps iteration 0."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.training.test_expert_iteration import EI


def _pairs(path):
    with open(path, "w") as handle:
        for i in range(8):
            handle.write(json.dumps({"q": f"say a {i}", "a": "abc", "gt": "abc"}) + "\n")
    return path


def _command(name, model_dir, run_dir, tmp_path, on_start):
    extra = {"train.eval_on_start": on_start, "train.eval_size": 2, "model.num_threads": 1}
    if name == "train":
        extra |= {"train.iterations": 2, "train.eval_every": 1}
    if name == "sft":
        extra |= {"sft.data_path": str(_pairs(tmp_path / "pairs.jsonl")), "sft.prompt_field": "q",
                  "sft.response_field": "a", "sft.ground_truth_field": "gt", "sft.batch_size": 4,
                  "sft.microbatch_size": 4, "sft.eval_every": 1, "model.lora_rank": 4, "model.lora_alpha": 8}
    if name == "expert-iter":
        extra |= EI
    return [name, *tiny_overrides(model_dir, run_dir, **extra)]


@pytest.mark.parametrize("name", ["train", "sft", "expert-iter"])
def test_false_skips_only_the_starting_eval(tiny_model_dir, tmp_path, name):
    run_dir = tmp_path / "run"
    assert main(_command(name, tiny_model_dir, run_dir, tmp_path, "false")) == 0
    assert [r["iteration"] for r in read_jsonl(run_dir / "eval.jsonl")] == [1, 2]


def test_true_evaluates_the_starting_weights_first(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert main(_command("sft", tiny_model_dir, run_dir, tmp_path, "true")) == 0
    assert [r["iteration"] for r in read_jsonl(run_dir / "eval.jsonl")] == [0, 1, 2]


def test_false_writes_no_generations_of_the_starting_weights(tiny_model_dir, tmp_path):
    # sft.log_generations writes each eval's generations: none at iteration 0 when the start is not evaluated
    run_dir = tmp_path / "run"
    assert main(_command("sft", tiny_model_dir, run_dir, tmp_path, "false") + ["sft.log_generations=1"]) == 0
    assert sorted({r["iteration"] for r in read_jsonl(run_dir / "generations.jsonl")}) == [1, 2]
