"""A sweep file's `before:` runs (rlvr/sweep_stages.py): checked keys, trained once before the grid, each grid
run started from the one that sets init_from, and skipped when the sweep runs again."""

from __future__ import annotations

import json

import pytest
import yaml

from rlvr.config import ConfigError
from rlvr.sweep import DONE_FILE, load_plan, sweep
from rlvr.sweep_stages import grid_overrides
from rlvr.utils import read_jsonl


def _sweep_file(tmp_path, before) -> str:
    (tmp_path / "sft.yaml").write_text("task: {name: guess_number}\n")
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"grid": {"train.seed": [0, 1]}, "before": before}))
    return str(path)


@pytest.mark.parametrize("before, message", [
    ({"sft": {"command": "sfft", "config": "sft.yaml"}}, "command 'sfft' is not one of train, sft"),
    ({"sft": {"command": "sft"}}, "name its config"),
    ({"sft": {"command": "sft", "config": "sft.yaml", "folder": 3}}, "folder is a path"),
    ({"sft": {"command": "sft", "config": "sft.yaml", "init": True}}, "unknown key 'init'; valid keys: command"),
    ({"a/b": {"command": "sft", "config": "sft.yaml"}}, "letters, digits"),
    ({"a": {"command": "sft", "config": "sft.yaml", "init_from": True},
      "b": {"command": "train", "config": "sft.yaml", "init_from": True}}, "at most one before run"),
    (["sft"], "before must map each run's name"),
])
def test_a_bad_before_entry_is_refused_naming_the_key_and_the_choices(tmp_path, before, message):
    with pytest.raises(ConfigError, match=message):
        load_plan(_sweep_file(tmp_path, before), [], [])


def test_only_the_init_from_stage_is_added_to_the_grid_runs(tmp_path):
    plan = load_plan(_sweep_file(tmp_path, {"data": {"command": "train", "config": "sft.yaml"},
                                            "warm": {"command": "sft", "config": "sft.yaml", "init_from": True,
                                                     "overrides": {"sft.exclude_eval_seeds": [0, 1]}}}), [], [])
    assert [(s.name, s.command, s.config, s.overrides) for s in plan.before] == [
        ("data", "train", tmp_path / "sft.yaml", []),
        ("warm", "sft", tmp_path / "sft.yaml", ["sft.exclude_eval_seeds=[0, 1]"])]
    assert grid_overrides(plan.before, tmp_path / "out") == [f"model.init_from={tmp_path / 'out' / 'warm'}"]
    shared = load_plan(_sweep_file(tmp_path, {"warm": {"command": "sft", "config": "sft.yaml", "init_from": True,
                                                       "folder": "runs/shared"}}), [], [])
    assert grid_overrides(shared.before, tmp_path / "out") == ["model.init_from=runs/shared/warm"]


@pytest.mark.slow
def test_the_warm_up_trains_once_and_every_grid_run_starts_from_it(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({
        "model": {"name": str(tiny_model_dir), "lora": False},
        "task": {"name": "guess_number", "use_chat_template": False, "options": {"eval_size": 4}},
        "sft": {"demonstrations": 4, "batch_size": 4, "microbatch_size": 4, "exclude_eval_seeds": [0, 1]},
        "train": {"eval_size": 0, "progress": False}}))
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump({
        "model": {"name": str(tiny_model_dir), "lora": False},
        "task": {"name": "guess_number", "use_chat_template": False, "options": {"eval_size": 4}},
        "rollout": {"batch_size": 1, "group_size": 2, "max_new_tokens": 4},
        "train": {"iterations": 1, "eval_size": 0, "progress": False}}))
    path = tmp_path / "study.yaml"
    warm = tmp_path / "shared" / "warm"  # in its own folder, as two studies that share a warm-up name it
    path.write_text(yaml.safe_dump({"base": "rl.yaml", "grid": {"train.seed": [0, 1]},
                                    "before": {"warm": {"command": "sft", "config": "sft.yaml", "init_from": True,
                                                        "folder": str(warm.parent)}}}))
    out = tmp_path / "out"
    sweep(str(path), [], [], out)
    assert json.loads((warm / DONE_FILE).read_text())["before"] == "warm"
    pairs = read_jsonl(warm / "sft_data.jsonl")  # the demonstrations it trained on: one pair per guess
    assert len({p["ground_truth"] for p in pairs}) == 4 and len(pairs) > 4
    assert len(read_jsonl(warm / "metrics.jsonl")) == -(-len(pairs) // 4)  # 4 pairs a step
    for seed in (0, 1):
        config = yaml.safe_load((out / f"seed={seed}" / "config.yaml").read_text())
        assert config["model"]["init_from"] == str(warm)
    import rlvr.sweep_stages as stages

    def no_training(*a, **k):
        raise AssertionError("a finished warm-up was trained again")

    monkeypatch.setitem(stages.STAGE_COMMANDS, "sft", (no_training, no_training))
    sweep(str(path), [], [], out)


def test_run_stages_skips_a_finished_run_resumes_a_checkpointed_one_and_starts_a_new_one(tmp_path, monkeypatch):
    import rlvr.sweep_stages as stages

    plan = load_plan(_sweep_file(tmp_path, {name: {"command": "sft", "config": "sft.yaml"}
                                            for name in ("done", "half", "new")}), [], [])
    out = tmp_path / "out"
    (out / "done").mkdir(parents=True)
    (out / "done" / DONE_FILE).write_text("{}")
    calls = []
    monkeypatch.setitem(stages.STAGE_COMMANDS, "sft", (lambda config: calls.append(("start", config.train.run_name)),
                                                      lambda run_dir: calls.append(("resume", run_dir.name))))
    (out / "half" / "checkpoints" / "iter_2").mkdir(parents=True)  # the stage's own checkpoint layout
    (out / "done" / "checkpoints" / "iter_2").mkdir(parents=True)  # a done file outranks a checkpoint
    (out / "new").mkdir()
    (out / "new" / "metrics.jsonl").write_text("{}\n")  # crashed before its first checkpoint: starts over
    monkeypatch.setattr("rlvr.sweep_runs._checkpoint_iteration",
                        lambda run_dir: 2 if (run_dir / "checkpoints").exists() else None)
    stages.run_stages(plan.before, out)
    assert calls == [("resume", "half"), ("start", "new")]
    assert all((out / name / DONE_FILE).exists() for name in ("half", "new"))
    assert not (out / "new" / "metrics.jsonl").exists()
