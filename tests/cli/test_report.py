"""rlvr report: figures only where there is data, overlaid runs, config differences, final and
best numbers, escaped samples from the first and last logged iterations, files beside the page,
interactive figures with both x axes (iterations, seconds) and eval durations, PNGs without plotly."""

from __future__ import annotations

import base64
import re

import pytest

from rlvr.cli import main
import sys

from rlvr.report import FIGURES, build_report, figures_dir, load_runs
from rlvr.report.figures import FIGURES as SPECS, X_LABELS, lines, select_figures, time_parts
from rlvr.report.interactive import plotly_figure, plotly_js
from rlvr.report.png import draw_lines
from rlvr.report.run_data import differing_config_keys, summarize
from tests.report_data import EVAL_SECONDS, EVALS, TRICKY_COMPLETION, write_fake_run

ALL_FIGURES = {spec.name for spec in FIGURES}


@pytest.fixture(scope="module")
def two_run_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    a = write_fake_run(root / "grpo", ["optim.lr=1e-3"])
    b = write_fake_run(root / "rloo", ["optim.lr=3e-4", "algorithm.name=rloo"], reward_offset=0.1)
    output = build_report([a, b], root / "out" / "compare.html")
    return root, output


def test_report_draws_every_figure_interactively_and_writes_the_pngs_beside_it(two_run_report):
    _, output = two_run_report
    page = output.read_text()
    folder = figures_dir(output)
    assert folder == output.parent / "compare_figures"
    assert {p.stem for p in folder.glob("*.png")} == ALL_FIGURES
    drawn = re.findall(r"<figure class=report-figure id='fig-(\w+)'><div[^>]*>\s*<div id=\"plot-(\w+)\"", page)
    assert [a for a, b in drawn if a == b] == [spec.name for spec in FIGURES]
    assert page.count(plotly_js()) == 1  # plotly.js written into the page once
    assert "src='http" not in page and 'src="http' not in page and "<img " not in page  # self-contained


def test_without_plotly_the_page_embeds_the_pngs(two_run_report, tmp_path, monkeypatch, capsys):
    root, _ = two_run_report
    monkeypatch.setitem(sys.modules, "plotly", None)  # `import plotly` fails as if it were not installed
    assert main(["report", str(root / "grpo"), str(root / "rloo"), "-o", str(tmp_path / "static.html")]) == 0
    assert "plotly is not installed" in capsys.readouterr().err
    page = (tmp_path / "static.html").read_text()
    embedded = dict(re.findall(r"<figure class=report-figure id='fig-(\w+)'><img alt='[^']*' "
                               r"src='data:image/png;base64,([^']+)'>", page))
    assert set(embedded) == ALL_FIGURES and "plotly is not installed" in page
    for name, data in embedded.items():
        assert base64.b64decode(data) == (figures_dir(tmp_path / "static.html") / f"{name}.png").read_bytes()
    assert "Plotly.newPlot" not in page


def test_every_point_has_its_iteration_and_second_and_evals_their_duration(two_run_report):
    root, _ = two_run_report
    runs = load_runs([root / "grpo"])
    (evals,) = [d for d in select_figures(runs) if d.name == "eval_accuracy"][0].series
    # eval.jsonl: evals after iterations 0, 2, 4 (30 s each), each ending EVAL_SECONDS later.
    assert evals.iterations == [it for it, _ in EVALS] == [0, 2, 4]
    assert evals.seconds == [30.0 * it + EVAL_SECONDS for it, _ in EVALS] == [6.0, 66.0, 126.0]
    assert evals.durations == [EVAL_SECONDS] * 3
    (reward,) = [d for d in select_figures(runs) if d.name == "reward"][0].series
    assert reward.iterations == [1, 2, 3, 4] and reward.seconds == [30.0, 60.0, 90.0, 120.0]
    assert reward.durations is None  # a rollout point is not an eval
    # The time figure stacks the eval after the iteration it followed, the step-0 eval alone.
    (time_figure,) = [d for d in select_figures(runs) if d.name == "time"]
    ((_, parts),) = time_figure.panels
    (eval_part,) = [s for s in parts if s.label == "eval"]
    assert eval_part.iterations == [0, 1, 2, 3, 4] and eval_part.values == [6.0, 0.0, 6.0, 0.0, 6.0]


def test_plotly_figure_switches_x_axis_and_shows_eval_spans_only_in_seconds(two_run_report):
    root, _ = two_run_report
    runs = load_runs([root / "grpo"])
    data = [d for d in select_figures(runs) if d.name == "eval_accuracy"][0]
    by_seconds = plotly_figure(data, x="seconds")
    (trace,) = by_seconds.data
    assert list(trace.x) == [6.0, 66.0, 126.0] and trace.error_x.visible is True
    assert list(trace.error_x.arrayminus) == [EVAL_SECONDS] * 3 and list(trace.error_x.array) == [0.0] * 3
    assert by_seconds.layout.xaxis.title.text == X_LABELS["seconds"]
    (by_iteration_trace,) = plotly_figure(data, x="iteration").data
    assert list(by_iteration_trace.x) == [0, 2, 4] and by_iteration_trace.error_x.visible is False
    # The buttons carry both axes: iteration first, then seconds.
    (menu,) = by_seconds.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["x: iteration", "x: seconds"] and menu.active == 1
    assert menu.buttons[0].args[0]["x"] == [[0, 2, 4]] and menu.buttons[1].args[0]["x"] == [[6.0, 66.0, 126.0]]
    assert menu.buttons[1].args[0]["error_x.visible"] == [True]
    assert menu.buttons[0].args[0]["error_x.visible"] == [False]
    assert menu.buttons[1].args[1]["xaxis.title.text"] == X_LABELS["seconds"]


