"""Where a run folder's trained policy is, found and verified without torch: the run or checkpoint
folder a path names, its verified checkpoint (`open_checkpoint`, pinned while it is read) and the
base model it was trained from. `run_policy.py` loads what these find; the start-up checks of
`rlvr eval --model RUN` and `model.init_from` use them before torch is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import yaml

from rlvr.models.checkpoints.files import (CHECKPOINTS, TRAINABLE_INFO_FILE, checkpoint_candidates,
                                           checkpoint_folders, checkpoint_iteration, checkpoint_root, pinned,
                                           verify_checkpoint)
from rlvr.models.model_spec import check_model_spec

RUN_CONFIG = "config.yaml"


class DamagedCheckpointError(FileNotFoundError):
    """The checkpoint asked for failed verification: it is named with the reason and never loaded."""


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint to load first (unverified): the one a usable `latest` pointer names, else the newest `iter_*`."""
    candidates, _ = checkpoint_candidates(run_dir)
    return candidates[0] if candidates else None


@dataclass
class RunCheckpoint:
    """Where a trained policy lives: its run, the checkpoint, and the weights folder in it."""

    run_dir: Path
    checkpoint_dir: Path
    model_dir: Path
    model_settings: dict  # the `model` section of the run's config.yaml

    @property
    def kind(self) -> str:
        return json.loads((self.model_dir / TRAINABLE_INFO_FILE).read_text())["kind"]


def is_run_path(path: str | os.PathLike) -> bool:
    """True for a run folder, a checkpoint folder or a checkpoint's `model/` folder."""
    path = Path(path).expanduser()
    return path.is_dir() and ((path / RUN_CONFIG).is_file() and (path / CHECKPOINTS).is_dir()
                              or (path / TRAINABLE_INFO_FILE).is_file()
                              or (path / "model" / TRAINABLE_INFO_FILE).is_file())


def _named_checkpoint(run_dir: Path, checkpoint: str) -> Path:
    folders = checkpoint_folders(checkpoint_root(run_dir))
    match = re.fullmatch(r"(?:iter_)?0*(\d+)", str(checkpoint))
    for folder in folders:
        if folder.name == checkpoint or match and checkpoint_iteration(folder) == int(match.group(1)):
            return folder
    raise FileNotFoundError(f"{run_dir} has no checkpoint {checkpoint!r}; valid choices: "
                            f"{', '.join(f.name for f in reversed(folders)) or '(none)'}")


def _locate(path: Path, checkpoint: Optional[str]) -> tuple[Path, list[Path]]:
    """The run folder and the checkpoints to try for `path`, in order (one, unless the run's latest is wanted)."""
    if (path / TRAINABLE_INFO_FILE).is_file():
        path = path.parent
    if (path / "model" / TRAINABLE_INFO_FILE).is_file() or path.parent.name == CHECKPOINTS:
        if checkpoint is not None:
            raise ValueError(f"{path} is a checkpoint already; pass its run folder to choose another checkpoint")
        return path.parent.parent, [path]
    if (path / RUN_CONFIG).is_file():
        if checkpoint is not None:
            return path, [_named_checkpoint(path, checkpoint)]
        candidates, pointer_problem = checkpoint_candidates(path)
        if pointer_problem:
            print(f"warning: {pointer_problem}; using the newest checkpoint folder instead", file=sys.stderr)
        if not candidates:
            raise FileNotFoundError(f"run {path} has no checkpoint yet ({CHECKPOINTS}/ is empty)")
        return path, candidates
    raise FileNotFoundError(f"{path} is neither a run folder (with {RUN_CONFIG} and {CHECKPOINTS}/) nor a "
                            f"checkpoint folder (with model/{TRAINABLE_INFO_FILE})")


