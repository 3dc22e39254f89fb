"""`rlvr export`: a run's checkpoint as a standard Hugging Face folder that other tools load.

Merged (`--merge`, and always for full fine-tuning): `config.json`, `generation_config.json`,
`model.safetensors` and the base model's tokenizer with its chat template, checked bit for bit
after writing; `AutoModelForCausalLM.from_pretrained(DIR)` or vLLM's `LLM(model=DIR)` load it.
LoRA without `--merge`: a PEFT adapter folder (`adapter_config.json`, `adapter_model.safetensors`,
the tokenizer) whose `base_model_name_or_path` is the base model's folder (for the embedded model,
its converted copy in the rlvr cache) or hub id; `PeftModel.from_pretrained(base, DIR)` loads it,
and so does `AutoModelForCausalLM.from_pretrained(DIR)` when PEFT is installed (it reads the base
from that field). Everything is written into a hidden folder next to DIR and renamed into place;
`rlvr_export.json` records the run, checkpoint and base model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from safetensors.torch import load_file
from transformers import AutoTokenizer

from rlvr.models.conversion import compare_state_dicts, write_verified_model
from rlvr.models.checkpoints.run_policy import load_policy_from_run, open_checkpoint
from rlvr.models.checkpoints.weights import ADAPTER_WEIGHTS_FILE, trainable_tensors, write_adapter

EXPORT_INFO_FILE = "rlvr_export.json"


@dataclass
class ExportResult:
    folder: Path
    mode: str  # "merged" (LoRA merged into the weights), "full" (full fine-tuning) or "adapter"
    checkpoint: Path
    base_model: str  # the folder or hub id the weights sit on


def _write_adapter_folder(loaded, folder: Path) -> None:
    tensors = trainable_tensors(loaded)
    write_adapter(tensors, loaded.policy.peft_config["default"], folder, base_model_name_or_path=loaded.model_path)
    problems = compare_state_dicts(tensors, load_file(str(folder / ADAPTER_WEIGHTS_FILE)))
    if problems:
        raise RuntimeError(f"the written adapter differs from the checkpoint: {'; '.join(problems[:5])}")


def export_run(path: str | os.PathLike, out: str | os.PathLike, *, checkpoint: Optional[str] = None,
               merge: bool = False, base_model: Optional[str] = None, fallback: bool = False) -> ExportResult:
    """Export the latest (or the named) checkpoint of the run at `path` to the new folder `out`.

    path: a run folder, a checkpoint folder or a checkpoint's `model/` folder.
    merge: fold a LoRA adapter into the weights (a plain model); without it a LoRA run gives an
        adapter folder. Full fine-tuning always gives a plain model.
    base_model: load the base from here instead of the run's `model.name` (a moved folder).
    fallback: when the checkpoint is damaged, export the newest intact one before it (default: refuse).
    The checkpoint is verified against its manifest and pinned while it is read, so a run that is
    still writing checkpoints cannot prune it mid-read.
    """
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out} already exists and is not empty; choose another folder or remove it")
    with open_checkpoint(path, checkpoint, fallback=fallback) as found:
        if found.kind == "lora" and not merge and found.model_settings.get("init_from"):
            raise ValueError(f"{found.run_dir} started from the weights of {found.model_settings['init_from']} "
                             "(model.init_from), so its adapter does not fit the base model alone; export with --merge")
        loaded = load_policy_from_run(found.checkpoint_dir, base_model=base_model, memory_kernels=False)
    # The tokenizer as the base model ships it (rlvr's own copy pads on the left, for generation).
    tokenizer = AutoTokenizer.from_pretrained(loaded.model_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
    try:
        if loaded.is_lora and not merge:
            mode = "adapter"
            _write_adapter_folder(loaded, work)
            tokenizer.save_pretrained(work)
        else:
            mode = "merged" if loaded.is_lora else "full"
            model = loaded.policy.merge_and_unload() if loaded.is_lora else loaded.policy
            write_verified_model(model, tokenizer, work)
        info = {"mode": mode, "run": str(found.run_dir.resolve()), "checkpoint": found.checkpoint_dir.name,
                "base_model": found.model_settings["name"] if base_model is None else base_model,
                "base_model_path": loaded.model_path, "dtype": str(loaded.dtype).removeprefix("torch.")}
        (work / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        os.rename(work, out)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return ExportResult(folder=out, mode=mode, checkpoint=found.checkpoint_dir, base_model=loaded.model_path)
