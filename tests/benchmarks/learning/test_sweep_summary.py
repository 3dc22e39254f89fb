"""benchmarks/learning/sweep_summary.py on a run folder written by hand: the table's numbers are the ones the
records hold (best eval the first to reach the maximum, first and last windows of the main component,
zero-contrast shares, DAPO's sampled groups, wall time from the run's own clock), and the figure is drawn."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.learning import sweep_summary
from rlvr.report import load_runs



def _write_run(folder: Path, algorithm: str, seed: int, answers: list[float], zero: list[float],
               accuracies: list[float], sampled: list[int] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"name": algorithm}, "train": {"seed": seed}}))
    metrics = []
    for i, (answer, z) in enumerate(zip(answers, zero), start=1):
        record = {"iteration": i, "elapsed_s": 10.0 * i, "reward/answer": answer, "reward/mean": answer,
                  "frac_no_contrast_groups": z, "time/iteration": 2.0 + i, "entropy": 1.0 - 0.125 * i}
        if sampled is not None:
            record["dynamic_sampling/sampled_groups"] = sampled[i - 1]
        metrics.append(record)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    evals = [{"iteration": 2 * k, "elapsed_s": 20.0 * k + 5, "eval/accuracy": a, "eval/num_examples": 20}
             for k, a in enumerate(accuracies)]
    (folder / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    return folder


def test_summary_numbers_come_from_the_records(tmp_path):
    sweep = tmp_path / "sweep"
    _write_run(sweep / "name=dapo", "dapo", 0, answers=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
               zero=[1.0, 0.5, 0.5, 0.25, 0.0, 0.0], accuracies=[0.1, 0.5, 0.3, 0.5], sampled=[4, 8, 4, 12, 4, 4])
    _write_run(sweep / "name=grpo", "grpo", 2, answers=[0.5] * 6, zero=[0.0] * 6, accuracies=[0.2, 0.25])
    dapo, grpo = [sweep_summary.summarize_run(run, "answer", window=2, reach=0.5) for run in load_runs([sweep])]

    assert (dapo["algorithm"], dapo["seed"], grpo["algorithm"], grpo["seed"]) == ("dapo", 0, "grpo", 2)
    # 0.5 is reached at iteration 2 and again at 6: the best is the first (a last-wins max would say 6).
    assert dapo["best"]["iteration"] == 2 and dapo["best"]["accuracy"] == 0.5
    # The reach column: 0.5 is met exactly at iteration 2, so ">=" finds it and ">" would find none.
    assert dapo["reached"]["iteration"] == 2 and dapo["reached"]["seconds"] == 25.0 and grpo["reached"] is None
    assert dapo["final"]["iteration"] == 6 and dapo["step0"]["accuracy"] == 0.1
    low, high = dapo["best"]["low"], dapo["best"]["high"]  # Wilson 95% for 10 of 20, computed by hand
    assert low == pytest.approx(0.2993, abs=1e-4) and high == pytest.approx(0.7007, abs=1e-4)
    assert dapo["component_first"] == pytest.approx(0.1) and dapo["component_last"] == pytest.approx(0.9)
    assert dapo["no_contrast_mean"] == pytest.approx(2.25 / 6) and dapo["no_contrast_last"] == 0.0
    assert dapo["sampled_groups_total"] == 36 and grpo["sampled_groups_total"] is None
    # entropy 0.875, 0.75, ..., 0.25 over iterations 1-6: the first two average 0.8125, the last two 0.3125
    assert dapo["entropy_first"] == pytest.approx(0.8125) and dapo["entropy_last"] == pytest.approx(0.3125)
    assert dapo["iterations"] == 6
    assert dapo["wall_s"] == 65.0  # the last eval (iteration 6, 65 s) lands after the last metrics record (60 s)
    assert dapo["median_iteration_s"] == 5.5

    table = sweep_summary.markdown_table([dapo, grpo], "answer", 2, 0.5)
    assert "| dapo | 0 | 0.100 (" in table and "0.500 (0.299-0.701), it 2" in table and "| 36 |" in table
    assert "| it 2, 25 s |" in table
    assert "0.100 -> 0.900" in table and "0.38 / 0.00" in table
    assert "| 0.81 -> 0.31 |" in table


def test_moving_mean_is_trailing_and_skips_missing():
    assert sweep_summary.moving_mean([1.0, 3.0, None, 5.0, float("nan"), 7.0], 2) == [1.0, 2.0, 3.0, 5.0, 5.0, 7.0]


def test_main_writes_table_json_and_figure(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "sweep"
    _write_run(sweep / "name=rloo", "rloo", 0, answers=[0.0, 0.5], zero=[1.0, 0.5], accuracies=[0.1, 0.4])
    out_json, out_png = tmp_path / "s.json", tmp_path / "s.png"
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--window", "1", "--json", str(out_json),
                                      "--out", str(out_png)])
    assert sweep_summary.main() == 0
    assert "| rloo | 0 |" in capsys.readouterr().out
    saved = json.loads(out_json.read_text())["runs"]
    assert saved[0]["component_first"] == 0.0 and saved[0]["component_last"] == 0.5
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_also_adds_saved_rows_with_their_legacy_key_names(tmp_path, capsys, monkeypatch):
    """Rows of an earlier --json file join the table and the figure (first), the old `zero_variance` names read
    as `no_contrast`, and the new --json file holds only the new runs."""
    sweep = tmp_path / "sweep"
    _write_run(sweep / "name=rloo", "rloo", 0, answers=[0.0, 0.5], zero=[1.0, 0.5], accuracies=[0.1, 0.4])
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--window", "1",
                                      "--json", str(tmp_path / "first.json")])
    assert sweep_summary.main() == 0
    first = json.loads((tmp_path / "first.json").read_text())
    legacy = {"runs": [{("zero_variance" + key[len("no_contrast"):] if key.startswith("no_contrast") else key):
                        value for key, value in row.items()} for row in first["runs"]]}
    for row in legacy["runs"]:
        row["algorithm"], row["metrics"] = "old_preset", [
            {("zero_variance" if k == "no_contrast" else k): v for k, v in m.items()} for m in row["metrics"]]
    legacy["runs"][0]["zero_variance_mean"], legacy["runs"][0]["zero_variance_last"] = 0.875, 0.125
    for key in ("entropy_first", "entropy_last"):
        del legacy["runs"][0][key]
    (tmp_path / "old.json").write_text(json.dumps(legacy))
    capsys.readouterr()

    out_json, out_png = tmp_path / "new.json", tmp_path / "all.png"
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--window", "1", "--also",
                                      str(tmp_path / "old.json"), "--json", str(out_json), "--out", str(out_png)])
    assert sweep_summary.main() == 0
    table = capsys.readouterr().out
    assert table.index("| old_preset | 0 |") < table.index("| rloo | 0 |")
    assert "| 0.88 / 0.12 |" in table  # the legacy shares, read under their new names
    assert "| 0.88 / 0.12 | - |" in table  # with no entropy in the saved row (older files)
    assert [r["algorithm"] for r in json.loads(out_json.read_text())["runs"]] == ["rloo"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.json").write_text("[1, 2]")
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--also", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit, match="not a sweep_summary.py --json file"):
        sweep_summary.main()


def _row(algorithm: str, seed: int, final: float, best: float | None = None, s_per_it: float = 10.0) -> dict:
    point = {"iteration": 40, "seconds": 100.0, "accuracy": final, "low": 0.0, "high": 1.0, "n": 200}
    return {"label": f"name={algorithm}", "algorithm": algorithm, "seed": seed, "final": point,
            "best": {**point, "accuracy": final if best is None else best}, "median_iteration_s": s_per_it}


def test_presets_pool_their_seeds_and_sit_against_the_reference_spread():
    """grpo's seeds span 0.60-0.70. A preset whose lowest seed (0.72) clears 0.70 is above by 0.02, one whose
    highest (0.55) is under 0.60 is below by 0.05, and a single seed inside the span, or a mean above the
    reference's highest with a seed inside it, is within: a mean-against-mean rule would call both of these above."""
    rows = [_row("grpo", 0, 0.60), _row("grpo", 1, 0.70, best=0.75), _row("grpo", 2, 0.65, s_per_it=20.0),
            _row("ppo", 0, 0.72), _row("ppo", 1, 0.80), _row("gpg", 0, 0.55), _row("gpg", 1, 0.50),
            _row("sapo", 0, 0.69), _row("dapo", 0, 0.68), _row("dapo", 1, 0.90)]
    pooled = {p["algorithm"]: p for p in sweep_summary.preset_rows(rows, "grpo")}
    assert pooled["grpo"]["seeds"] == [0, 1, 2] and pooled["grpo"]["final_mean"] == pytest.approx(0.65)
    assert (pooled["grpo"]["final_low"], pooled["grpo"]["final_high"]) == (0.60, 0.70)
    assert pooled["grpo"]["best_mean"] == pytest.approx((0.60 + 0.75 + 0.65) / 3)
    assert pooled["grpo"]["median_iteration_s"] == 10.0 and pooled["grpo"]["against_reference"] == "-"
    assert pooled["ppo"]["against_reference"] == "above by 0.020"
    assert pooled["gpg"]["against_reference"] == "below by 0.050"
    assert pooled["sapo"]["against_reference"] == "within"
    assert pooled["dapo"]["final_mean"] > 0.70 and pooled["dapo"]["against_reference"] == "within"
    order = [p["algorithm"] for p in sweep_summary.preset_rows(rows, "grpo")]
    assert order == ["dapo", "ppo", "sapo", "grpo", "gpg"]  # by final mean, highest first
    table = sweep_summary.preset_table(sweep_summary.preset_rows(rows, "grpo"), "grpo")
    assert "| ppo | 0,1 | 0.760 (0.720-0.800) | 0.760 | 10.0 | above by 0.020 |" in table
    # With no run of the reference preset, nothing is set against it.
    assert {p["against_reference"] for p in sweep_summary.preset_rows(rows, "remax")} == {"-"}


