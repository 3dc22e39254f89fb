"""`rlvr eval` and training on the new tasks, with a tiny random model and generated data."""

import json
import math
import re

import pytest
import torch

from rlvr.cli import main
from rlvr.rollout import cut_at_stop
from rlvr.training.evaluation import CATEGORIES, categorize, summarize, wilson_interval
from rlvr.tasks.task import Verdict
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides


def test_wilson_interval_hand_values():
    # 8/10 at 95%: centre (0.8 + 1.92²... ) -> (0.4902, 0.9433), the published Wilson values.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    # 0/10: the normal approximation gives the empty interval [0, 0]; Wilson does not.
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def _verdict(status="ok", correct=False, fmt=1.0):
    return Verdict(components={"answer": float(correct), "format": fmt}, total=float(correct), status=status,
                   verifier="t", version="1", correct=correct)


@pytest.mark.parametrize("verdict, category", [
    (_verdict(correct=True), "correct"),
    (_verdict(), "formatted_wrong"),
    (_verdict(fmt=0.0), "unformatted"),
    (_verdict(fmt=0.75), "unformatted"),  # partly formatted is not formatted
    (_verdict(status="timeout"), "timeout"),
    (_verdict(status="unjudgeable"), "unjudgeable"),
    (_verdict(status="error"), "error"),
])
def test_categorize(verdict, category):
    assert categorize(verdict) == category


def test_cut_at_stop_keeps_the_stop_string():
    assert cut_at_stop("a </answer> extra", ("</answer>",)) == "a </answer>"
    assert cut_at_stop("no stop", ("</answer>",)) == "no stop"


def test_summarize_counts():
    records = [{"index": i, "ground_truth": "1", "completion": "x", "category": c, "truncated": False,
                "completion_tokens": 4, "verdict": {"detail": ""}}
               for i, c in enumerate(["correct", "correct", "unformatted", "timeout"])]
    summary = summarize(records)
    assert summary["accuracy"] == 0.5 and summary["counts"]["correct"] == 2 and summary["counts"]["timeout"] == 1
    assert set(summary["counts"]) == set(CATEGORIES)


@pytest.fixture
def gsm8k_file(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": f"what is {i} + {i}?", "answer": f"{i} + {i}\n#### {2 * i}"}) + "\n"
                            for i in range(12)))
    return path


@pytest.mark.parametrize("prompt", ["r1_zero", "question_only"])
def test_rlvr_eval_writes_every_example(tiny_model_dir, gsm8k_file, tmp_path, capsys, prompt):
    out = tmp_path / "eval"
    assert main(["eval", "--task", "gsm8k", "--model", str(tiny_model_dir), "--prompt", prompt,
                 "--task-option", f"eval_path={gsm8k_file}", "--limit", "3", "--max-new-tokens", "6",
                 "--output", str(out)]) == 0
    records = read_jsonl(out / "generations.jsonl")
    assert [r["index"] for r in records] == [0, 1, 2]
    assert all(r["category"] in CATEGORIES and "components" in r["verdict"] for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert sum(summary["counts"].values()) == 3 and summary["use_chat_template"] == (prompt != "r1_zero")
    assert summary["stop_strings"] == (["</answer>"] if prompt == "r1_zero" else [])
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "95% CI" in printed


def test_rlvr_eval_rejects_bad_options(tiny_model_dir, capsys):
    assert main(["eval", "--task", "gsm8k", "--model", str(tiny_model_dir), "--task-option", "novalue"]) == 2
    assert "key=value" in capsys.readouterr().err
    assert main(["eval", "--task", "gsm8k", "--model", str(tiny_model_dir)]) == 2
    assert "exactly one data source" in capsys.readouterr().err


@pytest.mark.parametrize("task, options", [
    ("gsm8k", "{path: PATH, eval_size: 4}"),
    ("reasoning_gym:spell_backward", "{min_word_len: 3, max_word_len: 4, eval_size: 2, size: 200}"),
])
def test_train_runs_on_new_tasks(tiny_model_dir, gsm8k_file, tmp_path, task, options):
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": task, "task.options": options.replace("PATH", str(gsm8k_file)),
        "rollout.stop_strings": "[</answer>]", "train.iterations": 2, "train.eval_every": 0,
        "train.eval_size": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 4,
        "model.lora_rank": 4, "model.lora_alpha": 8, "algorithm.name": "gr_reinforce",
    })
    assert main(["train", *overrides]) == 0
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert all("reward/answer" in m and "reward/format" in m and "unscorable" in m for m in metrics)
    assert read_jsonl(run_dir / "eval.jsonl")


