"""Checkpoints: manifests catch damaged files, a damaged newest checkpoint falls back to the previous
one (and the resumed run still equals an uninterrupted one), leftovers are cleaned up, the newest
checkpoint is never pruned, and a full disk or a missing permission is said in words."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.models import LoraSettings, load_policy, trainable_parameters
from rlvr.utils import read_jsonl
from tests.run.conftest import _copy, _overrides  # and the fixture reference_run

def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _weights(checkpoint: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(checkpoint / "model" / "adapter_model.safetensors")


@pytest.mark.parametrize("damaged_file", ["model/adapter_model.safetensors", "optimizer.pt", "trainer_state.pt"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(reference_run, tmp_path, damaged_file, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    _truncate(run_dir / "checkpoints" / "iter_000004" / damaged_file)
    assert main(["train", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"checkpoint {run_dir / 'checkpoints' / 'iter_000004'} is damaged: {damaged_file} has" in err
    assert "resuming from iter_000002 instead of iter_000004" in err
    # Iterations 3 and 4 were redone from iter_000002: the same numbers and weights as before.
    redone, reference = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(reference_run / "metrics.jsonl")
    assert [r["iteration"] for r in redone] == [1, 2, 3, 4]
    for key in ("reward/mean", "loss", "grad_norm", "entropy"):
        assert [r[key] for r in redone] == pytest.approx([r[key] for r in reference], rel=1e-6, abs=1e-9), key
    new_weights, reference_weights = _weights(run_dir / "checkpoints" / "iter_000004"), \
        _weights(reference_run / "checkpoints" / "iter_000004")
    assert all(torch.equal(new_weights[k], reference_weights[k]) for k in reference_weights)
    set_aside = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("damaged-iter_000004-")]
    assert len(set_aside) == 1  # kept for inspection, never loaded again
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002"
    assert (record["skipped_checkpoints"][0]["checkpoint"] == "iter_000004"
            and record["skipped_checkpoints"][0]["damaged"])


def test_a_changed_byte_that_still_loads_is_caught_by_the_manifest(reference_run, tmp_path, capsys):
    """One flipped byte in the adapter's tensor data: the file has its size and loads (a wrong weight,
    silently), so only the sha256 in the manifest tells; the resume must fall back to iter_000002."""
    from safetensors.torch import load_file

    run_dir = _copy(reference_run, tmp_path / "run")
    weights = run_dir / "checkpoints" / "iter_000004" / "model" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor's data, after the header
    weights.write_bytes(bytes(data))
    changed, reference = load_file(weights), _weights(reference_run / "checkpoints" / "iter_000004")
    assert changed.keys() == reference.keys() and any(not torch.equal(changed[k], reference[k]) for k in reference)
    assert main(["train", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "iter_000004 is damaged: model/adapter_model.safetensors does not match its sha256 in manifest.json" in err
    assert "resuming from iter_000002 instead of iter_000004" in err
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002" and record["skipped_checkpoints"][0]["damaged"]
    new_weights = _weights(run_dir / "checkpoints" / "iter_000004")  # redone from iter_000002: as before
    assert all(torch.equal(new_weights[k], reference[k]) for k in reference)


def test_a_missing_manifest_is_damage_in_a_run_that_writes_manifests(reference_run, tmp_path, capsys):
    """The files of iter_000004 are intact, but without its manifest nothing vouches for them."""
    run_dir = _copy(reference_run, tmp_path / "run")
    (run_dir / "checkpoints" / "iter_000004" / "manifest.json").unlink()
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert "iter_000004 is damaged: manifest.json is missing" in capsys.readouterr().err
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002"


def test_a_run_from_before_manifests_loads_and_an_unreadable_checkpoint_is_skipped(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    root = run_dir / "checkpoints"
    (root / "format.json").unlink()  # as written before manifests existed: no record, no manifest anywhere
    for name in ("iter_000002", "iter_000004"):
        (root / name / "manifest.json").unlink()
    _truncate(root / "iter_000004" / "optimizer.pt")
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert "iter_000004 is damaged: it could not be read" in capsys.readouterr().err
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]


def test_no_intact_checkpoint_is_a_clear_error_listing_each(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    for name in ("iter_000002", "iter_000004"):
        _truncate(run_dir / "checkpoints" / name / "trainer_state.pt")
    assert main(["train", "--resume", str(run_dir), "train.iterations=6"]) == 2
    err = capsys.readouterr().err
    assert "no intact checkpoint to resume from (iter_000004: trainer_state.pt has" in err
    assert "iter_000002: trainer_state.pt has" in err


def test_manifest_holds_every_file_and_catches_changes(reference_run, tmp_path):
    from rlvr.models.checkpoints.training_state import verify_checkpoint

    folder = _copy(reference_run, tmp_path / "run") / "checkpoints" / "iter_000004"
    manifest = json.loads((folder / "manifest.json").read_text())
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != "manifest.json")
    assert sorted(manifest["files"]) == files and "optimizer.pt" in files
    for name, entry in manifest["files"].items():  # recomputed here, independently
        data = (folder / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert verify_checkpoint(folder) is None
    state = folder / "trainer_state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    state.write_bytes(bytes(data))
    assert verify_checkpoint(folder) == "trainer_state.pt does not match its sha256 in manifest.json"
    (folder / "optimizer.pt").unlink()
    assert verify_checkpoint(folder) == "optimizer.pt is missing"


def test_leftovers_of_interrupted_saves_are_removed_on_resume(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    (run_dir / "checkpoints" / ".tmp_iter_000006_4242" / "model").mkdir(parents=True)
    (run_dir / "checkpoints" / ".latest.k2j3h4").write_text("iter_000006\n")
    (run_dir / ".config.yaml.x8y9z0").write_text("half a config")
    assert main(["train", "--resume", str(run_dir), "train.iterations=5"]) == 0
    assert not list((run_dir / "checkpoints").glob(".*")) and not (run_dir / ".config.yaml.x8y9z0").exists()
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert any(".tmp_iter_000006_4242" in note and ".config.yaml.x8y9z0" in note for note in record["notes"])


@pytest.fixture
def tiny_training_state(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    optimizer = torch.optim.AdamW(trainable_parameters(loaded.policy), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return loaded, optimizer, scheduler


@pytest.mark.parametrize("keep, kept", [(0, [5]), (1, [5]), (2, [4, 5]), (-1, [5])])
def test_pruning_never_deletes_the_newest_checkpoint(tiny_training_state, tmp_path, keep, kept):
    from rlvr.models.checkpoints.training_state import save_checkpoint, verify_checkpoint

    for iteration in (3, 4, 5):
        save_checkpoint(tmp_path, iteration, *tiny_training_state, {}, keep=keep)
    folders = sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*"))
    assert folders == [f"iter_{i:06d}" for i in kept]
    assert verify_checkpoint(tmp_path / "checkpoints" / "iter_000005") is None
    (tmp_path / "checkpoints" / ".tmp_iter_000009_77").mkdir()  # a save's own leftovers go at the next save
    save_checkpoint(tmp_path, 6, *tiny_training_state, {}, keep=2)
    assert not (tmp_path / "checkpoints" / ".tmp_iter_000009_77").exists()


def _fail_writing(monkeypatch, error: OSError, when: str = "iter_000002") -> None:
    """Make torch.save fail for any file of checkpoint `when` (given a path or an open file)."""
    real_save = torch.save

    def save(obj, target, *args, **kwargs):
        if when in str(getattr(target, "name", target)):
            raise error
        return real_save(obj, target, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


@pytest.mark.parametrize("error, words", [
    (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied or a read-only filesystem"),
])
def test_write_failures_are_said_in_words_and_keep_the_previous_checkpoint(tiny_model_dir, tmp_path, monkeypatch,
                                                                           capsys, error, words):
    from rlvr.models.checkpoints.training_state import verify_checkpoint

    run_dir = tmp_path / "run"
    _fail_writing(monkeypatch, error)
    assert main(["train", *_overrides(tiny_model_dir, run_dir, **{"train.iterations": 2, "train.save_every": 1})]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {run_dir / 'checkpoints' / 'iter_000002'}: {words}" in err
    assert f"rlvr train --resume {run_dir}" in err and "iter_000002 was not written" in err
    root = run_dir / "checkpoints"
    assert (root / "latest").read_text() == "iter_000001\n" and verify_checkpoint(root / "iter_000001") is None
    assert not list(root.glob(".tmp_iter_*"))  # the half-written folder is gone
    monkeypatch.undo()
    assert main(["train", "--resume", str(run_dir)]) == 0  # and the run continues from iteration 1
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]


def test_library_errors_without_an_errno_are_still_recognised(tmp_path, monkeypatch):
    from rlvr.storage_errors import storage_error

    path = tmp_path / "checkpoints" / "iter_000002"
    rust = RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })')
    assert "the disk is full" in str(storage_error(rust, path))
    bare = RuntimeError("basic_ios::clear: iostream error")  # torch's C++ writer, errno lost
    assert storage_error(bare, path) is None  # plenty of room on this disk: not blamed on it
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(10**9, 10**9 - 512, 512))
    explained = storage_error(bare, path)
    assert "the disk is full (0.0 MiB free there)" in str(explained) and explained.errno == errno.ENOSPC
    assert storage_error(ValueError("bad value"), path) is None


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs the /dev/full device (every write: ENOSPC)")
def test_a_real_enospc_from_torch_save_through_a_file_object():
    from rlvr.storage_errors import storage_error
    from rlvr.models.checkpoints.training_state import _torch_save

    with pytest.raises(OSError) as info:
        _torch_save({"weights": torch.zeros(100_000)}, Path("/dev/full"))
    assert info.value.errno == errno.ENOSPC  # a path given to torch.save would raise basic_ios / enforce errors
    assert "the disk is full" in str(storage_error(info.value, Path("/dev/full")))
