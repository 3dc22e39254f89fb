"""What a model spec names, found without torch or transformers: an embedded model, a `.gguf` file, a model
folder or a hub id in the local cache, and where a GGUF file's converted copy lives in rlvr's cache.

`check_model_spec` is the start-up check of `model.name`; it imports nothing heavy, so a bad name fails
in a fraction of a second. Loading and converting (`rlvr.models.conversion`, `rlvr.models.policy`)
start from `locate_model`'s answer.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rlvr.models.embedded import EMBEDDED_MODELS, embedded_gguf_location

# Written last into a conversion folder: a folder without it is incomplete and is never used.
COMPLETE_MARKER = "rlvr-conversion.json"


def cache_dir() -> Path:
    """rlvr's cache: `$RLVR_CACHE_DIR` if set, else `~/.cache/rlvr`. Converted models go in `models/`."""
    configured = os.environ.get("RLVR_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rlvr"


def gguf_cache_key(gguf_path: str | Path) -> str:
    """A short hash of the file's absolute path, size and modification time.

    Cheap to compute on a 100 MB file, and it changes when the file is replaced or upgraded.
    """
    path = Path(gguf_path).resolve()
    stat = path.stat()
    identity = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def converted_model_dir(name: str, gguf_path: str | Path) -> Path:
    """`<cache>/models/<name>-<key>`: where the safetensors copy of `gguf_path` lives."""
    return cache_dir() / "models" / f"{name}-{gguf_cache_key(gguf_path)}"


def is_complete_conversion(folder: str | Path) -> bool:
    return (Path(folder) / COMPLETE_MARKER).is_file()


@dataclass(frozen=True)
class ModelSource:
    """Where a spec's model is. location: a model folder or a hub id, or for a GGUF file the folder
    holding it; gguf_file: that file's name (None otherwise); cache_name: the name its converted copy
    is cached under (`converted_model_dir`)."""

    location: str
    gguf_file: str | None = None
    cache_name: str | None = None


def valid_specs() -> str:
    return (f"an embedded model name ({', '.join(EMBEDDED_MODELS.names())}), a model folder, a .gguf file, or a "
            "hub id")


def locate_model(spec: str | os.PathLike) -> ModelSource:
    """Find what `spec` names, converting and loading nothing. In the order tried:
      - an embedded model name (see `EMBEDDED_MODELS`): its package's GGUF file;
      - a path to a `.gguf` file (cached by path, size and mtime once converted);
      - a local model folder (with `config.json`, as `save_pretrained` writes it);
      - anything else is a Hugging Face hub id, returned as is (transformers looks in its cache).
    """
    text = os.fspath(spec)
    if text in EMBEDDED_MODELS:
        folder, gguf_file = embedded_gguf_location(text)
        return ModelSource(str(folder), gguf_file, text)
    path = Path(text).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} does not exist")
        path = path.resolve()
        return ModelSource(str(path.parent), path.name, path.stem.lower())
    if path.is_dir():
        if not (path / "config.json").is_file():
            ggufs = sorted(found.name for found in path.glob("*.gguf"))
            hint = f"; to use a GGUF file in it, pass its path, e.g. {path / ggufs[0]}" if ggufs else ""
            raise FileNotFoundError(f"model folder {path} has no config.json{hint}")
        return ModelSource(str(path.resolve()))
    if path.exists():
        raise ValueError(f"model spec {text!r} is a file but not a .gguf file; pass a model folder instead")
    if text.startswith(("/", ".", "~")) or text.count("/") > 1:
        raise FileNotFoundError(f"model spec {text!r} looks like a path but nothing is there; valid specs: "
                                f"{valid_specs()}")
    return ModelSource(text)


def check_model_spec(spec: str | os.PathLike) -> None:
    """Raise now, loading and converting nothing, if `spec` names no model that `load_policy` could load.

    `locate_model` checks an embedded name (its package and file), a `.gguf` path and a folder; what it
    passes on as a hub id must have its config.json in the local Hugging Face cache (rlvr never
    downloads a model). Imports neither torch nor transformers.
    """
    text = os.fspath(spec)
    source = locate_model(text)
    if source.gguf_file is not None or Path(source.location).is_dir():
        return
    from huggingface_hub import try_to_load_from_cache

    valid = f"valid specs: {valid_specs()} already in the local Hugging Face cache"
    try:
        cached = try_to_load_from_cache(source.location, "config.json")
    except ValueError:  # not a well-formed hub id
        raise ValueError(f"model {text!r} is neither an embedded name, a file or a folder, nor a valid hub id; "
                         f"{valid}") from None
    if not isinstance(cached, str):
        raise FileNotFoundError(f"model {text!r} is not an embedded name, a file or a folder, and no hub model of that "
                                f"name is in the local Hugging Face cache (rlvr does not download models); {valid}")
