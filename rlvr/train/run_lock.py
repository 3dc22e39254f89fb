"""One writer per run folder: an exclusive `flock` on `RUN_DIR/.lock`, held for the whole run.

The kernel releases an flock when its holder dies (`kill -9`, a crash, power loss included), so a
lock can never go stale: a `.lock` file left behind by a dead process is simply taken over, and
its recorded holder (pid, host, start time) is reported. A live holder makes a second
`rlvr train` / `sft` / `expert-iter` / `--resume` on the same folder fail with a message naming
both. A clean exit removes the file while still holding the lock; a process that opened the old
file in that instant notices that its file is gone (different inode) and opens the new one.
flock works on local filesystems; on NFS Linux maps it to byte-range locks, which NFSv4 honours.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.storage_errors import storage_error

LOCK_FILE = ".lock"


class RunFolderBusyError(FileExistsError):
    """Another live process holds the folder's lock; the message names the folder and the holder."""


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


class RunLock:
    """The held lock of one run folder. `release()` (or leaving a `with` block) gives it up."""

    def __init__(self, run_dir: Path, fd: int, holder: LockHolder, previous: LockHolder | None):
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self.holder = holder
        # The holder recorded by a process that died without releasing (None after a clean exit).
        self.previous = previous
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: str | Path, command: str = "rlvr") -> "RunLock":
        """Lock `run_dir` (which must exist) or raise RunFolderBusyError naming the live holder."""
        run_dir = Path(run_dir)
        path = run_dir / LOCK_FILE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides the final mode
            except OSError as exc:
                explained = storage_error(exc, path)
                if explained is not None:
                    raise explained from exc
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                who = holder.describe() if holder else "a process that has not yet recorded itself"
                raise RunFolderBusyError(
                    f"run folder {run_dir} is in use by another rlvr process ({who}); two writers would "
                    "interleave metrics.jsonl and checkpoints. Wait for it to finish, stop it, or choose "
                    "another train.run_name"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same_file = False
            if not same_file:  # the previous holder removed the file between our open and our lock
                os.close(fd)
                continue
            previous = _read_holder(fd)
            holder = LockHolder(pid=os.getpid(), host=socket.gethostname(),
                                started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=command)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(holder.__dict__) + "\n").encode("utf-8"))
            os.fsync(fd)
            lock = cls(run_dir, fd, holder, previous)
            if previous is not None:
                print(f"note: {run_dir}: the previous process ({previous.describe()}) ended without "
                      "releasing the run folder (killed or crashed); its lock is taken over", file=sys.stderr)
            return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Remove the lock file and unlock (in that order, so no waiting process keeps a dead file)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:  # a read-only or vanished folder: the flock still goes with the descriptor
            pass
        finally:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def __del__(self) -> None:  # a lock dropped without release() still unlocks
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the kernel releases it anyway
            pass
