"""A model's shape (hidden size, layers, heads, vocabulary, ...) read from its config, never its weights.

A model folder or a hub id in the local cache gives its `config.json`; a GGUF file (the embedded
models) gives the key-value header at the front of the file, read here directly: transformers'
GGUF config path parses every tokenizer entry too and takes seconds. `rlvr.models.memory_estimate`
turns the shape into a memory estimate before any weight is loaded.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

from rlvr.models.conversion import resolve_model_path


@dataclass(frozen=True)
class Architecture:
    """The numbers of a decoder-only transformer (Llama-style: attention with grouped KV heads, gated MLP)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    intermediate_size: int
    head_dim: int
    tie_word_embeddings: bool


# GGUF value types: struct format of the fixed-size ones; 8 is a string, 9 an array.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _read(handle: BinaryIO, fmt: str):
    return struct.unpack(fmt, handle.read(struct.calcsize(fmt)))[0]


def _read_string(handle: BinaryIO) -> str:
    return handle.read(_read(handle, "<Q")).decode("utf-8", errors="replace")


def _read_value(handle: BinaryIO, kind: int):
    """One header value; arrays are skipped (None): the shape is in scalars, arrays hold the tokenizer."""
    if kind in _GGUF_SCALARS:
        return _read(handle, _GGUF_SCALARS[kind])
    if kind == _GGUF_STRING:
        return _read_string(handle)
    if kind != _GGUF_ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    item_kind, count = _read(handle, "<I"), _read(handle, "<Q")
    if item_kind in _GGUF_SCALARS:
        handle.seek(count * struct.calcsize(_GGUF_SCALARS[item_kind]), os.SEEK_CUR)
    else:
        for _ in range(count):
            _read_value(handle, item_kind)
    return None


def gguf_header(path: str | Path) -> tuple[dict, list[str]]:
    """(the scalar key-values, the tensor names) at the front of a GGUF file (version 2 or 3)."""
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _read(handle, "<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        tensor_count, kv_count = _read(handle, "<Q"), _read(handle, "<Q")
        fields = {}
        for _ in range(kv_count):
            key = _read_string(handle)
            fields[key] = _read_value(handle, _read(handle, "<I"))
        names = []
        for _ in range(tensor_count):
            names.append(_read_string(handle))
            dims = _read(handle, "<I")
            handle.seek(8 * dims + 4 + 8, os.SEEK_CUR)  # the dimensions, the tensor type, the data offset
    return fields, names


def _from_gguf(path: str | Path) -> Architecture:
    fields, names = gguf_header(path)
    arch = fields.get("general.architecture")
    prefix = f"{arch}."
    hidden, heads = fields[prefix + "embedding_length"], fields[prefix + "attention.head_count"]
    vocab = fields.get(prefix + "vocab_size")
    if vocab is None:  # older files give it only as the tokenizer's length
        raise KeyError(prefix + "vocab_size")
    return Architecture(
        hidden_size=hidden, num_layers=fields[prefix + "block_count"], num_heads=heads,
        num_kv_heads=fields.get(prefix + "attention.head_count_kv", heads), vocab_size=vocab,
        intermediate_size=fields[prefix + "feed_forward_length"],
        head_dim=fields.get(prefix + "attention.key_length", hidden // heads),
        tie_word_embeddings="output.weight" not in names,
    )


def _from_config(config: dict) -> Architecture:
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    return Architecture(
        hidden_size=hidden, num_layers=config["num_hidden_layers"], num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads, vocab_size=config["vocab_size"],
        intermediate_size=config["intermediate_size"], head_dim=config.get("head_dim") or hidden // heads,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
    )


def read_architecture(spec: str | os.PathLike) -> Optional[Architecture]:
    """The shape of the model `spec` names (see `resolve_model_path`), from its config or GGUF header.

    None when the config lacks one of the numbers (an architecture that is not Llama-style) or a
    hub model's config.json is not in the local cache. Nothing is converted, downloaded or loaded.
    """
    path, gguf_file = resolve_model_path(spec, convert_gguf=False)
    try:
        if gguf_file is not None:
            return _from_gguf(Path(path) / gguf_file)
        if Path(path).is_dir():
            return _from_config(json.loads((Path(path) / "config.json").read_text()))
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        return _from_config(json.loads(Path(cached).read_text())) if isinstance(cached, str) else None
    except (KeyError, TypeError, ZeroDivisionError):
        return None
