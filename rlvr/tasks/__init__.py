"""Tasks: a registry of task families, each yielding examples and scoring completions."""

from rlvr.registry import Registry
from rlvr.tasks.base import Example, Task, Verdict, weighted_total
from rlvr.tasks.format_copy import FormatCopyTask

TASKS: Registry = Registry("task")
TASKS.add("format_copy", FormatCopyTask)


def build_task(name: str, *, reward_weights=None, options=None, use_chat_template=True, seed=0):
    """Instantiate a registered task; `options` are the task's own keyword arguments."""
    factory = TASKS.get(name)
    try:
        return factory(reward_weights=reward_weights or {}, use_chat_template=use_chat_template,
                       seed=seed, **(options or {}))
    except TypeError as exc:
        raise ValueError(f"task {name!r}: bad task.options ({exc})") from None


__all__ = ["TASKS", "Example", "Task", "Verdict", "weighted_total", "build_task", "FormatCopyTask"]
