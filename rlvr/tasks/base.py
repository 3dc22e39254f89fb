"""The task interface's former path, kept for task code written against it: everything is in `rlvr.tasks.task`.

`from rlvr.tasks.base import Example, Verdict` was the documented import for a task of your own (the
examples and the environments guide used it); it gives the same objects as `rlvr.tasks.task` (or `rlvr.tasks`).
"""

from rlvr.tasks.task import (STATUSES, Example, JudgeCall, Messages, Task, Verdict, check_count_option,
                             check_seconds_option, extracts_answers, primary_component, prompt_text, resolve_weights,
                             train_indices, weighted_total)

__all__ = ["STATUSES", "Example", "JudgeCall", "Messages", "Task", "Verdict", "check_count_option",
           "check_seconds_option", "extracts_answers", "primary_component", "prompt_text", "resolve_weights",
           "train_indices", "weighted_total"]
