"""Reading question-answer rows from local files or a Hugging Face dataset, each with its location.

Local files: `.jsonl` (one object a line), `.csv` (a header row; every value is text), `.parquet`
(needs `pyarrow`, which the `datasets` package brings) and `.json` (a list of objects). jsonl, csv
and json are indexed, not loaded: one pass records where each record starts (a json item by `json`'s
own decoder over a moving window of the text), and a row is read from the file when it is used, so
a large file costs 16 bytes a row in memory, not its size. parquet is read one row group at a time.
A Hugging Face dataset (`datasets.load_dataset(name, config, split=...)`) is read only when the
user names one. Each row comes with where it was found (`train.jsonl line 5`), so a bad row is
reported by file and position rather than as "some record".
"""

from __future__ import annotations

import bisect
import codecs
import csv
import json
import os
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rlvr.utils import decode_jsonl_record

FORMATS = (".jsonl", ".json", ".parquet", ".csv")


@dataclass
class Row:
    """One record and where it came from (`data.jsonl line 3`, `data.csv row 2`)."""

    where: str
    record: dict


class FileRows(Sequence):
    """Rows read from a file while the task runs: the file must stay as it was when it was indexed."""

    def __init__(self, path: Path):
        self.path = path
        self.offsets, self.line_numbers = array("q"), array("q")  # where each record starts
        self.identity = self._identity()

    def _identity(self) -> tuple[int, int]:
        stat = self.path.stat()
        return stat.st_size, stat.st_mtime_ns

    def _check_unchanged(self) -> None:
        if self._identity() != self.identity:
            raise ValueError(f"{self.path}: the file changed after it was read at the start; its rows are read "
                             "again while the task runs, so leave a data file as it is until the run ends")

    def __len__(self) -> int:
        return len(self.offsets)


class JsonlRows(FileRows):
    """The rows of a jsonl file, each read from the file when asked for, by the offset of its line.

    Blank lines are skipped; non-UTF-8 bytes, bad JSON and non-object lines are errors naming the
    file and the line (`decode_jsonl_record`) when the row is read. A file that changes after it
    was indexed is an error, not rows from the wrong places.
    """

    def __init__(self, path: Path):
        super().__init__(path)
        offset = 0
        with path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    self.offsets.append(offset)
                    self.line_numbers.append(number)
                offset += len(line)

    def _row(self, number: int, raw: bytes) -> Row:
        return Row(f"{self.path}:{number}", decode_jsonl_record(self.path, number, raw))

    def __getitem__(self, index: int) -> Row:
        self._check_unchanged()
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[index])
            return self._row(self.line_numbers[index], handle.readline())

    def __iter__(self) -> Iterator[Row]:
        """Every row in one pass over the file (reading by index would reopen it for each)."""
        self._check_unchanged()
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    yield self._row(number, line)


def _csv_records(path: Path, handle, offset: int = 0, line: int = 1, row: int = 0) -> Iterator[tuple[int, int, list]]:
    """(byte offset, line number, values) of each non-blank record from `offset`, parsed by the csv
    module (a quoted value may hold newlines); `row` is the number of the first record (the header: 0).
    Bytes that are not UTF-8 and malformed records are errors naming the file and the row."""
    at = [offset, line]  # where the next line starts

    def where() -> str:
        return f"{path} {'header' if row == 0 else f'row {row}'} (line {at[1]})"

    def lines() -> Iterator[str]:
        for raw in handle:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where()}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                                 f"column {exc.start + 1}); save the file as UTF-8") from None
            at[0] += len(raw)
            at[1] += 1
            yield text

    reader = csv.reader(lines())
    while True:
        start = tuple(at)
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValueError(f"{where()}: not a CSV record ({exc})") from None
        if values:  # a blank line is no record
            yield start[0], start[1], values
            row += 1


class CsvRows(FileRows):
    """The rows of a csv file (a header row, then one record a row, every value text), each parsed
    again from the byte offset of its record when asked for. A record whose number of values is not
    the header's is an error naming the file and the row."""

    def __init__(self, path: Path):
        super().__init__(path)
        with path.open("rb") as handle:
            records = _csv_records(path, handle)
            _, _, self.fields = next(records, (0, 0, []))
            for offset, line, values in records:
                self.offsets.append(offset)
                self.line_numbers.append(line)
                self._record(len(self.offsets), line, values)  # checked once now

    def _record(self, row: int, line: int, values: list) -> Row:
        if len(values) != len(self.fields):
            raise ValueError(f"{self.path} row {row} (line {line}): {len(values)} values for the "
                             f"{len(self.fields)} columns of the header ({', '.join(self.fields)})")
        return Row(f"{self.path} row {row}", dict(zip(self.fields, values)))

    def __getitem__(self, index: int) -> Row:
        self._check_unchanged()
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[index])
            _, line, values = next(_csv_records(self.path, handle, self.offsets[index], self.line_numbers[index],
                                                index + 1))
            return self._record(index + 1, line, values)

    def __iter__(self) -> Iterator[Row]:
        self._check_unchanged()
        with self.path.open("rb") as handle:
            records = _csv_records(self.path, handle)
            next(records, None)  # the header
            for row, (_, line, values) in enumerate(records, 1):
                yield self._record(row, line, values)


