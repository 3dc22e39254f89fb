"""Tasks: a registry of task families, each yielding examples and scoring completions.

A name may carry an argument after a colon (`reasoning_gym:spell_backward`): the part before
the colon picks the family, the part after is passed to the family's factory.
"""

from rlvr.registry import Registry
from rlvr.tasks.base import Example, Task, Verdict, resolve_weights, weighted_total
from rlvr.tasks.format_copy import FormatCopyTask
from rlvr.tasks.gsm8k import GSM8KTask
from rlvr.tasks.integer import IntegerTask
from rlvr.tasks.judging import DEFAULT_MAX_ABS_REWARD, judge
from rlvr.tasks.math_problems import MathTask
from rlvr.tasks.reasoning_gym_tasks import ReasoningGymTask

TASKS: Registry = Registry("task")
TASKS.add("format_copy", FormatCopyTask)
TASKS.add("gsm8k", GSM8KTask)
TASKS.add("math", MathTask)
TASKS.add("integer", IntegerTask)
TASKS.add("reasoning_gym", ReasoningGymTask)


def build_task(name: str, *, reward_weights=None, options=None, use_chat_template=True, seed=0,
               max_abs_reward: float = DEFAULT_MAX_ABS_REWARD):
    """Instantiate a registered task; `options` are the task's own keyword arguments.

    `family:arg` builds the `family` task with `arg` as its first argument. `max_abs_reward` is
    recorded on the task for `judge` (`task.max_abs_reward` in the config).
    """
    family, _, argument = name.partition(":")
    factory = TASKS.get(family)
    args = (argument,) if argument else ()
    try:
        task = factory(*args, reward_weights=reward_weights or {}, use_chat_template=use_chat_template,
                       seed=seed, **(options or {}))
    except TypeError as exc:
        raise ValueError(f"task {name!r}: bad task.options ({exc})") from None
    task.max_abs_reward = float(max_abs_reward)
    return task


__all__ = ["TASKS", "Example", "Task", "Verdict", "weighted_total", "resolve_weights", "build_task", "judge",
           "FormatCopyTask", "GSM8KTask", "MathTask", "IntegerTask", "ReasoningGymTask"]
