"""`rlvr study` and `rlvr sweep` on a study file: the sweep runs it as any sweep file, into the same run folders;
the study trains its grid on the tiny model, writes summary.md, summary.json and the figure, writes the same page
again when rerun, and with --summary-only names the runs that are missing; an unknown name lists the studies; the
guide's example study file is valid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import rlvr.training.rl as rl
from rlvr.cli import main
from rlvr.config import save_config
from rlvr.study import load_study
from rlvr.sweep import grid_points
from tests.conftest import tiny_overrides


def tiny_study(tmp_path: Path, model_dir: Path, grid: dict, study: dict | None = None, **extra) -> Path:
    """A study file whose runs train the tiny model on char_count (2 prompts x 4 completions of 6 tokens)."""
    items = tiny_overrides(model_dir, tmp_path / "unused", **{"train.eval_every": 0, "train.save_every": 2, **extra})
    overrides = dict(item.split("=", 1) for item in items)
    for fixed in ("train.output_dir", "train.run_name"):  # the sweep sets them per run
        overrides.pop(fixed)
    data = {"overrides": overrides, "grid": grid}
    if study is not None:
        data["study"] = study
    path = tmp_path / "tiny_study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_rlvr_sweep_runs_a_study_file_into_the_same_run_folders(tiny_model_dir, tmp_path, monkeypatch, capsys):
    path = tiny_study(tmp_path, tiny_model_dir, {"algorithm.name": ["grpo", "rloo"], "train.seed": [0, 1]},
                      {"title": "t", "thresholds": [{"metric": "reward/mean", "value": 0.5}]})
    trained = []

    def fake_train(config):  # writes what a one-iteration run writes, without the model
        run_dir = Path(config.train.output_dir) / config.train.run_name
        run_dir.mkdir(parents=True)
        save_config(config, run_dir / "config.yaml")
        (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "reward/mean": 0.5}) + "\n")
        trained.append((run_dir.name, config.algorithm.name, config.train.seed))
        return run_dir

    monkeypatch.setattr(rl, "train", fake_train)
    out = tmp_path / "runs"
    assert main(["sweep", str(path), "train.iterations=1", "--output", str(out)]) == 0
    assert trained == [("name=grpo__seed=0", "grpo", 0), ("name=grpo__seed=1", "grpo", 1),
                       ("name=rloo__seed=0", "rloo", 0), ("name=rloo__seed=1", "rloo", 1)]
    assert (out / "report.html").exists()


def test_an_unknown_study_name_lists_the_studies_on_the_command_line(tmp_path, monkeypatch, capsys):
    studies = tmp_path / "configs" / "studies"
    studies.mkdir(parents=True)
    for name in ("hw4_lr", "hw4_clip"):
        (studies / f"{name}.yaml").write_text("grid: {train.seed: [0, 1]}\n")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["study", "hw4_kl", "--summary-only"]) == 2
    assert "rlvr study: error: no study named 'hw4_kl' in configs/studies/; the studies: hw4_clip, hw4_lr" in (
        capsys.readouterr().err)


@pytest.mark.slow
def test_rlvr_study_trains_its_grid_writes_its_page_and_writes_it_again(tiny_model_dir, tmp_path, monkeypatch, capsys):
    out, figure = tmp_path / "runs", tmp_path / "figures" / "tiny.png"
    study = {"title": "tiny", "output": str(out), "metrics": ["reward/mean", "eval/accuracy"],
             "thresholds": [{"metric": "reward/mean", "value": -1.0}],  # reached at once: the first iteration
             "figures": [{"path": str(figure), "panels": ["reward/mean", "eval/accuracy"]}]}
    path = tiny_study(tmp_path, tiny_model_dir, {"train.seed": [0, 1]}, study, **{"train.iterations": 2})
    capsys.readouterr()
    assert main(["study", str(path)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'summary.md'}" in printed and f"wrote {figure}" in printed
    saved = json.loads((out / "summary.json").read_text())
    # 2 iterations of 2 prompts x 4 completions, as the real records count them (num_sequences): 16 per run; the
    # threshold is met at iteration 1, after 8.
    assert [(r["name"], r["iterations"], r["completions"], r["finished"]) for r in saved["runs"]] == [
        ("seed=0", 2, 16, True), ("seed=1", 2, 16, True)]
    assert [r["crossings"][0]["completions"] for r in saved["runs"]] == [8, 8]
    assert [c["label"] for c in saved["conditions"]] == ["all"]
    assert saved["conditions"][0]["metrics"]["eval/accuracy"]["final"]["count"] == 2  # both runs evaluated
    page, picture = (out / "summary.md").read_text(), figure.read_bytes()
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and "2 of 2 runs summarised." in page

    # Rerunning trains nothing (both runs are finished) and writes the same page.
    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(rl, "train", no_training)
    monkeypatch.setattr(rl, "resume", no_training)
    assert main(["study", str(path)]) == 0
    assert (out / "summary.md").read_text() == page
    # --summary-only with a run gone: it is named, the other one summarised.
    shutil.rmtree(out / "seed=1")
    capsys.readouterr()
    assert main(["study", str(path), "--summary-only"]) == 0
    printed = capsys.readouterr().out
    assert "1 of 2 runs summarised." in printed and "Missing (1): seed=1." in printed


def test_the_guides_example_study_file_is_valid(tmp_path):
    repo = Path(__file__).resolve().parents[2]  # the guide is not among the files scripts/mutate.py copies
    guide = (repo / "docs" / "guides" / "reports-and-sweeps.md").read_text()
    example = guide.split("## Studies", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    example = example.replace("base: ../", f"base: {repo / 'configs'}/")
    path = tmp_path / "grpo_vs_dapo.yaml"
    path.write_text(example)
    study = load_study(path)
    assert study.conditions == ("name=grpo", "name=dapo") and study.spec.ratios == (("name=dapo", "name=grpo"),)
    assert [t.label for t in study.spec.thresholds] == ["eval/accuracy >= 0.5", "reward/answer >= 0.3"]
    assert [p.smooth for p in study.spec.figures[0].panels] == [5, 5, 5, 5]
    assert len(grid_points(study.plan)) == 6


def test_threads_sets_every_runs_num_threads_and_nothing_else(tmp_path, monkeypatch, capsys):
    import rlvr.study as study_module

    seen = []

    def fake_sweep(path, overrides, grid, output):
        seen.append(overrides)
        raise SystemExit(0)  # stop before summarising: only what reaches the sweep matters here

    monkeypatch.setattr(study_module, "sweep", fake_sweep)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"grid": {"train.seed": [0, 1]},
                                    "study": {"title": "t", "output": str(tmp_path / "out"),
                                              "metrics": ["reward/mean"]}}))
    for argv in (["study", str(path), "--threads", "1"], ["study", str(path)]):
        with pytest.raises(SystemExit):
            main(argv)
    assert seen == [["model.num_threads=1"], []]