class ParquetRows(FileRows):
    """The rows of a parquet file, read one row group at a time (the last one read is kept)."""

    def __init__(self, path: Path):
        super().__init__(path)
        try:
            import pyarrow.parquet as parquet
        except ImportError:
            raise ValueError(f"{path}: reading parquet needs the `pyarrow` package "
                             "(pip install 'rlvr[tasks]')") from None
        try:
            self.file = parquet.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises its own error types for a damaged file
            raise ValueError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None
        meta = self.file.metadata
        self.group_starts = [0]  # the index of each row group's first row, then the row count
        for group in range(meta.num_row_groups):
            self.group_starts.append(self.group_starts[-1] + meta.row_group(group).num_rows)
        self.cached: tuple[int, object] = (-1, None)

    def __len__(self) -> int:
        return self.group_starts[-1]

    def _group(self, group: int):
        if self.cached[0] != group:
            self.cached = (group, self.file.read_row_group(group))
        return self.cached[1]

    def __getitem__(self, index: int) -> Row:
        self._check_unchanged()
        index = range(len(self))[index]  # negative indices, and IndexError past the end
        group = bisect.bisect_right(self.group_starts, index) - 1
        record = self._group(group).slice(index - self.group_starts[group], 1).to_pylist()[0]
        return Row(f"{self.path} row {index + 1}", record)

    def __iter__(self) -> Iterator[Row]:
        self._check_unchanged()
        number = 0
        for batch in self.file.iter_batches(batch_size=1024):
            for record in batch.to_pylist():
                number += 1
                yield Row(f"{self.path} row {number}", record)


def _whole_json_error(path: Path) -> ValueError:
    """The error for a file that does not open a JSON list, from parsing it whole as before (it holds no rows)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return ValueError(f"{path}: not UTF-8 text; save the file as UTF-8")
    except json.JSONDecodeError as exc:
        return ValueError(f"{path}: not valid JSON ({exc})")
    except RecursionError:  # the parser recurses once per [ or {
        return ValueError(f"{path}: JSON nested too deeply to read (thousands of [ or {{ inside each other); "
                          "a data file is a list of objects of plain values")
    return ValueError(f"{path}: expected a JSON list of objects, got {type(data).__name__} "
                      "(one object per line is a .jsonl file)")


JSON_CHUNK_BYTES = 2**16  # read this many bytes at a time; a longer item widens the window until it fits
JSON_SPACE = re.compile(r"[ \t\n\r]*")
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what surrogateescape decoding makes of a byte that is not UTF-8


def _json_records(path: Path, handle) -> Iterator[tuple[int, int, object]]:
    """(byte offset, byte length, value) of each item of the JSON list in `handle`, in one pass that holds
    one window of text, each item parsed by `json`'s own decoder (`raw_decode`). A file that does not start
    with `[` is an error from `_whole_json_error`; anything else wrong is an error naming the item."""
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")  # bytes round-trip exactly
    text, at_eof = "", False
    mark, mark_byte, mark_line, mark_column = 0, 0, 1, 1  # text[mark] is byte mark_byte, line and column
    number = 0  # items read so far

    def fill() -> bool:
        """Append the next chunk (at least as much as is held); False at the end of the file."""
        nonlocal text, mark, at_eof
        if at_eof:
            return False
        raw = handle.read(max(JSON_CHUNK_BYTES, len(text) - mark))
        at_eof = not raw
        text = text[mark:] + utf8.decode(raw, final=at_eof)
        mark = 0
        return True

    def advance(to: int) -> None:
        """Move the mark to text[to], counting the bytes, lines and columns passed."""
        nonlocal mark, mark_byte, mark_line, mark_column
        passed = text[mark:to]
        mark_byte += len(passed.encode("utf-8", "surrogateescape"))
        newlines = passed.count("\n")
        mark_column = len(passed) - passed.rfind("\n") if newlines else mark_column + len(passed)
        mark_line += newlines
        mark = to

    def where(position: int) -> str:
        passed = text[mark:position]
        newlines = passed.count("\n")
        column = len(passed) - passed.rfind("\n") if newlines else mark_column + len(passed)
        return f"line {mark_line + newlines} column {column}"

    def skip_space() -> str:
        """The next character after JSON whitespace ('' at the end of the file), with the mark on it."""
        while True:
            advance(JSON_SPACE.match(text, mark).end())
            if mark < len(text) or not fill():
                return text[mark:mark + 1]

    def failure(place: str, problem: str, position: int) -> ValueError:
        return ValueError(f"{path} {place}: not valid JSON ({problem}: {where(position)})")

    fill()
    if skip_space() != "[":
        raise _whole_json_error(path)
    advance(mark + 1)
    closed = skip_space() == "]"
    while not closed:
        if skip_space() == "":
            raise failure(f"after item {number}", "the list is not closed with ']'", mark)
        while True:
            try:
                value, end = decoder.raw_decode(text, mark)
            except json.JSONDecodeError as exc:
                # an error in the last few characters, or an unclosed string, may be the window's end
                near_end = exc.pos >= len(text) - 16 or exc.msg.startswith("Unterminated string")
                if near_end and fill():
                    continue
                raise failure(f"item {number + 1}", exc.msg, exc.pos) from None
            except RecursionError:  # the decoder recurses once per [ or {
                raise ValueError(f"{path} item {number + 1}: JSON nested too deeply to read (thousands of [ or {{ "
                                 "inside each other); a data file is a list of objects of plain values") from None
            if end < len(text) or not fill():  # a number at the window's end may go on in the next chunk
                break
        bad = NOT_UTF8.search(text, mark, end)
        if bad:
            raise ValueError(f"{path} item {number + 1}: not UTF-8 text (byte 0x{ord(bad.group()) - 0xdc00:02x} "
                             f"at {where(bad.start())}); save the file as UTF-8")
        start = mark_byte
        advance(end)
        number += 1
        yield start, mark_byte - start, value
        after = skip_space()
        if after not in (",", "]"):
            raise failure(f"after item {number}", "expecting ',' or ']'", mark)
        closed = after == "]"
        if closed:
            break
        advance(mark + 1)
    advance(mark + 1)  # the closing bracket
    if skip_space() != "":
        raise failure("after the list", "extra data", mark)


def _json_item(path: Path, number: int, value) -> Row:
    if not isinstance(value, dict):
        raise ValueError(f"{path} item {number}: expected a JSON object, got {type(value).__name__}")
    return Row(f"{path} item {number}", value)


class JsonRows(FileRows):
    """The rows of a `.json` list, indexed like jsonl: one pass (`_json_records`) checks every item and
    records where it starts and how many bytes it takes, and a row is parsed from those bytes when asked
    for. Bad JSON, bytes that are not UTF-8 and items that are not objects are errors naming the item."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.lengths = array("q")
        with path.open("rb") as handle:
            for number, (offset, length, value) in enumerate(_json_records(path, handle), 1):
                _json_item(path, number, value)  # checked once now
                self.offsets.append(offset)
                self.lengths.append(length)

    def __getitem__(self, index: int) -> Row:
        self._check_unchanged()
        index = range(len(self))[index]  # negative indices, and IndexError past the end
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[index])
            raw = handle.read(self.lengths[index])
        return _json_item(self.path, index + 1, json.loads(raw.decode("utf-8")))

    def __iter__(self) -> Iterator[Row]:
        """Every row in one pass over the file."""
        self._check_unchanged()
        with self.path.open("rb") as handle:
            for number, (_, _, value) in enumerate(_json_records(self.path, handle), 1):
                yield _json_item(self.path, number, value)


