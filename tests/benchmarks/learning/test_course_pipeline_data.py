"""The pipeline's format-SFT examples (benchmarks/learning/course_pipeline.py) and the shipped configs behind it:
every example is correct and formatted by the task's own verifier, none is a held-out question, and a
wrong working is refused before it is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.learning import course_pipeline
from rlvr.config import load_config
from rlvr.tasks import build_task

REPO = Path(__file__).resolve().parents[3]


def small_config(model_dir, name="reasoning_gym:basic_arithmetic", **options):
    overrides = [f"model.name={model_dir}", "task.options.size=400", "task.options.eval_size=40"]
    if name != "reasoning_gym:basic_arithmetic":
        overrides += [f"task.name={name}", "task.options={prompt: r1_zero, min_word_len: 3, max_word_len: 4, "
                                           "size: 400, eval_size: 40}"]
    return load_config(REPO / "configs" / "course_basic_arithmetic.yaml", overrides)


@pytest.mark.parametrize("name", ["reasoning_gym:basic_arithmetic", "reasoning_gym:spell_backward"])
def test_sft_examples_are_right_formatted_and_not_held_out(tiny_model_dir, name):
    config = small_config(tiny_model_dir, name)
    rows = course_pipeline.sft_rows(config, 64)
    task = build_task(config.task.name, options=config.task.options, use_chat_template=False, seed=config.train.seed)
    held_out = {e.prompt for e in task.iter_eval()}
    assert len(rows) == 64 and not {row["prompt"] for row in rows} & held_out
    for row in rows:
        assert row["prompt"].endswith("Assistant: <think>")
        assert row["response"].endswith("</answer>" + "<|im_end|>")  # the tiny tokenizer's EOS text
        assert row["response"].count("</think>") == 1
    example = task.examples("train", 1, 5)[0]
    response = course_pipeline.WORKING[name.partition(":")[2]](example.metadata["entry"])
    verdict = task.score(response, example)
    assert verdict.correct and verdict.components["format"] == 1.0


def test_a_wrong_working_is_refused(tiny_model_dir, monkeypatch):
    config = small_config(tiny_model_dir)
    def off_by_one(entry):
        wrong = int(entry["answer"]) + 1
        return f" {entry['metadata']['expression']} = {wrong} </think> <answer>{wrong}</answer>"
    monkeypatch.setitem(course_pipeline.WORKING, "basic_arithmetic", off_by_one)
    with pytest.raises(AssertionError):
        course_pipeline.sft_rows(config, 8)


@pytest.mark.parametrize("path", ["configs/integer_add_2digit.yaml", "configs/integer_mul_2to12.yaml",
                                  "configs/course_basic_arithmetic.yaml"])
def test_shipped_configs_load_and_build_their_task(path):
    config = load_config(REPO / path)
    task = build_task(config.task.name, reward_weights=config.task.reward_weights, options=config.task.options,
                      use_chat_template=config.task.use_chat_template, seed=config.train.seed)
    assert len(task.examples("eval", 1000, 0)) >= max(config.train.eval_size, 60)
    assert task.stop_strings == ("</answer>",)
