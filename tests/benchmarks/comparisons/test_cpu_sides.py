"""benchmarks/comparisons/cpu_sides.py: the alternating order of its sides, the pooling of their steps, and a tiny
run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.comparisons.cpu_sides import pooled, round_orders

REPO = Path(__file__).resolve().parents[3]


def test_rounds_alternate_the_order_so_drift_hits_every_side_alike():
    assert round_orders(["a", "b", "c"], 3) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert round_orders(["a", "b"], 1) == [["a", "b"]]


def test_the_result_file_is_replaced_whole(tmp_path):
    from benchmarks.comparisons.cpu_sides import write_json

    path = tmp_path / "r.json"
    write_json(path, {"runs": [1]})
    write_json(path, {"runs": [1, 2]})
    assert json.loads(path.read_text()) == {"runs": [1, 2]} and os.listdir(tmp_path) == ["r.json"]


def test_pooling_drops_each_runs_own_warm_up_steps():
    runs = [{"step_seconds": [9.0, 1.0, 2.0], "generation_seconds": [5.0, 0.5, 0.6], "completion_tokens": [3, 4, 5]},
            {"step_seconds": [8.0, 3.0, 4.0], "generation_seconds": [4.0, 0.7, 0.8], "completion_tokens": [6, 7, 8]}]
    # warm-up steps of the second run (8.0) must go too, not only the first run's
    assert pooled(runs, 1) == {"step_seconds": [1.0, 2.0, 3.0, 4.0], "generation_seconds": [0.5, 0.6, 0.7, 0.8],
                               "completion_tokens": [4, 5, 7, 8]}


@pytest.mark.slow
def test_a_tiny_run_prints_one_row_per_side_in_alternating_rounds(tiny_model_dir, tmp_path):
    report = tmp_path / "sides.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = REPO / "benchmarks" / "comparisons" / "cpu_sides.py"
    done = subprocess.run([sys.executable, str(script), "--sides", "rlvr decode_loop", "trl generate", "--model",
                           str(tiny_model_dir), "--max-new-tokens", "4", "--steps", "2", "--warmup", "1", "--rounds",
                           "2", "--json", str(report)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| (rlvr|trl) ", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| rlvr decode_loop", "| trl generate"]
    result = json.loads(report.read_text())
    assert result["order"] == ["rlvr decode_loop", "trl generate", "trl generate", "rlvr decode_loop"]
    assert result["complete"] is True and not report.with_name(report.name + ".tmp").exists()
    for side in ("rlvr decode_loop", "trl generate"):
        summary = result["summary"][side]
        assert summary["steps"] == 2 and len(summary["per_run_median_s"]) == 2  # one step after warm-up, per run
        assert summary["peak_rss_gib"] > 0 and summary["tokens_per_s"] > 0
