"""Tasks: a registry of task families, each yielding examples and scoring completions, plus tasks of your own.

`task.name` is read in this order:
  1. a registered family, with an optional argument after the first colon
     (`gsm8k`, `dataset`, `reasoning_gym:spell_backward`, `verifiers:my_taskset`): the part before the
     colon decides;
  2. otherwise `path/to/file.py:Name` (a Python file) or `package.module:Name` (an importable
     module): `Name` is a class or factory following `rlvr.tasks.task.Task`, called with
     `task.options` as keywords (and `reward_weights`, `use_chat_template`, `seed` when it takes them).
A module whose first part is a registered family name (`math:Foo`) is reached as a file path.
`register_task(name, factory)` adds a family of your own from Python; it is built like a task
from a file (only the keywords it takes, its interface checked).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from rlvr.registry import Registry, did_you_mean
from rlvr.tasks.task import Example, Task, Verdict, resolve_weights, weighted_total
from rlvr.tasks.calculator import CalculatorTask
from rlvr.tasks.code import CodeTask, humaneval_task
from rlvr.tasks.data_files import check_data_file
from rlvr.tasks.dataset_task import DatasetTask
from rlvr.tasks.external import (FORMS, ModuleMissing, accepts_keyword, check_call, load_reference,
                                 split_reference)
from rlvr.tasks.format_copy import FormatCopyTask
from rlvr.tasks.gsm8k import GSM8KTask
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.tasks.integer import IntegerTask
from rlvr.tasks.judge import JudgeTask, judge_factory
from rlvr.tasks.verification.judging import DEFAULT_MAX_ABS_REWARD, judge
from rlvr.tasks.math_problems import MathTask
from rlvr.tasks.reasoning_gym_tasks import ReasoningGymTask
from rlvr.tasks.reward_model import RewardModelTask, reward_model_factory
from rlvr.tasks.verification.verifiers import VERIFIERS
from rlvr.tasks.verifiers_env import verifiers_task

TASKS: Registry = Registry("task")
TASKS.add("format_copy", FormatCopyTask)
TASKS.add("gsm8k", GSM8KTask)
TASKS.add("math", MathTask)
TASKS.add("integer", IntegerTask)
TASKS.add("reasoning_gym", ReasoningGymTask)
TASKS.add("dataset", DatasetTask)
TASKS.add("guess_number", GuessNumberTask)
TASKS.add("calculator_arithmetic", CalculatorTask)
TASKS.add("verifiers", verifiers_task)
TASKS.add("code", CodeTask)
TASKS.add("humaneval", humaneval_task)

_OUTSIDE_FAMILIES: set[str] = set()  # registered with `register_task`: built like a task from a file
_FAMILY_NAME = re.compile(r"[A-Za-z_][\w.-]*")


def register_task(name: str, factory: Callable | None = None):
    """Register your own task family under `name`: `register_task("words", WordsTask)`, or as a decorator,
    `@register_task("words")`. Then `task.name=words` builds it (`words:ARG` passes ARG first), with
    `task.options` as keywords plus whichever of `reward_weights`, `use_chat_template` and `seed` it takes,
    and checks what it built against `rlvr.tasks.task.Task`. Returns the factory (the decorator form: a decorator).
    """
    if not isinstance(name, str) or not _FAMILY_NAME.fullmatch(name):
        raise ValueError(f"task name {name!r} must be letters, digits, '_', '-' or '.', starting with a letter or "
                         "'_' (no ':': task.name NAME:ARG passes ARG to the factory)")
    if factory is None:
        return lambda given: register_task(name, given)
    if not callable(factory):
        raise TypeError(f"register_task({name!r}, ...): the factory must be a class or function that returns a task, "
                        f"got {type(factory).__name__}")
    TASKS.add(name, factory)  # refuses a name that is taken
    _OUTSIDE_FAMILIES.add(name)
    return factory


# What `rlvr.tasks.task.Task` asks of a task, checked on tasks from outside rlvr when they are built.
INTERFACE = ("name (str), component_names (tuple of str), examples(split, count, seed), score(completion, example), "
             "iter_eval(), and optionally stop_strings (tuple of str, default ()), primary_component (one of "
             "component_names) and extracts_answers (bool: its verdicts set Verdict.answer, for maj@k)")
STANDARD_KEYWORDS = ("reward_weights", "use_chat_template", "seed")


def is_registered(name: str) -> bool:
    return name.partition(":")[0] in TASKS


def _trusted(name: str) -> bool:
    """A family that takes every standard keyword and checks its own options (not one from `register_task`)."""
    return is_registered(name) and name.partition(":")[0] not in _OUTSIDE_FAMILIES


def task_factory(name: str) -> tuple[Callable, tuple]:
    """`(factory, positional arguments)` for a task name (see the module docstring for the order)."""
    family, _, argument = name.partition(":")
    if family in TASKS:
        return TASKS.get(family), ((argument,) if argument else ())
    parts = split_reference(name)
    if parts is None:
        raise KeyError(f"unknown task {family!r}{did_you_mean(family, TASKS)}; valid choices: "
                       f"{', '.join(TASKS.names())}, "
                       f"or a task of your own as {FORMS}")
    try:
        return load_reference(name, f"task.name {name!r}"), ()
    except ModuleMissing as exc:
        raise KeyError(f"unknown task {name!r}: {family!r} is not a registered task family (valid choices: "
                       f"{', '.join(TASKS.names())}) and there is no module named {exc.module!r} (looked in the "
                       f"current directory and on the Python path); a file is written path/to/file.py:Name") from None


def _external_keywords(factory: Callable, name: str, options: dict, reward_weights: dict, use_chat_template: bool,
                       seed: int) -> dict:
    clash = sorted(set(options) & set(STANDARD_KEYWORDS))
    if clash:
        raise ValueError(f"task.name {name!r}: task.options must not set {clash[0]!r}; it comes from the config")
    if reward_weights and not accepts_keyword(factory, "reward_weights"):
        raise ValueError(f"task.name {name!r}: task.reward_weights is set but the task takes no `reward_weights` "
                         "argument")
    standard = {"reward_weights": reward_weights, "use_chat_template": use_chat_template, "seed": seed}
    return {**{k: v for k, v in standard.items() if accepts_keyword(factory, k)}, **options}


def check_task_name(name: str, *, options=None, reward_weights=None) -> None:
    """Fail now, before any model loads, if `name` or its options cannot make a task."""
    factory, args = task_factory(name)
    if _trusted(name):
        return  # rlvr's own factories check their own options when built
    check_call(factory, f"task.name {name!r} with task.options", *args,
               **_external_keywords(factory, name, dict(options or {}), dict(reward_weights or {}), True, 0))


def check_data_files(name: str, options: dict | None = None) -> None:
    """Fail now, reading one byte of each, when a task.options entry that names a local data file (the family's
    `data_file_options`: `path`, `train_path`, `eval_path` for gsm8k, math and dataset) names none that can be read."""
    factory, _ = task_factory(name)
    for key in getattr(factory, "data_file_options", ()):
        value = (options or {}).get(key)
        if isinstance(value, (str, os.PathLike)) and os.fspath(value):
            try:
                check_data_file(value)
            except (FileNotFoundError, ValueError) as exc:
                raise type(exc)(f"task.options.{key}: {exc}") from None


def check_task_interface(task, name: str) -> None:
    """Raise naming what is missing when an outside task does not follow `rlvr.tasks.task.Task`."""
    problems = []
    if not isinstance(getattr(task, "name", None), str):
        problems.append("a `name` string")
    components = getattr(task, "component_names", None)
    if not isinstance(components, (tuple, list)) or not components or not all(isinstance(c, str) for c in components):
        problems.append("`component_names` (a non-empty tuple of str)")
    primary = getattr(task, "primary_component", None)
    if primary is not None and (not isinstance(components, (tuple, list)) or primary not in components):
        problems.append(f"`primary_component` among its component_names (got {primary!r})")
    stops = getattr(task, "stop_strings", ())
    if not isinstance(stops, (tuple, list)) or not all(isinstance(s, str) for s in stops):
        problems.append("`stop_strings` as a tuple of str (or none: () is assumed)")
    for method, args in (("examples", ("train", 1, 0)), ("score", ("", Example(prompt="", ground_truth=None))),
                         ("iter_eval", ())):
        function = getattr(task, method, None)
        if not callable(function):
            problems.append(f"a `{method}` method")
            continue
        try:
            check_call(function, method, *args)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError(f"task.name {name!r} built a {type(task).__name__} that lacks {'; '.join(problems)}. "
                         f"A task has {INTERFACE} (see rlvr/tasks/task.py)")


def build_task(name: str, *, reward_weights=None, options=None, use_chat_template=True, seed=0,
               max_abs_reward: float = DEFAULT_MAX_ABS_REWARD):
    """Instantiate a task; `options` are the task's own keyword arguments.

    `family:arg` builds the `family` task with `arg` as its first argument; `file.py:Name` and
    `module:Name` build a task from outside rlvr (see the module docstring). `max_abs_reward` is
    recorded on the task for `judge` (`task.max_abs_reward` in the config).
    """
    factory, args = task_factory(name)
    if not _trusted(name):
        kwargs = _external_keywords(factory, name, dict(options or {}), dict(reward_weights or {}),
                                    use_chat_template, seed)
        check_call(factory, f"task.name {name!r} with task.options", *args, **kwargs)
        task = factory(*args, **kwargs)
        check_task_interface(task, name)
        if not hasattr(task, "stop_strings"):
            try:
                task.stop_strings = ()  # the Task protocol's default: generation ends at EOS only
            except AttributeError:
                raise ValueError(f"task.name {name!r} built a {type(task).__name__} without `stop_strings` that "
                                 "cannot be given one; add `stop_strings = ()` to it") from None
        try:
            task.max_abs_reward = float(max_abs_reward)
        except AttributeError:  # a task with __slots__: judge() then uses the default limit
            pass
        return task
    try:
        task = factory(*args, reward_weights=reward_weights or {}, use_chat_template=use_chat_template,
                       seed=seed, **(options or {}))
    except TypeError as exc:
        raise ValueError(f"task {name!r}: bad task.options ({exc})") from None
    task.max_abs_reward = float(max_abs_reward)
    return task


TASKS.add("judge", judge_factory(build_task))  # judge:BASE builds its base task through build_task
TASKS.add("rm", reward_model_factory(build_task))  # rm:BASE: a reward model's score added to BASE's components


def default_use_chat_template(name: str, options: dict | None = None) -> bool:
    """Whether a task's prompts go through the chat template when nobody says (`rlvr eval --chat-template auto`).

    A task family with a raw-text prompt template decides from its options
    (`chat_template_for(options)`: False for `r1_zero`); every other task uses the chat template.
    """
    factory, _ = task_factory(name)
    decide = getattr(factory, "chat_template_for", None)
    return True if decide is None else bool(decide(dict(options or {})))


def task_label(name: str) -> str:
    """`task.name` as a piece of a folder name: `reasoning_gym_spell_backward`, `my_task_MyTask`."""
    parts = None if is_registered(name) else split_reference(name)
    if parts is not None:
        source, attribute = parts
        stem = Path(source).stem if source.endswith(".py") else source.rsplit(".", 1)[-1]
        name = f"{stem}_{attribute}"
    return re.sub(r"[^\w.-]+", "_", name)


__all__ = ["TASKS", "VERIFIERS", "Example", "Task", "Verdict", "weighted_total", "resolve_weights", "build_task",
           "register_task", "check_task_name", "check_data_files", "default_use_chat_template", "judge", "task_label",
           "FormatCopyTask", "GSM8KTask", "MathTask", "IntegerTask", "ReasoningGymTask", "DatasetTask",
           "GuessNumberTask",
           "CalculatorTask", "CodeTask", "JudgeTask", "RewardModelTask"]
