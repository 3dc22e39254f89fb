"""Checkers of your own for the `dataset` task (`task.options.verifier=examples/checkers.py:NAME`).

rlvr calls the function in its own process with the completion text and the row's ground truth
(and the whole row, when the function takes a third argument). It returns a number, the `answer`
component (NaN: cannot judge; correct when >= 1), or a `Verdict` whose components are those
listed in `task.options.components`. An exception it raises is not caught by the task.
"""

import math
import re

from rlvr.tasks.task import Verdict

TAGGED = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def number_in_tags(completion: str, ground_truth) -> float:
    """1 when the last number inside the <answer> tags equals the truth, 0 otherwise; NaN without tags."""
    tagged = TAGGED.findall(completion)
    if not tagged:
        return math.nan
    numbers = NUMBER.findall(tagged[-1])
    return float(bool(numbers) and float(numbers[-1]) == float(ground_truth))


def answer_and_unit(completion: str, ground_truth, row: dict) -> Verdict:
    """Two components: `answer` (as `number_in_tags`, 0 without tags) and `unit` (the row's unit is named).

    Use with `task.options.components=[answer, unit]`; rlvr recomputes the total from the components
    and `task.reward_weights` (default weight 1 each).
    """
    answer = number_in_tags(completion, ground_truth)
    answer = 0.0 if math.isnan(answer) else answer
    components = {"answer": answer, "unit": float(row["unit"] in completion.lower())}
    return Verdict(components=components, total=sum(components.values()), status="ok",
                   verifier="answer_and_unit", version="1", correct=answer == 1.0)
