"""The command line around the config: `rlvr config show` (help from one place, every key has
it), `rlvr --version`, plain-text listings, and no library deprecation noise on stderr."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import rlvr
from rlvr.cli import main
from rlvr.config import Config, describe_config, field_help, load_config, yaml_value

REPO = Path(__file__).resolve().parents[2]


def test_every_config_key_and_section_has_one_line_of_help():
    rows = describe_config(load_config())
    sections = [f.name for f in dataclasses.fields(Config)]
    expected = sum(len(dataclasses.fields(typing.get_type_hints(Config)[s])) for s in sections)
    assert len(rows) == expected > 100  # every leaf key of every section is described
    missing = [row.key for row in rows if not row.help.strip()]
    assert missing == [], f"config keys without help: {missing}"
    multi_line = [row.key for row in rows if "\n" in row.help]
    assert multi_line == []
    for section in sections:
        assert (typing.get_type_hints(Config)[section].__doc__ or "").strip(), f"section {section} has no docstring"


def test_help_text_comes_from_the_field_metadata():
    from rlvr.config import OptimConfig

    (lr_field,) = [f for f in dataclasses.fields(OptimConfig) if f.name == "lr"]
    (row,) = [r for r in describe_config(load_config()) if r.key == "optim.lr"]
    assert row.help == field_help(lr_field) and "learning rate" in row.help


def test_config_show_prints_value_type_default_and_help(tmp_path, capsys):
    config_file = tmp_path / "c.yaml"
    config_file.write_text("algorithm:\n  name: dapo\n")
    assert main(["config", "show", str(config_file), "optim.lr=3e-4", "rollout.stop_strings=[</answer>]"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("optim.lr = 0.0003   (float in (0, 10], default 0.0005)  *")  # changed from the default: starred
    assert "learning rate" in lines[at + 1]
    assert "optim.weight_decay = 0.0   (float in [0, 100], default 0.0)" in lines  # unchanged: no star
    # A key the preset sets shows the preset's value as its default (what runs when it is unset): no star.
    assert "algorithm.clip_high = 0.28   (float in [0, 100], default 0.28 from preset dapo)" in lines
    assert "algorithm.clip_low = 0.2   (float in [0, 1], default 0.2 from preset dapo)" in lines
    assert "algorithm.std = population   (str in {population, sample}, default population)" in lines
    assert ("train.loggers = []   (list[str] of {aim, mlflow, tensorboard, wandb}, default [])") in lines
    assert "train.eval_max_new_tokens = null   (int in [1, 1048576] or null, default null)" in lines
    assert "rollout.stop_strings = [</answer>]   (list[str], default [])  *" in lines
    assert "[optim]  AdamW, gradient clipping, the learning-rate schedule and the minibatch split." in lines
    assert main(["config", "show", "optim.lrr=1"]) == 2
    assert "unknown config key 'optim.lrr'" in capsys.readouterr().err


def test_config_show_gives_a_key_the_preset_sets_the_preset_value_as_its_default(capsys):
    from rlvr.algorithms import ALGORITHMS

    assert main(["config", "show", "algorithm.name=ppo", "rollout.group_size=1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for key, value in ALGORITHMS.get("ppo").settings.items():
        (line,) = [line for line in lines if line.startswith(f"algorithm.{key} = ")]
        assert line.endswith(f"default {yaml_value(value)} from preset ppo)"), line  # unchanged: no star
    assert "algorithm.kl_estimator = k3   (str in {k1, k2, k3}, default k3)" in lines  # not set by ppo
    assert "algorithm.name = ppo   (str in {" + ", ".join(ALGORITHMS.names()) + "}, default grpo)  *" in lines


def test_train_help_points_to_config_show_and_version_prints(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "rlvr config show" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"rlvr {rlvr.__version__}"


def test_tasks_and_algorithms_print_plain_text(capsys):
    assert main(["tasks"]) == 0
    tasks = capsys.readouterr().out
    assert "format_copy" in tasks and "reasoning_gym:<name>" in tasks
    assert "`" not in tasks and "|" not in tasks  # no markdown code spans or table rows
    assert main(["algorithms"]) == 0
    algorithms = capsys.readouterr().out
    assert "grpo" in algorithms and "`" not in algorithms and "|" not in algorithms


def _rlvr_subprocess(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlvr", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_train_prints_no_library_deprecation_warnings(tiny_model_dir, tmp_path):
    # Loading a LoRA model makes peft read a transformers attribute that warns FutureWarning.
    result = _rlvr_subprocess(
        "train", f"model.name={tiny_model_dir}", "task.use_chat_template=false", "train.iterations=1",
        "train.eval_size=0", "rollout.batch_size=1", "rollout.group_size=2", "rollout.max_new_tokens=4",
        f"train.output_dir={tmp_path}", "train.run_name=quiet", "train.progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    noisy = [line for line in result.stderr.splitlines() if "deprecat" in line.lower() or "FutureWarning" in line]
    assert noisy == []


def test_the_deprecation_filter_is_narrow():
    """Only transformers' own notices are hidden: the same warning from another module still shows."""
    import warnings

    from rlvr.cli import quiet_library_deprecations

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_library_deprecations()
        warnings.warn_explicit("x is deprecated", FutureWarning, "modeling_utils.py", 1,
                               module="transformers.modeling_utils")
        warnings.warn_explicit("y is deprecated", FutureWarning, "other.py", 1, module="mypackage.other")
        warnings.warn_explicit("z changed", UserWarning, "modeling_utils.py", 2, module="transformers.modeling_utils")
    assert [str(w.message) for w in caught] == ["y is deprecated", "z changed"]


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_every_command_has_help_and_the_top_level_lists_them(capsys):
    from rlvr.cli import build_parser

    top = _help([], capsys)
    commands = list(build_parser()._subparsers._group_actions[0].choices)
    assert set(commands) >= {"train", "sft", "expert-iter", "check", "report", "sweep", "config", "algorithms",
                             "tasks", "eval", "export"}
    for command in commands:
        assert command in top
        assert f"rlvr {command}" in _help([command], capsys)
    assert "rlvr config show" in _help(["config", "show"], capsys)
    for command in ("train", "sft", "expert-iter", "check", "sweep", "eval"):
        text = " ".join(_help([command], capsys).split())
        assert "rlvr config show" in text and "exit status 2" in text, command


