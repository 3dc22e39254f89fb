"""Reading question-answer rows from local files or a Hugging Face dataset, each with its location.

Local files: `.jsonl` (one object a line), `.json` (a list of objects), `.parquet` (needs
`pyarrow`, which the `datasets` package brings) and `.csv` (a header row; every value is text).
A Hugging Face dataset (`datasets.load_dataset(name, config, split=...)`) is read only when the
user names one. Each row comes with where it was found (`train.jsonl line 5`), so a bad row is
reported by file and position rather than as "some record".
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FORMATS = (".jsonl", ".json", ".parquet", ".csv")


@dataclass
class Row:
    """One record and where it came from (`data.jsonl line 3`, `data.csv row 2`)."""

    where: str
    record: dict


def _jsonl_rows(path: Path) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {number}: not valid JSON ({exc})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path} line {number}: expected a JSON object, got {type(record).__name__}")
            rows.append(Row(f"{path} line {number}", record))
    return rows


def _json_rows(path: Path) -> list[Row]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
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
    with path.open(encoding="utf-8", newline="") as handle:
        return [Row(f"{path} row {number}", dict(record)) for number, record in enumerate(csv.DictReader(handle), 1)]


READERS = {".jsonl": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows, ".csv": _csv_rows}


def read_rows(path: str | Path) -> list[Row]:
    """Every record of a local data file, by its suffix (see `FORMATS`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"data file {str(path)!r}: unknown format {path.suffix!r}; "
                         f"valid formats: {', '.join(FORMATS)}")
    return reader(path)


def hf_rows(dataset: str, config: Optional[str], split: str) -> list[Row]:
    """Only called when the user names a dataset; needs the `datasets` package and the hub or a cache."""
    try:
        import datasets
    except ImportError:
        raise ValueError("task.options.dataset needs the `datasets` package (pip install datasets)") from None
    records = datasets.load_dataset(dataset, config, split=split)
    return [Row(f"dataset {dataset} split {split} row {number}", dict(record))
            for number, record in enumerate(records, 1)]
