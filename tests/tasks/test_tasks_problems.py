"""gsm8k and math tasks: data sources, held-out splits, prompts, filters and verdicts
(integer: test_integer_task.py)."""

import json
import math

import pytest

from rlvr.tasks import TASKS, build_task
from rlvr.tasks.prompts import R1_ZERO_TEMPLATE


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def gsm8k_file(tmp_path):
    records = [{"question": f"Tom has {i} apples and buys {i + 1} more. How many apples?",
                "answer": f"{i} + {i + 1} = {2 * i + 1}\n#### {2 * i + 1:,}"} for i in range(40)]
    records.append({"question": "A price?", "answer": "It costs $1,250.\n#### 1,250"})
    return write_jsonl(tmp_path / "gsm8k.jsonl", records)


@pytest.fixture
def math_file(tmp_path):
    records = [
        {"problem": "Half of one?", "solution": r"It is $\boxed{\frac{1}{2}}$.", "level": "Level 5", "type": "Algebra"},
        {"problem": "Root?", "solution": r"$\boxed{\sqrt{\frac{1}{4}}}$", "level": "Level 2", "type": "Algebra"},
        {"problem": "Count?", "answer": "7", "level": 5, "type": "Counting & Probability"},
        {"problem": "Broken?", "solution": "no box here", "level": "Level 5", "type": "Algebra"},
    ]
    return write_jsonl(tmp_path / "math.jsonl", records)


def test_registry_lists_new_tasks():
    for name in ("gsm8k", "math", "integer", "reasoning_gym", "format_copy"):
        assert name in TASKS


def test_gsm8k_splits_are_held_out_and_deterministic(gsm8k_file):
    task = build_task("gsm8k", options={"path": str(gsm8k_file), "eval_size": 8, "prompt": "question_only"})
    held_out = {e.metadata["question"] for e in task.iter_eval()}
    assert len(held_out) == 8
    train = {e.metadata["question"] for seed in range(30) for e in task.examples("train", 4, seed)}
    assert train and not train & held_out
    assert len(train | held_out) == 41
    first = [e.metadata["question"] for e in task.examples("train", 6, 3)]
    assert first == [e.metadata["question"] for e in task.examples("train", 6, 3)]
    assert first != [e.metadata["question"] for e in task.examples("train", 6, 4)]
    assert len(set(first)) == 6  # no repeats within a call
    with pytest.raises(ValueError, match="unknown split 'test'"):
        task.examples("test", 1, 0)


def test_gsm8k_separate_files_drop_eval_questions_from_train(gsm8k_file, tmp_path):
    records = [json.loads(line) for line in gsm8k_file.read_text().splitlines()]
    eval_file = write_jsonl(tmp_path / "test.jsonl", records[:5])
    task = build_task("gsm8k", options={"train_path": str(gsm8k_file), "eval_path": str(eval_file)},
                      use_chat_template=False)
    assert [e.metadata["question"] for e in task.iter_eval()] == [r["question"] for r in records[:5]]
    assert len(task.train) == 36
    assert task.held_out[0].ground_truth == "1"
    assert task.held_out[-1].ground_truth == str(2 * 4 + 1)


def test_gsm8k_needs_exactly_one_source(gsm8k_file):
    with pytest.raises(ValueError, match="exactly one data source"):
        build_task("gsm8k", use_chat_template=False)
    with pytest.raises(ValueError, match="exactly one data source"):
        build_task("gsm8k", options={"path": str(gsm8k_file), "eval_path": str(gsm8k_file)}, use_chat_template=False)
    with pytest.raises(FileNotFoundError):
        build_task("gsm8k", options={"path": "/nonexistent/x.jsonl"}, use_chat_template=False)


