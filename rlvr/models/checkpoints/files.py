"""Checkpoint folders on disk: their manifest, the one verification every loader runs, and which folder to load.

A checkpoint `checkpoints/iter_NNNNNN/` holds `manifest.json`: the size and sha256 of every other file
in it. `verify_checkpoint` is the one check behind resume, `rlvr eval --model`, `rlvr export`,
`model.init_from` and sweeps: a missing, extra or changed file, or a missing, empty or malformed
manifest, makes the checkpoint damaged. Only a run whose records show it was written before manifests
existed (no `checkpoints/format.json` and no manifest in any of its checkpoints) is loaded without one.
The `latest` pointer is a hint: one that is empty, undecodable, a folder, or names anything but an
existing `iter_*` folder of the same run is reported and the newest `iter_*` folder is used instead.
A reader pins the folder it loads (a shared `flock` on the folder) so a training run that is writing
never deletes it mid-read: pruning skips a pinned checkpoint and removes it at a later save.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

from rlvr.utils import atomic_write_text

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MANIFEST = "manifest.json"
FORMAT_FILE = "format.json"  # in checkpoints/: the run writes manifests (its absence marks an older run)
MANIFEST_FORMAT = 1
REQUIRED = ("model", "optimizer.pt", "trainer_state.pt")
# In a checkpoint's model/ folder, written after the weights; says which kind of checkpoint the folder holds.
TRAINABLE_INFO_FILE = "trainable.json"
CHECKPOINT_NAME = re.compile(r"iter_(\d{6,})")
POINTER_MAX_BYTES = 4096
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def checkpoint_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS


def checkpoint_iteration(folder: Path) -> int:
    """The iteration an `iter_NNNNNN` folder's name carries (-1 for any other name)."""
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    return int(match.group(1)) if match else -1


def checkpoint_folders(root: Path) -> list[Path]:
    """The `iter_*` folders of `root` (real folders, not links), newest (highest iteration) first."""
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = CHECKPOINT_NAME.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found, reverse=True)]


def file_digest(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        if sync:
            os.fsync(handle.fileno())  # the bytes are on disk before the folder is renamed into place
    return digest.hexdigest()


def write_manifest(folder: Path, iteration: int) -> dict:
    """Record every file of `folder` (size, sha256) in `folder/manifest.json`; returns the manifest."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": file_digest(path, True)}
    manifest = {"format": MANIFEST_FORMAT, "iteration": iteration, "files": files}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def mark_manifests(root: Path) -> None:
    """Record in `checkpoints/format.json` that this run writes manifests (once, before its first checkpoint)."""
    if not (root / FORMAT_FILE).is_file():
        atomic_write_text(root / FORMAT_FILE, json.dumps({"manifest_format": MANIFEST_FORMAT}) + "\n")


def manifests_required(root: Path) -> bool:
    """False only for a run written before manifests existed: no format.json, no manifest in any checkpoint."""
    if (root / FORMAT_FILE).exists():
        return True
    return root.is_dir() and any((path / MANIFEST).exists() for path in root.iterdir() if path.is_dir())


def _read_manifest(path: Path) -> tuple[dict | None, str | None]:
    """The parsed manifest, or why it cannot be used (unreadable or malformed)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"{MANIFEST} is unreadable ({type(exc).__name__})"
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None, f"{MANIFEST} is malformed (not a format-{MANIFEST_FORMAT} manifest)"
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        return None, f"{MANIFEST} is malformed (it lists no files)"
    for name, entry in files.items():
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts or name == MANIFEST:
            return None, f"{MANIFEST} is malformed (it lists {name!r}, not a file inside the checkpoint)"
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int) and not isinstance(entry["size"], bool)
                and entry["size"] >= 0 and isinstance(entry.get("sha256"), str)
                and SHA256_HEX.fullmatch(entry["sha256"])):
            return None, f"{MANIFEST} is malformed (the entry of {name!r} has no size and sha256)"
    return data, None


def verify_checkpoint(folder: str | os.PathLike, manifest_required: bool | None = None) -> str | None:
    """Why `folder` is not an intact checkpoint (a missing, extra or changed file, a missing or bad
    manifest), or None if it is. `manifest_required` defaults to what the run's records say
    (`manifests_required` of the folder's parent); without a manifest, loading is the only check."""
    folder = Path(folder)
    if not folder.is_dir():
        return "it is not a folder"
    for name in REQUIRED:
        if not (folder / name).exists():
            return f"{name} is missing"
    if manifest_required is None:
        manifest_required = manifests_required(folder.parent)
    manifest_path = folder / MANIFEST
    if not manifest_path.exists() and not manifest_path.is_symlink():
        return f"{MANIFEST} is missing" if manifest_required else None
    manifest, problem = _read_manifest(manifest_path)
    if problem is not None:
        return problem
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    if match and "iteration" in manifest and manifest["iteration"] != int(match.group(1)):
        return f"{MANIFEST} is of iteration {manifest['iteration']!r}, not of {folder.name}"
    files = manifest["files"]
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                     if (p.is_file() or p.is_symlink()) and p.name != MANIFEST)
    for name in REQUIRED:
        if not any(listed == name or listed.startswith(name + "/") for listed in files):
            return f"{MANIFEST} does not list {name}"
    for name in on_disk:
        if name not in files:
            return f"{name} is not in {MANIFEST} (added after the checkpoint was written)"
    for name, expected in files.items():
        path = folder / name
        if path.is_symlink() or not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{name} has {size} bytes, {expected['size']} were written"
        if file_digest(path) != expected["sha256"]:
            return f"{name} does not match its sha256 in {MANIFEST}"
    return None


def read_pointer(root: Path) -> tuple[Path | None, str | None]:
    """The folder `checkpoints/latest` names, or None and why it is not usable (None, None: no pointer)."""
    pointer = root / LATEST
    if not pointer.exists() and not pointer.is_symlink():
        return None, None
    try:
        with open(pointer, "rb") as handle:
            raw = handle.read(POINTER_MAX_BYTES + 1)
    except OSError as exc:
        return None, f"{pointer} cannot be read ({exc.strerror or type(exc).__name__})"
    try:
        name = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None, f"{pointer} is not text"
    if len(raw) > POINTER_MAX_BYTES or not CHECKPOINT_NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:60] + "..."
        return None, f"{pointer} names {shown!r}, not a checkpoint folder (iter_NNNNNN)"
    folder = root / name
    if not folder.is_dir() or folder.is_symlink():
        return None, f"{pointer} names {name}, which is not a checkpoint folder of this run"
    return folder, None


def checkpoint_candidates(run_dir: str | os.PathLike) -> tuple[list[Path], str | None]:
    """The checkpoints to try, in order, and what was wrong with the `latest` pointer (or None).

    A good pointer's folder comes first, then the older ones, newest first; without a usable pointer,
    every `iter_*` folder, newest first."""
    root = checkpoint_root(run_dir)
    folders = checkpoint_folders(root)
    named, problem = read_pointer(root)
    if named is None:
        return folders, problem
    older = [p for p in folders if checkpoint_iteration(p) < checkpoint_iteration(named)]
    return [named, *older], None


@contextlib.contextmanager
def pinned(folder: Path) -> Iterator[None]:
    """Hold a shared lock on the checkpoint folder while reading it: the writer does not delete it meanwhile."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # gone, or not a folder: verification says so
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def remove_checkpoint_folder(folder: Path) -> bool:
    """Delete a checkpoint folder unless a reader has it pinned (then keep it, return False)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True
    finally:
        os.close(fd)
