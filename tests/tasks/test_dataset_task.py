"""The `dataset` task: local files and Hugging Face datasets, templates, held-out splits, verifiers by
name or your own function, row errors, and the example run in examples/word_problems.yaml."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.tasks import VERIFIERS, build_task
from rlvr.tasks.prompts import R1_ZERO_TEMPLATE
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

REPO = Path(__file__).resolve().parents[2]
ROWS = [{"q": f"What is {i} plus {i}?", "a": 2 * i, "topic": "sums" if i % 2 else "doubles"} for i in range(20)]


def write_rows(path: Path, rows=ROWS) -> Path:
    """The same rows in the format the suffix names (parquet through pyarrow, as `datasets` writes it)."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def dataset_task(chat=True, **options):
    return build_task("dataset", options={"prompt_field": "q", "answer_field": "a", **options}, use_chat_template=chat)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_every_file_format_gives_the_same_examples(tmp_path, suffix):
    task = dataset_task(path=str(write_rows(tmp_path / f"rows{suffix}")), eval_size=4, verifier="integer")
    reference = dataset_task(path=str(write_rows(tmp_path / "reference.jsonl")), eval_size=4, verifier="integer")
    got = [(e.prompt, str(e.ground_truth)) for e in task.iter_eval()]  # csv values are text
    assert got == [(e.prompt, str(e.ground_truth)) for e in reference.iter_eval()] and len(got) == 4
    example = next(task.iter_eval())
    assert task.score(f"<answer>{example.ground_truth}</answer>", example).correct


def test_held_out_slice_is_seeded_and_disjoint(tmp_path):
    path = str(write_rows(tmp_path / "rows.jsonl"))
    task = dataset_task(path=path, eval_size=5, split_seed=1)
    held_out = [e.metadata["question"] for e in task.iter_eval()]
    assert len(held_out) == 5 and held_out == [e.metadata["question"] for e in dataset_task(path=path, eval_size=5,
                                                                                           split_seed=1).iter_eval()]
    assert held_out != [e.metadata["question"] for e in dataset_task(path=path, eval_size=5, split_seed=2).iter_eval()]
    train = {e.metadata["question"] for seed in range(20) for e in task.examples("train", 5, seed)}
    assert len(train) == 15 and not train & set(held_out)


def test_separate_eval_file_and_a_local_hugging_face_dataset(tmp_path, monkeypatch):
    train_file, eval_file = (write_rows(tmp_path / "train.jsonl", ROWS[:15]),
                             write_rows(tmp_path / "test.jsonl", ROWS[12:]))
    task = dataset_task(train_path=str(train_file), eval_path=str(eval_file))
    assert [e.ground_truth for e in task.iter_eval()] == [r["a"] for r in ROWS[12:]]
    assert len(task.train) == 12  # rows 12-14 are in the eval file too: dropped from training

    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # a folder of data files: nothing is downloaded
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    folder = tmp_path / "hf"
    folder.mkdir()
    write_rows(folder / "train.jsonl", ROWS[:15])
    write_rows(folder / "test.jsonl", ROWS[15:])
    from_hub = dataset_task(dataset=str(folder), verifier="number")
    assert [e.ground_truth for e in from_hub.iter_eval()] == [r["a"] for r in ROWS[15:]] and len(from_hub.train) == 15