def test_prompts(gsm8k_file):
    raw = build_task("gsm8k", options={"path": str(gsm8k_file)}, use_chat_template=False)
    example = raw.iter_eval().__next__()
    assert example.prompt == R1_ZERO_TEMPLATE.format(question=example.metadata["question"])
    assert example.prompt.endswith("Assistant: <think>") and raw.stop_strings == ("</answer>",)
    chat = build_task("gsm8k", options={"path": str(gsm8k_file), "prompt": "question_only"})
    assert chat.iter_eval().__next__().prompt == [{"role": "user", "content": example.metadata["question"]}]
    with pytest.raises(ValueError, match="raw-text template; set task.use_chat_template=false"):
        build_task("gsm8k", options={"path": str(gsm8k_file)}, use_chat_template=True)
    with pytest.raises(ValueError, match="unknown prompt 'cot'"):
        build_task("gsm8k", options={"path": str(gsm8k_file), "prompt": "cot"}, use_chat_template=False)


@pytest.mark.parametrize("completion, answer, format_, correct", [
    (" 16 - 3 = 13 </think> <answer>$1,250.00</answer>", 1.0, 1.0, True),
    (" </think> <answer>1250</answer>", 1.0, 1.0, True),
    (" </think> <answer>1,249</answer>", 0.0, 1.0, False),
    (" </think> <answer></answer>", 0.0, 0.0, False),  # an empty span is no answer: no format either
    (" </think> <answer> answer here </answer>", 0.0, 0.0, False),  # copied from the r1_zero prompt
    (" The answer is 1250.", 0.0, 0.0, False),
])
def test_gsm8k_verdicts(gsm8k_file, completion, answer, format_, correct):
    task = build_task("gsm8k", options={"path": str(gsm8k_file), "eval_size": 41}, use_chat_template=False)
    example = [e for e in task.iter_eval() if e.ground_truth == "1250"][0]
    verdict = task.score(completion, example)
    assert verdict.components == {"answer": answer, "format": format_}
    assert verdict.total == answer  # default weights: answer 1, format 0
    assert verdict.correct is correct and verdict.status == "ok" and verdict.verifier == "gsm8k_number"
    weighted = build_task("gsm8k", options={"path": str(gsm8k_file), "eval_size": 41}, use_chat_template=False,
                          reward_weights={"format": 0.5})
    assert weighted.score(completion, example).total == pytest.approx(answer + 0.5 * format_)


def test_math_filters_and_answers(math_file):
    task = build_task("math", options={"eval_path": str(math_file)}, use_chat_template=False)
    assert [p.ground_truth for p in task.held_out] == [r"\frac{1}{2}", r"\sqrt{\frac{1}{4}}", "7"]
    assert task.skipped == 1  # the record without an answer
    hard = build_task("math", options={"eval_path": str(math_file), "levels": [5]}, use_chat_template=False)
    assert [p.ground_truth for p in hard.held_out] == [r"\frac{1}{2}", "7"]
    algebra = build_task("math", options={"eval_path": str(math_file), "subjects": ["algebra"], "levels": "Level 2"},
                         use_chat_template=False)
    assert [p.ground_truth for p in algebra.held_out] == [r"\sqrt{\frac{1}{4}}"]
    counting = build_task("math", options={"eval_path": str(math_file), "subjects": "Counting & Probability"},
                          use_chat_template=False)
    assert [p.ground_truth for p in counting.held_out] == ["7"]


def test_math_verdicts_and_timeout(math_file):
    task = build_task("math", options={"eval_path": str(math_file), "timeout_seconds": 1.0}, use_chat_template=False)
    half, root, _ = task.iter_eval()
    assert task.score(" </think> <answer>0.5</answer>", half).correct
    assert task.score(r" </think> <answer>\boxed{\frac12}</answer>", half).correct
    assert task.score(r" </think> <answer>1/2</answer>", root).correct  # sqrt(1/4) = 1/2 symbolically
    wrong = task.score(" </think> <answer>0.25</answer>", root)
    assert not wrong.correct and wrong.total == 0.0
    hung = task.score(" </think> <answer>9^{9^{9^{9}}}</answer>", half)
    assert hung.status == "timeout" and math.isnan(hung.components["answer"])
    assert hung.components["format"] == 1.0
    assert math.isnan(hung.total) and not hung.scorable  # left out of the advantage, not scored 0


