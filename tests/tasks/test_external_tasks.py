"""Tasks from outside rlvr: `task.name=path/to/file.py:Name` or `package.module:Name`, the example in
examples/reverse_words.py, and the errors that name the problem before any model loads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.tasks import build_task, check_task_name, task_label
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = f"{REPO}/examples/reverse_words.py:ReverseWords"

PLAIN_TASK = '''
from rlvr.tasks.task import Example, Verdict


class Echo:
    """Takes none of the standard keywords: rlvr passes only what the constructor names."""

    name = "echo"
    component_names = ("answer",)

    def __init__(self, word="hi"):
        self.word = word

    def examples(self, split, count, seed):
        return [Example(prompt=f"say {self.word}", ground_truth=self.word) for _ in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 2, 0))

    def score(self, completion, example):
        value = float(example.ground_truth in completion)
        return Verdict(components={"answer": value}, total=value, status="ok", verifier="echo", version="1",
                       correct=value == 1.0)


def make_echo(word):
    return Echo(word=word.upper())


class NoScore:
    name = "no_score"
    component_names = ("answer",)

    def examples(self, split, count, seed):
        return []

    def iter_eval(self):
        return iter([])


class ScoreTakesOneArgument(NoScore):
    def score(self, completion):
        return None
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """`my_tasks_pkg/tasks.py` in a fresh current directory, importable as `my_tasks_pkg.tasks`."""
    package = tmp_path / "my_tasks_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(PLAIN_TASK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("my_tasks_pkg")]:
        del sys.modules[name]


def test_example_task_file_builds_and_scores():
    task = build_task(EXAMPLE, options={"min_letters": 4, "max_letters": 4, "eval_size": 5},
                      reward_weights={"tag": 0.5}, use_chat_template=False, seed=3)
    held_out = list(task.iter_eval())
    assert len(held_out) == 5 and all(len(e.metadata["word"]) == 4 for e in held_out)
    example = held_out[0]
    word = example.metadata["word"]
    assert example.prompt == f"Write the word {word} backwards inside <answer></answer> tags."
    reversed_word = "".join(word[i] for i in range(len(word) - 1, -1, -1))  # by hand, not [::-1]
    right = task.score(f"<answer>{reversed_word}</answer>", example)
    assert right.correct and right.total == 1.5  # answer 1 + tag 0.5 (the weight set above)
    tag_only = task.score(f"<answer>{word}</answer>", example)
    assert not tag_only.correct and tag_only.components == {"answer": 0.0, "tag": 1.0} and tag_only.total == 0.5
    assert task.score(reversed_word, example).total == 0.0  # no tags, no reward
    # the case-swapped word is not the answer; the prompt echoed (its empty tag pair), an empty pair and
    # a non-word earn no tag either: before, each earned it
    unearned = {reversed_word.upper(): {"answer": 0.0, "tag": 1.0}, example.prompt: {"answer": 0.0, "tag": 0.0},
                "<answer></answer>": {"answer": 0.0, "tag": 0.0}, "<answer>0</answer>": {"answer": 0.0, "tag": 0.0}}
    for completion, components in unearned.items():
        wrapped = completion if "<answer>" in completion else f"<answer>{completion}</answer>"
        assert task.score(wrapped, example).components == components, completion
    train_words = {e.metadata["word"] for seed in range(20) for e in task.examples("train", 8, seed)}
    assert not train_words & {e.metadata["word"] for e in held_out}


def test_dotted_module_and_factory_get_only_the_keywords_they_name(user_package):
    task = build_task("my_tasks_pkg.tasks:Echo", options={"word": "yo"}, use_chat_template=False, seed=5)
    assert task.word == "yo" and task.score("yo!", task.examples("train", 1, 0)[0]).correct
    assert build_task("my_tasks_pkg.tasks:make_echo", options={"word": "yo"}).word == "YO"
    with pytest.raises(ValueError, match="task.reward_weights is set but the task takes no `reward_weights`"):
        build_task("my_tasks_pkg.tasks:Echo", reward_weights={"answer": 2.0})


def test_a_registered_family_wins_over_a_module_of_the_same_name(user_package):
    (user_package / "dataset.py").write_text(PLAIN_TASK)
    with pytest.raises(ValueError, match="task 'dataset:Echo': bad task.options"):  # the `dataset` family
        build_task("dataset:Echo")
    assert build_task("./dataset.py:Echo").name == "echo"  # a file path reaches the module


@pytest.mark.parametrize("name, options, error, message", [
    ("no_such_pkg_xyz.tasks:Task", {}, KeyError,
     "unknown task 'no_such_pkg_xyz.tasks:Task': 'no_such_pkg_xyz.tasks' is not a registered task family "
     r"\(valid choices: .*dataset.*\) and there is no module named 'no_such_pkg_xyz'"),
    ("missing/task_file.py:Task", {}, FileNotFoundError, "Python file 'missing/task_file.py' does not exist"),
    ("my_tasks_pkg.tasks:Nope", {}, KeyError, "has no attribute 'Nope'; it defines: Echo, NoScore, "
                                              "ScoreTakesOneArgument, make_echo"),
    ("my_tasks_pkg.tasks:Echo", {"colour": "red"}, ValueError,
     r"cannot call Echo\(word='hi'\): got an unexpected keyword argument 'colour'"),
    ("my_tasks_pkg.tasks:Echo", {"seed": 1}, ValueError, "task.options must not set 'seed'"),
    ("my_tasks_pkg.tasks:NoScore", {}, ValueError, "built a NoScore that lacks a `score` method"),
    ("my_tasks_pkg.tasks:ScoreTakesOneArgument", {}, ValueError,
     r"lacks score: cannot call score\(completion\): too many positional arguments"),
    ("chess", {}, KeyError, "unknown task 'chess'; valid choices: .*dataset, .*format_copy, .* or a task of your own"),
])
def test_bad_references_name_the_problem(user_package, name, options, error, message):
    with pytest.raises(error, match=message):
        build_task(name, options=options)


def test_errors_inside_the_users_module_are_reported_with_their_place(user_package):
    (user_package / "broken.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(ValueError, match=r"loading 'broken.py' failed: RuntimeError: boom \(at .*broken.py:2\)"):
        build_task("broken.py:Task")
    (user_package / "needs_dep.py").write_text("import not_installed_dep_xyz\n")
    with pytest.raises(ValueError, match="importing 'needs_dep' failed: ModuleNotFoundError: No module named "
                                         "'not_installed_dep_xyz'"):
        build_task("needs_dep:Task")


def test_config_rejects_a_bad_task_before_any_model_loads(user_package, capsys):
    check_task_name("my_tasks_pkg.tasks:Echo", options={"word": "x"})
    with pytest.raises(ConfigError, match="task.name 'my_tasks_pkg.tasks:Echo' with task.options: cannot call"):
        load_config(None, ["task.name=my_tasks_pkg.tasks:Echo", "task.options={size: 3}"])
    # The model does not exist: had it been loaded first, the error would be about the model.
    assert main(["train", "model.name=/nonexistent/model", "task.name=my_tasks_pkg.tasks:Nope"]) == 2
    assert "has no attribute 'Nope'" in capsys.readouterr().err


def test_task_labels_make_folder_names():
    assert task_label("reasoning_gym:spell_backward") == "reasoning_gym_spell_backward"
    assert task_label("examples/reverse_words.py:ReverseWords") == "reverse_words_ReverseWords"
    assert task_label("my_pkg.my_module:MyTask") == "my_module_MyTask"


def test_one_training_iteration_on_the_example_task(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the example config names the task file relative to the repository root
    run_dir = tmp_path / "reverse"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "examples/reverse_words.py:ReverseWords", "train.iterations": 1, "train.eval_size": 2,
        "model.lora_rank": 4, "model.lora_alpha": 8})
    assert main(["train", "examples/reverse_words.yaml", *overrides]) == 0
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    assert {"reward/answer", "reward/tag"} <= set(metrics) and metrics["optimizer_steps"] == 2
    evaluations = read_jsonl(run_dir / "eval.jsonl")
    assert evaluations and all(e["eval/num_examples"] == 2 for e in evaluations)
    assert load_config(run_dir / "config.yaml").task.name == "examples/reverse_words.py:ReverseWords"
