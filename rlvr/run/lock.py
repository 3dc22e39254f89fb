"""One writer per run folder: an exclusive `flock` on the run folder itself, held for the whole run.

The lock is taken on the folder (opened read-only), so deleting `RUN_DIR/.lock` while a run is alive
does not let a second writer in. `.lock` is the record of the holder (pid, host, start time,
command) for messages, and is flocked as well: where the filesystem refuses a lock on a directory
(NFS emulates flock with byte-range locks, which need a file opened for writing) that file's lock is
the one that excludes. The kernel releases an flock when its holder dies (`kill -9`, a crash, power
loss included), so a lock can never go stale: a record left by a dead process is taken over and its
holder is reported. A live holder makes a second `rlvr train` / `sft` / `expert-iter` / `--resume`
on the same folder fail at once with a message naming both. A clean exit removes the record while
still holding the locks; a process that opened the old record in that instant notices that its
file is gone (different inode) and opens the new one. A `.lock` that is a directory, a symbolic
link or unreadable is refused with a message naming it and what to do.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rlvr.storage_errors import PERMISSION_ERRNOS, storage_error

LOCK_FILE = ".lock"
# flock on a directory refused by the filesystem (NFS: EBADF, as the folder is not open for writing).
FOLDER_LOCK_UNSUPPORTED = (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP)


class RunFolderBusyError(FileExistsError):
    """Another live process holds the folder's lock; the message names the folder and the holder."""


class LockPathError(FileExistsError):
    """`RUN_DIR/.lock` exists but is not a plain file rlvr can lock; the message says what to do."""


@dataclass
class LockHolder:
    pid: int
    host: str
    started: str  # local time, ISO 8601
    command: str  # e.g. "rlvr train"

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, {self.command} started {self.started}"


def _read_holder(fd: int) -> LockHolder | None:
    """The holder recorded in an open lock file, or None when it is empty or unreadable."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        data = json.loads(raw.decode("utf-8"))
        return LockHolder(pid=int(data["pid"]), host=str(data["host"]), started=str(data["started"]),
                          command=str(data.get("command", "rlvr")))
    except (ValueError, KeyError, TypeError):
        return None


def _read_holder_at(path: Path) -> LockHolder | None:
    """The holder recorded at `path`, or None when the record is missing, odd or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return _read_holder(fd)
    except OSError:  # a directory reads as EISDIR
        return None
    finally:
        os.close(fd)


def _flock_pid(fd: int) -> Optional[int]:
    """The pid holding an exclusive flock on the file open as `fd`, from /proc/locks (Linux), or None."""
    stat = os.fstat(fd)
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for fields in (line.split() for line in locks):
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; waiters carry "->" after the number
                if fields[1:2] == ["FLOCK"] and fields[3:4] == ["WRITE"] and fields[5:6] == [wanted]:
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def _try_flock(fd: int) -> bool:
    """Take an exclusive flock on `fd` without waiting: True when taken, False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _busy(run_dir: Path, holder: LockHolder | None, pid: Optional[int] = None) -> RunFolderBusyError:
    if holder is not None:
        who = holder.describe()
    elif pid is not None:
        who = f"pid {pid}, whose record {run_dir / LOCK_FILE} is missing or unreadable"
    else:
        who = "a process that has not yet recorded itself"
    return RunFolderBusyError(
        f"run folder {run_dir} is in use by another rlvr process ({who}); two writers would "
        "interleave metrics.jsonl and checkpoints. Wait for it to finish, stop it, or choose "
        "another train.run_name")


def _odd_path(path: Path, exc: OSError) -> OSError:
    """The error to raise when `path` (the lock record) cannot be opened as a plain file."""
    what = {errno.EISDIR: "is a directory", errno.ELOOP: "is a symbolic link",
            **{code: "cannot be opened for reading and writing" for code in PERMISSION_ERRNOS}}.get(exc.errno)
    if what is not None and os.path.lexists(path):
        return LockPathError(f"{path} {what}; rlvr keeps the record of the run folder's writer there, as a "
                             f"plain file it can write. Remove it (rm -r {path}) and run again")
    explained = storage_error(exc, path)
    return explained if explained is not None else exc


def _open_folder(run_dir: Path) -> int | None:
    """The run folder opened and flocked, or None where the filesystem refuses a directory flock."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        explained = storage_error(exc, run_dir)
        if explained is not None:
            raise explained from exc
        raise
    try:
        taken = _try_flock(fd)
    except OSError as exc:
        os.close(fd)
        if exc.errno in FOLDER_LOCK_UNSUPPORTED:
            return None
        raise
    if not taken:
        pid = _flock_pid(fd)
        os.close(fd)
        raise _busy(run_dir, _read_holder_at(run_dir / LOCK_FILE), pid)
    return fd


def _open_record(run_dir: Path) -> int:
    """`.lock` opened (created if need be) and flocked; raises RunFolderBusyError if another holds it."""
    path = run_dir / LOCK_FILE
    while True:
        try:  # the umask decides the final mode; O_NOFOLLOW: a symbolic link is refused (ELOOP)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise _odd_path(path, exc) from exc
        try:
            if not _try_flock(fd):
                raise _busy(run_dir, _read_holder(fd))
            try:
                same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same_file = False
        except BaseException:
            os.close(fd)
            raise
        if same_file:
            return fd
        os.close(fd)  # the previous holder removed the file between our open and our lock


class RunLock:
    """The held lock of one run folder. `release()` (or leaving a `with` block) gives it up."""

    def __init__(self, run_dir: Path, folder_fd: int | None, fd: int, holder: LockHolder,
                 previous: LockHolder | None):
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self.holder = holder
        # The holder recorded by a process that died without releasing (None after a clean exit).
        self.previous = previous
        self._folder_fd = folder_fd  # None where the filesystem refuses a directory flock
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: str | Path, command: str = "rlvr") -> "RunLock":
        """Lock `run_dir` (which must exist) or raise RunFolderBusyError naming the live holder."""
        run_dir = Path(run_dir)
        folder_fd = _open_folder(run_dir)
        try:
            fd = _open_record(run_dir)
        except BaseException:
            if folder_fd is not None:
                os.close(folder_fd)
            raise
        previous = _read_holder(fd)
        holder = LockHolder(pid=os.getpid(), host=socket.gethostname(),
                            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=command)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(holder.__dict__) + "\n").encode("utf-8"))
        os.fsync(fd)
        lock = cls(run_dir, folder_fd, fd, holder, previous)
        if previous is not None:
            print(f"note: {run_dir}: the previous process ({previous.describe()}) ended without "
                  "releasing the run folder (killed or crashed); its lock is taken over", file=sys.stderr)
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Remove our record and unlock (in that order, so no waiting process keeps a dead file).

        A `.lock` that is no longer our file (deleted, or replaced by something else) is left alone.
        """
        if self._fd is None:
            return
        try:
            try:
                ours = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(self._fd).st_ino
            except FileNotFoundError:
                ours = False
            if ours:
                self.path.unlink(missing_ok=True)
        except OSError:  # a read-only folder: the record stays, the flocks still go with the descriptors
            pass
        finally:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None
            if self._folder_fd is not None:
                os.close(self._folder_fd)
                self._folder_fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def __del__(self) -> None:  # a lock dropped without release() still unlocks
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the kernel releases it anyway
            pass
