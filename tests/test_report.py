"""rlvr report: figures only where there is data, overlaid runs, config differences, final and
best numbers, escaped samples from the first and last logged iterations, files beside the page."""

from __future__ import annotations

import base64
import re

import pytest

from rlvr.cli import main
from rlvr.report import FIGURES, build_report, figures_dir, load_runs
from rlvr.report.figures import plot_lines, time_parts
from rlvr.report.runs import differing_config_keys, summarize
from tests.report_data import TRICKY_COMPLETION, write_fake_run

ALL_FIGURES = {spec.name for spec in FIGURES}


@pytest.fixture(scope="module")
def two_run_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    a = write_fake_run(root / "grpo", ["optim.lr=1e-3"])
    b = write_fake_run(root / "rloo", ["optim.lr=3e-4", "algorithm.name=rloo"], reward_offset=0.1)
    output = build_report([a, b], root / "out" / "compare.html")
    return root, output


def test_report_embeds_every_figure_and_writes_the_pngs_beside_it(two_run_report):
    _, output = two_run_report
    page = output.read_text()
    folder = figures_dir(output)
    assert folder == output.parent / "compare_figures"
    assert {p.stem for p in folder.glob("*.png")} == ALL_FIGURES
    embedded = dict(re.findall(r"<figure id='fig-([\w]+)'><img alt='[^']*' src='data:image/png;base64,([^']+)'>", page))
    assert set(embedded) == ALL_FIGURES
    for name, data in embedded.items():
        assert base64.b64decode(data) == (folder / f"{name}.png").read_bytes()
    assert "src='http" not in page and "src=\"http" not in page  # self-contained


def test_summary_has_final_and_best_reward_and_eval(two_run_report):
    root, _ = two_run_report
    (run,) = load_runs([root / "grpo"])
    summary = summarize(run)
    # REWARDS = [0.25, 0.5, 0.9, 0.5]: the best is not the last; eval.jsonl includes the step-0 eval.
    assert (summary.final_reward, summary.best_reward, summary.best_reward_iteration) == (0.5, 0.9, 3)
    assert (summary.final_eval, summary.best_eval, summary.best_eval_iteration) == (0.5, 0.75, 2)
    assert summary.iterations == 4 and summary.wall_s == 120.0


def test_config_table_lists_only_the_keys_that_differ(two_run_report):
    root, output = two_run_report
    runs = load_runs([root / "grpo", root / "rloo"])
    keys = differing_config_keys(runs)
    assert "optim.lr" in keys and "algorithm.name" in keys and "algorithm.advantage_estimator" in keys
    assert "model.name" not in keys and "rollout.group_size" not in keys
    assert differing_config_keys(runs[:1]) == []
    page = output.read_text()
    diff_table = page.split("<h2>Config differences</h2>")[1].split("<details>")[0]
    assert "<td>optim.lr</td><td>0.001</td><td>0.0003</td>" in diff_table
    assert "model.name" not in diff_table


def test_samples_are_escaped_and_come_from_the_first_and_last_iterations(two_run_report):
    _, output = two_run_report
    samples = output.read_text().split("<h2>Completions: first and last logged iteration</h2>")[1]
    assert "<script>alert" not in samples and "<answer>12" not in samples
    escaped = "&lt;answer&gt;12&lt;/answer&gt; &amp; &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert escaped in samples and TRICKY_COMPLETION not in samples
    assert "iteration 1 <span" in samples and "iteration 4 <span" in samples
    assert "it1 plain" in samples and "it2 plain" not in samples  # iteration 2 is neither first nor last


def test_missing_keys_skip_their_figures_and_stale_pngs_go(tmp_path):
    sparse = write_fake_run(tmp_path / "sparse", full=False)
    output = tmp_path / "r.html"
    (figures_dir(output)).mkdir()
    (figures_dir(output) / "kl.png").write_bytes(b"stale")  # from an earlier, fuller report
    build_report([sparse], output)
    assert {p.stem for p in figures_dir(output).glob("*.png")} == {"reward"}
    page = output.read_text()
    assert page.count("<img ") == 1 and "no samples logged" in page and "One run" in page


def test_overlaid_lines_have_one_colour_per_run_and_a_style_per_key(two_run_report):
    root, _ = two_run_report
    runs = load_runs([root / "grpo", root / "rloo"])
    figure = plot_lines(runs, ["clip_frac/low", "clip_frac/high", "absent/key"], "clip", "fraction")
    lines = figure.axes[0].get_lines()
    assert [line.get_label() for line in lines] == [
        "grpo: clip_frac/low", "grpo: clip_frac/high", "rloo: clip_frac/low", "rloo: clip_frac/high"]
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    assert lines[0].get_linestyle() != lines[1].get_linestyle()
    assert plot_lines(runs, ["absent/key"], "none", "") is None


def test_time_parts_put_the_unnamed_rest_into_other():
    parts = time_parts({"time/generation": 10.0, "time/update": 12.0, "time/iteration": 25.0, "time/unix": 1e9})
    assert parts == {"generation": 10.0, "update": 12.0, "other": 3.0}  # time/unix is a timestamp, not a part


def test_cli_report_and_its_errors(two_run_report, tmp_path, capsys):
    root, _ = two_run_report
    assert main(["report", str(root / "grpo"), "-o", str(tmp_path / "one.html")]) == 0
    assert (tmp_path / "one.html").exists() and "report:" in capsys.readouterr().out
    # A folder of runs (a sweep's output) stands for the runs inside it.
    assert [r.label for r in load_runs([root])] == ["grpo", "rloo"]
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert main(["report", str(root / "grpo"), "-o", str(tmp_path / "r.pdf")]) == 2
    assert "must end in .html" in capsys.readouterr().err
