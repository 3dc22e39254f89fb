"""rlvr sweep: grid parsing and run names, a 2x1 grid on a tiny model that runs twice (the second
time skipping both runs), resuming an unfinished run, and the shipped sweep files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rlvr.training.rl as rl
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


def test_variants_are_one_more_grid_dimension_of_named_override_sets(tmp_path):
    path = tmp_path / "ablations.yaml"
    path.write_text("variants:\n  kl_up: {algorithm.kl_coef: 0.16}\n"
                    "  clip: {algorithm.clip_low: 0.1, algorithm.clip_high: 0.1}\n"
                    "grid:\n  train.seed: [0, 1]\n")
    points = grid_points(load_plan(str(path), [], []))
    assert points == [("variant=kl_up__seed=0", ["algorithm.kl_coef=0.16", "train.seed=0"]),
                      ("variant=kl_up__seed=1", ["algorithm.kl_coef=0.16", "train.seed=1"]),
                      ("variant=clip__seed=0", ["algorithm.clip_low=0.1", "algorithm.clip_high=0.1", "train.seed=0"]),
                      ("variant=clip__seed=1", ["algorithm.clip_low=0.1", "algorithm.clip_high=0.1", "train.seed=1"])]
    for text, message in (("variants: [a, b]\ngrid: {train.seed: [0]}\n", "variants must map each name"),
                          ("variants: {a: 1}\ngrid: {train.seed: [0]}\n", "variants must map each name"),
                          ("variants: {'a b': {optim.lr: 1}}\ngrid: {train.seed: [0]}\n", "may hold only")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_plan(str(path), [], [])


SHIPPED_SWEEPS = sorted([*(Path(__file__).parents[2] / "configs" / "sweeps").glob("*.yaml"),
                         *(Path(__file__).parents[2] / "configs" / "studies").glob("**/*.yaml")])


def test_the_hw4_pair_differs_only_in_the_presets_epochs_and_loss():
    """The study's two conditions are the two shipped configs, and they differ in nothing but the epochs and
    the loss (and the preset's name): the homework's controlled comparison."""
    configs = Path(__file__).parents[2] / "configs"
    plan = load_plan(str(configs / "studies" / "hw4_grpo_vs_gr_reinforce.yaml"), [], [])
    points = {name: load_config(plan.base, plan.overrides + overrides).flat() for name, overrides in grid_points(plan)}
    grpo, reinforce = (load_config(configs / f"hw4_{side}.yaml").flat() for side in ("grpo", "gr_reinforce"))
    assert points["seed=0__name=grpo"] == grpo and points["seed=0__name=gr_reinforce"] == reinforce
    differing = {key for key in grpo if grpo[key] != reinforce[key]}
    assert differing == {"algorithm.name", "algorithm.ppo_epochs", "algorithm.policy_loss"}
    assert (grpo["rollout.batch_size"], grpo["rollout.group_size"], grpo["optim.minibatch_size"],
            grpo["optim.grad_accum_steps"], grpo["optim.max_grad_norm"], grpo["algorithm.advantage_clip"]) == (
        8, 6, 12, 4, 0.5, 5.0)


def _setting(config, key: str):
    """A config's value of a dotted key; task.options.NAME (a free mapping, not flattened) read from it."""
    prefix = "task.options."
    return config.task.options.get(key[len(prefix):]) if key.startswith(prefix) else config.flat()[key]


@pytest.mark.parametrize("path", SHIPPED_SWEEPS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shipped_sweep_files_build_a_valid_config_per_point(path):
    plan = load_plan(str(path), [], [])
    points = grid_points(plan)
    assert len(points) >= 2
    configs = [load_config(plan.base, plan.overrides + overrides) for _, overrides in points]
    # The swept keys really differ per run: each point's values of all the keys it sets (a cartesian grid
    # of two keys repeats each one's values across the points; a variant sets its own keys).
    keys = sorted({item.split("=", 1)[0] for _, overrides in points for item in overrides})
    values = [tuple(repr(_setting(c, key)) for key in keys) for c in configs]
    assert len(set(values)) == len(points)
    # Equal generation budget: the completions per iteration, their length and the iteration count never vary
    # inside a sweep (a study of the group size moves the prompts per iteration with it).
    assert len({(c.rollout.batch_size * c.rollout.group_size, c.rollout.max_new_tokens, c.train.iterations)
                for c in configs}) == 1


@pytest.mark.slow
def test_sweep_runs_the_grid_skips_finished_runs_and_resumes_unfinished_ones(tiny_model_dir, tmp_path, monkeypatch,
                                                                              capsys):
    out = tmp_path / "sweep"
    base = tiny_overrides(tiny_model_dir, tmp_path / "unused", **{"train.eval_every": 0, "train.save_every": 1})
    args = ["sweep", *base, "--grid", "algorithm.ppo_epochs=1,2", "--grid", "optim.lr=1e-2", "--output", str(out)]
    capsys.readouterr()
    assert main([*args, "train.iterations=1", "--json"]) == 0
    runs = [out / "ppo_epochs=1__lr=1e-2", out / "ppo_epochs=2__lr=1e-2"]
    summary = json.loads(capsys.readouterr().out)  # the whole of stdout is one JSON object
    assert [(r["name"], r["status"], r["run"]["run_dir"]) for r in summary["runs"]] == [
        (run.name, "new", str(run)) for run in runs]
    assert summary["grid"] == ["algorithm.ppo_epochs=1,2", "optim.lr=1e-2"]
    assert summary["report"] == str(out / "report.html") and summary["next_commands"] == [f"rlvr report {out}"]
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
    assert main([*args, "train.iterations=1", "train.progress=true"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count(": finished") == 2  # the progress lines, on stderr
    assert f"rlvr:   sweep folder: {out}" in captured.err and "rlvr: sweep: 2 runs" in captured.err
    assert captured.out.count("already done") == 2  # the end table, on stdout
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


def _run_with_evals(run_dir: Path, accuracies: list[tuple[int, float]], iterations: int) -> Path:
    from rlvr.utils import append_jsonl

    run_dir.mkdir(parents=True)
    append_jsonl(run_dir / "metrics.jsonl", [{"iteration": i, "reward/mean": 0.1 * i}
                                             for i in range(1, iterations + 1)])
    (run_dir / "eval.jsonl").write_text("".join(json.dumps({"iteration": i, "eval/accuracy": a}) + "\n"
                                                for i, a in accuracies))  # NaN as the NaN literal, not null
    return run_dir


def test_the_sweep_end_table_shows_each_runs_final_and_best_eval(tmp_path):
    from rlvr.observe.console import format_sweep_summary, summarize_sweep, summary_json, sweep_banner_lines

    out = tmp_path / "sweep"
    # Run a: best 0.75 at iteration 2, final 0.5. Run b: a NaN eval (skipped), then 0.25 twice: best at the first.
    a = _run_with_evals(out / "lr=1e-3", [(0, 0.25), (2, 0.75), (4, 0.5)], 4)
    b = _run_with_evals(out / "lr=1e-4", [(0, float("nan")), (2, 0.25), (4, 0.25)], 4)
    grid = [(("optim.lr",), ["1e-3", "1e-4"])]
    summary = summarize_sweep(out, grid, [("lr=1e-3", "new", a), ("lr=1e-4", "finished", b)], out / "report.html")
    lines = format_sweep_summary(summary).splitlines()
    assert lines[0] == f"sweep folder: {out} (2 runs over optim.lr=1e-3,1e-4)"
    assert lines[1].split() == ["run", "done", "now", "iterations", "final", "eval", "best", "eval", "at", "iteration"]
    assert lines[2].split() == ["lr=1e-3", "trained", "4", "0.500", "0.750", "2"]
    assert lines[3].split() == ["lr=1e-4", "already", "done", "4", "0.250", "0.250", "2"]
    assert f"  report: {out / 'report.html'}" in lines and f"    rlvr report {out}" in lines
    data = json.loads(summary_json(summary))
    assert [(r["run"]["final_eval"], r["run"]["best_eval"], r["run"]["best_eval_iteration"]) for r in data["runs"]] == [
        (0.5, 0.75, 2), (0.25, 0.25, 2)]
    assert sweep_banner_lines(grid + [(("algorithm.clip_low", "algorithm.clip_high"), ["0.1", "0.2"])], 4, out) == [
        "sweep: 4 runs, one after another", "  grid: optim.lr = 1e-3, 1e-4",
        "  grid: algorithm.clip_low+algorithm.clip_high = 0.1, 0.2", f"  sweep folder: {out}"]


def test_a_stage_is_finished_by_its_done_file_alone_and_a_grid_run_by_its_budget(tmp_path):
    from rlvr.sweep_runs import DONE_FILE

    run = tmp_path / "warm"
    (run / "checkpoints" / "iter_000009").mkdir(parents=True)
    assert run_status(run, None) == "resume"  # a stage's checkpoint never finishes it: it runs its own budget
    assert run_status(run, 9) == "finished"
    (run / DONE_FILE).write_text("{}")  # a stage's done file names no iterations
    assert run_status(run, None) == "finished"
    assert run_status(run, 10) == "resume"


def test_a_restarted_run_starts_without_its_stale_logs_and_a_finished_one_is_left_alone(tmp_path):
    import json

    from rlvr.sweep_runs import DONE_FILE, STALE_LOGS, RunCommand, train_to_done

    calls = []
    run = tmp_path / "point"
    run.mkdir()
    for name in STALE_LOGS:
        (run / name).write_text('{"iteration": 1}\n')
    (run / "config.yaml").write_text("kept: true\n")

    def start(config, run_dir):  # what train() would see: no log of the crashed attempt to append to
        calls.append(("start", sorted(p.name for p in run_dir.iterdir())))

    command = RunCommand(start, lambda config, run_dir: calls.append("resume"), budget=True)
    train_to_done(command, None, run, "restart", {"iterations": 3, "grid": ["a=1"]})
    assert calls == [("start", ["config.yaml"])]
    assert json.loads((run / DONE_FILE).read_text()) == {"iterations": 3, "grid": ["a=1"]}
    (run / "metrics.jsonl").write_text('{"iteration": 3}\n')
    train_to_done(command, None, run, "finished", {"iterations": 9})
    train_to_done(command, None, run, "resume", {"iterations": 4})
    assert calls[1:] == ["resume"] and (run / "metrics.jsonl").exists()
    assert json.loads((run / DONE_FILE).read_text()) == {"iterations": 4}


def test_only_an_rl_run_is_finished_by_a_checkpoint_at_its_train_iterations(tmp_path):
    from rlvr.config import Config
    from rlvr.sweep_runs import RUN_COMMANDS, status_of

    run = tmp_path / "point"
    (run / "checkpoints" / "iter_000005").mkdir(parents=True)
    config = Config(train={"iterations": 5})
    assert status_of(RUN_COMMANDS["train"], config, run) == "finished"
    for command in ("sft", "expert-iter", "eval"):  # 5 SFT steps or EI rounds say nothing of done
        assert status_of(RUN_COMMANDS[command], config, run) == "resume"


def test_a_finished_sft_grid_run_stays_finished_when_the_study_raises_train_iterations(tmp_path):
    """A study's SFT run is done by its done file, whatever train.iterations says later: raising the RL
    budget (40 -> 60) resumes an RL grid run but must not train a finished SFT run of 3 steps again."""
    import json

    from rlvr.config import Config
    from rlvr.sweep_runs import DONE_FILE, RUN_COMMANDS, status_of

    run = tmp_path / "sft_point"
    (run / "checkpoints" / "iter_000003").mkdir(parents=True)
    (run / DONE_FILE).write_text(json.dumps({"iterations": 40, "grid": {"sft.demonstrations": 128}}) + "\n")
    raised = Config(train={"iterations": 60})
    assert status_of(RUN_COMMANDS["sft"], raised, run) == "finished"
    assert status_of(RUN_COMMANDS["train"], raised, run) == "resume"  # an RL run of that folder would go on


def test_an_eval_run_of_a_sweep_is_a_run_folder_with_its_metrics_at_iteration_0(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from rlvr.report.run_data import load_run
    from rlvr.sweep_runs import RUN_COMMANDS

    metrics = {"eval/accuracy": 0.25, "eval/num_examples": 8, "eval/truncated_frac": 0.5}

    def fake_evaluate(config, output_dir, log):
        (output_dir / "summary.json").write_text("{}")
        return SimpleNamespace(summary={"metrics": dict(metrics), "accuracy": 0.25})

    monkeypatch.setattr("rlvr.training.evaluation.evaluate", fake_evaluate)
    run = tmp_path / "zero_shot"
    run.mkdir()
    RUN_COMMANDS["eval"].start(None, run)
    assert load_run(run).evals == [{"iteration": 0, **metrics}]
