"""Metric sinks through accelerate's trackers: TensorBoard event files and an MLflow file store
hold the logged scalars, W&B and Aim get the expected calls (fake modules), and a requested sink
whose package is missing fails with an install hint (absent ones are fine)."""

from __future__ import annotations

import sys
import types

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.observe.metrics import RunWriter
from rlvr.observe.sinks import SINKS, MissingSinkPackage, TrackerSink, build_sinks
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_tensorboard_sink_writes_every_numeric_scalar(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is in the test extra; install rlvr[test]")
    config = load_config(None, ["train.loggers=[tensorboard]"])
    writer = RunWriter(tmp_path, sinks=build_sinks(config, tmp_path))
    writer.metrics({"iteration": 1, "reward/mean": 0.25, "kl": 0.125, "note": "text", "flag": True,
                    "nan": float("nan")})
    writer.metrics({"iteration": 2, "reward/mean": 0.75, "kl": 0.0625})
    writer.eval({"iteration": 2, "eval/accuracy": 0.5, "examples": [{"x": 1}]})
    writer.close()
    scalars = _scalars(tmp_path / "tensorboard")
    assert scalars["reward/mean"] == [(1, 0.25), (2, 0.75)]
    assert scalars["kl"] == [(1, 0.125), (2, 0.0625)]
    assert scalars["eval/accuracy"] == [(2, 0.5)]
    # Strings, booleans, NaN and the step itself are not scalars.
    assert not {"note", "flag", "nan", "iteration", "examples"} & set(scalars)
    assert read_jsonl(tmp_path / "metrics.jsonl")[1]["reward/mean"] == 0.75  # the jsonl is still written


def test_train_run_mirrors_metrics_jsonl_into_tensorboard(tiny_model_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is in the test extra; install rlvr[test]")
    from rlvr.training.rl import train

    run_dir = tmp_path / "tb_run"
    config = load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 2, "train.eval_every": 0, "train.loggers": "[tensorboard]"}))
    train(config)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    scalars = _scalars(run_dir / "tensorboard")
    expected = [(r["iteration"], pytest.approx(r["reward/mean"], abs=1e-6)) for r in metrics]
    assert scalars["reward/mean"] == expected
    assert [step for step, _ in scalars["eval/accuracy"]][0] == 0  # the step-0 eval from eval.jsonl


def test_wandb_sink_runs_offline_and_logs_numbers_by_iteration(tmp_path, monkeypatch):
    calls: dict[str, list] = {"init": [], "log": [], "finish": []}

    class FakeRun:
        def log(self, values, step):
            calls["log"].append((step, values))

        def finish(self):
            calls["finish"].append(True)

    def init(**kwargs):
        calls["init"].append(kwargs)
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    config = load_config(None, ["train.loggers=[wandb]", "train.wandb_project=demo"])
    sinks = build_sinks(config, tmp_path / "run-a")
    assert isinstance(sinks[0], TrackerSink) and type(sinks[0].tracker).__name__ == "WandBTracker"
    writer = RunWriter(tmp_path, sinks=sinks)
    writer.metrics({"iteration": 3, "reward/mean": 0.5, "status": "ok"})
    writer.close()
    (init_kwargs,) = calls["init"]
    assert init_kwargs["mode"] == "offline" and init_kwargs["project"] == "demo" and init_kwargs["name"] == "run-a"
    assert init_kwargs["config"]["train"]["loggers"] == ["wandb"]
    assert calls["log"] == [(3, {"reward/mean": 0.5})]
    assert calls["finish"] == [True]


@pytest.mark.parametrize("sink, module",
                         [("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow"), ("aim", "aim")])
def test_missing_package_is_a_clear_error_only_when_asked_for(tmp_path, monkeypatch, sink, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(MissingSinkPackage, match=rf"pip install 'rlvr\[{sink}\]'"):
        build_sinks(load_config(None, [f"train.loggers=[{sink}]"]), tmp_path)
    # Not asked for: nothing is imported and the writer works.
    writer = RunWriter(tmp_path, sinks=build_sinks(load_config(None, []), tmp_path))
    writer.metrics({"iteration": 1, "reward/mean": 1.0})
    writer.close()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"iteration": 1, "reward/mean": 1.0}]


def test_missing_package_stops_train_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from rlvr.cli import main

    monkeypatch.setitem(sys.modules, "wandb", None)
    model = tmp_path / "unloadable-model"  # the start-up checks accept it; loading it would fail otherwise
    model.mkdir()
    (model / "config.json").write_text("{}")
    code = main(["train", f"model.name={model}", "train.loggers=[wandb]",
                 f"train.output_dir={tmp_path}", "train.run_name=r", "train.progress=false"])
    assert code == 2
    assert "pip install 'rlvr[wandb]'" in capsys.readouterr().err


def test_mlflow_sink_writes_a_file_store_in_the_run_folder(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow-skinny is in the test extra; install rlvr[test]")
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run-m"
    config = load_config(None, ["train.loggers=[mlflow]", "optim.lr=3e-4"])
    writer = RunWriter(run_dir, sinks=build_sinks(config, run_dir))
    writer.metrics({"iteration": 1, "reward/mean": 0.25, "note": "text", "nan": float("nan")})
    writer.metrics({"iteration": 2, "reward/mean": 0.75})
    writer.eval({"iteration": 2, "eval/accuracy": 0.5})
    writer.close()
    client = MlflowClient(tracking_uri=(run_dir / "mlflow").resolve().as_uri())  # nothing outside the run folder
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr").experiment_id])
    assert run.info.run_name == "run-m" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.75)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/accuracy")] == [(2, 0.5)]
    assert not {"note", "nan", "iteration"} & set(run.data.metrics)
    assert run.data.params["optim.lr"] == "0.0003" and run.data.params["train.loggers"] == "['mlflow']"


def test_aim_sink_tracks_each_value_and_stores_the_config(tmp_path, monkeypatch):
    created = []

    class FakeAimRun:
        def __init__(self, repo, **kwargs):
            self.repo, self.tracked, self.items, self.closed = repo, [], {}, False
            created.append(self)

        def __setitem__(self, key, value):
            self.items[key] = value

        def track(self, value, name, step):
            self.tracked.append((name, step, value))

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "aim", types.SimpleNamespace(Run=FakeAimRun))
    config = load_config(None, ["train.loggers=[aim]"])
    writer = RunWriter(tmp_path, sinks=build_sinks(config, tmp_path / "run-b"))
    writer.metrics({"iteration": 4, "reward/mean": 0.5, "kl": 0.01, "status": "ok"})
    writer.close()
    (run,) = created
    assert run.repo == str(tmp_path / "run-b" / "aim") and run.name == "run-b"
    assert run.tracked == [("reward/mean", 4, 0.5), ("kl", 4, 0.01)]
    assert run.items["hparams"]["rollout.group_size"] == 8 and run.closed


def test_unknown_logger_and_mode_are_config_errors():
    assert SINKS.names() == ["aim", "mlflow", "tensorboard", "wandb"]
    with pytest.raises(ConfigError, match="valid choices: aim, mlflow, tensorboard, wandb"):
        load_config(None, ["train.loggers=[tensorbored]"])
    with pytest.raises(ConfigError, match="online, offline, disabled"):
        load_config(None, ["train.wandb_mode=cloud"])
