"""Small shared helpers: atomic file writes, JSON lines, seeding and memory readings.

Everything a run writes goes through the atomic helpers so a crash never leaves a half file.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import random
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from rlvr.storage_errors import storage_error


def lazy_attributes(package: str, sources: dict[str, str], namespace: dict) -> Callable[[str], Any]:
    """A package's module-level `__getattr__` (PEP 562) that imports each name from its submodule on first use.

    `sources` maps a name to the submodule (relative to `package`) that defines it; the value found is kept
    in `namespace` (the package's globals), so the import happens once. Any other name is an AttributeError.
    """

    def __getattr__(name: str):
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (setting it races with threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`.

    The file gets the mode a plain `open()` would give it (0o666 minus the umask), not mkstemp's 0o600.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        explained = storage_error(exc, path) if isinstance(exc, OSError) else None
        if explained is not None:
            raise explained from exc
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    torch = sys.modules.get("torch")  # a tensor can only exist once torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(record: dict) -> str:
    """JSON with NaN/inf written as null (strict JSON readers reject NaN)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(record), default=_json_default, ensure_ascii=False)


def append_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Append whole lines and flush; a reader never sees half a record from a live run."""
    lines = "".join(to_json(r) + "\n" for r in records)
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(lines)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        explained = storage_error(exc, Path(path))
        if explained is not None:
            raise explained from exc
        raise


def _jsonl_lines(path: Path) -> list[tuple[int, bytes, bool]]:
    """(line number, bytes, ends with a newline) for every non-blank line of the file."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    out = []
    for number, raw in enumerate(lines, 1):
        if raw.strip():
            out.append((number, raw, number < len(lines)))  # only the text after the last newline is unterminated
    return out


def decode_jsonl_record(path: Path, number: int, raw: bytes) -> dict:
    """One JSON object from one line; any problem is a ValueError naming the file and the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                         "save the file as UTF-8") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
    except RecursionError:  # the parser recurses once per [ or {
        raise ValueError(f"{path}:{number}: JSON nested too deeply to read (thousands of [ or {{ inside each "
                         "other); a data row is an object of plain values") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}:{number}: expected a JSON object ({{...}}) per line, got "
                         f"{type(record).__name__} {text.strip()[:60]}")
    return record


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file (none if it does not exist); a bad line names file and line."""
    path = Path(path)
    if not path.exists():
        return []
    return [decode_jsonl_record(path, number, raw) for number, raw, _ in _jsonl_lines(path)]


def read_jsonl_numbered(path: Path, what: str = "data file") -> list[tuple[int, dict]]:
    """(line number, record) of a jsonl data file that must exist and hold at least one record."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    records = [(number, decode_jsonl_record(path, number, raw)) for number, raw, _ in _jsonl_lines(path)]
    if not records:
        raise ValueError(f"{path}: the file is empty; a {what} holds one JSON object per line")
    return records


def trimmed_jsonl(path: Path, keep: callable) -> tuple[str | None, str | None]:
    """(text of the records for which keep(record) is true, note), without writing; (None, None) if no file.

    A last line without its newline that does not parse is what an interrupted append leaves; it
    is dropped and the note says so (None when nothing was dropped). A bad line anywhere else is
    still an error naming the file and the line.
    """
    path = Path(path)
    if not path.exists():
        return None, None
    lines = _jsonl_lines(path)
    note = None
    if lines and not lines[-1][2]:
        number, raw, _ = lines[-1]
        try:
            decode_jsonl_record(path, number, raw)
        except ValueError:
            lines = lines[:-1]
            note = f"{path}: dropped an incomplete last line ({number}, {len(raw)} bytes) left by an interrupted write"
    kept = [r for r in (decode_jsonl_record(path, number, raw) for number, raw, _ in lines) if keep(r)]
    return "".join(to_json(r) + "\n" for r in kept), note


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass


def rng_state() -> dict:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
