"""Write failures the user has to fix (a full disk, a missing permission), said in words.

A checkpoint, config or log write that fails for such a reason is re-raised as `StorageError`
naming the path, the cause and what to do, instead of a library's `basic_ios::clear`.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class StorageError(OSError):
    """A write that failed for a reason the user must fix (disk full, no permission), said in words."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
PERMISSION_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


def storage_error(exc: BaseException, path: Path, hint: str = "") -> StorageError | None:
    """A StorageError explaining `exc` (raised while writing `path`), or None if it is not a storage problem.

    Errors from Python file objects carry an errno; libraries that write by themselves (safetensors
    in Rust, torch in C++) only leave words in the message, or nothing at all (`basic_ios::clear`),
    so a near-empty disk is taken as the cause then.
    """
    path = Path(path)
    code = exc.errno if isinstance(exc, OSError) else None
    text = str(exc)
    if code is None and ("No space left" in text or "StorageFull" in text or "Disk quota" in text):
        code = errno.ENOSPC
    if code is None and ("Permission denied" in text or "Read-only file system" in text):
        code = errno.EACCES
    folder = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    free = shutil.disk_usage(folder).free if folder.exists() else None
    if code is None and isinstance(exc, RuntimeError) and free is not None and free < 1 << 20:
        code = errno.ENOSPC
    hint = f" {hint}" if hint else ""
    if code in DISK_FULL_ERRNOS:
        room = f" ({free / 2**20:.1f} MiB free there)" if free is not None else ""
        return StorageError(code, f"cannot write {path}: the disk is full{room}. Free some space "
                                  f"(df -h {folder}) or move train.output_dir to a larger disk.{hint}")
    if code in PERMISSION_ERRNOS:
        return StorageError(code, f"cannot write {path}: permission denied or a read-only filesystem. Make "
                                  f"{path.parent} writable (ls -ld {path.parent}) or choose another "
                                  f"train.output_dir.{hint}")
    return None
