"""Atomic, verified checkpoints: trainable weights, optimizer, scheduler, counters and RNG states.

A checkpoint folder is written under a temporary name, its files' sizes and sha256 hashes go into
`manifest.json`, everything is fsynced, the folder is renamed into place and the `latest` pointer
replaced atomically afterwards, so a crash at any moment leaves the previous checkpoint intact. On
resume each candidate (the one a usable `latest` names first, then older ones) is checked by
`verify_checkpoint` (`files.py`, the check every loader runs) and loaded; a
damaged one is reported by name and the next older intact one is used instead. Pruning keeps a
checkpoint a reader (`rlvr eval`, `rlvr export`) has pinned.
Under FSDP every rank gathers the full tensors (`gather_checkpoint_state`) and rank 0 writes them:
the files are the same as without FSDP. PPO's value model (head, and a separate model's trainable
weights) is saved in `value/` beside the policy's `model/`. A full disk or a missing permission is said in words.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import time
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError

from rlvr.models.checkpoints.files import (LATEST, MANIFEST, REQUIRED, checkpoint_candidates,  # noqa: F401
                                           checkpoint_folders, checkpoint_root, mark_manifests,
                                           remove_checkpoint_folder, verify_checkpoint, write_manifest)
from rlvr.models.checkpoints.weights import load_trainable, save_trainable, trainable_tensors
from rlvr.models.value_model import load_value_model, save_value_model, value_model_tensors
from rlvr.parallel.distributed import SINGLE
from rlvr.parallel.fsdp import full_optimizer_state, shard_optimizer_state
from rlvr.storage_errors import storage_error
from rlvr.utils import atomic_write_text, rng_state, set_rng_state

DAMAGED_PREFIX = "damaged-"  # a checkpoint that failed verification is renamed, never deleted
VALUE_FOLDER = "value"  # PPO's value model, required when the run has one
# What reading a damaged file raises (truncated safetensors / zip / pickle, missing keys, bad JSON).
LOAD_DAMAGE_ERRORS = (SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile,
                      OSError, KeyError, json.JSONDecodeError)


def gather_checkpoint_state(loaded, optimizer, value_model=None) -> dict:
    """The trainable tensors and optimizer state (and the value model's tensors), full even when
    FSDP-sharded (then a collective). Pass the result to `save_checkpoint` as `gathered`.
    """
    return {"model_tensors": trainable_tensors(loaded), "optimizer_state": full_optimizer_state(optimizer),
            "value_tensors": None if value_model is None else value_model_tensors(value_model)}


def remove_orphans(root: Path) -> list[str]:
    """Delete what an interrupted save leaves behind (`.tmp_iter_*` folders, `.latest.*` files).

    Only safe while the run folder's lock is held (no other writer can be mid-save); returns the names.
    """
    removed = []
    for leftover in sorted([*root.glob(".tmp_iter_*"), *root.glob(f".{LATEST}.*")]):
        if leftover.is_dir() and not leftover.is_symlink():
            if not remove_checkpoint_folder(leftover):  # a replaced checkpoint a reader still has open
                continue
        else:
            leftover.unlink()
        removed.append(leftover.name)
    return removed


def _torch_save(obj, path: Path) -> None:
    with open(path, "wb") as handle:  # a Python file object: a full disk raises OSError(ENOSPC), not basic_ios
        torch.save(obj, handle)


def save_checkpoint(run_dir: Path, iteration: int, loaded, optimizer, scheduler, state: dict, keep: int = 2,
                    distributed: dict | None = None, gathered: dict | None = None, value_model=None) -> Path:
    """Write checkpoint `iter_<iteration>` (iteration = number of finished iterations).

    `distributed` (world size, every rank's RNG states) is stored for data-parallel runs;
    `gathered` (from `gather_checkpoint_state` on every rank) is needed when the model is sharded.
    `value_model`: PPO's, written to `value/`. Keeps the newest `keep` checkpoints (at least the
    one just written).
    """
    gathered = gathered or {"model_tensors": None, "optimizer_state": optimizer.state_dict(), "value_tensors": None}
    root = checkpoint_root(run_dir)
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}_{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_orphans(root)
        mark_manifests(root)
        tmp.mkdir()
        save_trainable(loaded, tmp / "model", tensors=gathered["model_tensors"])
        if value_model is not None:
            save_value_model(value_model, tmp / VALUE_FOLDER, tensors=gathered.get("value_tensors"))
        _torch_save(gathered["optimizer_state"], tmp / "optimizer.pt")
        _torch_save({"scheduler": scheduler.state_dict(), "iteration": iteration, "rng": rng_state(), "state": state,
                     **({"distributed": distributed} if distributed is not None else {})},
                    tmp / "trainer_state.pt")
        write_manifest(tmp, iteration)
        if final.exists():  # redone after a resume from an older checkpoint; a reader may still have it open
            replaced = root / f".tmp_iter_{iteration:06d}_{os.getpid()}_replaced"
            os.replace(final, replaced)
            remove_checkpoint_folder(replaced)
        os.replace(tmp, final)
        atomic_write_text(root / LATEST, final.name + "\n")
    except Exception as exc:
        explained = storage_error(exc, final, hint=f"Checkpoint {final.name} was not written; the previous one is "
                                                 f"intact (rlvr train --resume {run_dir} continues from it).")
        shutil.rmtree(tmp, ignore_errors=True)
        if explained is not None:
            raise explained from exc
        raise
    _prune(root, keep, final)
    return final


def _prune(root: Path, keep: int, newest: Path) -> None:
    """Delete all but the newest `keep` checkpoints; `newest` (just written) is never deleted."""
    folders = [p for p in reversed(checkpoint_folders(root)) if p != newest]  # oldest first
    for old in folders[: max(0, len(folders) - max(1, keep) + 1)]:
        remove_checkpoint_folder(old)  # one a reader (eval, export) has pinned is kept, and pruned at a later save


def load_checkpoint(folder: Path, loaded, optimizer, scheduler, value_model=None) -> dict:
    """Restore everything saved by `save_checkpoint`; returns {'iteration', 'state', 'distributed'}."""
    folder = Path(folder)
    for name in (*REQUIRED, *([VALUE_FOLDER] if value_model is not None else [])):
        if not (folder / name).exists():
            raise FileNotFoundError(f"checkpoint {folder} is incomplete: {name} is missing")
    load_trainable(loaded, folder / "model")
    if value_model is not None:
        load_value_model(value_model, folder / VALUE_FOLDER)
    saved_optimizer = torch.load(folder / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(shard_optimizer_state(optimizer, saved_optimizer))  # full tensors, sliced if sharded
    trainer_state = torch.load(folder / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(trainer_state["scheduler"])
    set_rng_state(trainer_state["rng"])
    return {"iteration": trainer_state["iteration"], "state": trainer_state["state"],
            "distributed": trainer_state.get("distributed")}


def restore_checkpoint(run_dir: Path, loaded, optimizer, scheduler, dist=SINGLE, value_model=None) -> dict:
    """Load the newest intact checkpoint of `run_dir`.

    Returns `load_checkpoint`'s result plus 'checkpoint' (its folder) and 'skipped': one entry
    {'checkpoint', 'reason', 'damaged'} per newer checkpoint that was passed over (warned about
    here); 'damaged' is true when its files no longer match its manifest. The main process checks
    the manifests and every rank gets its verdicts, so all ranks load the same checkpoint; reading
    the files is the last check (the only one for checkpoints written before manifests).
    """
    candidates, pointer_problem = checkpoint_candidates(run_dir)
    if pointer_problem and dist.is_main:
        print(f"warning: {pointer_problem}; resuming from the newest intact checkpoint folder instead",
              file=sys.stderr)
    if not candidates:
        raise FileNotFoundError(f"{run_dir} has no checkpoint to resume from")
    verdicts: list[str | None] = []
    if dist.is_main:
        for folder in candidates:  # verify down to the first intact one
            verdicts.append(verify_checkpoint(folder))
            if verdicts[-1] is None:
                break
    verdicts = dist.broadcast(verdicts)
    skipped: list[dict] = []
    for index, folder in enumerate(candidates):
        reason = verdicts[index] if index < len(verdicts) else None
        damaged = reason is not None
        if reason is None:
            try:
                restored = load_checkpoint(folder, loaded, optimizer, scheduler, value_model)
            except LOAD_DAMAGE_ERRORS as exc:
                reason = f"it could not be read ({type(exc).__name__}: {str(exc)[:200]})"
        if reason is not None:
            skipped.append({"checkpoint": folder.name, "reason": reason, "damaged": damaged})
            if dist.is_main:
                print(f"warning: checkpoint {folder} is damaged: {reason}; trying the previous one", file=sys.stderr)
            continue
        if skipped and dist.is_main:
            print(f"warning: resuming from {folder.name} instead of {skipped[0]['checkpoint']}; what was logged "
                  f"after iteration {restored['iteration']} is dropped and redone", file=sys.stderr)
        return {**restored, "checkpoint": folder, "skipped": skipped, "pointer_problem": pointer_problem}
    listed = "; ".join(f"{entry['checkpoint']}: {entry['reason']}" for entry in skipped)
    raise FileNotFoundError(f"{run_dir} has no intact checkpoint to resume from ({listed})")


def set_aside(run_dir: Path, names: list[str]) -> list[str]:
    """Rename damaged checkpoint folders to `damaged-<name>-<time>` (kept for inspection, never loaded)."""
    root, moved = checkpoint_root(run_dir), []
    for name in names:
        target = root / f"{DAMAGED_PREFIX}{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(root / name, target)
        moved.append(target.name)
    return moved


def point_latest(run_dir: Path, folder: Path) -> list[str]:
    """Point `latest` at `folder`; a folder in the pointer's place is set aside first. Returns what was set aside."""
    pointer, moved = checkpoint_root(run_dir) / LATEST, []
    if pointer.is_dir() and not pointer.is_symlink():
        target = pointer.with_name(f"{DAMAGED_PREFIX}{LATEST}-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(pointer, target)
        moved.append(target.name)
    atomic_write_text(pointer, Path(folder).name + "\n")
    return moved
