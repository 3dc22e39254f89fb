"""benchmarks/learning/arithmetic_learning.py's TRL side on a tiny model: it trains through TRL's GRPOTrainer,
logs its rewards from rlvr's verdicts, and evaluates through rlvr's own evaluation, so its step-0 eval
is the same completions, word for word, as the step-0 eval of `rlvr train` on the same config. With
`--trl-only` it runs TRL's side alone and tabulates it beside results saved earlier (`--also`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.utils import read_jsonl

REPO = Path(__file__).resolve().parents[3]
pytest.importorskip("trl", reason="TRL is in the test extra (pip install -e '.[test]')")
from benchmarks.learning import arithmetic_learning  # noqa: E402



def test_trl_side_trains_logs_and_evaluates_like_rlvr(tiny_model_dir, tmp_path):
    overrides = [f"model.name={tiny_model_dir}", "train.iterations=2", "train.eval_every=1", "train.eval_size=4",
                 "rollout.batch_size=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
                 "train.eval_max_new_tokens=6", "model.lora_rank=4", "model.lora_alpha=8", "model.num_threads=1"]
    config = str(REPO / "configs" / "integer_add_2digit.yaml")
    trl_dir = tmp_path / "trl"
    arithmetic_learning.run_trl_side(config, overrides, 0, trl_dir)
    metrics, evals = read_jsonl(trl_dir / "metrics.jsonl"), read_jsonl(trl_dir / "eval.jsonl")
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert {"reward/mean", "reward/answer", "reward/strict", "correct_frac", "time/unix"} <= set(metrics[0])
    assert [e["iteration"] for e in evals] == [0, 1, 2] and all(e["eval/num_examples"] == 4 for e in evals)

    rlvr_dir = tmp_path / "rlvr"
    assert main(["train", config, *overrides, f"train.output_dir={tmp_path}", "train.run_name=rlvr",
                 "train.progress=false"]) == 0
    rlvr_first = read_jsonl(rlvr_dir / "eval.jsonl")[0]
    assert rlvr_first["iteration"] == 0
    # Same held-out problems, same greedy decoding path, same untrained weights: the same text.
    assert [e["completion"] for e in evals[0]["examples"]] == [e["completion"] for e in rlvr_first["examples"]]
    assert [e["ground_truth"] for e in evals[0]["examples"]] == [e["ground_truth"] for e in rlvr_first["examples"]]


def _result(side: str, seed: int, accuracy: float) -> dict:
    point = {"accuracy": accuracy, "low": accuracy - 0.1, "high": accuracy + 0.1, "n": 60, "iteration": 5,
             "seconds": 50.0}
    return {"side": side, "seed": seed, "config": "configs/integer_mul_2to12.yaml", "overrides": [], "total_s": 60.0,
            "metrics": [{"iteration": 1, "seconds": 10.0, "reward/mean": 0.5}], "evals": [point], "best": point,
            "final": point}


def test_trl_only_runs_trl_alone_and_draws_earlier_results_beside_it(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_run_side(side, config, overrides, seed, runs_dir):
        calls.append((side, seed))
        return _result(side, seed, 0.7)

    earlier = tmp_path / "rlvr.json"
    earlier.write_text(json.dumps({"argv": [], "runs": [_result("rlvr", 0, 0.8)]}))
    before = earlier.read_text()
    out_json, out_png = tmp_path / "trl.json", tmp_path / "curves.png"
    monkeypatch.setattr(arithmetic_learning, "run_side", fake_run_side)
    monkeypatch.setattr(sys, "argv", ["arithmetic_learning.py", "--config", "configs/integer_mul_2to12.yaml",
                                      "--seeds", "0", "1", "--trl-only", "--also", str(earlier),
                                      "--json", str(out_json), "--out", str(out_png)])
    assert arithmetic_learning.main() == 0
    assert calls == [("trl", 0), ("trl", 1)]  # not rlvr's side, not both
    assert [(r["side"], r["seed"]) for r in json.loads(out_json.read_text())["runs"]] == [("trl", 0), ("trl", 1)]
    assert earlier.read_text() == before  # the earlier results are read, never rewritten
    table = capsys.readouterr().out
    assert "0.800 (0.700-0.900)" in table
    assert table.count("0.700 (0.600-0.800)") == 6  # 2 TRL rows x (step 0, best, final)
    assert out_png.read_bytes()[:4] == b"\x89PNG"
