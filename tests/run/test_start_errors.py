"""A start that fails leaves nothing behind: every config, task, data and model-name error is raised
before the model loads, for every command that loads one, with exit status 2 and a message naming
the problem, and `runs/` is exactly as it was.

"The model loads" is observed with a spy on the first step of `rlvr.models.policy.load_policy`
(through which every policy, base model and run checkpoint loads) and on transformers' model
constructor. The control cases show the spy does see each command's model load: with a valid config
every command reaches it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import rlvr.models.policy as policy_module
from rlvr.cli import main
from rlvr.testing import IM_END_TOKEN


class ModelLoadAttempted(Exception):
    """Raised by the spy: not one of the errors the command line turns into exit status 2."""


@pytest.fixture
def model_loads(monkeypatch) -> list[str]:
    """Every model load the commands begin (the spec), each stopped at once."""
    calls: list[str] = []

    def spy(spec, *args, **kwargs):
        calls.append(str(spec))
        raise ModelLoadAttempted(str(spec))

    monkeypatch.setattr(policy_module, "resolve_model_path", spy)
    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    return calls


@pytest.fixture
def workdir(tmp_path, monkeypatch, tiny_model_dir) -> Path:
    """A current directory with data files and a `runs/` that already holds one run."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(
        json.dumps({"question": f"what is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n" for i in range(12)))
    rows = [json.dumps({"question": f"what is {i} + {i}?", "answer": f"#### {2 * i}"}) for i in range(4)]
    rows[2] = json.dumps({"question": "what is 2 + 2?", "answer": "four, with no final line"})  # line 3
    (data / "bad.jsonl").write_text("\n".join(rows) + "\n")
    (data / "rows.jsonl").write_text("".join(
        json.dumps({"question": f"say {i}", "answer": str(i)}) + "\n" for i in range(12)))
    (data / "pairs.jsonl").write_text("".join(
        json.dumps({"prompt": f"say a {i}", "response": "abc" + IM_END_TOKEN, "ground_truth": "abc"}) + "\n"
        for i in range(6)))
    previous = tmp_path / "runs" / "previous-run"
    previous.mkdir(parents=True)
    (previous / "metrics.jsonl").write_text('{"iteration": 1}\n')
    return tmp_path


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}


def _valid_overrides(model_dir) -> dict[str, str]:
    return {
        "model.name": str(model_dir), "task.name": "char_count", "train.output_dir": "runs", "train.progress": "false",
        "rollout.batch_size": "2", "rollout.group_size": "2", "rollout.max_new_tokens": "3", "train.iterations": "1",
        "train.eval_size": "2", "model.lora_rank": "4", "model.lora_alpha": "8",
        "expert_iteration.questions_per_step": "2", "expert_iteration.samples_per_question": "2",
        "expert_iteration.min_new_tokens": "1", "expert_iteration.n_ei_steps": "1",
        "sft.batch_size": "2", "sft.microbatch_size": "2",
    }


def _command(name: str, overrides: dict[str, str]) -> list[str]:
    items = [f"{key}={value}" for key, value in overrides.items()]
    if name == "sft":
        return ["sft", *items, "sft.data_path=data/pairs.jsonl"]
    if name == "sweep":
        return ["sweep", *items, "--grid", "optim.weight_decay=0.0,0.1"]
    return [name, *items]


COMMANDS = ("train", "sft", "expert-iter", "eval", "check", "sweep")

