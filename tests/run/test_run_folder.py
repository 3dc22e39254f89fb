"""Run folders: one writer at a time, unique default names, what a resume may change, and that a
failed resume writes nothing; also a half-written last log line and the files' permissions."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

# A process that holds RUN_DIR/.lock the way an rlvr run does, then waits for a line on stdin
# (or, with "kill", dies by SIGKILL while holding it).
HOLDER = """
import fcntl, json, os, signal, socket, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-02T03:04:05",
                         "command": "rlvr train"}).encode())
print("locked", flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.readline()
"""


# The same, through rlvr's own RunLock (imported from this checkout, as the tests are).
RLVR_HOLDER = """
import sys
from rlvr.run.lock import RunLock
lock = RunLock.acquire(sys.argv[1], "rlvr train")
print("locked", flush=True)
sys.stdin.readline()
lock.release()
"""
REPO = Path(__file__).resolve().parents[2]
# A hang guard, not a timing check: acquiring a held lock returns at once (no waiting) or never.
ACQUIRE_GUARD_S = 30


def _holder(run_dir: Path, mode: str = "wait") -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir / ".lock"), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def _rlvr_holder(run_dir: Path) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", RLVR_HOLDER, str(run_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert child.stdout.readline().strip() == "locked"
    return child


def _acquire_without_waiting(run_dir: Path, command: str):
    """`RunLock.acquire` in a thread: its lock, or the error it raised; fails if it waits on a held lock."""
    from rlvr.run.lock import RunLock

    outcome = {}

    def attempt():
        try:
            outcome["lock"] = RunLock.acquire(run_dir, command)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(ACQUIRE_GUARD_S)
    assert not thread.is_alive(), "RunLock.acquire waited for the holder instead of refusing at once"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["lock"]


def _overrides(model_dir, run_dir, **extra):
    return tiny_overrides(model_dir, run_dir, **{"train.iterations": 2, "train.save_every": 1, "model.lora_rank": 4,
                                                 "model.lora_alpha": 8, "train.eval_size": 2, **extra})


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def finished_run(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", *_overrides(tiny_model_dir, run_dir)]) == 0
    return run_dir


def test_default_names_never_collide_within_one_second(tmp_path, monkeypatch):
    import rlvr.run.folder as run_folder

    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 11, 29, 10, 15, 0)

    monkeypatch.setattr(run_folder, "datetime", FrozenClock)
    folders = [run_folder.make_run_dir(tmp_path, "", "format_copy-grpo") for _ in range(20)]
    assert len(set(folders)) == 20 and all(folder.is_dir() for folder in folders)
    assert all(folder.name.startswith("format_copy-grpo-20261129-101500-") for folder in folders)


def test_two_default_named_runs_get_two_folders(tiny_model_dir, tmp_path, capsys):
    for _ in range(2):
        overrides = [o for o in _overrides(tiny_model_dir, tmp_path / "runs" / "x", **{"train.iterations": 1})
                     if not o.startswith("train.run_name=")]
        assert main(["train", *overrides]) == 0
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert [r["iteration"] for r in read_jsonl(folder / "metrics.jsonl")] == [1]
        assert not (folder / ".lock").exists()  # released at the end of the run


def test_a_second_writer_is_refused_while_the_folder_is_held(finished_run, tiny_model_dir, capsys):
    before = _snapshot(finished_run)
    holder = _holder(finished_run)
    try:
        capsys.readouterr()
        assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 2
        err = capsys.readouterr().err
        assert f"run folder {finished_run} is in use" in err and f"pid {holder.pid}" in err
        assert "started 2026-01-02T03:04:05" in err
        assert main(["train", *_overrides(tiny_model_dir, finished_run)]) == 2  # a new run with the same name
        assert f"pid {holder.pid}" in capsys.readouterr().err
        assert main(["expert-iter", *_overrides(tiny_model_dir, finished_run)]) == 2  # one lock for every command
        assert f"pid {holder.pid}" in capsys.readouterr().err
        after = _snapshot(finished_run)
        after.pop(".lock")
        assert after == before  # nothing written: no interleaved metrics, no rewritten config.yaml
    finally:
        holder.stdin.close()
        holder.wait()
    assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 0  # free again
    assert [r["iteration"] for r in read_jsonl(finished_run / "metrics.jsonl")] == [1, 2, 3]


def test_a_new_run_does_not_write_into_a_held_folder(tiny_model_dir, tmp_path, capsys):
    run_dir = tmp_path / "held"
    holder = _holder(run_dir)
    try:
        assert main(["train", *_overrides(tiny_model_dir, run_dir)]) == 2
        assert f"pid {holder.pid}" in capsys.readouterr().err
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # no config.yaml of the refused run
    finally:
        holder.stdin.close()
        holder.wait()


def test_the_lock_of_a_killed_process_is_taken_over(finished_run, capsys):
    holder = _holder(finished_run, mode="kill")
    assert holder.wait() == -signal.SIGKILL
    assert json.loads((finished_run / ".lock").read_text())["pid"] == holder.pid  # left behind, unreleased
    assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 0
    err = capsys.readouterr().err
    assert f"pid {holder.pid}" in err and "ended without releasing" in err
    assert not (finished_run / ".lock").exists()


def test_a_resume_refuses_config_changes_and_writes_nothing(finished_run, capsys):
    before = _snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), "train.iterations=4", "algorithm.name=rloo"]) == 2
    err = capsys.readouterr().err
    assert "algorithm.name: 'grpo' -> 'rloo'" in err and "a preset is applied only when a run starts" in err
    assert "A resume may change only: train.iterations" in err and "health.*" in err
    assert "train.iterations:" not in err  # an allowed change is not listed as refused
    # The batch changed mid-run (group_size and a matching minibatch): refused too, both keys named.
    assert main(["train", "--resume", str(finished_run), "rollout.group_size=2", "optim.minibatch_size=4"]) == 2
    err = capsys.readouterr().err
    assert "optim.minibatch_size: 8 -> 4" in err and "rollout.group_size: 4 -> 2" in err
    # A key in the same section as allowed ones (train.iterations, train.eval_every) is still refused.
    assert main(["train", "--resume", str(finished_run), "train.iterations=4", "train.seed=1"]) == 2
    err = capsys.readouterr().err
    assert "train.seed: 0 -> 1" in err and "train.iterations:" not in err
    assert _snapshot(finished_run) == before


def test_a_forced_config_change_is_applied_and_recorded(finished_run):
    assert main(["train", "--resume", str(finished_run), "train.iterations=3", "algorithm.kl_coef=0.1",
                 "--force-config-change"]) == 0
    assert main(["train", "--resume", str(finished_run), "train.iterations=4", "train.eval_every=1"]) == 0
    first, second = read_jsonl(finished_run / "resumes.jsonl")
    assert first["forced"] is True and first["checkpoint"] == "iter_000002" and first["iteration"] == 2
    assert first["changes"] == {"algorithm.kl_coef": {"saved": 0.0, "new": 0.1},
                                "train.iterations": {"saved": 2, "new": 3}}
    assert second["forced"] is False and second["checkpoint"] == "iter_000003"
    assert second["changes"] == {"train.eval_every": {"saved": 4, "new": 1}, "train.iterations": {"saved": 3, "new": 4}}
    import yaml

    saved = yaml.safe_load((finished_run / "config.yaml").read_text())
    assert saved["algorithm"]["kl_coef"] == 0.1 and saved["train"]["iterations"] == 4
    assert [r["iteration"] for r in read_jsonl(finished_run / "metrics.jsonl")] == [1, 2, 3, 4]


def test_force_without_resume_is_an_error(capsys):
    assert main(["train", "--force-config-change", "train.iterations=1"]) == 2
    assert "--force-config-change only applies with --resume" in capsys.readouterr().err


def test_a_failed_resume_changes_nothing_on_disk(finished_run, capsys):
    import shutil

    shutil.rmtree(finished_run / "checkpoints")
    before = _snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), "train.iterations=5"]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err
    assert _snapshot(finished_run) == before  # config.yaml still says 2 iterations


def test_a_half_written_last_line_is_dropped_on_resume(finished_run, capsys):
    with open(finished_run / "metrics.jsonl", "a") as handle:
        handle.write('{"iteration": 3, "reward/me')  # an append cut short by kill -9 or a full disk
    with open(finished_run / "samples.jsonl", "ab") as handle:
        handle.write('{"iteration": 3, "completion": "\u00e9'.encode()[:-1])  # cut inside a UTF-8 character
    assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 0
    err = capsys.readouterr().err
    assert "metrics.jsonl: dropped an incomplete last line" in err and "samples.jsonl: dropped" in err
    assert [r["iteration"] for r in read_jsonl(finished_run / "metrics.jsonl")] == [1, 2, 3]
    assert {r["iteration"] for r in read_jsonl(finished_run / "samples.jsonl")} == {1, 2, 3}
    (record,) = read_jsonl(finished_run / "resumes.jsonl")
    assert any("incomplete last line" in note for note in record["notes"])


def test_a_corrupt_line_in_the_middle_is_an_error_naming_file_and_line(finished_run, capsys):
    lines = (finished_run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (finished_run / "metrics.jsonl").write_text(lines[0] + '{"iteration": 2, "reward\n' + "".join(lines[1:]))
    before = _snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 2
    assert f"{finished_run / 'metrics.jsonl'}:2: not a JSON line" in capsys.readouterr().err
    assert _snapshot(finished_run) == before


@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_every_run_file_gets_the_mode_the_umask_gives(tiny_model_dir, tmp_path, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        run_dir = tmp_path / "run"
        assert main(["train", *_overrides(tiny_model_dir, run_dir)]) == 0
        assert main(["train", "--resume", str(run_dir), "train.iterations=3"]) == 0
    finally:
        os.umask(old)
    paths = [run_dir, *run_dir.rglob("*")]
    modes = {str(p.relative_to(run_dir)): stat.S_IMODE(p.stat().st_mode) for p in paths}
    expected = {str(p.relative_to(run_dir)): dir_mode if p.is_dir() else file_mode for p in paths}
    assert modes == expected
    for name in ("config.yaml", "checkpoints/latest", "resumes.jsonl", "metrics.jsonl"):
        assert name in modes


def test_the_lock_is_exclusive_even_within_one_process_and_released_cleanly(tmp_path):
    from rlvr.run.lock import RunFolderBusyError, RunLock

    first = RunLock.acquire(tmp_path, "rlvr train")
    holder = json.loads((tmp_path / ".lock").read_text())
    assert holder["pid"] == os.getpid() and holder["command"] == "rlvr train"
    with pytest.raises(RunFolderBusyError, match=f"pid {os.getpid()} on host .*, rlvr train started"):
        _acquire_without_waiting(tmp_path, "rlvr sft")
    first.release()
    assert not (tmp_path / ".lock").exists()
    with RunLock.acquire(tmp_path, "rlvr sft") as second:
        assert second.previous is None  # the first one released cleanly: nothing to take over
    assert not (tmp_path / ".lock").exists()


def test_a_live_rlvr_holder_refuses_a_second_writer_at_once(tmp_path):
    from rlvr.run.lock import RunFolderBusyError

    holder = _rlvr_holder(tmp_path)
    try:
        with pytest.raises(RunFolderBusyError, match=f"pid {holder.pid} on host .*, rlvr train started"):
            _acquire_without_waiting(tmp_path, "rlvr sft")
        assert json.loads((tmp_path / ".lock").read_text())["pid"] == holder.pid  # the refused one wrote nothing
    finally:
        holder.stdin.close()
        assert holder.wait() == 0
    assert not (tmp_path / ".lock").exists()  # released cleanly
    with _acquire_without_waiting(tmp_path, "rlvr sft") as lock:
        assert lock.previous is None


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path):
    """A cleanup script removes RUN_DIR/.lock while a run (another process) is alive: the folder
    itself stays locked, and the refusal still names the holder's pid (read from the kernel)."""
    from rlvr.run.lock import RunFolderBusyError

    holder = _rlvr_holder(tmp_path)
    try:
        (tmp_path / ".lock").unlink()
        with pytest.raises(RunFolderBusyError, match=f"in use by another rlvr process \\(pid {holder.pid}\\b"):
            _acquire_without_waiting(tmp_path, "rlvr sft")
        assert not (tmp_path / ".lock").exists()  # the refused one recorded nothing
    finally:
        holder.stdin.close()
        assert holder.wait() == 0  # its release finds no record of its own to remove, and says nothing
    with _acquire_without_waiting(tmp_path, "rlvr sft") as lock:
        assert lock.previous is None
        assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()


def test_a_lock_file_deleted_and_recreated_is_no_way_in_within_one_process(tmp_path):
    from rlvr.run.lock import RunFolderBusyError, RunLock

    first = RunLock.acquire(tmp_path, "rlvr train")
    (tmp_path / ".lock").unlink()
    (tmp_path / ".lock").write_text("")  # an empty stranger in its place
    with pytest.raises(RunFolderBusyError, match=f"pid {os.getpid()}"):
        _acquire_without_waiting(tmp_path, "rlvr sft")
    first.release()
    assert (tmp_path / ".lock").read_text() == ""  # not our record: left alone
    with RunLock.acquire(tmp_path, "rlvr sft") as second:
        assert second.previous is None


def test_a_lock_path_that_is_a_directory_is_refused_with_what_to_do(tmp_path):
    from rlvr.run.lock import LockPathError, RunLock

    (tmp_path / ".lock").mkdir()
    with pytest.raises(LockPathError, match=f"{tmp_path / '.lock'} is a directory; .* Remove it \\(rm -r "):
        RunLock.acquire(tmp_path, "rlvr train")
    (tmp_path / ".lock").rmdir()
    with RunLock.acquire(tmp_path, "rlvr train"):  # nothing was left locked by the refusal
        pass


def test_a_lock_path_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    from rlvr.run.lock import LockPathError, RunLock

    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(target)
    with pytest.raises(LockPathError, match=f"{run_dir / '.lock'} is a symbolic link; .* Remove it"):
        RunLock.acquire(run_dir, "rlvr train")
    assert target.read_text() == "keep"


def test_a_lock_path_that_is_a_directory_is_a_clear_cli_error(finished_run, capsys):
    (finished_run / ".lock").mkdir()
    assert main(["train", "--resume", str(finished_run), "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert f"{finished_run / '.lock'} is a directory" in err and "Traceback" not in err


def test_a_resume_may_change_only_the_listed_keys(tmp_path):
    import yaml

    from rlvr.config import ConfigError, load_config
    from rlvr.run.resume_policy import mutable, plan_resume

    assert mutable("train.iterations") and mutable("health.window") and mutable("model.num_threads")
    # Keys beside a mutable one in its section, and a name that only starts like an allowed prefix.
    for key in ("train.seed", "train.eval_size", "model.name", "sft.batch_size", "healthy.window"):
        assert not mutable(key), key
    saved = load_config(None, [])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved.as_dict()))
    plan = plan_resume(tmp_path, load_config(None, ["train.iterations=7", "health.window=5"]))
    assert plan.changes == {"train.iterations": (saved.train.iterations, 7), "health.window": (3, 5)}
    assert not plan.forced
    with pytest.raises(ConfigError, match=r"train.seed: 0 -> 1\. A resume may change only"):
        plan_resume(tmp_path, load_config(None, ["train.iterations=7", "train.seed=1"]))
    forced = plan_resume(tmp_path, load_config(None, ["train.seed=1"]), force=True)
    assert forced.forced and forced.changes == {"train.seed": (0, 1)}


def test_a_run_saved_with_a_removed_key_at_its_off_value_still_resumes(tmp_path):
    """A saved config writes every key: an old run holds train.stop_if_dead_for: 0, which did nothing."""
    import yaml

    from rlvr.config import ConfigError, load_config, load_run_config
    from rlvr.run.resume_policy import plan_resume

    data = load_config().as_dict()
    data["train"]["stop_if_dead_for"] = 0
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    assert load_run_config(tmp_path).as_dict() == load_config().as_dict()
    assert plan_resume(tmp_path, load_config(None, ["train.iterations=20"])).changes == {
        "train.iterations": (16, 20)}
    data["train"]["stop_if_dead_for"] = 2  # it stopped runs: the replacement must be chosen
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"'train.stop_if_dead_for' was removed: use train.stop_on: \[no_contrast\]"):
        load_run_config(tmp_path)
