"""Claiming a run folder for one writer: unique default names, the lock, the new-run and resume steps.

A new run creates its folder (a default name carries the time and a random suffix and is made
with an exclusive mkdir, so two runs started in the same second never share one), locks it
(rlvr/run/lock.py) before writing anything, refuses a folder that already holds a run and
writes config.yaml; if the model then fails to load, `abandon` removes the folder again. A resume
locks the folder and checks the config (rlvr/run/resume_policy.py) but writes nothing until
`commit_resume`, called once the checkpoint has loaded: it removes what interrupted saves left,
sets damaged checkpoints aside, drops what was logged after the checkpoint (and a half-written
last line), writes config.yaml and appends to resumes.jsonl. Under data parallelism only the main
process touches the folder; the other ranks get its path or its error.
"""

from __future__ import annotations

import functools
import secrets
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rlvr.config import Config, save_config
from rlvr.observe.metric_names import ITERATION
from rlvr.models.checkpoints.training_state import checkpoint_root, point_latest, remove_orphans, set_aside
from rlvr.parallel.distributed import SINGLE, Dist
from rlvr.run.resume_policy import RESUMES_FILE, ResumePlan, plan_resume, record_resume
from rlvr.run.lock import RunLock
from rlvr.storage_errors import storage_error
from rlvr.utils import atomic_write_text, trimmed_jsonl

# JSON-lines files keyed by "iteration": a resume drops their records after the checkpoint.
RUN_LOGS = ("metrics.jsonl", "samples.jsonl", "eval.jsonl", "generations.jsonl")
# Files written atomically through a `.<name>.<random>` temporary that a crash can leave behind.
ATOMIC_FILES = ("config.yaml", RESUMES_FILE, "sweep_done.json", *RUN_LOGS)


def default_run_name(stem: str) -> str:
    """`<stem>-<YYYYmmdd-HHMMSS>-<4 hex digits>`: sorts by time, and two runs in one second still differ."""
    return f"{stem}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def make_run_dir(output_dir: str | Path, run_name: str, stem: str) -> Path:
    """Create the folder of a new run: `run_name` if given (it may exist), else a fresh default name."""
    output_dir = Path(output_dir)
    try:
        if run_name:
            path = output_dir / run_name
            path.mkdir(parents=True, exist_ok=True)
            return path
        output_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = output_dir / default_run_name(stem)
            try:
                path.mkdir()  # exclusive: a name another run took a moment ago raises and is redrawn
                return path
            except FileExistsError:
                continue
    except OSError as exc:
        explained = storage_error(exc, output_dir)
        if explained is not None:
            raise explained from exc
        raise


@dataclass
class RunFolder:
    """A claimed run folder: its path, the lock (main process only), for a resume the checked plan, and
    whether this start created the folder."""

    path: Path
    lock: RunLock | None = None
    plan: ResumePlan | None = None
    created: bool = False

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def abandon(self) -> None:
        """A start that failed after the claim (the model did not load): release the folder, and remove it
        when this start created it and nothing but its config.yaml is in it, so runs/ is as it was."""
        ours = self.created and self.lock is not None
        try:
            if ours:
                (self.path / "config.yaml").unlink(missing_ok=True)  # while still locked: no other run wrote it
        finally:
            self.release()
        if ours:
            try:
                self.path.rmdir()
            except OSError:  # something else is in it: left as it is
                pass

    def commit_resume(self, restored: dict, dist: Dist = SINGLE) -> None:
        """The resume's writes, once `restore_checkpoint` succeeded (main process; every rank waits)."""
        if dist.is_main:
            iteration = restored["iteration"]
            # Read every log first: a corrupt line is an error before anything is written.
            trimmed = {name: trimmed_jsonl(self.path / name, lambda r: r.get(ITERATION, -1) <= iteration)
                       for name in RUN_LOGS}
            notes = [note for _, note in trimmed.values() if note]
            leftovers = remove_orphans(checkpoint_root(self.path)) + _remove_temp_files(self.path)
            if leftovers:
                notes.append(f"removed leftovers of interrupted writes: {', '.join(leftovers)}")
            damaged = [entry["checkpoint"] for entry in restored["skipped"] if entry["damaged"]]
            if damaged:
                notes.append(f"damaged checkpoints set aside as {', '.join(set_aside(self.path, damaged))}")
            if restored["skipped"] or restored.get("pointer_problem"):
                if restored.get("pointer_problem"):
                    notes.append(f"{restored['pointer_problem']}: it now names {restored['checkpoint'].name}")
                moved = point_latest(self.path, restored["checkpoint"])
                if moved:
                    notes.append(f"the folder in the place of checkpoints/latest was set aside as {moved[0]}")
            for name, (text, _) in trimmed.items():
                if text is not None:
                    atomic_write_text(self.path / name, text)
            for note in notes:
                print(f"note: {note}", file=sys.stderr)
            save_config(self.plan.config, self.path / "config.yaml")
            record_resume(self.plan, restored, notes)
        dist.barrier()  # the other ranks read metrics.jsonl (health history) only after it was trimmed


