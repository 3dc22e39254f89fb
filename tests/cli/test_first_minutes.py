"""What a new user sees: fast config errors with "did you mean", the start banner, the stages, the end summary,
what a stop leaves behind, config show's defaults and the report's health warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.config import Config, ConfigError, load_config, save_config
from rlvr.utils import append_jsonl, read_jsonl
from tests.conftest import tiny_overrides

REPO = Path(__file__).resolve().parents[2]
# Importing torch alone costs more than a second of CPU here (about 1.4 s measured); a config error must cost
# well under that, interpreter start included.
CPU_BOUND_S = 1.0


def _child_cpu(code: str) -> dict:
    """Run `code` in a fresh interpreter that prints a JSON line; adds the child's whole CPU time (user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    found["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found["stderr"] = result.stderr
    return found


PARSE = """
import contextlib, io, json, sys
from rlvr.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        rc = main({argv!r})
    except SystemExit as exc:
        rc = exc.code
print(json.dumps({{"rc": rc, "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules,
                  "err": err.getvalue()}}))
"""


def _fails_fast(argv: list[str], expected: str) -> None:
    found = _child_cpu(PARSE.format(argv=argv))
    assert found["rc"] == 2 and expected in found["err"], found["err"]
    assert not found["torch"] and not found["transformers"]
    assert found["cpu_s"] < CPU_BOUND_S, f"{argv} took {found['cpu_s']:.2f} s of CPU"


@pytest.mark.parametrize("argv, expected", [
    (["train", "optim.lrr=1e-3"], "'lrr' is not in optim (did you mean 'lr'?)"),
    (["expert-iter", "optimm.lr=1"], "'optimm' is not in top level (did you mean 'optim'?)"),
])
def test_a_mistyped_key_fails_in_well_under_a_second_of_cpu_without_torch(argv, expected):
    _fails_fast(argv, expected)


@pytest.mark.parametrize("argv, expected", [
    (["train", "task.name=gsm8kk"], "unknown task 'gsm8kk' (did you mean 'gsm8k'?)"),
    (["sft", "algorithm.name=grpoo"], "algorithm.name: unknown choice 'grpoo' (did you mean 'grpo'?); valid choices: "
                                      "cispo, clip_cov, dapo, dr_grpo"),
    # Names declared as Literal types are checked while the value is read, before any registry loads.
    (["train", "algorithm.std=sampel"], "algorithm.std: unknown choice 'sampel' (did you mean 'sample'?); valid "
                                        "choices: population, sample"),
    (["train", "optim.schedule=cosin"], "optim.schedule: unknown choice 'cosin' (did you mean 'cosine'?); valid "
                                        "choices: constant, linear, cosine"),
    (["train", "model.dtype=bfloat61"], "model.dtype: unknown choice 'bfloat61' (did you mean 'bfloat16'?)"),
    (["train", "train.wandb_mode=ofline"], "train.wandb_mode: unknown choice 'ofline' (did you mean 'offline'?)"),
    (["sft", "sft.loss_normalization=token_man"], "sft.loss_normalization: unknown choice 'token_man' (did you "
                                                  "mean 'token_mean'?); valid choices: token_mean, constant"),
])
def test_a_mistyped_name_fails_in_well_under_a_second_of_cpu_without_torch(argv, expected):
    _fails_fast(argv, expected)


@pytest.mark.parametrize("argv", [["tasks"], ["--help"], ["train", "--help"]])
def test_listing_tasks_and_help_import_no_torch(argv):
    found = _child_cpu(PARSE.format(argv=argv))
    assert found["rc"] == 0 and not found["torch"]
    assert found["cpu_s"] < CPU_BOUND_S, f"{argv} took {found['cpu_s']:.2f} s of CPU"


