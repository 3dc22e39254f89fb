"""Crashes that a run must survive: `kill -9` at any point of a checkpoint save, a disk that fills up and
an output folder that turns read-only during a run. Each ends with a clear message (or just dies), and
`rlvr train --resume` then finishes the run with the same metrics as an uninterrupted one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 4
COMPARED = ("reward/mean", "loss", "grad_norm", "entropy")

# Runs `rlvr train` with one crash injected; argv: point, iteration, then the train arguments.
KILL_DRIVER = r"""
import os, signal, sys
import tests.conftest  # registers the char_count task
import rlvr.models.checkpoints.training_state as checkpoint
point, iteration = sys.argv[1], int(sys.argv[2])

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "mid_file":  # half of optimizer.pt written into the temporary folder
    real_save = checkpoint._torch_save
    def torch_save(obj, path):
        if path.name == "optimizer.pt" and f"iter_{iteration:06d}" in path.parent.name:
            real_save(obj, path)
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
            die()
        real_save(obj, path)
    checkpoint._torch_save = torch_save
elif point == "before_rename":  # every file and the manifest written, the folder not yet in place
    real_manifest = checkpoint.write_manifest
    def write_manifest(folder, it):
        manifest = real_manifest(folder, it)
        if it == iteration:
            die()
        return manifest
    checkpoint.write_manifest = write_manifest
elif point == "before_pointer":  # the folder renamed into place, `latest` still names the previous one
    real_write = checkpoint.atomic_write_text
    def atomic_write_text(path, text):
        if path.name == "latest" and text.strip() == f"iter_{iteration:06d}":
            die()
        return real_write(path, text)
    checkpoint.atomic_write_text = atomic_write_text
from rlvr.cli import main
sys.exit(main(sys.argv[3:]))
"""

# Inside a private mount namespace with a tmpfs at argv[1]: train, break the disk after the checkpoint
# of iteration 2, report the failure, mend the disk, resume; prints one JSON line.
STORAGE_DRIVER = r"""
import contextlib, io, json, os, subprocess, sys
import tests.conftest  # registers the char_count task
import rlvr.training.session as session
from rlvr.cli import main
mount, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
filler = os.path.join(mount, "filler")
real_save = session.save_checkpoint

def break_disk():
    if mode == "full":
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: not one more page fits
            pass
        finally:
            os.close(fd)
    else:  # a read-only bind mount on top: what the run opens from now on is read-only (its open files stay)
        subprocess.run(["mount", "--bind", mount, mount], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", mount], check=True)

def save_then_break(run_dir, iteration, *rest, **kwargs):
    folder = real_save(run_dir, iteration, *rest, **kwargs)
    if iteration == 2:
        break_disk()
    return folder

session.save_checkpoint = save_then_break
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        first = main(args)
except BaseException as exc:
    import traceback
    first = f"raised {type(exc).__name__}: {exc}" + traceback.format_exc()[-1500:]
session.save_checkpoint = real_save
if mode == "full":
    os.unlink(filler)
else:
    subprocess.run(["umount", mount], check=True)
run_dir = [a.split("=", 1)[1] for a in args if a.startswith("train.output_dir=")][0]
name = [a.split("=", 1)[1] for a in args if a.startswith("train.run_name=")][0]
second = main(["train", "--resume", os.path.join(run_dir, name)])
with open(os.path.join(run_dir, name, "metrics.jsonl")) as handle:
    metrics = [json.loads(line) for line in handle]
print(json.dumps({"first": first, "stderr": err.getvalue()[-3000:], "second": second, "metrics": metrics}))
"""


def _overrides(model_dir, run_dir):
    return tiny_overrides(model_dir, run_dir, **{"train.iterations": ITERATIONS, "train.save_every": 2,
                                                 "train.keep_checkpoints": 5, "model.lora_rank": 4,
                                                 "model.lora_alpha": 8, "train.eval_size": 2})


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main(["train", *_overrides(tiny_model_dir, run_dir)]) == 0
    return read_jsonl(run_dir / "metrics.jsonl")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}  # the same threads as this process: the same sums


def _assert_same_metrics(redone: list[dict], reference: list[dict]) -> None:
    assert [r["iteration"] for r in redone] == list(range(1, ITERATIONS + 1))
    for key in COMPARED:
        assert [r[key] for r in redone] == pytest.approx([r[key] for r in reference], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("point", ["mid_file", "before_rename", "before_pointer"])
def test_kill_9_during_a_checkpoint_save_then_resume_equals_an_uninterrupted_run(tiny_model_dir, tmp_path,
                                                                                 uninterrupted, point, capsys):
    run_dir = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILL_DRIVER, point, "4", "train",
                             *_overrides(tiny_model_dir, run_dir)], cwd=REPO, env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    root = run_dir / "checkpoints"
    assert (root / "latest").read_text() == "iter_000002\n"  # the kill came before the pointer moved
    assert (root / "iter_000004").is_dir() == (point == "before_pointer")
    assert main(["train", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "ended without releasing the run folder" in err  # the dead process's lock was taken over
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002"
    _assert_same_metrics(read_jsonl(run_dir / "metrics.jsonl"), uninterrupted)
    assert not list(root.glob(".tmp_*")) and (root / "latest").read_text() == "iter_000004\n"


def _in_mount_namespace(mount: Path, mode: str, args: list[str]) -> dict:
    """STORAGE_DRIVER inside `unshare --mount` (and a user namespace when not root), a tmpfs at `mount`."""
    if shutil.which("unshare") is None:
        pytest.fail("this test needs util-linux's unshare (a private mount namespace for a small tmpfs)")
    mount.mkdir()
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    script = 'mount -t tmpfs -o size=16m tmpfs "$1" && shift && exec "$@"'
    result = subprocess.run(["unshare", "--mount", *user, "sh", "-c", script, "sh", str(mount), sys.executable,
                             "-c", STORAGE_DRIVER, str(mount), mode, *args], cwd=REPO, env=_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result


@pytest.mark.parametrize("mode, words", [("full", "the disk is full"),
                                         ("readonly", "permission denied or a read-only filesystem")])
def test_a_full_or_read_only_disk_during_a_run_ends_with_a_message_and_the_run_resumes(tiny_model_dir, tmp_path,
                                                                                        uninterrupted, mode, words):
    mount = tmp_path / "disk"
    outcome, result = _in_mount_namespace(mount, mode, ["train", *_overrides(tiny_model_dir, mount / "run")])
    assert outcome["first"] == 2, outcome  # the CLI's exit status for a problem the user must fix
    assert words in outcome["stderr"] and "Traceback" not in outcome["stderr"], outcome["stderr"]
    assert outcome["second"] == 0, result.stderr[-3000:]
    _assert_same_metrics(outcome["metrics"], uninterrupted)