class HalfUnscorableTask:
    """Every other completion in a group cannot be judged (answer NaN, no other weighted component)."""

    name = "half_unscorable"
    component_names = ("answer", "format")
    stop_strings = ()

    def __init__(self):
        self.calls = 0

    def examples(self, split, count, seed):
        from rlvr.tasks.task import Example

        return [Example(prompt=f"say {seed} {i}", ground_truth="x") for i in range(count)]

    def score(self, completion, example):
        from rlvr.tasks.task import weighted_total

        self.calls += 1
        judged = self.calls % 2 == 1
        components = {"answer": float(len(completion) % 3) if judged else math.nan, "format": 0.0}
        return Verdict(components=components, total=weighted_total(components, {"answer": 1.0, "format": 0.0}),
                       status="ok" if judged else "timeout", verifier="t", version="1")


def test_unscorable_completions_get_zero_advantage_and_are_counted(tiny_model_dir, tmp_path):
    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings
    from rlvr.training.advantage_stage import with_advantages
    from rlvr.training.collect import collect_groups, rollout_batch
    from rlvr.observe.rollout_stats import gather_rollout, rollout_stats

    config = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "r", **{
        "algorithm.name": "gr_reinforce", "algorithm.kl_coef": 0, "rollout.max_new_tokens": 5}))
    loaded = load_policy(str(tiny_model_dir))
    task = HalfUnscorableTask()
    backend = ROLLOUT_BACKENDS.get(config.rollout.backend)(loaded.policy, loaded.tokenizer)
    collected = collect_groups(backend, task, SamplingSettings.for_task(config.rollout, task), config, 1)
    batch = with_advantages(rollout_batch(collected, loaded.tokenizer, task.name), collected.rewards, config.algorithm)
    rows = gather_rollout(collected, batch)
    stats = rollout_stats(rows, dynamic_sampling=False)
    unscorable = [s["reward"] != s["reward"] for s in rows.samples]  # NaN != NaN
    assert sum(unscorable) == 4 == stats["unscorable"] and stats["status/timeout"] == 4
    assert all(batch.advantages[i] == 0 for i, bad in enumerate(unscorable) if bad)
    assert torch.isfinite(batch.rewards).all()


def _completions(path) -> list[str]:
    return [record["completion"] for record in read_jsonl(path)]