def test_summary_has_final_and_best_reward_and_eval(two_run_report):
    root, _ = two_run_report
    (run,) = load_runs([root / "grpo"])
    summary = summarize(run)
    # REWARDS = [0.25, 0.5, 0.9, 0.5]: the best is not the last; eval.jsonl includes the step-0 eval.
    assert (summary.final_reward, summary.best_reward, summary.best_reward_iteration) == (0.5, 0.9, 3)
    assert (summary.final_eval, summary.best_eval, summary.best_eval_iteration) == (0.5, 0.75, 2)
    assert summary.iterations == 4 and summary.wall_s == 126.0  # the last eval ends 6 s after iteration 4


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
    assert page.count("class=report-figure") == 1 and "no samples logged" in page and "One run" in page


def test_overlaid_lines_have_one_colour_per_run_and_a_style_per_key(two_run_report):
    root, _ = two_run_report
    runs = load_runs([root / "grpo", root / "rloo"])
    spec = [s for s in SPECS if s.name == "clip_frac"][0]
    data = lines(runs, ["clip_frac/low", "clip_frac/high", "absent/key"], spec)
    assert [s.label for s in data.series] == [
        "grpo: clip_frac/low", "grpo: clip_frac/high", "rloo: clip_frac/low", "rloo: clip_frac/high"]
    assert data.series[0].color == data.series[1].color != data.series[2].color
    assert data.series[0].style_index != data.series[1].style_index
    assert lines(runs, ["absent/key"], spec) is None
    # Both renderers keep the colours and styles.
    drawn = draw_lines(data).axes[0].get_lines()
    assert drawn[0].get_color() == drawn[1].get_color() != drawn[2].get_color()
    assert drawn[0].get_linestyle() != drawn[1].get_linestyle()
    traces = plotly_figure(data).data
    assert traces[0].line.color == traces[1].line.color != traces[2].line.color
    assert traces[0].line.dash != traces[1].line.dash


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
    assert main(["report", str(root / "grpo"), "--x", "seconds", "-o", str(tmp_path / "s.html")]) == 0
    assert X_LABELS["seconds"] in (tmp_path / "s.html").read_text()


@pytest.mark.parametrize("runs", [2, 15, 40])
def test_a_stacked_figure_of_many_runs_is_drawn_with_the_same_gap_between_panels(runs):
    from rlvr.report.figures import FigureData, Series

    part = Series(label="generation", color="#1f77b4", style_index=0, iterations=[1, 2], seconds=[1.0, 2.0],
                  values=[1.0, 2.0])
    data = FigureData(name="time", title="time", ylabel="s", kind="stacked",
                      panels=[(f"run{i}", [part]) for i in range(runs)])
    figure = plotly_figure(data)  # plotly refuses a gap above 1 / (rows - 1): 0.12 failed from 10 runs on
    assert len(figure.data) == runs
    height = figure.layout.height
    assert height == 260 * runs + 140
    top, below = figure.layout.yaxis.domain, figure.layout.yaxis2.domain
    assert (top[0] - below[1]) * height == pytest.approx(80, abs=1)  # pixels between two panels, any count


@pytest.mark.parametrize("runs", [1, 15])
def test_a_png_of_many_lines_puts_its_legend_beside_the_axes_and_keeps_its_layout(runs):
    import warnings

    from rlvr.report.figures import FigureData, Series
    from rlvr.report.png import render_png

    series = [Series(label=f"name=run{i}: reward/{part}", color="#1f77b4", style_index=j, iterations=[1, 2],
                     seconds=[1.0, 2.0], values=[0.1 * i, 0.2]) for i in range(runs)
              for j, part in enumerate(("answer", "format", "strict"))]
    data = FigureData(name="reward_components", title="Reward components", ylabel="mean", series=series)
    figure = draw_lines(data)
    (axes,) = figure.axes
    if runs == 1:  # three entries: inside the axes, as before
        assert axes.get_legend() is not None and not figure.legends
    else:  # 45 entries in columns of 16 beside the axes, the figure wider by one column each
        assert axes.get_legend() is None
        (legend,) = figure.legends
        assert len(legend.get_texts()) == 45 and legend._ncols == 3
        assert figure.get_figwidth() == pytest.approx(7.0 + 3 * 2.6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed to zero"
        assert render_png(data)[:8] == b"\x89PNG\r\n\x1a\n"
