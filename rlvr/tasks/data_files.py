"""Reading question-answer rows from local files or a Hugging Face dataset, each with its location.

Local files: `.jsonl` (one object a line), `.json` (a list of objects), `.parquet` (needs
`pyarrow`, which the `datasets` package brings) and `.csv` (a header row; every value is text).
A `.jsonl` file is indexed, not loaded: one pass records where each line starts, and a row is read
from the file when it is used, so a large file costs 16 bytes a row in memory, not its size.
A Hugging Face dataset (`datasets.load_dataset(name, config, split=...)`) is read only when the
user names one. Each row comes with where it was found (`train.jsonl line 5`), so a bad row is
reported by file and position rather than as "some record".
"""

from __future__ import annotations

import csv
import json
import os
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


class JsonlRows(Sequence):
    """The rows of a jsonl file, each read from the file when asked for, by the offset of its line.

    Blank lines are skipped; non-UTF-8 bytes, bad JSON and non-object lines are errors naming the
    file and the line (`decode_jsonl_record`) when the row is read. A file that changes after it
    was indexed is an error, not rows from the wrong places.
    """

    def __init__(self, path: Path):
        self.path = path
        self.offsets, self.line_numbers = array("q"), array("q")  # of the non-blank lines
        offset = 0
        with path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    self.offsets.append(offset)
                    self.line_numbers.append(number)
                offset += len(line)
        self.identity = self._identity()

    def _identity(self) -> tuple[int, int]:
        stat = self.path.stat()
        return stat.st_size, stat.st_mtime_ns

    def _check_unchanged(self) -> None:
        if self._identity() != self.identity:
            raise ValueError(f"{self.path}: the file changed after it was read at the start; its rows are read "
                             "again while the task runs, so leave a data file as it is until the run ends")

    def _row(self, number: int, raw: bytes) -> Row:
        return Row(f"{self.path}:{number}", decode_jsonl_record(self.path, number, raw))

    def __len__(self) -> int:
        return len(self.offsets)

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


def _json_rows(path: Path) -> list[Row]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:  # the parser recurses once per [ or {
        raise ValueError(f"{path}: JSON nested too deeply to read (thousands of [ or {{ inside each other); "
                         "a data file is a list of objects of plain values") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of objects, got {type(data).__name__} "
                         "(one object per line is a .jsonl file)")
    rows = []
    for number, record in enumerate(data, 1):
        if not isinstance(record, dict):
            raise ValueError(f"{path} item {number}: expected a JSON object, got {type(record).__name__}")
        rows.append(Row(f"{path} item {number}", record))
    return rows


def _parquet_rows(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise ValueError(f"{path}: reading parquet needs the `pyarrow` package (pip install 'rlvr[tasks]')") from None
    records = parquet.read_table(path).to_pylist()
    return [Row(f"{path} row {number}", record) for number, record in enumerate(records, 1)]


def _csv_rows(path: Path) -> list[Row]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            return [Row(f"{path} row {number}", dict(record))
                    for number, record in enumerate(csv.DictReader(handle), 1)]
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; save the file as UTF-8") from None


READERS = {".jsonl": JsonlRows, ".json": _json_rows, ".parquet": _parquet_rows, ".csv": _csv_rows}


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
    """Every record of a local data file, by its suffix (see `FORMATS`): jsonl rows on demand, others in a list."""
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