def test_colon_names_reach_the_family(gsm8k_file):
    with pytest.raises(ValueError, match="task 'format_copy:x': bad task.options"):
        build_task("format_copy:x")
    with pytest.raises(KeyError, match="unknown task 'nope:x': 'nope' is not a registered task family"):
        build_task("nope:x")


def test_gsm8k_from_a_dataset_name_uses_the_named_splits(monkeypatch):
    """`task.options.dataset` goes through `datasets.load_dataset(name, config, split=...)`."""
    datasets = pytest.importorskip("datasets", reason="the `datasets` package (installed with trl) is needed here")
    calls = []
    rows = {
        "train": [{"question": f"q{i}?", "answer": f"work\n#### {i}"} for i in range(5)],
        "test": [{"question": "held out?", "answer": "#### 1,234"}],
    }

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(rows[split])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = build_task("gsm8k", options={"dataset": "openai/gsm8k", "dataset_config": "main"}, use_chat_template=False)
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    held_out = task.examples("eval", 1, 0)
    assert len(held_out) == 1 and str(held_out[0].ground_truth) == "1234"
    assert task.score("<think>x</think> <answer>1234</answer>", held_out[0]).correct
    train = task.examples("train", 5, 0)
    assert sorted(str(e.ground_truth) for e in train) == ["0", "1", "2", "3", "4"]


def test_dataset_name_without_the_datasets_package_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(ValueError, match="needs the `datasets` package"):
        build_task("gsm8k", options={"dataset": "openai/gsm8k"}, use_chat_template=False)


