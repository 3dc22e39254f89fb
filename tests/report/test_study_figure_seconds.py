"""A study figure against seconds (`x: seconds`, a leaderboard's accuracy over time): each point at its record's
elapsed_s (eval records from eval.jsonl, which sit 5 s after their iteration's metrics record here, so reading
iterations, or the metrics record's seconds, gives other xs); a bad axis is named with the choices."""

from __future__ import annotations

import pytest

from rlvr.report.run_data import load_run
from rlvr.report.study_figures import panel_series, render_study_figure
from rlvr.report.study_spec import FigureSpec, Panel, StudyError
from rlvr.study import load_study
from tests.report.study_runs import write_run
from tests.report.test_study import write_study


def test_eval_accuracy_against_seconds_reads_each_eval_records_elapsed_seconds(tmp_path):
    folder = write_run(tmp_path / "run", rewards=[0.1, 0.2, 0.3, 0.4], evals={0: 0.25, 2: 0.5, 4: 0.75},
                       elapsed=[30.0, 70.0, 110.0, 150.0])
    run = load_run(folder)
    assert panel_series(run, "eval/accuracy", "seconds") == ([5.0, 25.0, 45.0], [0.25, 0.5, 0.75])
    assert panel_series(run, "eval/accuracy", "iteration") == ([0, 2, 4], [0.25, 0.5, 0.75])
    assert panel_series(run, "reward/mean", "seconds") == ([30.0, 70.0, 110.0, 150.0], [0.1, 0.2, 0.3, 0.4])
    spec = FigureSpec(tmp_path / "f.png", "", (Panel("eval/accuracy", "held out", 1),), "seconds")
    assert render_study_figure(spec, [("a", [run]), ("b", [run])]).startswith(b"\x89PNG")


def test_the_axis_is_checked_with_the_study_file(tmp_path):
    figure = {"path": str(tmp_path / "f.png"), "panels": ["eval/accuracy"]}
    study = load_study(write_study(tmp_path / "ok", {"figures": [{**figure, "x": "seconds"}]}))
    assert study.spec.figures[0].x == "seconds"
    assert load_study(write_study(tmp_path / "default", {"figures": [figure]})).spec.figures[0].x == "iteration"
    with pytest.raises(StudyError, match="x must be one of iteration, seconds, not 'minutes'"):
        load_study(write_study(tmp_path / "bad", {"figures": [{**figure, "x": "minutes"}]}))
