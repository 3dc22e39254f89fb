"""rlvr sweep: grid parsing and run names, a 2x1 grid on a tiny model that runs twice (the second
time skipping both runs), resuming an unfinished run, and the shipped sweep files."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlvr.train.rl as rl
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.sweep import grid_points, load_plan, parse_grid_item, run_status
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides


def test_grid_items_names_and_the_cartesian_product():
    assert parse_grid_item("algorithm.clip_low+algorithm.clip_high=0.1,0.2") == (
        ("algorithm.clip_low", "algorithm.clip_high"), ["0.1", "0.2"])
    assert parse_grid_item("rollout.stop_strings=[a,b],[c]") == (("rollout.stop_strings",), ["[a,b]", "[c]"])
    plan = load_plan(None, [], ["algorithm.ppo_epochs=1,2,4", "optim.lr=1e-3,1e-4", "algorithm.name+task.name=x"])
    points = grid_points(plan)
    assert len(points) == 3 * 2  # the product, not the sum
    assert points[1] == ("ppo_epochs=1__lr=1e-4__algorithm.name+task.name=x",
                         ["algorithm.ppo_epochs=1", "optim.lr=1e-4", "algorithm.name=x", "task.name=x"])
    for bad, message in (("ppo_epochs", "not of the form"), ("a=1,1", "twice"), ("a=", "at least one")):
        with pytest.raises(ConfigError, match=message):
            parse_grid_item(bad)
    with pytest.raises(ConfigError, match="needs a grid"):
        load_plan(None, [], [])
    with pytest.raises(ConfigError, match="two grid entries"):
        load_plan(None, [], ["optim.lr=1,2", "optim.lr+optim.eps=3"])


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "configs" / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_sweep_files_build_a_valid_config_per_point(path):
    plan = load_plan(str(path), [], [])
    points = grid_points(plan)
    assert len(points) >= 2
    configs = [load_config(plan.base, plan.overrides + overrides) for _, overrides in points]
    section, name = plan.grid[0][0][0].split(".")
    values = [getattr(getattr(c, section), name) for c in configs]
    assert len({repr(v) for v in values}) == len(points)  # the swept key really differs per run
    # Equal generation budget: the rollout shape and the iteration count never vary inside a sweep.
    assert len({(c.rollout.batch_size, c.rollout.group_size, c.rollout.max_new_tokens, c.train.iterations)
                for c in configs}) == 1


@pytest.mark.slow
def test_sweep_runs_the_grid_skips_finished_runs_and_resumes_unfinished_ones(tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    base = tiny_overrides(tiny_model_dir, tmp_path / "unused", **{"train.eval_every": 0, "train.save_every": 1})
    args = ["sweep", *base, "--grid", "algorithm.ppo_epochs=1,2", "--grid", "optim.lr=1e-2", "--output", str(out)]
    assert main([*args, "train.iterations=1"]) == 0
    runs = [out / "ppo_epochs=1__lr=1e-2", out / "ppo_epochs=2__lr=1e-2"]
    assert [len(read_jsonl(r / "metrics.jsonl")) for r in runs] == [1, 1]
    assert [read_jsonl(r / "metrics.jsonl")[0]["optimizer_steps"] for r in runs] == [1, 2]
    first_lines = [read_jsonl(r / "metrics.jsonl")[0] for r in runs]
    report = (out / "report.html").read_text()
    assert "ppo_epochs=1__lr=1e-2" in report and "ppo_epochs=2__lr=1e-2" in report
    assert "<td>algorithm.ppo_epochs</td><td>1</td><td>2</td>" in report

    # Same budget again: both runs are finished, nothing trains.
    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(rl, "train", no_training)
    monkeypatch.setattr(rl, "resume", no_training)
    capsys.readouterr()
    assert main([*args, "train.iterations=1"]) == 0
    assert capsys.readouterr().out.count(": finished") == 2
    monkeypatch.undo()

    # A larger budget: each run resumes from its checkpoint and keeps its first iteration.
    assert [run_status(r, 2) for r in runs] == ["resume", "resume"]
    assert main([*args, "train.iterations=2"]) == 0
    for run, first in zip(runs, first_lines):
        metrics = read_jsonl(run / "metrics.jsonl")
        assert [m["iteration"] for m in metrics] == [1, 2] and metrics[0] == first
        assert run_status(run, 2) == "finished"


def test_run_status_restarts_a_run_that_crashed_before_its_first_checkpoint(tmp_path):
    run = tmp_path / "r"
    assert run_status(run, 3) == "new"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n')
    assert run_status(run, 3) == "restart"
    (run / "sweep_done.json").write_text('{"iterations": 3}\n')
    assert run_status(run, 3) == "finished" and run_status(run, 4) == "restart"