@pytest.mark.parametrize("content, expected", [
    (b"", "the file is empty"),
    (b"\n  \n", "the file is empty"),
    (b'{"question": "q1?", "answer": "#### 1"}\n{"question": "q2?", "answer": "no final line"}\n',
     ":2: GSM8K answer has no '#### N' line"),
    (b'{"question": "q1?", "answer": "#### 1"}\n\n{"question": "caf\xe9?", "answer": "#### 2"}\n',
     ":3: not UTF-8 text (byte 0xe9 at column 18)"),
    (b'{"question": "q1?", "answer": "#### 1"}\n42\n', ":2: expected a JSON object ({...}) per line, got int 42"),
    (b'{"question": "q1?", "answer": "#### 1"}\n{"question": \n', ":2: not a JSON line"),
    (b'{"question": "q1?"}\n', ":1: gsm8k: a record needs 'question' and 'answer' fields"),
])
def test_gsm8k_data_errors_name_the_file_and_the_line(tmp_path, content, expected):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        build_task("gsm8k", options={"path": str(path)}, use_chat_template=False)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_math_data_errors_name_the_file_and_the_line(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text('{"problem": "1+1?", "answer": "2"}\n["not", "an", "object"]\n')
    pytest.importorskip("math_verify", reason="the math task needs math-verify")
    with pytest.raises(ValueError, match=f"{path}:2: expected a JSON object"):
        build_task("math", options={"path": str(path)}, use_chat_template=False)
    path.write_text('{"problem": "1+1?", "answer": "2"}\n{"question_text": "?"}\n')
    with pytest.raises(ValueError, match=f"{path}:2: math: a record needs a 'problem' field"):
        build_task("math", options={"path": str(path)}, use_chat_template=False)


@pytest.mark.parametrize("options, expected", [
    ({"eval_size": -1}, "gsm8k: task.options.eval_size=-1 must be an integer >= 0"),
    ({"eval_size": 2.5}, "gsm8k: task.options.eval_size=2.5 must be an integer >= 0"),
    ({"split_seed": "x"}, "gsm8k: task.options.split_seed='x' must be an integer >= 0"),
    ({"timeout_seconds": 0}, "gsm8k: task.options.timeout_seconds=0 must be a finite number of seconds > 0"),
])
def test_gsm8k_option_ranges(gsm8k_file, options, expected):
    with pytest.raises(ValueError) as info:
        build_task("gsm8k", options={"path": str(gsm8k_file), **options}, use_chat_template=False)
    assert expected in str(info.value)


@pytest.mark.parametrize("name, options, expected", [
    ("format_copy", {"eval_size": -1}, "format_copy: task.options.eval_size=-1 must be an integer >= 0"),
    ("integer", {"eval_size": -5}, "integer: task.options.eval_size=-5 must be an integer >= 0"),
    ("integer", {"low": 1.5}, "integer: task.options.low=1.5 must be an integer"),
])
def test_generated_task_option_ranges(name, options, expected):
    with pytest.raises(ValueError) as info:
        build_task(name, options=options)
    assert expected in str(info.value)


def unloadable_model(tmp_path):
    """A model folder the start-up checks accept (it holds a config.json) but that loading would fail on
    with another message: an error that names something else was found before the model loaded."""
    folder = tmp_path / "unloadable-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_a_bad_task_option_fails_before_the_model_is_loaded(tmp_path, capsys):
    from rlvr.cli import main

    assert main(["train", f"model.name={unloadable_model(tmp_path)}", "task.name=format_copy",
                 "task.options={eval_size: -1}", f"train.output_dir={tmp_path}", "train.run_name=run",
                 "train.progress=false"]) == 2
    assert "format_copy: task.options.eval_size=-1 must be an integer >= 0" in capsys.readouterr().err


def test_train_path_alone_holds_out_a_slice_and_says_so(gsm8k_file, capsys):
    task = build_task("gsm8k", options={"train_path": str(gsm8k_file), "eval_size": 5}, use_chat_template=False)
    assert "no eval_path given: 5 problems of train_path are held out" in capsys.readouterr().err
    held_out = {e.metadata["question"] for e in task.iter_eval()}
    train = {e.metadata["question"] for seed in range(30) for e in task.examples("train", 6, seed)}
    assert len(held_out) == 5 and not held_out & train and len(held_out | train) == 41
    default = build_task("gsm8k", options={"train_path": str(gsm8k_file)}, use_chat_template=False)
    assert len(list(default.iter_eval())) == 4  # 10% of 41, as with `path`


def test_training_with_no_held_out_examples_is_refused(gsm8k_file, tmp_path, capsys):
    from rlvr.cli import main

    options = f"task.options={{train_path: {gsm8k_file}, eval_size: 0, prompt: question_only}}"
    assert main(["train", f"model.name={unloadable_model(tmp_path)}", "task.name=gsm8k", options,
                 f"train.output_dir={tmp_path}", "train.run_name=run", "train.progress=false",
                 "train.eval_size=8"]) == 2
    err = capsys.readouterr().err
    assert "task 'gsm8k' has no held-out examples but train.eval_size=8" in err and "train.eval_size=0" in err


def test_an_unreachable_dataset_says_so_and_suggests_a_local_file(tmp_path):
    """Offline (HF_DATASETS_OFFLINE=1, empty cache): no traceback, a message naming the fix. No network is used."""
    import os
    import subprocess
    import sys

    pytest.importorskip("datasets", reason="the `datasets` package (installed with trl) is needed here")
    code = ("from rlvr.tasks import build_task\n"
            "try:\n"
            "    build_task('gsm8k', options={'dataset': 'openai/gsm8k'}, use_chat_template=False)\n"
            "except ValueError as exc:\n"
            "    print(exc)\n")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "task.options.dataset='openai/gsm8k' (split 'train'): HF_DATASETS_OFFLINE is set" in done.stdout
    assert "task.options.path=data.jsonl" in done.stdout