def test_the_cap_compares_runs_at_the_same_wall_clock_time(tmp_path, capsys, monkeypatch):
    """Evals land at 5, 25, 45, 65 s (see _write_run). At a 50 s cap the slow run counts its eval at 45 s; a
    final-eval or first-eval reading would give other numbers."""
    sweep = tmp_path / "sweep"
    _write_run(sweep / "name=ppo", "ppo", 0, answers=[0.1] * 6, zero=[0.0] * 6, accuracies=[0.1, 0.3, 0.6, 0.9])
    _write_run(sweep / "name=rloo", "rloo", 0, answers=[0.1] * 3, zero=[0.0] * 3, accuracies=[0.1, 0.4])
    ppo, rloo = [sweep_summary.summarize_run(run, "answer", window=2, reach=0.5) for run in load_runs([sweep])]
    assert sweep_summary.at_cap(ppo, 50.0)["accuracy"] == 0.6  # not the final 0.9
    assert sweep_summary.at_cap(ppo, 45.0)["accuracy"] == 0.6 and sweep_summary.at_cap(ppo, 44.9)["accuracy"] == 0.3
    assert sweep_summary.at_cap(ppo, 4.0) is None
    assert sweep_summary.resolve_cap("shortest", [ppo, rloo]) == rloo["wall_s"] == 30.0
    assert sweep_summary.resolve_cap("50", [ppo]) == 50.0 and sweep_summary.resolve_cap(None, [ppo]) is None
    for bad in ("soon", "0", "-3"):
        with pytest.raises(SystemExit, match="seconds"):
            sweep_summary.resolve_cap(bad, [ppo])
    pooled = {p["algorithm"]: p for p in sweep_summary.preset_rows([ppo, rloo], "rloo", cap=30.0)}
    assert pooled["ppo"]["cap_mean"] == 0.3 and pooled["rloo"]["cap_mean"] == 0.4  # at 30 s rloo leads
    assert pooled["ppo"]["final_mean"] == 0.9  # while at the end ppo does
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--cap", "shortest"])
    assert sweep_summary.main() == 0
    out = capsys.readouterr().out
    assert "eval at 30 s |" in out and "0.300 (" in out and "at 30 s: mean |" in out and "| 0.400 |" in out


