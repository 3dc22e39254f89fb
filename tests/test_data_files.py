"""Data files at size: a jsonl file is indexed and read row by row, never held whole; deep nesting and
held-out duplicates give messages that name the file, the line and what to do."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.data_files import read_rows

ROW_COUNT = 10_000
PADDING = "x" * 2000  # about 2 KB a row: ~20 MB in all


def write_large_jsonl(path) -> int:
    """ROW_COUNT rows with a blank line after every 1000th (a row's line number is then not its index + 1)."""
    with path.open("w") as handle:
        for i in range(ROW_COUNT):
            handle.write(json.dumps({"q": f"What is {i} plus {i}?", "a": str(2 * i), "notes": PADDING}) + "\n")
            if i % 1000 == 999:
                handle.write("\n")
    return path.stat().st_size


def test_a_large_jsonl_file_is_indexed_not_held(tmp_path):
    path = tmp_path / "large.jsonl"
    size = write_large_jsonl(path)
    assert size > 20_000_000
    tracemalloc.start()
    try:
        rows = read_rows(path)
        seen = 0
        for row in rows:  # every row is still read and checked, one at a time
            seen += len(row.record["notes"])
        middle = rows[5_000]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rows) == ROW_COUNT and seen == ROW_COUNT * len(PADDING)
    assert middle.where == f"{path}:5006" and middle.record["a"] == "10000"  # five blank lines before it
    # A list of the parsed rows would hold more than the file's size; the index holds 16 bytes a row.
    assert peak < size / 20, f"peak {peak} bytes for a {size}-byte file"


def test_a_task_on_a_large_jsonl_file_holds_only_the_index(tmp_path):
    path = tmp_path / "large.jsonl"
    size = write_large_jsonl(path)
    tracemalloc.start()
    try:
        task = build_task("dataset", options={"path": str(path), "prompt_field": "q", "answer_field": "a",
                                              "eval_size": 8}, use_chat_template=False)
        examples = task.examples("train", 4, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(task.train) == ROW_COUNT - 8 and len(task.held_out) == 8
    first = examples[0]
    assert first.prompt == f"What is {int(first.ground_truth) // 2} plus {int(first.ground_truth) // 2}?"
    assert peak < size / 10, f"peak {peak} bytes for a {size}-byte file"
    held = {int(problem.question.split()[2]) for problem in task.held_out}
    expected = [i for i in range(ROW_COUNT) if i not in held]  # the training rows, in file order
    for k in (0, len(expected) // 2, len(expected) - 1):  # each read from its own row, after the held-out ones
        assert task.train[k].question == f"What is {expected[k]} plus {expected[k]}?"


def test_a_row_read_after_the_file_changed_is_an_error(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"q": "a?", "a": "1"}\n{"q": "b?", "a": "2"}\n')
    rows = read_rows(path)
    assert rows[1].record == {"q": "b?", "a": "2"}
    path.write_text('{"q": "a?", "a": "1"}\n{"q": "longer b?", "a": "2"}\n')
    with pytest.raises(ValueError, match="rows.jsonl: the file changed after it was read"):
        rows[1]


def test_blank_lines_keep_the_line_numbers(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('\n{"q": "a?", "a": "1"}\n   \n\n{"q": "b?", "a": "2"}\n{"q": ')
    rows = read_rows(path)
    assert [rows[0].where, rows[1].where] == [f"{path}:2", f"{path}:5"] and len(rows) == 3
    with pytest.raises(ValueError, match=r"rows.jsonl:6: not a JSON line"):
        rows[2]


@pytest.mark.parametrize("suffix, where", [(".jsonl", "rows.jsonl:2: "), (".json", "rows.json: ")])
def test_deep_nesting_names_the_file_and_the_line(tmp_path, suffix, where):
    path = tmp_path / f"rows{suffix}"
    deep = "[" * 100_000
    if suffix == ".jsonl":
        path.write_text('{"q": "a?", "a": "1"}\n' + deep + "\n")
    else:
        path.write_text('[{"q": "a?", "a": "1"}, ' + deep + "]")
    with pytest.raises(ValueError) as info:
        build_task("dataset", options={"path": str(path), "prompt_field": "q", "answer_field": "a"})
    assert str(info.value).startswith(str(tmp_path / where)) and "nested too deeply" in str(info.value)


def test_rows_that_all_ask_the_held_out_question_say_so(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"q": "What is 2 plus 2?", "a": "4"}) + "\n" for _ in range(20)))
    task = build_task("dataset", options={"path": str(path), "prompt_field": "q", "answer_field": "a"},
                      use_chat_template=False)
    assert len(task.held_out) == 2 and len(task.train) == 0
    with pytest.raises(ValueError) as info:
        task.examples("train", 1, seed=0)
    message = str(info.value)
    assert "all 18 training rows ask a question of the held-out (eval) split" in message
    assert "task.options.eval_size" in message and "set task.options.path" not in message
