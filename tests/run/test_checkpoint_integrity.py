"""Checkpoint integrity beyond a changed byte: the `latest` pointer is only a hint, manifests are required
and checked for shape, every loader (resume, export, eval, init_from) verifies through one function, and a
reader's checkpoint is never deleted under it by a run that is writing."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.models.checkpoints.files import (checkpoint_candidates, pinned, read_pointer, remove_checkpoint_folder,
                                           verify_checkpoint)
from rlvr.utils import read_jsonl

from tests.run.conftest import _copy, _overrides  # and the fixture reference_run: intact checkpoints 2 and 4


def _flip_adapter_byte(checkpoint: Path) -> None:
    weights = checkpoint / "model" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # in the tensor data: the file still loads, with a wrong weight
    weights.write_bytes(bytes(data))


# ----------------------------------------------------------------------------- the pointer is a hint

def _write_pointer(root: Path, content, outside: Path) -> None:
    pointer = root / "latest"
    pointer.unlink()
    if content == "DIRECTORY":
        pointer.mkdir()
    elif content == "OUTSIDE":
        pointer.write_text(str(outside) + "\n")
    else:
        pointer.write_bytes(content)


BAD_POINTERS = {"empty": b"", "whitespace": b"  \n\t", "dot": b".\n", "dotdot": b"..\n", "undecodable": b"\xff\x00",
                "directory": "DIRECTORY", "outside the run": "OUTSIDE", "a missing folder": b"iter_000009\n",
                "a path": b"iter_000002/../iter_000002\n"}


@pytest.mark.parametrize("kind", list(BAD_POINTERS))
def test_a_bad_pointer_is_reported_and_the_newest_checkpoint_folder_used(reference_run, tmp_path, kind):
    run_dir = _copy(reference_run, tmp_path / "run")
    root = run_dir / "checkpoints"
    outside = _copy(root / "iter_000002", tmp_path / "elsewhere" / "iter_000002")
    _write_pointer(root, BAD_POINTERS[kind], outside)
    folder, problem = read_pointer(root)
    assert folder is None and problem and str(root / "latest") in problem
    candidates, reported = checkpoint_candidates(run_dir)
    assert candidates == [root / "iter_000004", root / "iter_000002"] and reported == problem


def test_a_good_pointer_comes_first_then_older_ones_only(reference_run, tmp_path):
    run_dir = _copy(reference_run, tmp_path / "run")
    root = run_dir / "checkpoints"
    (root / "latest").write_text("iter_000002\n")
    assert checkpoint_candidates(run_dir) == ([root / "iter_000002"], None)


@pytest.mark.parametrize("kind", ["empty", "outside the run", "undecodable", "directory"])
def test_resume_through_a_bad_pointer_continues_from_the_newest_intact_checkpoint(reference_run, tmp_path, capsys,
                                                                                   kind):
    """Today's bug: an empty pointer made checkpoints/ itself the checkpoint and the resume failed; one
    naming a folder outside the run loaded that folder (here a copy of iteration 2)."""
    run_dir = _copy(reference_run, tmp_path / "run")
    root = run_dir / "checkpoints"
    outside = _copy(root / "iter_000002", tmp_path / "elsewhere" / "iter_000002")
    _write_pointer(root, BAD_POINTERS[kind], outside)
    assert main(["train", "--resume", str(run_dir), "train.iterations=5"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {root / 'latest'}" in err and "resuming from the newest intact checkpoint folder" in err
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000004"
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert (root / "latest").read_text() == "iter_000005\n"


# ----------------------------------------------------------------------------- manifests: required, and well formed

MALFORMED = {
    "files a list": lambda m: {**m, "files": []},
    "files empty": lambda m: {**m, "files": {}},
    "no sha256": lambda m: {**m, "files": {k: {"size": v["size"]} for k, v in m["files"].items()}},
    "size a string": lambda m: {**m, "files": {k: {**v, "size": str(v["size"])} for k, v in m["files"].items()}},
    "a path outside": lambda m: {**m, "files": {**m["files"], "../../config.yaml": next(iter(m["files"].values()))}},
    "another format": lambda m: {**m, "format": 99},
    "not an object": lambda m: [m],
    "another iteration": lambda m: {**m, "iteration": 2},
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_manifest_makes_the_checkpoint_damaged_instead_of_crashing(reference_run, tmp_path, kind):
    folder = _copy(reference_run, tmp_path / "run") / "checkpoints" / "iter_000004"
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(MALFORMED[kind](manifest)))
    reason = verify_checkpoint(folder)
    assert reason is not None and "manifest.json" in reason


def test_a_manifest_that_is_a_folder_or_not_json_is_unreadable(reference_run, tmp_path):
    root = _copy(reference_run, tmp_path / "run") / "checkpoints"
    (root / "iter_000004" / "manifest.json").unlink()
    (root / "iter_000004" / "manifest.json").mkdir()
    assert verify_checkpoint(root / "iter_000004") == "manifest.json is unreadable (IsADirectoryError)"
    (root / "iter_000002" / "manifest.json").write_bytes(b"\xff{")
    assert verify_checkpoint(root / "iter_000002").startswith("manifest.json is unreadable")


def test_files_beside_the_manifest_and_a_manifest_without_the_weights_are_damage(reference_run, tmp_path):
    root = _copy(reference_run, tmp_path / "run") / "checkpoints"
    (root / "iter_000004" / "model" / "extra.safetensors").write_bytes(b"\x00" * 8)
    assert verify_checkpoint(root / "iter_000004") == ("model/extra.safetensors is not in manifest.json (added "
                                                       "after the checkpoint was written)")
    folder = root / "iter_000002"
    manifest = json.loads((folder / "manifest.json").read_text())
    shutil.rmtree(folder / "model")
    (folder / "model").mkdir()  # an empty model folder, and a manifest edited to match
    manifest["files"] = {k: v for k, v in manifest["files"].items() if not k.startswith("model/")}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert verify_checkpoint(folder) == "manifest.json does not list model"


def test_a_missing_or_empty_manifest_is_only_forgiven_in_a_run_from_before_manifests(reference_run, tmp_path):
    root = _copy(reference_run, tmp_path / "run") / "checkpoints"
    (root / "iter_000004" / "manifest.json").unlink()
    (root / "iter_000004" / "optimizer.pt").write_bytes(b"changed")  # nothing would notice without a manifest
    assert verify_checkpoint(root / "iter_000004") == "manifest.json is missing"
    (root / "format.json").unlink()  # iter_000002's manifest still shows the run wrote them
    assert verify_checkpoint(root / "iter_000004") == "manifest.json is missing"
    (root / "iter_000002" / "manifest.json").unlink()
    assert verify_checkpoint(root / "iter_000004") is None  # the run's records: no manifest ever written
    (root / "iter_000002" / "manifest.json").write_text('{"format": 1, "files": {}}')
    assert verify_checkpoint(root / "iter_000002") == "manifest.json is malformed (it lists no files)"


def test_resume_sets_a_checkpoint_with_a_malformed_manifest_aside(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    manifest_path = run_dir / "checkpoints" / "iter_000004" / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "files": []}))
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert "iter_000004 is damaged: manifest.json is malformed (it lists no files)" in capsys.readouterr().err
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002"


def test_resume_passes_over_a_checkpoint_with_a_file_it_did_not_write(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    (run_dir / "checkpoints" / "iter_000004" / "model" / "model.safetensors").write_bytes(b"\x00" * 16)
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert "iter_000004 is damaged: model/model.safetensors is not in manifest.json" in capsys.readouterr().err
    (record,) = read_jsonl(run_dir / "resumes.jsonl")
    assert record["checkpoint"] == "iter_000002"


# ----------------------------------------------------------------------------- every loader verifies

def test_export_refuses_a_damaged_checkpoint_and_names_the_intact_one(reference_run, tmp_path, capsys):
    run_dir = _copy(reference_run, tmp_path / "run")
    _flip_adapter_byte(run_dir / "checkpoints" / "iter_000004")
    out = tmp_path / "exported"
    assert main(["export", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (f"checkpoint {run_dir / 'checkpoints' / 'iter_000004'} is damaged: model/adapter_model.safetensors "
            "does not match its sha256 in manifest.json; it was not loaded") in err
    assert "the newest intact one before it is iter_000002" in err and not out.exists()
    assert main(["export", str(run_dir / "checkpoints" / "iter_000004"), "--out", str(out)]) == 2  # by folder too
    assert main(["export", str(run_dir), "--out", str(out), "--fallback"]) == 0
    assert json.loads((out / "rlvr_export.json").read_text())["checkpoint"] == "iter_000002"
    assert main(["export", str(run_dir), "--checkpoint", "iter_000002", "--out", str(tmp_path / "named")]) == 0


def test_eval_and_init_from_refuse_a_damaged_checkpoint_before_loading_a_model(reference_run, tmp_path, capsys,
                                                                              tiny_model_dir, monkeypatch):
    import rlvr.models.checkpoints.run_policy as runs
    import rlvr.run.setup as run_setup

    run_dir = _copy(reference_run, tmp_path / "run")
    _flip_adapter_byte(run_dir / "checkpoints" / "iter_000004")
    loads = []
    for module in (runs, run_setup):
        monkeypatch.setattr(module, "load_policy", lambda *a, **k: loads.append(a) or pytest.fail("a model loaded"))
    assert main(["eval", f"model.name={run_dir}", "task.name=char_count", "task.use_chat_template=false",
                 "train.eval_size=2", f"train.output_dir={tmp_path}"]) == 2
    assert "iter_000004 is damaged: model/adapter_model.safetensors does not match" in capsys.readouterr().err
    assert main(["train", *_overrides(tiny_model_dir, tmp_path / "child", **{"model.init_from": str(run_dir)})]) == 2
    err = capsys.readouterr().err
    assert "model.init_from: checkpoint" in err and "iter_000004 is damaged" in err and not loads


def test_a_checkpoint_loaded_for_inference_is_verified_even_as_a_folder(reference_run, tmp_path):
    from rlvr.models.checkpoints.run_policy import DamagedCheckpointError, load_policy_from_run

    run_dir = _copy(reference_run, tmp_path / "run")
    (run_dir / "checkpoints" / "iter_000002" / "trainer_state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(DamagedCheckpointError, match="iter_000002 is damaged: trainer_state.pt has 16 bytes"):
        load_policy_from_run(run_dir / "checkpoints" / "iter_000002" / "model")
    assert load_policy_from_run(run_dir).policy is not None  # iter_000004 is intact


# ----------------------------------------------------------------------------- a reader's checkpoint is kept

def test_a_pinned_checkpoint_is_not_deleted_until_its_reader_is_done(reference_run, tmp_path):
    folder = _copy(reference_run, tmp_path / "run") / "checkpoints" / "iter_000002"
    with pinned(folder):
        assert remove_checkpoint_folder(folder) is False and folder.is_dir()
    assert remove_checkpoint_folder(folder) is True and not folder.exists()


def test_pruning_during_an_export_keeps_the_checkpoint_being_read(tiny_model_dir, tmp_path):
    """A run that saves while `rlvr export` reads: the pinned checkpoint survives the prune, the next
    save after the reader is done removes it, and the export is of one consistent checkpoint."""
    import torch

    from rlvr.models import LoraSettings, load_policy, trainable_parameters
    from rlvr.models.checkpoints.run_policy import load_policy_from_run
    from rlvr.models.checkpoints.training_state import save_checkpoint

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"model:\n  name: {tiny_model_dir}\n  dtype: float32\n")
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    optimizer = torch.optim.AdamW(trainable_parameters(loaded.policy), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    def save(iteration):
        with torch.no_grad():
            for parameter in trainable_parameters(loaded.policy):
                parameter.fill_(float(iteration))
        return save_checkpoint(run_dir, iteration, loaded, optimizer, scheduler, {}, keep=1)

    first = save(1)
    reading, release = threading.Event(), threading.Event()
    import rlvr.models.checkpoints.run_policy as runs

    real_load = runs.load_trainable

    def slow_load(model, folder):  # the export reads while the run saves and prunes
        reading.set()
        assert release.wait(30)
        real_load(model, folder)

    result = {}
    runs.load_trainable = slow_load
    try:
        reader = threading.Thread(target=lambda: result.setdefault("model", load_policy_from_run(run_dir)))
        reader.start()
        assert reading.wait(30)
        second = save(2)  # keep=1 prunes iter_000001, which the reader has pinned
        assert first.is_dir() and second.is_dir()
        release.set()
        reader.join(30)
    finally:
        runs.load_trainable = real_load
    values = {float(p.flatten()[0]) for name, p in result["model"].policy.named_parameters() if "lora_" in name}
    assert values == {1.0}  # the whole of iteration 1, none of iteration 2
    save(3)
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*")) == ["iter_000003"]
