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
    ({"sft": {"command": "sfft", "config": "sft.yaml"}}, "command 'sfft' is not one of train, sft, expert-iter, eval"),
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
    from rlvr.sweep_runs import RUN_COMMANDS, RunCommand

    def no_training(*a, **k):
        raise AssertionError("a finished warm-up was trained again")

    monkeypatch.setitem(RUN_COMMANDS, "sft", RunCommand(no_training, no_training, sft_data=True))
    sweep(str(path), [], [], out)


def test_run_stages_skips_a_finished_run_resumes_a_checkpointed_one_and_starts_a_new_one(tmp_path, monkeypatch):
    import rlvr.sweep_stages as stages
    from rlvr.sweep_runs import RUN_COMMANDS, RunCommand

    plan = load_plan(_sweep_file(tmp_path, {name: {"command": "sft", "config": "sft.yaml"}
                                            for name in ("done", "half", "new")}), [], [])
    out = tmp_path / "out"
    (out / "done").mkdir(parents=True)
    (out / "done" / DONE_FILE).write_text("{}")
    calls = []
    monkeypatch.setitem(RUN_COMMANDS, "sft", RunCommand(
        lambda config, run_dir: calls.append(("start", config.train.run_name)),
        lambda config, run_dir: calls.append(("resume", run_dir.name))))
    (out / "half" / "checkpoints" / "iter_2").mkdir(parents=True)  # the stage's own checkpoint layout
    (out / "done" / "checkpoints" / "iter_2").mkdir(parents=True)  # a done file outranks a checkpoint
    (out / "new").mkdir()
    (out / "new" / "metrics.jsonl").write_text("{}\n")  # crashed before its first checkpoint: starts over
    monkeypatch.setattr("rlvr.sweep_runs._checkpoint_iteration",
                        lambda run_dir: 10**6 if (run_dir / "checkpoints").exists() else None)  # SFT steps,
    # far past train.iterations, which is an RL run's budget, not an SFT run's: only the done file finishes it
    stages.run_stages(plan.before, out)
    assert calls == [("resume", "half"), ("start", "new")]
    assert all((out / name / DONE_FILE).exists() for name in ("half", "new"))
    assert not (out / "new" / "metrics.jsonl").exists()


def test_the_command_line_overrides_reach_every_stage_after_its_own(tmp_path, monkeypatch):
    """`rlvr study NAME --threads 1` (a command-line model.num_threads=1) sets the warm-up's threads too: two studies
    sharing a 2-core machine otherwise run a 2-thread warm-up beside each other. The stage's own overrides come
    first, so the command line wins where both set a key; the grid's file overrides do not reach the stage."""
    import rlvr.sweep_stages as stages
    from rlvr.sweep_runs import RUN_COMMANDS, RunCommand

    path = _sweep_file(tmp_path, {"warm": {"command": "sft", "config": "sft.yaml",
                                           "overrides": {"sft.epochs": 3, "train.seed": 5}}})
    data = yaml.safe_load(open(path))
    data["overrides"] = {"sft.batch_size": 4}
    yaml.safe_dump(data, open(path, "w"))
    plan = load_plan(path, ["model.num_threads=1", "train.seed=7"], [])
    seen = []
    monkeypatch.setitem(RUN_COMMANDS, "sft", RunCommand(lambda config, run_dir: seen.append(config), None))
    stages.run_stages(plan.before, tmp_path / "out", plan.command_line)
    config = seen[0]
    assert (config.model.num_threads, config.train.seed, config.sft.epochs) == (1, 7, 3)
    assert config.sft.batch_size != 4


