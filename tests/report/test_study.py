"""A study file read and summarised over run folders written by hand: conditions pooled over seeds, ratios,
missing and unfinished runs named, summary.md / summary.json / the figure written; and the study file's mistakes
(a bad key, a metric typo, a condition that does not exist, an unknown study name) named before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlvr.report.study_spec import StudyError
from rlvr.study import load_study, resolve_study, run_study
from rlvr.sweep import grid_points, load_plan
from tests.report.study_runs import write_run

EVALS = {0: 0.25, 2: 0.5, 4: 0.75}


def write_study(folder: Path, study: dict | None = None, grid: dict | None = None) -> Path:
    data = {"overrides": {"train.iterations": 4},
            "grid": grid or {"algorithm.name": ["grpo", "dapo"], "train.seed": [0, 1, 2]}}
    if study is not None:
        data["study"] = study
    path = folder / "demo.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def study_section(tmp_path: Path) -> dict:
    return {"title": "GRPO vs DAPO", "output": str(tmp_path / "runs"), "page": "docs/results/demo.md",
            "metrics": ["reward/mean", "eval/accuracy", "kl"], "last": 2,
            "thresholds": [{"metric": "reward/mean", "value": 0.5}, {"metric": "eval/accuracy", "value": 0.6}],
            "ratios": [["name=dapo", "name=grpo"]],
            "figures": [{"path": str(tmp_path / "figures" / "demo.png"), "smooth": 2,
                         "panels": ["reward/mean", {"metric": "eval/accuracy", "title": "held out"}]}]}


def fabricate_runs(out: Path) -> None:
    # grpo: reward/mean >= 0.5 at iteration 2 (16 completions, 20 s), at 4 (32, 40 s), never.
    write_run(out / "name=grpo__seed=0", seed=0, rewards=[0.1, 0.5, 0.6, 0.7], evals=EVALS, iteration_seconds=2.0)
    write_run(out / "name=grpo__seed=1", seed=1, rewards=[0.1, 0.2, 0.3, 0.5], evals=EVALS, iteration_seconds=2.0)
    write_run(out / "name=grpo__seed=2", seed=2, rewards=[0.1, 0.2, 0.3, 0.4], evals=EVALS, iteration_seconds=4.0)
    # dapo: at iteration 2 after (4 + 6) x 4 = 40 completions; at 1 after 3 x 4 = 12 (unfinished: 2 of 4 iterations);
    # seed 2 never started.
    write_run(out / "name=dapo__seed=0", algorithm="dapo", seed=0, rewards=[0.2, 0.5, 0.6, 0.6],
              sampled_groups=[4, 6, 2, 2], evals=EVALS, iteration_seconds=3.0)
    write_run(out / "name=dapo__seed=1", algorithm="dapo", seed=1, rewards=[0.5, 0.5], sampled_groups=[3, 3],
              evals={0: 0.7}, iterations=4, done=False, iteration_seconds=5.0)


def test_a_study_pools_seeds_per_condition_and_prints_the_ratio(tmp_path):
    path = write_study(tmp_path, study_section(tmp_path))
    fabricate_runs(tmp_path / "runs")
    result = run_study(str(path), summary_only=True)
    summary = result.summary
    grpo, dapo = summary.conditions
    assert (grpo.label, dapo.label) == ("name=grpo", "name=dapo")
    assert grpo.runs == ("name=grpo__seed=0", "name=grpo__seed=1", "name=grpo__seed=2")
    assert summary.missing == ["name=dapo__seed=2"] and summary.unfinished == ["name=dapo__seed=1"]
    # grpo reached reward/mean >= 0.5 in 2 of 3 runs: iterations (2 + 4) / 2 = 3, completions 24 (the unreached
    # run as 0: 2 and 16). dapo in 2 of 2: iterations 1.5, completions (40 + 12) / 2 = 26.
    pool = grpo.thresholds[0]
    assert (pool.reached, pool.runs, pool.iteration.mean, pool.completions.mean) == (2, 3, 3.0, 24.0)
    assert (dapo.thresholds[0].iteration.mean, dapo.thresholds[0].completions.mean) == (1.5, 26.0)
    # dapo / grpo: iterations 1.5 / 3 = 0.5 (0.75 with the unreached run as 0), completions 26 / 24, seconds
    # (20 + 10) / 2 / ((20 + 40) / 2) = 0.5. Median s/it: dapo's runs 3 and 5 -> 4; grpo's 2, 2, 4 -> 2: ratio 2.
    ratio = summary.ratios[0]
    part = ratio.thresholds[0]
    assert (ratio.numerator, ratio.denominator, part.reached) == ("name=dapo", "name=grpo", (2, 2, 2, 3))
    assert part.iteration == 0.5 and part.completions == pytest.approx(26 / 24) and part.seconds == 0.5
    assert ratio.median_iteration_s == 2.0
    # eval/accuracy >= 0.6: grpo's runs all at iteration 4 (32 completions, the eval's 45 s); dapo seed 1 at step 0.
    assert [r.crossings[1].iteration for r in summary.runs] == [4, 4, 4, 4, 0]
    assert [r.crossings[1].completions for r in summary.runs] == [32, 32, 32, 56, 0]

    out = tmp_path / "runs"
    assert result.written == (out / "summary.md", out / "summary.json", tmp_path / "figures" / "demo.png")
    saved = json.loads((out / "summary.json").read_text())
    assert saved["conditions"][0]["thresholds"][0]["completions"]["mean"] == 24.0
    assert saved["ratios"][0]["thresholds"][0]["iteration"] == 0.5
    assert saved["runs"][2]["crossings"][0] == {"reached": False, "iteration": None, "completions": None,
                                                 "seconds": None}
    text = (out / "summary.md").read_text()
    assert "Missing (1): name=dapo__seed=2." in text and "Unfinished (1): name=dapo__seed=1." in text
    assert "| name=grpo | 2 / 3 | 3.0 (2.0-4.0) | 24 (16-32) | 30 (20-40) |" in text
    assert "| name=grpo__seed=2 | name=grpo | 2 | not reached | - | - |" in text
    assert "| name=dapo / name=grpo | reward/mean >= 0.5 | 2/2 and 2/3 | 0.50 | 1.08 | 0.50 |" in text
    assert "No run logged kl." in text
    assert (tmp_path / "figures" / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_only_with_no_run_is_an_error_that_says_how_to_train(tmp_path):
    path = write_study(tmp_path, study_section(tmp_path))
    with pytest.raises(StudyError, match="none of the 6 runs .* without --summary-only"):
        run_study(str(path), summary_only=True)


def test_the_study_section_is_checked_before_anything_runs(tmp_path):
    def error(section, grid=None):
        with pytest.raises(StudyError) as caught:
            load_study(write_study(tmp_path / "s", section, grid))
        return str(caught.value)

    assert "unknown key 'metric'; valid keys: title, output, page, group_by" in error({"metric": ["kl"]})
    assert "'entorpy' is not a metric rlvr writes" in error({"metrics": ["entorpy"]})
    assert "did you mean entropy" in error({"metrics": ["entorpy"]})
    assert "'optim.lr' is not a grid key; the grid's keys: algorithm.name, train.seed" in error(
        {"group_by": ["optim.lr"]})
    assert "no condition 'dapo'; the conditions: name=grpo, name=dapo" in error({"ratios": [["dapo", "name=grpo"]]})
    assert "needs both metric and value" in error({"thresholds": [{"metric": "reward/mean"}]})
    # Families with a variable part are metrics too; the default conditions are every grid key but the seed.
    study = load_study(write_study(tmp_path / "ok", {"metrics": ["reward/answer", "policy_loss/dual_clipped"]}))
    assert study.spec.group_by == ("algorithm.name",) and study.conditions == ("name=grpo", "name=dapo")
    assert [r.seed for r in study.runs] == [0, 1, 2, 0, 1, 2]
    assert study.spec.output == Path("runs/studies/demo")


def test_an_unknown_study_name_lists_the_studies(tmp_path):
    studies = tmp_path / "configs" / "studies"
    for name in ("hw4_lr", "hw4_clip"):
        write_study(studies / name)
        (studies / name / "demo.yaml").rename(studies / f"{name}.yaml")
    assert resolve_study("hw4_lr", studies) == studies / "hw4_lr.yaml"
    with pytest.raises(StudyError, match=r"no study named 'hw4_lr2' in .*; the studies: hw4_clip, hw4_lr$"):
        resolve_study("hw4_lr2", studies)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_study(str(studies / "nope.yaml"), studies)


def test_a_study_file_is_a_sweep_file_with_the_same_run_names(tmp_path):
    with_study = load_plan(str(write_study(tmp_path / "a", study_section(tmp_path))), [], [])
    without = load_plan(str(write_study(tmp_path / "b")), [], [])
    assert grid_points(with_study) == grid_points(without)
    assert [name for name, _ in grid_points(with_study)][:2] == ["name=grpo__seed=0", "name=grpo__seed=1"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {train.seed: [0, 1]}\nstudies: {}\n")
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key 'studies'; valid keys: base, command, overrides, grid, .*study"):
        load_plan(str(bad), [], [])
