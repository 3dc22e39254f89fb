"""The Python API (`from rlvr import ...`): a config from keyword arguments or a dict checked exactly like
YAML, tasks registered from Python, the example in examples/python_api.py (run, and the same text as
the block of the Python API page, docs/guides/python-api.md), and `train(config)` a plain function beside the
`rlvr.training` package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rlvr
import rlvr.tasks as tasks_module
from rlvr.config import Config, ConfigError, RolloutConfig, load_config
from rlvr.tasks import TASKS, Example, Verdict, build_task, register_task

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "python_api.py"


def test_the_api_names_import_and_import_rlvr_alone_loads_no_torch():
    from rlvr import Config as config_class, evaluate, expert_iteration, export, load_config as loader, sft, train

    assert config_class is Config and loader is load_config
    assert {f.__name__ for f in (evaluate, expert_iteration, export, sft)} == {
        "evaluate", "expert_iteration", "export_run", "train_sft"}
    assert callable(train) and set(rlvr.__all__) == {
        "Config", "load_config", "train", "sft", "expert_iteration", "evaluate", "export", "register_task"}
    code = "import sys, rlvr; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_train_is_the_loop_function_and_stays_so_after_submodule_imports():
    from rlvr import train

    import rlvr.training.session as session
    import rlvr.training.rl as rl

    # A function, not a package: importing the loop's modules does not replace `rlvr.train`.
    assert train is rl.train and rlvr.train is rl.train and session.__name__ == "rlvr.training.session"
    assert "rlvr.train" not in sys.modules and not isinstance(rlvr.train, type(sys))
    assert list(__import__("inspect").signature(train).parameters) == ["config", "resume_dir", "force_config_change"]
    with pytest.raises(TypeError, match=r"expected a Config \(Config\(\.\.\.\), Config\.from_dict\(data\)"):
        train({"task": {"name": "format_copy"}})  # a dict where a Config belongs: said before anything runs


def test_the_task_interface_s_former_path_gives_the_same_objects():
    """`rlvr.tasks.base` was the documented import for a task of your own; it re-exports `rlvr.tasks.task`."""
    import rlvr.tasks.base as former
    import rlvr.tasks.task as interface

    assert former.Example is Example is interface.Example and former.Verdict is Verdict is interface.Verdict
    assert all(getattr(former, name) is getattr(interface, name) for name in former.__all__)


def test_keyword_sections_dict_and_yaml_build_the_same_config(tmp_path):
    sections = {"task": {"name": "format_copy"}, "rollout": {"group_size": 4}, "algorithm": {"name": "dapo"},
                "optim": {"lr": 3e-4}}
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(sections))
    from_yaml = load_config(config_file)
    from_keywords = Config(**sections)
    assert from_keywords.as_dict() == from_yaml.as_dict() == Config.from_dict(sections).as_dict()
    # Resolved as it is built: dapo's preset filled in, the minibatch derived from 4 x 4.
    assert (from_keywords.algorithm.clip_high, from_keywords.optim.minibatch_size) == (0.28, 16)
    assert from_keywords.as_dict() != Config().as_dict()
    # A section object works too, and is not changed by the resolution.
    rollout = RolloutConfig(group_size=4)
    assert Config(task={"name": "format_copy"}, rollout=rollout, algorithm={"name": "dapo"},
                  optim={"lr": 3e-4}).as_dict() == from_yaml.as_dict()
    assert rollout == RolloutConfig(group_size=4)
    # An algorithm section object sets what differs from the defaults; the preset fills the rest, as from a dict.
    from rlvr.config import AlgorithmConfig, OptimConfig

    assert Config(task={"name": "format_copy"}, rollout=rollout, algorithm=AlgorithmConfig(name="dapo"),
                  optim=OptimConfig(lr=3e-4)).as_dict() == from_yaml.as_dict()


def test_dotted_overrides_apply_to_a_dict_without_changing_it():
    data = {"task": {"name": "gsm8k", "options": {"path": "a.jsonl"}}}
    config = Config.from_dict(data, ["optim.lr=1e-4", "task.options.prompt=question_only",
                                     "rollout.stop_strings=[</answer>]"])
    assert config.optim.lr == 1e-4 and config.task.options == {"path": "a.jsonl", "prompt": "question_only"}
    assert config.rollout.stop_strings == ["</answer>"]
    assert data == {"task": {"name": "gsm8k", "options": {"path": "a.jsonl"}}}


BAD = [  # (sections, the same as a YAML file would hold them, the message)
    ({"rollout": {"group_sise": 4}},
     "unknown config key 'rollout.group_sise' in rollout (did you mean 'group_size'?); valid keys: backend,"),
    ({"rollout": {"group_size": "4"}}, "rollout.group_size: expected an integer, got str '4'"),
    ({"optim": {"lr": -1.0}}, "optim.lr must be a finite number in (0, 10], got -1.0"),
    ({"rollout": {"group_size": 1}}, "rollout.group_size=1 gives every advantage 0"),
    ({"train": {"eval_top_p": 0.9}}, "train.eval_top_p=0.9 does nothing when the eval decodes greedily"),
    ({"task": {"name": "no_such_task"}}, "unknown task 'no_such_task'; valid choices:"),
]


@pytest.mark.parametrize("sections, message", BAD, ids=[m.split(" ")[0] for _, m in BAD])
def test_keyword_and_yaml_configs_fail_with_the_same_message(tmp_path, sections, message):
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(sections))
    with pytest.raises(ConfigError) as from_yaml:
        load_config(config_file)
    with pytest.raises(ConfigError) as from_keywords:
        Config(**sections)
    with pytest.raises(ConfigError) as from_dict:
        Config.from_dict(sections)
    assert message in str(from_yaml.value)
    assert str(from_keywords.value) == str(from_yaml.value) == str(from_dict.value)


def test_a_section_that_does_not_exist_or_is_not_a_mapping_is_named():
    with pytest.raises(ConfigError, match=r"unknown config section 'rollouts' \(did you mean 'rollout'\?\); "
                                          r"valid sections: model, task, rollout"):
        Config(rollouts={"group_size": 4})
    with pytest.raises(ConfigError, match=r"rollout: expected a mapping of rollout\.\* keys or a RolloutConfig, got "
                                          r"int 4"):
        Config(rollout=4)


@pytest.fixture
def task_registry(monkeypatch):
    """Registrations made by a test are dropped after it."""
    monkeypatch.setattr(TASKS, "_items", dict(TASKS._items))
    monkeypatch.setattr(tasks_module, "_OUTSIDE_FAMILIES", set(tasks_module._OUTSIDE_FAMILIES))


class Words:
    """Takes `task.options` and none of the standard keywords; has no stop_strings."""

    name = "words"
    component_names = ("answer",)

    def __init__(self, word="hi", repeat=1):
        self.word, self.repeat = word, repeat

    def examples(self, split, count, seed):
        return [Example(prompt=f"say {self.word}", ground_truth=self.word * self.repeat) for _ in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 2, 0))

    def score(self, completion, example):
        value = float(completion == example.ground_truth)
        return Verdict(components={"answer": value}, total=value, status="ok", verifier="words", version="1")


def test_register_task_as_a_call_or_a_decorator(task_registry):
    assert register_task("words", Words) is Words
    task = build_task("words", options={"repeat": 2}, seed=3)  # no seed parameter: only what it takes is passed
    assert isinstance(task, Words) and task.repeat == 2 and task.stop_strings == ()
    assert "words" in [name for name in TASKS]

    @register_task("words_with_argument")
    def make(word, repeat=1):  # `words_with_argument:ho` passes "ho" first
        return Words(word, repeat)

    assert make.__name__ == "make" and build_task("words_with_argument:ho").word == "ho"
    config = Config(task={"name": "words", "options": {"repeat": 3}})
    assert config.task.use_chat_template is True  # a task without chat_template_for: the chat template


def test_register_task_refuses_what_cannot_work(task_registry):
    register_task("words", Words)
    with pytest.raises(ValueError, match="task 'words' is already registered"):
        register_task("words", Words)
    with pytest.raises(ValueError, match="task name 'my:task' must be letters"):
        register_task("my:task", Words)
    with pytest.raises(TypeError, match="the factory must be a class or function"):
        register_task("not_callable", "Words")
    # A wrong option fails when the config is built (before any model), naming the option.
    with pytest.raises(ConfigError, match="unexpected keyword argument 'repeats'"):
        Config(task={"name": "words", "options": {"repeats": 2}})

    class NoScore:
        name, component_names = "no_score", ("answer",)

        def examples(self, split, count, seed):
            return []

        def iter_eval(self):
            return iter(())

    register_task("no_score", NoScore)
    with pytest.raises(ValueError, match=r"task.name 'no_score' built a NoScore that lacks a `score` method"):
        build_task("no_score")


def _docs_block(page: str, heading: str) -> str:
    """The first python block of a page's section: `# heading` (the page's title) up to the next `## `."""
    text = (REPO / "docs" / page).read_text()
    marker = f"\n{heading}\n"
    assert marker in f"\n{text}", f"docs/{page} has no heading {heading!r}"
    section = f"\n{text}".split(marker, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, f"docs/{page} section {heading!r} has no python block"
    return blocks[0]


def test_python_api_page_block_is_the_example_file():
    assert _docs_block("guides/python-api.md", "# Python API") == EXAMPLE.read_text()


def test_the_python_api_example_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = tmp_path.glob("say_a-grpo-*")
    (eval_dir,) = tmp_path.glob("eval-say_a-*")
    assert f"run folder: {run_dir}" in done.stdout and f"written to {eval_dir}" in done.stdout
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1]
    last_eval = json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])
    summary = json.loads((eval_dir / "summary.json").read_text())
    assert summary["num_examples"] == 4 and summary["model"] == str(run_dir)
    assert summary["metrics"]["eval/reward_mean"] == last_eval["eval/reward_mean"]  # the run's own eval, again