def _run_checkpoint(run_dir: Path, checkpoint_dir: Path) -> RunCheckpoint:
    config_path = run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise FileNotFoundError(f"checkpoint {checkpoint_dir} is not inside a run folder: {config_path} is missing "
                                "(it names the base model)")
    settings = (yaml.safe_load(config_path.read_text()) or {}).get("model") or {}
    if not settings.get("name"):
        raise ValueError(f"{config_path} names no base model (model.name)")
    model_dir = checkpoint_dir / "model"
    if not (model_dir / TRAINABLE_INFO_FILE).is_file():
        raise DamagedCheckpointError(f"checkpoint {checkpoint_dir} is incomplete: model/{TRAINABLE_INFO_FILE} is "
                                     "missing")
    return RunCheckpoint(run_dir=run_dir, checkpoint_dir=checkpoint_dir, model_dir=model_dir, model_settings=settings)


@contextlib.contextmanager
def open_checkpoint(path: str | os.PathLike, checkpoint: Optional[str] = None, *,
                    fallback: bool = False) -> Iterator[RunCheckpoint]:
    """The verified checkpoint of `path`, pinned while the block reads it (a writing run keeps it).

    path: a run folder (its latest checkpoint, or `checkpoint`, e.g. `iter_4`), a checkpoint folder, or
    a checkpoint's `model/` folder. A checkpoint that fails `verify_checkpoint` raises
    DamagedCheckpointError naming it, the reason and the newest intact one; with `fallback`, the run's
    older checkpoints are tried instead (each reported) and the first intact one is used.
    """
    run_dir, candidates = _locate(Path(path).expanduser(), checkpoint)
    damaged = []
    for index, folder in enumerate(candidates):
        with pinned(folder):
            reason = verify_checkpoint(folder)
            if reason is None:
                found = _run_checkpoint(run_dir, folder)
                if damaged:
                    print(f"warning: using {folder.name} instead of the damaged {damaged[0][0].name}", file=sys.stderr)
                yield found
                return
        damaged.append((folder, reason))
        if not fallback:
            break
        print(f"warning: checkpoint {folder} is damaged: {reason}; trying the previous one", file=sys.stderr)
    if fallback:
        listed = "; ".join(f"{folder.name}: {why}" for folder, why in damaged)
        raise DamagedCheckpointError(f"{run_dir} has no intact checkpoint ({listed}); nothing was loaded")
    first, reason = damaged[0]
    intact = next((p for p in checkpoint_folders(checkpoint_root(run_dir))
                   if checkpoint_iteration(p) < checkpoint_iteration(first) and verify_checkpoint(p) is None), None)
    advice = (f"; the newest intact one before it is {intact.name}: name it (--checkpoint {intact.name}, or the "
              f"folder {intact}) or pass --fallback where the command has it" if intact is not None
              else "; the run has no older intact checkpoint")
    raise DamagedCheckpointError(f"checkpoint {first} is damaged: {reason}; it was not loaded{advice}")


def find_checkpoint(path: str | os.PathLike, checkpoint: Optional[str] = None, *,
                    fallback: bool = False) -> RunCheckpoint:
    """`open_checkpoint`'s verified checkpoint, not pinned beyond the check (for checks before a load)."""
    with open_checkpoint(path, checkpoint, fallback=fallback) as found:
        return found


def names_a_run(spec: str | os.PathLike) -> bool:
    return is_run_path(spec) or (Path(spec).expanduser() / RUN_CONFIG).is_file()


def base_model_spec(spec: str | os.PathLike) -> str | os.PathLike:
    """The model `load_model_for_inference(spec)` builds on: a run or checkpoint folder's `model.name`
    (its checkpoint verified), anything else as it is."""
    return find_checkpoint(spec).model_settings["name"] if names_a_run(spec) else spec


def check_inference_spec(spec: str | os.PathLike) -> None:
    """Raise now, loading nothing, if `load_model_for_inference(spec)` would find no model: a run folder
    needs a complete checkpoint and a base model that `check_model_spec` accepts."""
    check_model_spec(base_model_spec(spec))


def checkpoint_to_load(spec: str | os.PathLike) -> Path | None:
    """The checkpoint folder `load_model_for_inference(spec)` tries first (unverified), None when `spec` is no run."""
    if not names_a_run(spec):
        return None
    try:
        return _locate(Path(spec).expanduser(), None)[1][0]
    except (FileNotFoundError, ValueError):
        return None