def test_rlvr_study_threads_reach_the_warm_up(tmp_path, monkeypatch):
    from rlvr.study import run_study
    from rlvr.sweep_runs import RUN_COMMANDS, RunCommand

    path = _sweep_file(tmp_path, {"warm": {"command": "sft", "config": "sft.yaml"}})
    data = yaml.safe_load(open(path))
    data["study"] = {"title": "t", "output": str(tmp_path / "out"), "metrics": ["eval/accuracy"]}
    yaml.safe_dump(data, open(path, "w"))
    threads = []
    monkeypatch.setitem(RUN_COMMANDS, "sft", RunCommand(lambda config, run_dir: threads.append(
        config.model.num_threads), None))
    monkeypatch.setitem(RUN_COMMANDS, "train", RunCommand(lambda config, run_dir: threads.append(
        config.model.num_threads), None))
    with pytest.raises(FileNotFoundError, match="is not a run folder"):  # the stand-in runs write no records
        run_study(path, threads=1)
    assert threads == [1, 1, 1]  # the warm-up, then the two grid runs


def _tiny_base(tmp_path, tiny_model_dir, **sections) -> None:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "model": {"name": str(tiny_model_dir), "lora": False},
        "task": {"name": "guess_number", "use_chat_template": False, "options": {"eval_size": 4}},
        "rollout": {"max_new_tokens": 4}, **sections}))


def test_a_study_of_evaluations_writes_one_eval_record_per_run_and_skips_them_on_a_rerun(tiny_model_dir, tmp_path,
                                                                                       monkeypatch):
    from rlvr.study import run_study
    from rlvr.sweep_runs import RUN_COMMANDS, RunCommand

    _tiny_base(tmp_path, tiny_model_dir, train={"eval_size": 3, "progress": False})
    path = tmp_path / "zero_shot.yaml"
    path.write_text(yaml.safe_dump({
        "base": "base.yaml", "command": "eval", "grid": {"train.eval_temperature": [0.0, 1.0]},
        "study": {"title": "zero-shot", "output": str(tmp_path / "out"), "metrics": ["eval/accuracy"]}}))
    result = run_study(str(path))
    for run in ("eval_temperature=0.0", "eval_temperature=1.0"):
        folder = tmp_path / "out" / run
        (record,) = read_jsonl(folder / "eval.jsonl")
        summary = json.loads((folder / "summary.json").read_text())
        assert record["iteration"] == 0 and record["eval/accuracy"] == summary["accuracy"]
        assert record["eval/num_examples"] == 3 and len(read_jsonl(folder / "generations.jsonl")) == 3
        assert not (folder / "metrics.jsonl").exists()  # no training happened
    assert json.loads((tmp_path / "out" / "eval_temperature=1.0" / "summary.json").read_text())["do_sample"]
    assert len(result.summary.runs) == 2 and not result.summary.missing and all(r.finished for r in result.summary.runs)

    def no_run(*a, **k):
        raise AssertionError("a finished evaluation ran again")

    monkeypatch.setitem(RUN_COMMANDS, "eval", RunCommand(no_run, no_run, inference=True))
    run_study(str(path))


def test_a_sweep_of_sft_runs_trains_each_point_with_its_own_data_size(tiny_model_dir, tmp_path):
    _tiny_base(tmp_path, tiny_model_dir, train={"eval_size": 0, "progress": False},
               sft={"batch_size": 2, "microbatch_size": 2, "epochs": 1})
    path = tmp_path / "sizes.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", "command": "sft", "grid": {"sft.demonstrations": [2, 4]}}))
    sweep(str(path), [], [], tmp_path / "out")
    for count in (2, 4):
        folder = tmp_path / "out" / f"demonstrations={count}"
        pairs = read_jsonl(folder / "sft_data.jsonl")
        assert len({p["ground_truth"] for p in pairs}) == count
        assert len(read_jsonl(folder / "metrics.jsonl")) == -(-len(pairs) // 2)  # SFT steps, not RL iterations
        assert json.loads((folder / DONE_FILE).read_text())["grid"] == [f"sft.demonstrations={count}"]


def test_an_unknown_grid_command_is_refused_naming_the_choices(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"command": "sfft", "grid": {"train.seed": [0]}}))
    with pytest.raises(ConfigError, match="command 'sfft' is not one of train, sft, expert-iter, eval"):
        load_plan(str(path), [], [])