# (what is wrong, the overrides that make it so, a piece of the message that names it)
BAD_INPUTS = [
    ("unknown task", {"task.name": "no_such_task"}, "unknown task 'no_such_task'"),
    ("bad task option", {"task.name": "format_copy", "task.options.no_such_option": "1"}, "no_such_option"),
    ("missing data file", {"task.name": "gsm8k", "task.options.path": "data/missing.jsonl",
                           "task.use_chat_template": "false"}, "missing.jsonl"),
    ("bad row", {"task.name": "gsm8k", "task.options.path": "data/bad.jsonl", "task.use_chat_template": "false"},
     "bad.jsonl:3"),
    ("unknown verifier", {"task.name": "dataset", "task.options.path": "data/rows.jsonl",
                          "task.options.verifier": "no_such_verifier"}, "unknown verifier 'no_such_verifier'"),
    ("unknown model name", {"model.name": "no-such-model"}, "model.name: model 'no-such-model'"),
    ("bad key", {"optim.lrr": "1"}, "unknown config key 'optim.lrr'"),
    ("bad value range", {"rollout.top_k": "-5"}, "rollout.top_k must be an integer in [0, 16777216], got -5"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("problem, bad, named", BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_a_bad_start_exits_2_before_the_model_loads_and_leaves_runs_unchanged(
        workdir, tiny_model_dir, model_loads, capsys, command, problem, bad, named):
    before = _tree(workdir / "runs")
    status = main(_command(command, {**_valid_overrides(tiny_model_dir), **bad}))
    error = capsys.readouterr().err
    assert status == 2, f"{command} with {problem}: exit {status}, stderr {error!r}"
    assert named in error and error.startswith(f"rlvr {command}: error:")
    assert model_loads == []
    assert _tree(workdir / "runs") == before
    assert sorted(p.name for p in workdir.iterdir()) == ["data", "runs"]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_spy_sees_every_command_load_its_model(workdir, tiny_model_dir, model_loads, command):
    with pytest.raises(ModelLoadAttempted):
        main(_command(command, _valid_overrides(tiny_model_dir)))
    assert model_loads == [str(tiny_model_dir)]


def test_a_task_that_fails_after_the_config_loads_leaves_no_folder_with_only_config_yaml(workdir, tiny_model_dir):
    """The case that used to leave `runs/<name>/config.yaml` behind: the config is valid, the task is not."""
    overrides = {**_valid_overrides(tiny_model_dir), "task.name": "gsm8k", "task.options.path": "data/bad.jsonl",
                 "task.use_chat_template": "false"}
    from rlvr.config import load_config
    from rlvr.training.rl import train

    config = load_config(None, [f"{k}={v}" for k, v in overrides.items()])  # valid: the data is read later
    with pytest.raises(ValueError, match="bad.jsonl:3"):
        train(config)
    assert sorted(p.name for p in (workdir / "runs").iterdir()) == ["previous-run"]


def test_a_missing_sink_package_stops_before_the_folder(workdir, tiny_model_dir, model_loads, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now raises ImportError
    before = _tree(workdir / "runs")
    status = main(_command("train", {**_valid_overrides(tiny_model_dir), "train.loggers": "[tensorboard]"}))
    assert status == 2 and "pip install 'rlvr[tensorboard]'" in capsys.readouterr().err
    assert model_loads == [] and _tree(workdir / "runs") == before


def test_a_sweep_checks_every_point_before_the_first_run(workdir, tiny_model_dir, model_loads, capsys):
    """The second point's data file has a bad row: not one run starts (without the check the first would)."""
    overrides = {**_valid_overrides(tiny_model_dir), "task.name": "gsm8k", "task.use_chat_template": "false"}
    before = _tree(workdir / "runs")
    status = main(["sweep", *[f"{k}={v}" for k, v in overrides.items()],
                   "--grid", "task.options.path=data/gsm8k.jsonl,data/bad.jsonl"])
    assert status == 2 and "bad.jsonl:3" in capsys.readouterr().err
    assert model_loads == [] and _tree(workdir / "runs") == before


def test_a_model_that_fails_to_load_takes_its_new_folder_with_it(workdir, tiny_model_dir, monkeypatch):
    """Checks cannot see everything (damaged weights, a device that is not there): a new folder holding only
    its config.yaml is removed again; a folder that existed before the start is left where it was."""
    import rlvr.run.setup as run_setup
    from rlvr.config import load_config
    from rlvr.training.rl import train

    def damaged(*args, **kwargs):
        raise OSError("model.safetensors is truncated")

    monkeypatch.setattr(run_setup, "load_policy", damaged)
    before = _tree(workdir / "runs")
    config = load_config(None, [f"{k}={v}" for k, v in _valid_overrides(tiny_model_dir).items()])
    with pytest.raises(OSError, match="truncated"):
        train(config)
    assert _tree(workdir / "runs") == before
    kept = workdir / "runs" / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(OSError, match="truncated"):
        train(load_config(None, [f"{k}={v}" for k, v in _valid_overrides(tiny_model_dir).items()]
                          + ["train.run_name=kept"]))
    assert (kept / "notes.txt").read_text() == "mine" and not (kept / ".lock").exists()
