"""Atomic checkpoints: trainable weights, optimizer, scheduler, counters and RNG states.

A checkpoint folder is written under a temporary name and renamed into place, and the
`latest` pointer is replaced atomically afterwards, so a crash at any moment leaves the previous
checkpoint intact and resumable. Under FSDP every rank gathers the full tensors
(`gather_checkpoint_state`) and rank 0 writes them: the files are the same as without FSDP.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from rlvr.models import load_trainable, save_trainable
from rlvr.models.runs import LATEST, checkpoint_root, latest_checkpoint  # noqa: F401  (the run layout lives there)
from rlvr.models.trainable_state import trainable_tensors
from rlvr.train.fsdp import full_optimizer_state, shard_optimizer_state
from rlvr.utils import atomic_write_text, rng_state, set_rng_state

def gather_checkpoint_state(loaded, optimizer) -> dict:
    """The trainable tensors and optimizer state, full even when FSDP-sharded (then a collective).

    Pass the result to `save_checkpoint` as `gathered`.
    """
    return {"model_tensors": trainable_tensors(loaded), "optimizer_state": full_optimizer_state(optimizer)}


def save_checkpoint(run_dir: Path, iteration: int, loaded, optimizer, scheduler, state: dict, keep: int = 2,
                    distributed: dict | None = None, gathered: dict | None = None) -> Path:
    """Write checkpoint `iter_<iteration>` (iteration = number of finished iterations).

    `distributed` (world size, every rank's RNG states) is stored for data-parallel runs;
    `gathered` (from `gather_checkpoint_state` on every rank) is needed when the model is sharded.
    """
    gathered = gathered or {"model_tensors": None, "optimizer_state": optimizer.state_dict()}
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_trainable(loaded, tmp / "model", tensors=gathered["model_tensors"])
    torch.save(gathered["optimizer_state"], tmp / "optimizer.pt")
    torch.save(
        {"scheduler": scheduler.state_dict(), "iteration": iteration, "rng": rng_state(), "state": state,
         **({"distributed": distributed} if distributed is not None else {})},
        tmp / "trainer_state.pt",
    )
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    atomic_write_text(root / LATEST, final.name + "\n")
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    folders = sorted(p for p in root.glob("iter_*") if p.is_dir())
    for old in folders[: max(0, len(folders) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, loaded, optimizer, scheduler) -> dict:
    """Restore everything saved by `save_checkpoint`; returns {'iteration', 'state', 'distributed'}."""
    folder = Path(folder)
    for name in ("model", "optimizer.pt", "trainer_state.pt"):
        if not (folder / name).exists():
            raise FileNotFoundError(f"checkpoint {folder} is incomplete: {name} is missing")
    load_trainable(loaded, folder / "model")
    saved_optimizer = torch.load(folder / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(shard_optimizer_state(optimizer, saved_optimizer))  # full tensors, sliced if sharded
    trainer_state = torch.load(folder / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(trainer_state["scheduler"])
    set_rng_state(trainer_state["rng"])
    return {"iteration": trainer_state["iteration"], "state": trainer_state["state"],
            "distributed": trainer_state.get("distributed")}