def test_template_and_system_prompt(tmp_path):
    path = str(write_rows(tmp_path / "rows.jsonl"))
    options = {"path": path, "system_prompt": "Be brief.", "prompt_template": "[{topic}] {q} Answer: {{n}}"}
    chat = next(dataset_task(**options).iter_eval())
    row = chat.metadata["row"]
    assert chat.prompt == [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": f"[{row['topic']}] {row['q']} Answer: {{n}}"}]
    raw = next(dataset_task(**options, chat=False).iter_eval())
    assert raw.prompt == f"Be brief.\n\n[{row['topic']}] {row['q']} Answer: {{n}}"
    r1 = dataset_task(path=path, prompt_template="r1_zero", verifier="r1_zero_number", chat=False)
    example = next(r1.iter_eval())
    assert example.prompt == R1_ZERO_TEMPLATE.format(question=example.metadata["row"]["q"])
    assert r1.stop_strings == ("</answer>",) and dataset_task(path=path).stop_strings == ()
    assert r1.score(f" </think> <answer>{example.ground_truth}</answer>", example).correct
    with pytest.raises(ValueError, match="prompt_template r1_zero is raw text"):
        dataset_task(path=path, prompt_template="r1_zero")
    with pytest.raises(ValueError, match="write a literal brace as"):
        dataset_task(path=path, prompt_template="{q")


@pytest.mark.parametrize("rows, options, message", [
    (ROWS[:2] + [{"q": "x"}], {}, r"rows.jsonl:3: no field 'a' \(task.options.answer_field\); fields: q"),
    (ROWS[:1] + [{"a": 1}], {}, r"rows.jsonl:2: no field 'q' \(task.options.prompt_field\)"),
    (ROWS[:3], {"prompt_template": "{q} ({level})"},
     "jsonl:1: no field 'level' \\(used in task.options.prompt_template"),
    (ROWS[:1] + [{"q": "x", "a": "two"}], {"verifier": "integer"}, "jsonl:2: ground truth 'two' is not an integer"),
    (ROWS[:1] + [{"q": "x", "a": "1/0x"}], {"verifier": "number"}, "jsonl:2: ground truth '1/0x' is not a number"),
])
def test_bad_rows_are_reported_by_file_and_line(tmp_path, rows, options, message):
    path = write_rows(tmp_path / "rows.jsonl", rows)
    with pytest.raises(ValueError, match=message):
        dataset_task(path=str(path), **options)


def bad_truth_task(tmp_path, line):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n" + json.dumps(ROWS[1]) + "\n")
    return dataset_task(path=str(path), verifier="exact")


@pytest.mark.parametrize("line, message", [
    ('{"q": "x", "a": NaN}', r"rows.jsonl:2: ground truth nan is not a finite number"),
    ('{"q": "x", "a": Infinity}', r"rows.jsonl:2: ground truth inf is not a finite number"),
    ('{"q": "x", "a": ["4", -Infinity]}', r"rows.jsonl:2: ground truth -inf is not a finite number"),
])
def test_exact_refuses_non_finite_ground_truths_naming_the_row(tmp_path, line, message):
    with pytest.raises(ValueError, match=message):
        bad_truth_task(tmp_path, line)
    task = bad_truth_task(tmp_path, '{"q": "x", "a": ["4", 4, 2.5, true]}')  # text and numbers: accepted
    assert len(task.train) + len(task.held_out) == 3


@pytest.mark.parametrize("line, message", [
    ('{"q": "x", "a": {"value": 4}}',
     r"rows.jsonl:2: ground truth \{'value': 4\} is a dict; verifier `exact` compares"),
    ('{"q": "x", "a": [["4"]]}', r"rows.jsonl:2: ground truth \['4'\] is a list; verifier `exact` compares"),
    ('{"q": "x", "a": []}', r"rows.jsonl:2: ground truth is an empty list"),
])
def test_exact_refuses_ground_truths_that_are_not_text_or_numbers(tmp_path, line, message):
    with pytest.raises(ValueError, match=message):
        bad_truth_task(tmp_path, line)


def test_csv_rows_are_counted_from_the_first_data_row(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("q,a\nfirst,1\nsecond,\n")
    with pytest.raises(ValueError, match=r"rows.csv row 2: field 'a' \(task.options.answer_field\) is empty"):
        dataset_task(path=str(path), verifier="integer")
    path.write_text("q,answer\nfirst,1\n")
    with pytest.raises(ValueError,
                       match=r"rows.csv row 1: no field 'a' \(task.options.answer_field\); fields: q, answer"):
        dataset_task(path=str(path))


def test_unknown_verifier_lists_the_valid_names(tmp_path):
    with pytest.raises(KeyError, match="unknown verifier 'fuzzy'; valid choices: exact, integer, math, number, "
                                       "r1_zero, r1_zero_number, or a function of your own"):
        dataset_task(path=str(write_rows(tmp_path / "rows.jsonl")), verifier="fuzzy")


# (verifier, completion, ground truth, answer, format, status): expected values by reading each rule.
VERIFIER_TABLE = [
    ("exact", "Paris", "Paris", 1.0, 1.0, "ok"),
    ("exact", " <answer> Paris </answer> ", "Paris", 1.0, 1.0, "ok"),
    ("exact", "Paris.", "Paris", 0.0, 1.0, "ok"),
    ("exact", "lyon", ["Paris", "lyon"], 1.0, 1.0, "ok"),
    ("integer", "It is 12, no 14", 14, 1.0, 0.0, "ok"),
    ("integer", " 14 ", "14", 1.0, 1.0, "ok"),
    ("integer", "<answer>13</answer> then 14", 14, 0.0, 0.0, "ok"),
    ("integer", "fourteen", 14, math.nan, 0.0, "unjudgeable"),
    ("number", "so $1,000.00", "1000", 1.0, 1.0, "ok"),
    ("number", "18 or 20", "18", 0.0, 1.0, "ok"),
    ("math", r"\boxed{\frac{1}{2}}", "0.5", 1.0, 1.0, "ok"),
    ("r1_zero", " </think> <answer>\\frac12</answer>", "1/2", 1.0, 1.0, "ok"),
    ("r1_zero", "<answer>1/2</answer>", "1/2", 0.0, 0.0, "ok"),
    ("r1_zero_number", " </think> <answer>7</answer>", 7, 1.0, 1.0, "ok"),
]


@pytest.mark.parametrize("verifier, completion, truth, answer, format_, status", VERIFIER_TABLE)
def test_named_verifiers(verifier, completion, truth, answer, format_, status):
    judgement = VERIFIERS.get(verifier).judge(completion, truth, 5.0)
    assert judgement.status == status and judgement.format == format_
    assert judgement.answer == answer or (math.isnan(answer) and math.isnan(judgement.answer))


def test_the_table_covers_every_registered_verifier():
    assert set(VERIFIERS.names()) == {row[0] for row in VERIFIER_TABLE}


def test_a_verifier_function_of_your_own(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    path = str(write_rows(tmp_path / "rows.jsonl", [{**r, "unit": "apples"} for r in ROWS]))
    task = dataset_task(path=path, verifier="examples/checkers.py:number_in_tags")
    example = next(task.iter_eval())
    truth = example.ground_truth
    assert task.component_names == ("answer",)
    right = task.score(f"<answer>{truth}</answer>", example)
    assert right.correct and right.total == 1.0 and right.verifier == "examples/checkers.py:number_in_tags"
    assert task.score(f"<answer>{truth + 1}</answer>", example).total == 0.0
    untagged = task.score(str(truth), example)  # the function returns NaN: cannot judge
    assert untagged.status == "unjudgeable" and not untagged.scorable

    weighted = dataset_task(path=path, verifier="examples/checkers.py:answer_and_unit", components=["answer", "unit"])
    weighted.weights["unit"] = 0.25  # as task.reward_weights={unit: 0.25} would set it
    verdict = weighted.score(f"<answer>{truth} apples</answer>", example)
    assert verdict.components == {"answer": 1.0, "unit": 1.0} and verdict.total == 1.25  # recomputed, not 2.0
    assert build_task("dataset", reward_weights={"unit": 0.25}, options={
        "path": path, "prompt_field": "q", "answer_field": "a", "verifier": "examples/checkers.py:answer_and_unit",
        "components": ["answer", "unit"]}).weights == {"answer": 1.0, "unit": 0.25}


def test_verifier_function_problems(tmp_path):
    module = tmp_path / "checks.py"
    module.write_text(
        "from rlvr.tasks.task import Verdict\n"
        "def no_args(): return 1.0\n"
        "def text(completion, ground_truth): return 'yes'\n"
        "def divide(completion, ground_truth): return 1 / 0\n"
        "def other_components(completion, ground_truth):\n"
        "    return Verdict(components={'style': 1.0}, total=1.0, status='ok', verifier='x', version='1')\n"
        "NOT_A_FUNCTION = 3\n")
    path = str(write_rows(tmp_path / "rows.jsonl"))
    with pytest.raises(ValueError, match=r"called as fn\(completion, ground_truth\) or fn\(completion, "
                                         r"ground_truth, row\); this one is no_args\(\)"):
        dataset_task(path=path, verifier=f"{module}:no_args")
    with pytest.raises(ValueError, match="is a int, not a function"):
        dataset_task(path=path, verifier=f"{module}:NOT_A_FUNCTION")
    with pytest.raises(KeyError, match="has no attribute 'missing'"):
        dataset_task(path=path, verifier=f"{module}:missing")
    with pytest.raises(ValueError, match="task.options.components is for a verifier function"):
        dataset_task(path=path, verifier="exact", components=["a"])
    example = next(dataset_task(path=path).iter_eval())
    with pytest.raises(TypeError, match="returned str; it must return a number or a rlvr.tasks.Verdict"):
        dataset_task(path=path, verifier=f"{module}:text").score("", example)
    with pytest.raises(ValueError, match=r"returned components \['style'\]; declared: \['answer'\]"):
        dataset_task(path=path, verifier=f"{module}:other_components").score("", example)
    # The task does not swallow the user's exception: it reaches whoever scores (and hardens) verdicts.
    with pytest.raises(ZeroDivisionError):
        dataset_task(path=path, verifier=f"{module}:divide").score("", example)


def test_example_dataset_config_trains_one_iteration_and_evaluates(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the example config names its jsonl relative to the repository root
    config = load_config("examples/word_problems.yaml")
    task = build_task(config.task.name, options=config.task.options)
    assert len(task.held_out) == 8 and len(task.train) == 32 and task.stop_strings == ("</answer>",)
    example = next(task.iter_eval())
    assert example.prompt[1]["content"].endswith(f"Give only the final number of {example.metadata['row']['unit']}, "
                                                 "inside <answer></answer> tags.")
    assert task.score(f"<answer>{example.ground_truth}</answer>", example).correct

    run_dir = tmp_path / "words"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "dataset", "task.use_chat_template": "true", "train.iterations": 1, "train.eval_size": 2,
        "rollout.max_new_tokens": 6, "model.lora_rank": 4, "model.lora_alpha": 8})
    assert main(["train", "examples/word_problems.yaml", *overrides]) == 0
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    assert {"reward/answer", "reward/format"} <= set(metrics)
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert samples and all("Give only the final number" in s["prompt"] for s in samples)

    out = tmp_path / "eval"
    assert main(["eval", "--task", "dataset", "--model", str(run_dir), "--task-option",
                 "path=examples/word_problems.jsonl", "--task-option", "prompt_field=problem", "--task-option",
                 "answer_field=solution", "--task-option", "verifier=examples/checkers.py:number_in_tags",
                 "--limit", "2", "--max-new-tokens", "4", "--output", str(out)]) == 0
    assert [r["verdict"]["verifier"] for r in read_jsonl(out / "generations.jsonl")] == \
        ["examples/checkers.py:number_in_tags"] * 2