def test_plot_presets_keeps_every_seed_of_the_named_presets_and_rejects_unknown_names():
    rows = [_row("grpo", 0, 0.6), _row("dapo", 0, 0.7), _row("grpo", 1, 0.65), _row("ppo", 0, 0.5)]
    assert sweep_summary.only_presets(rows, None) is rows
    kept = sweep_summary.only_presets(rows, "grpo, ppo")
    assert [(r["algorithm"], r["seed"]) for r in kept] == [("grpo", 0), ("grpo", 1), ("ppo", 0)]
    with pytest.raises(SystemExit, match=r"gpro not among the runs' presets \(grpo, dapo, ppo\)"):
        sweep_summary.only_presets(rows, "grpo,gpro")
    with pytest.raises(SystemExit, match="no preset named"):
        sweep_summary.only_presets(rows, " , ")


def test_main_draws_only_the_named_presets_but_tables_every_run(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "sweep"
    _write_run(sweep / "name=rloo", "rloo", 0, answers=[0.0, 0.5], zero=[1.0, 0.5], accuracies=[0.1, 0.4])
    _write_run(sweep / "name=grpo", "grpo", 0, answers=[0.0, 0.5], zero=[1.0, 0.5], accuracies=[0.1, 0.3])
    drawn = []
    monkeypatch.setattr(sweep_summary, "plot", lambda rows, *a: drawn.extend(r["algorithm"] for r in rows))
    monkeypatch.setattr(sys, "argv", ["sweep_summary.py", str(sweep), "--window", "1", "--out",
                                      str(tmp_path / "f.png"), "--plot-presets", "rloo"])
    assert sweep_summary.main() == 0
    out = capsys.readouterr().out
    assert drawn == ["rloo"] and "| rloo | 0 |" in out and "| grpo | 0 |" in out
