"""Finding a model from a spec, and turning a GGUF file into a plain safetensors folder once.

Loading a quantised GGUF through transformers dequantises every tensor on every load (about 40 s
for SmolLM2-135M on a laptop CPU); the safetensors copy written here, bit for bit the same
weights, loads in a second or two. Conversions are cached and published atomically.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Mapping

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rlvr.models.model_spec import (COMPLETE_MARKER, cache_dir, check_model_spec, converted_model_dir,  # noqa: F401
                                    gguf_cache_key, is_complete_conversion, locate_model)

logger = logging.getLogger(__name__)

# Leftover work folders of a crashed conversion are removed once this old; a live conversion
# takes about a minute, so six hours cannot hit one in progress.
STALE_PARTIAL_SECONDS = 6 * 3600
# Text the converted tokenizer must encode exactly as the original one does.
TOKENIZER_PROBE = "<|im_start|>user\nWhat is 12 + 30? Answer: 42.<|im_end|>\n<|im_start|>assistant\n"


def compare_state_dicts(
    expected: Mapping[str, torch.Tensor], actual: Mapping[str, torch.Tensor]
) -> list[str]:
    """Every difference between two state dicts: missing or extra keys, shape, dtype, or any bit."""
    problems = [f"missing {key}" for key in sorted(set(expected) - set(actual))]
    problems += [f"unexpected {key}" for key in sorted(set(actual) - set(expected))]
    for key in sorted(set(expected) & set(actual)):
        want, got = expected[key], actual[key]
        if want.dtype != got.dtype or want.shape != got.shape:
            problems.append(f"{key}: {got.dtype}{list(got.shape)} instead of {want.dtype}{list(want.shape)}")
        elif not torch.equal(want.cpu(), got.cpu()):
            problems.append(f"{key}: values differ")
    return problems


def _raise_if_different(expected, actual, stage: str) -> None:
    problems = compare_state_dicts(expected, actual)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise RuntimeError(f"conversion is not bit-for-bit exact ({stage}): {shown}")


def copy_into_fresh_model(model: PreTrainedModel) -> PreTrainedModel:
    """A plain model built from `model`'s config (without its quantization config) holding its weights.

    transformers refuses `save_pretrained` on a GGUF-loaded model; this copy has no such tie.
    """
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    fresh.load_state_dict(model.state_dict(), strict=True)
    if getattr(model, "generation_config", None) is not None:
        fresh.generation_config = copy.deepcopy(model.generation_config)  # eos, pad and sampling defaults
    if getattr(config, "tie_word_embeddings", False):
        if fresh.get_output_embeddings().weight is not fresh.get_input_embeddings().weight:
            raise RuntimeError("the rebuilt model does not share lm_head with embed_tokens as its config says")
    return fresh.eval()


def _remove_stale_partials(out_dir: Path) -> None:
    for partial in out_dir.parent.glob(f".{out_dir.name}.partial-*"):
        try:
            if time.time() - partial.stat().st_mtime > STALE_PARTIAL_SECONDS:
                shutil.rmtree(partial, ignore_errors=True)
        except FileNotFoundError:
            pass  # another process removed it first


def _publish(work_dir: Path, out_dir: Path) -> None:
    """Rename the finished `work_dir` to `out_dir`; if another process got there first, keep theirs."""
    try:
        os.rename(work_dir, out_dir)
    except OSError:
        if is_complete_conversion(out_dir):
            shutil.rmtree(work_dir, ignore_errors=True)
            return
        shutil.rmtree(out_dir, ignore_errors=True)  # an incomplete folder left by hand or by older code
        os.rename(work_dir, out_dir)


def write_verified_model(model: PreTrainedModel, tokenizer, folder: str | Path) -> int:
    """Save `model` (safetensors, config, generation config) and `tokenizer` into `folder`, then check them.

    The weights are checked twice against `model.state_dict()`, bit for bit: in the fresh in-memory
    copy, and after reloading the written files; the reloaded tokenizer must encode a probe text
    the same way and keep its chat template. Returns the number of tensors checked.
    """
    folder = Path(folder)
    expected = model.state_dict()
    fresh = copy_into_fresh_model(model)
    _raise_if_different(expected, fresh.state_dict(), "in-memory copy")
    fresh.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del fresh
    reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=model.dtype)
    _raise_if_different(expected, reloaded.state_dict(), "after reloading the saved files")
    reloaded_tokenizer = AutoTokenizer.from_pretrained(folder)
    if reloaded_tokenizer(TOKENIZER_PROBE).input_ids != tokenizer(TOKENIZER_PROBE).input_ids:
        raise RuntimeError("the saved tokenizer encodes differently from the original one")
    if reloaded_tokenizer.chat_template != tokenizer.chat_template:
        raise RuntimeError("the saved tokenizer lost or changed its chat template")
    return len(expected)


def save_verified_copy(model: PreTrainedModel, tokenizer, out_dir: str | Path, *, source: dict | None = None) -> Path:
    """Save `model` and `tokenizer` to `out_dir` as safetensors, checked bit for bit, atomically.

    Everything is written into a hidden work folder next to `out_dir` (`write_verified_model`),
    with the marker file last, then renamed; a crash never leaves a complete-looking folder.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out_dir)
    work_dir = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.partial-"))
    try:
        tensors = write_verified_model(model, tokenizer, work_dir)
        marker = {
            "source": source or {},
            "tensors": tensors,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }
        (work_dir / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _publish(work_dir, out_dir)
    finally:
        if work_dir.exists():
            shutil.rmtree(work_dir, ignore_errors=True)
    return out_dir


def convert_gguf_to_safetensors(gguf_folder: str | Path, gguf_file: str, out_dir: str | Path) -> Path:
    """Dequantise `gguf_folder/gguf_file` to float32 and save it with its tokenizer to `out_dir`.

    Returns `out_dir` at once when it already holds a complete conversion. The float32 copy keeps
    exactly the values transformers' GGUF loader produces; `load_policy` casts to the requested dtype.
    """
    out_dir = Path(out_dir)
    if is_complete_conversion(out_dir):
        return out_dir
    gguf_path = Path(gguf_folder) / gguf_file
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file {gguf_path} does not exist")
    logger.info("converting %s to safetensors in %s (once; later loads use the copy)", gguf_path, out_dir)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(gguf_folder), gguf_file=gguf_file, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_folder), gguf_file=gguf_file)
    stat = gguf_path.stat()
    source = {"gguf_file": str(gguf_path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    save_verified_copy(model, tokenizer, out_dir, source=source)
    logger.info("converted %s in %.1f s", gguf_path.name, time.perf_counter() - started)
    return out_dir


def resolve_model_path(spec: str | os.PathLike, *, convert_gguf: bool = True) -> tuple[str, str | None]:
    """Turn a model spec into `(path_or_hub_id, gguf_file)` for transformers' `from_pretrained`.

    The spec is found as `rlvr.models.model_spec.locate_model` finds it (embedded name, `.gguf` path,
    model folder, hub id); a GGUF file is converted once into the cache and the copy's folder returned.
    With `convert_gguf=False`, GGUF specs return `(folder, file name)` to load the GGUF directly.
    """
    source = locate_model(spec)
    if source.gguf_file is None or not convert_gguf:
        return source.location, source.gguf_file
    out_dir = converted_model_dir(source.cache_name, Path(source.location) / source.gguf_file)
    convert_gguf_to_safetensors(source.location, source.gguf_file, out_dir)
    return str(out_dir), None