def test_did_you_mean_names_the_closest_choice_and_nothing_for_a_far_miss():
    from rlvr.registry import did_you_mean

    assert did_you_mean("lrr", ["lr", "eps", "beta1"]) == " (did you mean 'lr'?)"
    assert did_you_mean("warmup_step", ["lr", "warmup_steps", "weight_decay"]) == " (did you mean 'warmup_steps'?)"
    assert did_you_mean("zzzz", ["lr", "eps"]) == ""
    with pytest.raises(ConfigError, match=r"unknown config key 'train.iteratons' in train \(did you mean "
                                          r"'iterations'\?\)"):
        Config.from_dict({"train": {"iteratons": 3}})
    with pytest.raises(ConfigError, match=r"unknown config section 'rollot' \(did you mean 'rollout'\?\)"):
        Config(rollot={})
    with pytest.raises(ConfigError) as far:
        load_config(None, ["optim.zzzz=1"])
    assert "did you mean" not in str(far.value)


def test_config_show_default_is_what_runs_when_the_key_is_unset(tmp_path, capsys):
    import json

    from rlvr.config import OptimConfig, TrainConfig

    # One set of defaults: the fields' own are what `rlvr train` runs with no file (5e-4, 16 iterations).
    assert (OptimConfig().lr, TrainConfig().iterations) == (5e-4, 16)
    assert main(["config", "show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "optim.lr = 0.0005   (float in (0, 10], default 0.0005)" in lines
    assert "train.iterations = 16   (int in [1, 10000000], default 16)" in lines
    starred = [line.split(" = ")[0] for line in lines if line.endswith("  *")]
    assert starred == ["task.use_chat_template", "optim.minibatch_size"]  # only keys derived from their null
    assert main(["config", "show", "optim.lr=1e-3"]) == 0
    assert "optim.lr = 0.001   (float in (0, 10], default 0.0005)  *" in capsys.readouterr().out.splitlines()
    config_file = tmp_path / "c.yaml"
    config_file.write_text("train:\n  seed: 1\n")
    assert main(["config", "show", str(config_file)]) == 0  # with a file, the same defaults apply
    assert "optim.lr = 0.0005   (float in (0, 10], default 0.0005)" in capsys.readouterr().out.splitlines()
    # The no-config run resolves as it did when its defaults were a separate table (recorded then).
    recorded = json.loads((Path(__file__).parent / "no_config_resolved.json").read_text())
    recorded.pop("train.stop_if_dead_for")  # removed since (train.stop_on); it was 0, off
    recorded["health.no_contrast_frac"] = recorded.pop("health.zero_variance_frac")  # renamed since
    resolved = load_config().flat()
    # Every recorded key is still there at its recorded value; keys added since are not listed here (a new
    # key's default is reviewed where it is declared, in rlvr/config/schema.py, not in a ledger of this test).
    assert set(recorded) <= set(resolved), sorted(set(recorded) - set(resolved))
    assert {key: resolved[key] for key in recorded} == recorded


def _stopped_main(argv: list[str]):
    """main's exit status, or "interrupt escaped" when the KeyboardInterrupt went past it."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        return "interrupt escaped"


def _train(tiny_model_dir, run_dir, *extra: str) -> int:
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 2, "train.eval_every": 1,
                                                            "train.progress": "true", "train.save_every": 1})
    return main(["train", *overrides, *extra])


@pytest.mark.slow
def test_a_tiny_run_prints_the_banner_the_stages_and_the_end_summary(tiny_model_dir, tmp_path, capsys):
    run_dir = tmp_path / "banner"
    assert _train(tiny_model_dir, run_dir) == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "rlvr: train: char_count with grpo on " + str(tiny_model_dir) + " (LoRA r=16)" in err
    assert "rlvr:   batch: 2 prompts x 4 completions = 8 sequences per iteration, up to 6 new tokens; " \
           "2 iterations, lr 0.01" in err
    assert f"rlvr:   run folder: {run_dir}" in err and "torch threads" in err
    stages = ["checking the task char_count", f"loading the model {tiny_model_dir} ...",
              "evaluation at iteration 0 on 4 held-out prompts ...", "iteration 1/2 took",
              "checkpoint at iteration 2"]
    positions = [err.index(stage) for stage in stages]
    assert positions == sorted(positions)  # in the order they happen
    # The end summary, on stdout, from the run's own files: best eval computed here from eval.jsonl.
    evals = read_jsonl(run_dir / "eval.jsonl")
    accuracies = [(e["iteration"], e["eval/accuracy"]) for e in evals]
    best = max(accuracies, key=lambda pair: pair[1])
    out = captured.out
    assert f"run folder: {run_dir}" in out
    assert f"eval accuracy: final {accuracies[-1][1]:.3f}, best {best[1]:.3f} at iteration {best[0]}" in out
    assert f"checkpoints: iter_000001, iter_000002 in {run_dir / 'checkpoints'}" in out
    for command in (f"rlvr train --resume {run_dir}", f"rlvr eval {run_dir}/config.yaml --model {run_dir}",
                    f"rlvr export {run_dir} --out DIR", f"rlvr report {run_dir}"):
        assert f"    {command}\n" in out + "\n"
    assert "rlvr:" not in out  # progress lines stay on stderr


@pytest.mark.slow
def test_json_summary_and_progress_false_keep_stdout_machine_readable(tiny_model_dir, tmp_path, capsys):
    run_dir = tmp_path / "quiet"
    assert _train(tiny_model_dir, run_dir, "train.progress=false", "--json") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # the whole of stdout is one JSON object
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert summary["iterations"] == 2 == metrics[-1]["iteration"]
    assert summary["final_reward"] == metrics[-1]["reward/mean"]
    assert summary["final_eval"] == evals[-1]["eval/accuracy"]
    assert summary["best_eval"] == max(e["eval/accuracy"] for e in evals)
    assert [Path(p).name for p in summary["checkpoints"]] == ["iter_000001", "iter_000002"]
    assert summary["next_commands"][0] == f"rlvr train --resume {run_dir}"
    assert "rlvr:" not in captured.err  # train.progress=false: no banner, no stage lines


STOP_WHILE_LOADING = """
import os, signal, sys, time
import tests.conftest  # registers the char_count task
import rlvr.training.session as session
def load_then_get_stopped(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` does while the model loads
    time.sleep(30)
session.load_run_model = load_then_get_stopped
from rlvr.cli import main
sys.exit(main(["train", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_sigterm_while_the_model_loads_leaves_no_folder(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "runs" / "stopped"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", STOP_WHILE_LOADING, *tiny_overrides(tiny_model_dir, run_dir)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, result.stderr[-2000:]  # stopped, not killed (-15) mid-way
    assert "rlvr train: stopped" in result.stderr
    assert not run_dir.exists() and list((tmp_path / "runs").iterdir()) == []  # no config.yaml, no stale .lock


@pytest.mark.slow
def test_ctrl_c_in_the_step0_eval_removes_the_new_folder(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import rlvr.training.session as session

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "evaluate_in_training", interrupted)
    run_dir = tmp_path / "runs" / "early"
    assert _stopped_main(["train", *tiny_overrides(tiny_model_dir, run_dir)]) == 130
    assert not run_dir.exists()
    assert f"stopped before the first checkpoint: removed {run_dir}" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_in_the_first_iteration_of_a_run_without_evals_removes_the_folder(tiny_model_dir, tmp_path,
                                                                                  monkeypatch, capsys):
    import rlvr.training.rl as rl

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rl, "collect_groups", interrupted)
    run_dir = tmp_path / "runs" / "no_eval"
    assert _stopped_main(["train", *tiny_overrides(tiny_model_dir, run_dir, **{"train.eval_size": 0})]) == 130
    assert not run_dir.exists() and list((tmp_path / "runs").iterdir()) == []
    assert f"stopped before the first checkpoint: removed {run_dir}" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_says_what_a_resume_continues_from(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import rlvr.training.rl as rl

    real, calls = rl.collect_groups, []

    def stop_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rl, "collect_groups", stop_at_third)
    run_dir = tmp_path / "runs" / "later"
    args = tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 4, "train.save_every": 1})
    assert _stopped_main(["train", *args]) == 130
    err = capsys.readouterr().err
    assert f"stopped: `rlvr train --resume {run_dir}` continues from iter_000002 (the newest checkpoint)" in err
    # Stopped in the first iteration, after the step-0 eval was recorded: kept, and said to hold no checkpoint.
    calls.clear()
    calls.extend([1, 1])
    kept = tmp_path / "runs" / "kept"
    assert _stopped_main(["train", *tiny_overrides(tiny_model_dir, kept)]) == 130
    err = capsys.readouterr().err
    assert kept.is_dir() and read_jsonl(kept / "eval.jsonl")
    assert f"stopped before the first checkpoint: {kept} holds no checkpoint" in err and "may be deleted" in err


def _health_run(run_dir: Path) -> Path:
    """Truncation above 0.5 at iterations 2-4 and 6-8, with health.window=2: the warning is active at
    iterations 3-4 and 7-8 (two in a row above), not at 6 (one alone), as `rlvr train` would have recorded it."""
    run_dir.mkdir(parents=True)
    save_config(load_config(None, ["health.window=2", "health.truncation_frac=0.5"]), run_dir / "config.yaml")
    truncated = [0.1, 0.8, 0.9, 0.7, 0.2, 0.95, 0.9, 0.8]
    records = []
    for iteration, frac in enumerate(truncated, start=1):
        active = ["truncation"] if iteration in (3, 4, 7, 8) else []
        records.append({"iteration": iteration, "reward/mean": 0.1 * iteration, "truncated_frac": frac,
                        "frac_no_contrast_groups": 0.0, "elapsed_s": 10.0 * iteration, "health/warnings": active})
    append_jsonl(run_dir / "metrics.jsonl", records)
    return run_dir


def test_report_shows_a_table_of_the_health_warnings_with_their_messages(tmp_path):
    from rlvr.report import build_report

    run_dir = _health_run(tmp_path / "run")
    page = build_report([run_dir], interactive=False).read_text()
    # check_truncation's own words with window 2: at iteration 3 the values are [0.8, 0.9] (last 90%, lowest
    # 0.80), at iteration 7 [0.95, 0.9] (last 90%, lowest 0.90).
    assert ("<tr><td>run</td><td>truncation</td><td class=num>3</td><td class=num>4</td><td>90% of completions hit "
            "max_new_tokens (above 50% for 2 iterations; lowest 0.80)</td>") in page
    assert ("<tr><td>run</td><td>truncation</td><td class=num>7</td><td class=num>8</td><td>90% of completions hit "
            "max_new_tokens (above 50% for 2 iterations; lowest 0.90)</td>") in page
    assert "holds no checkpoint: nothing to resume, evaluate or export" in page


def test_report_marks_where_each_warning_started_on_the_figures_it_concerns(tmp_path):
    from rlvr.report.figures import select_figures
    from rlvr.report.health_warnings import add_warning_markers, warning_spans
    from rlvr.report.interactive import plotly_available, plotly_figure
    from rlvr.report.run_data import load_run

    run = load_run(_health_run(tmp_path / "run"))
    spans = warning_spans(run)
    assert [(s.name, s.first, s.last, s.first_seconds) for s in spans] == [("truncation", 3, 4, 30.0),
                                                                           ("truncation", 7, 8, 70.0)]
    figures = select_figures([run])
    add_warning_markers(figures, spans, several_runs=False)
    marked = {figure.name: [(m.iteration, m.seconds, m.label) for m in figure.markers] for figure in figures}
    assert marked["truncated_frac"] == [(3, 30.0, "truncation"), (7, 70.0, "truncation")]
    assert marked["reward"] == []  # only the figure that plots truncated_frac
    if plotly_available():
        (truncated,) = [f for f in figures if f.name == "truncated_frac"]
        shapes = plotly_figure(truncated, "seconds").layout.shapes
        assert [shape.x0 for shape in shapes] == [30.0, 70.0]  # on the seconds axis, at elapsed_s


def test_report_of_a_run_without_warnings_says_so(tmp_path):
    from rlvr.report import build_report

    run_dir = _health_run(tmp_path / "run")
    records = read_jsonl(run_dir / "metrics.jsonl")
    (run_dir / "metrics.jsonl").write_text("")
    append_jsonl(run_dir / "metrics.jsonl", [{**r, "health/warnings": []} for r in records])
    page = build_report([run_dir], interactive=False).read_text()
    assert "No health warning fired." in page and "<td>truncation</td>" not in page
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["health"]["window"] == 2


def _finished_run(run_dir: Path) -> Path:
    """A run folder with evals at 0.25, 0.75, 0.5: the best (0.75 at iteration 2) is not the final one (0.5)."""
    run_dir.mkdir(parents=True)
    append_jsonl(run_dir / "metrics.jsonl", [{"iteration": i, "reward/mean": 0.1 * i} for i in (1, 2, 3)])
    append_jsonl(run_dir / "eval.jsonl", [{"iteration": i, "eval/accuracy": a} for i, a in
                                          ((0, 0.25), (2, 0.75), (3, 0.5))])
    (run_dir / "checkpoints" / "iter_000003").mkdir(parents=True)
    (run_dir / "checkpoints" / "iter_000002").mkdir()
    return run_dir


def test_end_summary_names_best_and_final_eval_checkpoints_and_commands(tmp_path):
    from rlvr.observe.console import format_summary, summarize_run

    run_dir = _finished_run(tmp_path / "done")
    text = format_summary(summarize_run(run_dir, "rlvr sft"))
    assert "  iterations: 3, final reward 0.300" in text
    assert "  eval accuracy: final 0.500, best 0.750 at iteration 2" in text
    assert f"  checkpoints: iter_000002, iter_000003 in {run_dir / 'checkpoints'}" in text  # in iteration order
    assert f"    rlvr sft --resume {run_dir}" in text and f"    rlvr export {run_dir} --out DIR" in text


def test_json_end_summary_holds_the_same_numbers(tmp_path):
    from rlvr.observe.console import summarize_run, summary_json

    run_dir = _finished_run(tmp_path / "done")
    summary = json.loads(summary_json(summarize_run(run_dir, None)))
    assert (summary["final_eval"], summary["best_eval"], summary["best_eval_iteration"]) == (0.5, 0.75, 2)
    assert summary["iterations"] == 3 and not any("--resume" in c for c in summary["next_commands"])


def test_end_summary_and_report_agree_on_final_and_best_eval(tmp_path):
    """One computation behind both (rlvr/observe/numbers.py): an eval that scored NaN (first) or nothing
    (last) is skipped, and the best is the first iteration that reached the maximum."""
    from rlvr.report.run_data import load_run, summarize
    from rlvr.observe.console import summarize_run
    from rlvr.observe.numbers import final_and_best, series

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    append_jsonl(run_dir / "metrics.jsonl", [{"iteration": i, "reward/mean": 0.1 * i} for i in (1, 2, 3, 4)])
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(record) + "\n" for record in (
        {"iteration": 0, "eval/accuracy": float("nan")}, {"iteration": 1, "eval/accuracy": 0.5},
        {"iteration": 2, "eval/accuracy": 0.75}, {"iteration": 3, "eval/accuracy": 0.75},
        {"iteration": 4, "eval/accuracy": 0.25}, {"iteration": 5, "eval/accuracy": None})))
    console_summary, report_summary = summarize_run(run_dir), summarize(load_run(run_dir))
    for summary in (console_summary, report_summary):
        assert (summary.final_eval, summary.best_eval, summary.best_eval_iteration) == (0.25, 0.75, 2)
    assert series([{"iteration": 7, "x": True}, {"x": 2}, {"iteration": 9, "x": float("inf")}], "x") == ([0], [2.0])
    assert final_and_best([], []) == (None, None, None)