def test_rlvr_eval_of_a_run_reproduces_its_last_in_training_eval(tiny_model_dir, tmp_path, capsys):
    from rlvr.observe.metric_names import (EVAL_ACCURACY, EVAL_COMPLETION_LEN_MEAN, EVAL_EXAMPLES, EVAL_NUM_EXAMPLES,
                                   EVAL_REWARD_MEAN, EVAL_TRUNCATED_FRAC)

    run_dir = tmp_path / "run"
    assert main(["train", *tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 2, "train.eval_every": 0, "train.eval_size": 5, "model.lora_rank": 4,
        "model.lora_alpha": 8})]) == 0
    last = read_jsonl(run_dir / "eval.jsonl")[-1]  # after the last update, from the weights of the last checkpoint
    out = tmp_path / "eval"
    capsys.readouterr()
    assert main(["eval", str(run_dir / "config.yaml"), "train.progress=true", "--model", str(run_dir),
                 "--output", str(out)]) == 0
    newest = sorted((run_dir / "checkpoints").glob("iter_*"))[-1]
    assert f"rlvr: eval: char_count on {run_dir} (checkpoint {newest})\n" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    for key in (EVAL_ACCURACY, EVAL_REWARD_MEAN, EVAL_TRUNCATED_FRAC, EVAL_COMPLETION_LEN_MEAN, EVAL_NUM_EXAMPLES):
        assert summary["metrics"][key] == last[key], key
    completions = _completions(out / "generations.jsonl")
    assert len(completions) == 5 and completions[:4] == [example["completion"] for example in last[EVAL_EXAMPLES]]
    assert summary["do_sample"] is False and summary["max_new_tokens"] == 6  # greedy, rollout.max_new_tokens
    # Sampling (rlvr eval's old default, temperature 1) gives other completions: the match is not luck.
    sampled = tmp_path / "sampled"
    assert main(["eval", str(run_dir / "config.yaml"), "--model", str(run_dir), "--temperature", "1",
                 "--output", str(sampled)]) == 0
    assert _completions(sampled / "generations.jsonl") != completions
    assert json.loads((sampled / "summary.json").read_text())["do_sample"] is True


