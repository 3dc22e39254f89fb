"""Data files at size: jsonl, csv and json files are indexed and read row by row, parquet one row group
at a time, never held whole; defects, deep nesting and held-out duplicates give messages that name the
file, the row or line and what to do."""

from __future__ import annotations

import csv
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


@pytest.mark.parametrize("suffix, where", [(".jsonl", "rows.jsonl:2: "), (".json", "rows.json item 2: ")])
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


def write_large_csv(path) -> int:
    """ROW_COUNT rows whose `notes` value is quoted and holds a newline (a record then spans two lines),
    with a blank line after every 1000th row."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["q", "a", "notes"])
        for i in range(ROW_COUNT):
            writer.writerow([f"What is {i} plus {i}?", str(2 * i), f"line one, {i}\n{PADDING}"])
            if i % 1000 == 999:
                handle.write("\r\n")
    return path.stat().st_size


def test_a_large_csv_file_is_indexed_not_held(tmp_path):
    path = tmp_path / "large.csv"
    size = write_large_csv(path)
    assert size > 20_000_000
    tracemalloc.start()
    try:
        rows = read_rows(path)
        seen = sum(len(row.record["notes"]) for row in rows)
        middle, last = rows[5_000], rows[-1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    note = len("line one, 5000\n") + len(PADDING)
    assert len(rows) == ROW_COUNT and seen > ROW_COUNT * len(PADDING)
    # records from the offset of their own first line, across quoted newlines and blank lines
    assert middle.where == f"{path} row 5001" and middle.record["a"] == "10000" and len(middle.record["notes"]) == note
    assert middle.record["notes"].startswith("line one, 5000\nxx")
    assert last.record == {"q": f"What is {ROW_COUNT - 1} plus {ROW_COUNT - 1}?", "a": str(2 * (ROW_COUNT - 1)),
                           "notes": f"line one, {ROW_COUNT - 1}\n{PADDING}"}
    assert peak < size / 20, f"peak {peak} bytes for a {size}-byte file"


@pytest.mark.parametrize("content, message", [
    (b"q,a\nfirst,1\nsecond,2,extra\n",
     r"rows.csv row 2 \(line 3\): 3 values for the 2 columns of the header \(q, a\)"),
    # quote never closed
    (b'q,a\nfirst,1\n"second\n,2\nthird,3\n', r"rows.csv row 2 \(line 3\): 1 values for the 2 columns"),
    (b"q,a\nfirst,1\nsec\xffond,2\n", r"rows.csv row 2 \(line 3\): not UTF-8 text \(byte 0xff at column 4\)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"rows.csv header \(line 1\): not UTF-8 text \(byte 0x89"),
    (b"q,a\n\n\n", r"rows.csv: the file is empty"),
    (b"", r"rows.csv: the file is empty"),
])
def test_csv_defects_name_the_file_and_the_row(tmp_path, content, message):
    path = tmp_path / "rows.csv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_rows(path)


def test_a_csv_row_read_after_the_file_changed_is_an_error(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("q,a\na?,1\nb?,2\n")
    rows = read_rows(path)
    assert rows[1].record == {"q": "b?", "a": "2"} and [row.where for row in rows] == [f"{path} row 1", f"{path} row 2"]
    path.write_text("q,a\na?,1\nlonger b?,2\n")
    with pytest.raises(ValueError, match="rows.csv: the file changed after it was read"):
        rows[1]


def test_parquet_is_read_one_row_group_at_a_time(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    records = [{"q": f"What is {i} plus {i}?", "a": 2 * i} for i in range(1000)]
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=128)  # 7 groups of 128, one of 104
    rows = read_rows(path)
    groups_read = []
    read_row_group = rows.file.read_row_group
    monkeypatch.setattr(rows.file, "read_row_group", lambda group: groups_read.append(group) or read_row_group(group))
    assert len(rows) == 1000 and rows.group_starts == [0, 128, 256, 384, 512, 640, 768, 896, 1000]
    assert rows[0].record == records[0] and rows[127].record == records[127]  # one group, read once
    assert rows[128].record == records[128] and rows[-1].record == records[999]
    assert rows[-1].where == f"{path} row 1000" and groups_read == [0, 1, 7]
    assert [row.record for row in rows] == records  # iteration: batches, not the row groups above
    with pytest.raises(IndexError):
        rows[1000]


def test_parquet_defects_name_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    path.write_bytes(b"q,a\nnot parquet,1\n")
    with pytest.raises(ValueError, match=r"rows.parquet: not a readable parquet file"):
        read_rows(path)
    pq.write_table(pa.Table.from_pylist([{"q": "x", "a": 1}]).slice(0, 0), path)
    with pytest.raises(ValueError, match=r"rows.parquet: the file is empty"):
        read_rows(path)


def write_large_json(path) -> int:
    """ROW_COUNT objects in one JSON list, one item a line, with non-ASCII text (a character is then not a
    byte) and, in every 1000th item, a string holding `]`, `,` and an escaped quote."""
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[\n")
        for i in range(ROW_COUNT):
            notes = f'"}}], [{i}' if i % 1000 == 0 else PADDING
            record = {"q": f"Wie viel ist {i} plus {i}? \u00e4\u4e2d", "a": str(2 * i), "notes": notes}
            handle.write(("  " if i == 0 else ", ") + json.dumps(record, ensure_ascii=False) + "\n")
        handle.write("]\n")
    return path.stat().st_size


def test_a_large_json_list_is_indexed_not_held(tmp_path):
    path = tmp_path / "large.json"
    size = write_large_json(path)
    assert size > 20_000_000
    tracemalloc.start()
    try:
        rows = read_rows(path)
        seen = sum(len(row.record["q"]) for row in rows)  # every row is still read, one at a time
        middle, marked, last = rows[5_001], rows[3_000], rows[-1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rows) == ROW_COUNT
    assert seen == sum(len(f"Wie viel ist {i} plus {i}? \u00e4\u4e2d") for i in range(ROW_COUNT))
    # each item from its own byte offset (past 5001 two-byte and three-byte characters)
    assert middle.where == f"{path} item 5002" and middle.record["a"] == "10002" and middle.record["notes"] == PADDING
    assert marked.record == {"q": "Wie viel ist 3000 plus 3000? \u00e4\u4e2d", "a": "6000", "notes": '"}], [3000'}
    assert last.where == f"{path} item {ROW_COUNT}" and last.record["a"] == str(2 * (ROW_COUNT - 1))
    # parsed whole, the list would hold more than the file's size; the index holds 16 bytes a row
    assert peak < size / 20, f"peak {peak} bytes for a {size}-byte file"


def test_a_json_item_longer_than_the_read_window_is_read_whole(tmp_path, monkeypatch):
    import rlvr.tasks.data_files as data_files

    monkeypatch.setattr(data_files, "JSON_CHUNK_BYTES", 5)  # every item, number and string spans windows
    path = tmp_path / "rows.json"
    records = [{"q": "\u00e4" * 40, "a": 1234567}, {"q": "b", "a": -1.5e-7}, {"q": "c", "a": [True, None]}]
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    rows = read_rows(path)
    assert [row.record for row in rows] == records and [rows[k].record for k in (2, 1, 0)] == records[::-1]


@pytest.mark.parametrize("content, message", [
    (b'[{"q": "a"},\n {"q": "b" "a": 1}]',
     r"rows.json item 2: not valid JSON \(Expecting ',' delimiter: line 2 column 12\)"),
    (b'[{"q": "a"}, {"q": "b"} {"q": "c"}]',
     r"rows.json after item 2: not valid JSON \(expecting ',' or '\]': line 1 column 25\)"),
    (b'[{"q": "a"}, {"q": "b"},]', r"rows.json item 3: not valid JSON \(Expecting value: line 1 column 25\)"),
    (b'[{"q": "a"}, {"q": "b"', r"rows.json item 2: not valid JSON \(Expecting ',' delimiter: line 1 column 23\)"),
    (b'[{"q": "a"}] {"q": "b"}', r"rows.json after the list: not valid JSON \(extra data: line 1 column 14\)"),
    (b'[{"q": "a"}, ["b"]]', r"rows.json item 2: expected a JSON object, got list"),
    (b'[{"q": "a"}, {"q": "sec\xffond"}]', r"rows.json item 2: not UTF-8 text \(byte 0xff at line 1 column 24\)"),
    (b'{"q": "a"}', r"rows.json: expected a JSON list of objects, got dict"),
    (b'', r"rows.json: not valid JSON \(Expecting value"),
    (b' [ ] ', r"rows.json: the file is empty"),
])
def test_json_defects_name_the_file_and_the_item(tmp_path, content, message):
    path = tmp_path / "rows.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_rows(path)


def test_a_json_row_read_after_the_file_changed_is_an_error(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[{"q": "a?", "a": "1"}, {"q": "b?", "a": "2"}]')
    rows = read_rows(path)
    assert rows[1].record == {"q": "b?", "a": "2"}
    assert [row.where for row in rows] == [f"{path} item 1", f"{path} item 2"]
    path.write_text('[{"q": "a?", "a": "1"}, {"q": "longer b?", "a": "2"}]')
    with pytest.raises(ValueError, match="rows.json: the file changed after it was read"):
        rows[1]
    with pytest.raises(ValueError, match="rows.json: the file changed after it was read"):
        list(rows)


def test_a_task_on_parquet_row_groups_reads_the_rows_a_jsonl_file_gives(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{"q": f"What is {i} plus {i}?", "a": str(2 * i)} for i in range(60)]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "rows.parquet", row_group_size=7)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tasks = [build_task("dataset", options={"path": str(tmp_path / name), "prompt_field": "q", "answer_field": "a",
                                            "eval_size": 6}, use_chat_template=False)
             for name in ("rows.parquet", "rows.jsonl")]
    parquet_task, jsonl_task = tasks
    assert [parquet_task.train[k].question for k in range(54)] == [jsonl_task.train[k].question for k in range(54)]
    assert ([e.prompt for e in parquet_task.examples("train", 20, seed=1)]
            == [e.prompt for e in jsonl_task.examples("train", 20, seed=1)])