def _remove_temp_files(run_dir: Path) -> list[str]:
    removed = []
    for name in ATOMIC_FILES:
        for leftover in sorted(run_dir.glob(f".{name}.*")):
            leftover.unlink()
            removed.append(leftover.name)
    return removed


_active = threading.local()  # the folders claimed inside each running `releases_run_folders` call


def releases_run_folders(loop):
    """Decorate a training loop: the run folders it claims are released when it returns or raises."""

    @functools.wraps(loop)
    def run(*args, **kwargs):
        stack = _active.__dict__.setdefault("stack", [])
        stack.append([])
        try:
            return loop(*args, **kwargs)
        finally:
            for folder in stack.pop():
                folder.release()

    return run


def _claim_on_main(config: Config, *, stem: str, command: str, resume_dir, force_config_change: bool,
                   resumable: bool) -> RunFolder:
    if resume_dir is not None:
        path = Path(resume_dir)
        if not (path / "config.yaml").is_file():
            raise FileNotFoundError(f"{path} is not a run folder: config.yaml is missing")
        lock = RunLock.acquire(path, f"{command} --resume")
        try:
            plan = plan_resume(path, config, force_config_change)
        except BaseException:
            lock.release()
            raise
        return RunFolder(path, lock, plan)
    named = Path(config.train.output_dir) / config.train.run_name if config.train.run_name else None
    created = named is None or not named.exists()
    path = make_run_dir(config.train.output_dir, config.train.run_name, stem)
    lock = RunLock.acquire(path, command)
    try:
        if (path / "metrics.jsonl").exists():
            how = f"resume it with --resume {path}, or" if resumable else "delete it or"
            raise FileExistsError(f"{path} already holds a run; {how} choose another train.run_name")
        save_config(config, path / "config.yaml")
    except BaseException:
        lock.release()
        raise
    return RunFolder(path, lock, created=created)


def claim_run_folder(config: Config, dist: Dist = SINGLE, *, stem: str, command: str, resume_dir=None,
                     force_config_change: bool = False, resumable: bool = True) -> RunFolder:
    """Create and lock a new run's folder (writing config.yaml), or lock and check a resumed one.

    Call inside a loop decorated with `releases_run_folders`. Every rank gets the folder's path;
    an error on the main process (folder in use, config change refused, ...) is raised on every rank.
    """
    folder, error = None, None
    if dist.is_main:
        try:
            folder = _claim_on_main(config, stem=stem, command=command, resume_dir=resume_dir,
                                    force_config_change=force_config_change, resumable=resumable)
        except Exception as exc:  # re-raised below, after the other ranks have heard of it
            error = exc
    shared = dist.broadcast(("error", error) if error is not None else ("ok", folder.path if folder else None))
    if error is not None:
        raise error
    if shared[0] == "error":
        raise shared[1]
    if folder is None:
        folder = RunFolder(Path(shared[1]))
    stack = getattr(_active, "stack", None)
    if stack:
        stack[-1].append(folder)
    return folder