def test_eval_takes_a_config_file_key_overrides_and_flags(tiny_model_dir, gsm8k_file, tmp_path):
    config_file = tmp_path / "gsm8k.yaml"
    config_file.write_text(f"task:\n  name: gsm8k\n  options: {{eval_path: {gsm8k_file}, prompt: question_only}}\n"
                           "rollout:\n  max_new_tokens: 5\ntrain:\n  eval_size: 7\n")
    out = tmp_path / "eval"
    assert main(["eval", str(config_file), "train.eval_size=3", "--model", str(tiny_model_dir),
                 "--output", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_examples"] == 3 and summary["task"] == "gsm8k"  # the override beat the file's 7
    assert summary["use_chat_template"] is True and summary["stop_strings"] == []  # question_only: the task decides
    assert (summary["max_new_tokens"], summary["do_sample"], summary["temperature"]) == (5, False, 0.0)
    assert summary["model"] == str(tiny_model_dir)
    saved = (out / "config.yaml").read_text()
    assert "eval_size: 3" in saved and "name: gsm8k" in saved


@pytest.mark.parametrize("args, message", [
    (["train.eval_size=4", "--limit", "3"], "--limit sets train.eval_size, and so does 'train.eval_size=4'"),
    (["task.options={eval_path: a.jsonl}", "--task-option", "eval_path=b.jsonl"],
     "--task-option sets task.options.eval_path, and so does 'task.options={eval_path: a.jsonl}'"),
    (["--prompt", "r1_zero", "--task-option", "prompt=question_only"],
     "--task-option sets task.options.prompt, and so does '--prompt (task.options.prompt=r1_zero)'"),
    (["--task-option", "path=a.jsonl", "--task-option", "path=b.jsonl"], "--task-option sets task.options.path"),
    (["--chat-template", "off", "task.use_chat_template=true"], "--chat-template sets task.use_chat_template"),
    (["--top-p", "0.9"], "train.eval_top_p=0.9 does nothing when the eval decodes greedily"),
    (["--limit", "0"], "train.eval_size=0: nothing to evaluate"),
])
def test_eval_refuses_a_key_given_twice_or_a_setting_that_does_nothing(tiny_model_dir, tmp_path, monkeypatch, capsys,
                                                                       args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--model", str(tiny_model_dir), "--task", "char_count", *args]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no output folder


def test_eval_output_folders_get_unique_default_names(tiny_model_dir, tmp_path):
    args = ["eval", f"train.output_dir={tmp_path / 'runs'}", "--model", str(tiny_model_dir), "--task", "char_count",
            "--chat-template", "off", "--limit", "2", "--max-new-tokens", "2"]
    assert main(args) == 0 and main(args) == 0
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert re.fullmatch(r"eval-char_count-\d{8}-\d{6}-[0-9a-f]{4}", folder.name)
        assert {p.name for p in folder.iterdir()} == {"config.yaml", "generations.jsonl", "summary.json"}


def test_rlvr_eval_prints_a_banner_and_a_json_end_summary(tiny_model_dir, gsm8k_file, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--task", "gsm8k", "--model", str(tiny_model_dir), "--task-option", f"eval_path={gsm8k_file}",
                 "--limit", "3", "--max-new-tokens", "5", "--temperature", "1", "--top-p", "0.9", "--batch-size", "2",
                 "--output", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # the whole of stdout is one JSON object
    records = read_jsonl(out / "generations.jsonl")
    assert summary["num_examples"] == 3 and summary["accuracy"] == sum(r["category"] == "correct" for r in records) / 3
    answers = [r["verdict"]["components"]["answer"] for r in records]
    assert summary["main_component"] == "answer" and summary["main_component_mean"] == pytest.approx(sum(answers) / 3)
    assert summary["files"] == [str(out / name) for name in ("generations.jsonl", "summary.json", "config.yaml")]
    err = captured.err
    assert f"rlvr: eval: gsm8k on {tiny_model_dir}\n" in err  # a model folder: no checkpoint to name
    assert "rlvr:   prompts: the first 3 of the eval split (train.eval_size=3), 2 at a time, seed 0" in err
    assert "rlvr:   sampling: temperature 1, top-p 0.9, up to 5 new tokens, stop at '</answer>'" in err
    assert f"rlvr:   output: {out} (generations.jsonl, summary.json, config.yaml)" in err
    assert err.index("rlvr: eval: gsm8k") < err.index(f"rlvr: loading the model {tiny_model_dir} ...")
    assert "accuracy" in err and "-- unformatted" in err  # the examples of each category stay on stderr


def test_eval_end_summary_reads_the_main_component_from_summary_json(tmp_path):
    from rlvr.observe.console import format_eval_summary, summarize_eval, summary_json

    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "generations.jsonl").write_text("")
    (folder / "summary.json").write_text(json.dumps({
        "task": "math", "model": "m", "num_examples": 8, "accuracy": 0.375, "accuracy_ci95": [0.137, 0.694],
        "main_component": "format", "metrics": {"eval/reward/answer": 0.375, "eval/reward/format": 0.875,
                                                "eval/reward_mean": 0.5}}))
    summary = summarize_eval(folder)
    assert (summary.main_component, summary.main_component_mean) == ("format", 0.875)  # not answer's, not the total
    assert summary.files == [str(folder / "generations.jsonl"), str(folder / "summary.json")]  # no config.yaml here
    text = format_eval_summary(summary)
    assert "  math on m: accuracy 0.375 (95% CI 0.137 to 0.694) on 8 examples" in text
    assert "  main reward component format: mean 0.875" in text
    assert f"  written: generations.jsonl, summary.json in {folder}" in text
    assert json.loads(summary_json(summary))["main_component_mean"] == 0.875


def test_the_checkpoint_an_eval_of_a_run_loads_first(tmp_path):
    from rlvr.models.checkpoints.locate import checkpoint_to_load

    run = tmp_path / "run"
    for name in ("iter_000002", "iter_000010"):
        (run / "checkpoints" / name / "model").mkdir(parents=True)
        (run / "checkpoints" / name / "model" / "trainable.json").write_text('{"kind": "lora"}')
    (run / "config.yaml").write_text("model:\n  name: base\n")
    assert checkpoint_to_load(run) == run / "checkpoints" / "iter_000010"  # no pointer: the newest
    (run / "checkpoints" / "latest").write_text("iter_000002")
    assert checkpoint_to_load(run) == run / "checkpoints" / "iter_000002"  # the pointer decides
    assert checkpoint_to_load(run / "checkpoints" / "iter_000010") == run / "checkpoints" / "iter_000010"
    assert checkpoint_to_load(tmp_path / "some-model-folder") is None