READERS = {".jsonl": JsonlRows, ".json": JsonRows, ".parquet": ParquetRows, ".csv": CsvRows}


def check_data_file(path: str | Path) -> Path:
    """`path` (user folder expanded) when it is a file of a known format (see `FORMATS`) that can be opened and
    read; otherwise an error naming it. Reads one byte: cheap enough for a start-up check of any file."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"data file {str(path)!r} is a folder; name a file in it ({', '.join(FORMATS)})")
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist")
    if path.suffix.lower() not in READERS:
        raise ValueError(f"data file {str(path)!r}: unknown format {path.suffix!r}; "
                         f"valid formats: {', '.join(FORMATS)}")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ValueError(f"data file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    return path


def read_rows(path: str | Path) -> Sequence[Row]:
    """Every record of a local data file, by its suffix (see `FORMATS`): json in a list, others on demand."""
    path = check_data_file(path)
    rows = READERS[path.suffix.lower()](path)
    if not rows:
        raise ValueError(f"{path}: the file is empty; a data file holds at least one record")
    return rows


def _offline_mode() -> Optional[str]:
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return name
    return None


def hf_rows(dataset: str, config: Optional[str], split: str) -> list[Row]:
    """Only called when the user names a dataset; needs the `datasets` package and the hub or a cache."""
    try:
        import datasets
    except ImportError:
        raise ValueError("task.options.dataset needs the `datasets` package (pip install datasets)") from None
    try:
        records = datasets.load_dataset(dataset, config, split=split)
    except ConnectionError as exc:
        offline = _offline_mode()
        where = (f"{offline} is set, so only the local Hugging Face cache was searched, and the dataset is not "
                 "there" if offline else "could not reach the Hugging Face hub, and the dataset is not in the local "
                 "cache")
        raise ValueError(
            f"task.options.dataset={dataset!r} (split {split!r}): {where} ({exc}). Download it once on a machine "
            "with network access, or point the task at local files instead: task.options.path=data.jsonl "
            "(a slice held out for eval) or train_path / eval_path"
        ) from None
    return [Row(f"dataset {dataset} split {split} row {number}", dict(record))
            for number, record in enumerate(records, 1)]