def test_eval_help_names_the_key_behind_every_flag(capsys):
    from rlvr.cli import EVAL_FLAG_KEYS, build_parser

    actions = {action.dest: action for action in build_parser()._subparsers._group_actions[0].choices["eval"]._actions}
    for flag, key in EVAL_FLAG_KEYS.items():
        assert actions[flag].help.startswith(f"[{key}]"), flag
        assert actions[flag].default is None  # a flag not given sets nothing, so the config's value stands
    assert actions["chat_template"].help.startswith("[task.use_chat_template]")
    assert actions["task_option"].help.startswith("[task.options.KEY]")
    text = " ".join(_help(["eval"], capsys).split())
    assert "rlvr eval [CONFIG.yaml] [key=value ...]" in text and "greedy" in text


def test_describe_config_without_a_config_gives_the_same_keys_with_their_defaults():
    built = describe_config(load_config())
    bare = describe_config(None)
    assert [(r.key, r.type_name, r.default, r.default_from, r.help) for r in bare] == [
        (r.key, r.type_name, r.default, r.default_from, r.help) for r in built]
    assert all(r.value == r.default for r in bare)
    # The run without a file: lr 5e-4, and the default preset's settings as the algorithm defaults.
    assert [r.default for r in bare if r.key == "optim.lr"] == [5e-4]
    (clip_high,) = [r for r in bare if r.key == "algorithm.clip_high"]
    assert clip_high.default_from == "preset grpo"
    # A built config's values are its own, not the defaults (the preset fills clip_high for dapo).
    dapo = describe_config(Config(algorithm={"name": "dapo"}))
    assert [(r.value, r.default) for r in dapo if r.key == "algorithm.clip_high"] == [(0.28, 0.28)]
