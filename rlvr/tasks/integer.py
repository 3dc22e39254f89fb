"""`integer`: questions whose answer is one integer, with a small built-in arithmetic source.

Questions ("What is 37 * 12?") are generated from a seed; the eval questions come from their own
stream and are removed from training. Components: `answer` (the last integer in the completion,
or in its `<answer>` tags when present, equals the truth; weight 1) and `format` (the completion
is only an integer; weight 0.2). A completion with no integer at all is `unjudgeable`: its
`answer` is NaN, so with `format` weighted 0 it is left out of its group's advantage.
"""

from __future__ import annotations

import math
import random
import re

from rlvr.tasks.answers import extract_answer_tag
from rlvr.tasks.base import Example, Verdict, check_count_option, resolve_weights
from rlvr.tasks.grading import Judgement, judgement_verdict

VERSION = "1"
INTEGER_RE = re.compile(r"(?<![\d.])-?\d{1,40}(?![\d])")
ONLY_INTEGER_RE = re.compile(r"\s*-?\d{1,40}\s*")
QUESTION = "What is {a} {op} {b}? Reply with only the integer."
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
EVAL_SEED_OFFSET = 7_919


def find_integers(text: str) -> list[int]:
    return [int(match) for match in INTEGER_RE.findall(text.replace(",", ""))]


def parse_integer_truth(ground_truth) -> int:
    """The ground truth as an integer (`42`, `"-7"`, `"1,000"`); ValueError for anything else."""
    text = str(ground_truth).strip().replace(",", "")
    if not ONLY_INTEGER_RE.fullmatch(text):
        raise ValueError(f"ground truth {ground_truth!r} is not an integer")
    return int(text)


def judge_integer(completion: str, ground_truth) -> Judgement:
    """`answer`: the last integer (in the `<answer>` span when there is one) equals the truth;
    `format`: the completion is only an integer. No integer at all is `unjudgeable`."""
    tagged = extract_answer_tag(completion)
    integers = find_integers(tagged if tagged is not None else completion)
    formatted = float(ONLY_INTEGER_RE.fullmatch(completion) is not None)
    if not integers:
        return Judgement(format=formatted, answer=math.nan, status="unjudgeable", detail="no integer")
    correct = integers[-1] == parse_integer_truth(ground_truth)
    return Judgement(format=formatted, answer=float(correct), extracted=str(integers[-1]))


class IntegerTask:
    name = "integer"
    component_names = ("answer", "format")
    stop_strings: tuple[str, ...] = ()  # the completion ends at EOS
    default_weights = {"answer": 1.0, "format": 0.2}

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, low=0, high=99,
                 operations=("+", "-", "*"), eval_size=200):
        check_count_option(self.name, "eval_size", eval_size)
        for key, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"integer: task.options.{key}={value!r} must be an integer")
        unknown = sorted(set(operations) - set(OPERATIONS))
        if unknown or low > high:
            raise ValueError(f"integer: operations must be among {', '.join(OPERATIONS)} and low <= high")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.low, self.high, self.operations = low, high, tuple(operations)
        rng = random.Random(seed + EVAL_SEED_OFFSET)
        self._eval = [self._draw(rng) for _ in range(eval_size)]
        self._held_out = {question for question, _ in self._eval}

    def _draw(self, rng: random.Random) -> tuple[str, int]:
        a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high)
        op = rng.choice(self.operations)
        return QUESTION.format(a=a, op=op, b=b), OPERATIONS[op](a, b)

    def make_example(self, question: str, answer: int) -> Example:
        prompt = [{"role": "user", "content": question}] if self.use_chat_template else question
        return Example(prompt=prompt, ground_truth=str(answer), metadata={"question": question})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.make_example(q, a) for q, a in self._eval[:count]]
        if split != "train":
            raise ValueError(f"integer: unknown split {split!r}; valid splits: train, eval")
        rng = random.Random(seed)
        drawn: list[tuple[str, int]] = []
        for _ in range(1000 * max(1, count)):
            if len(drawn) == count:
                break
            question, answer = self._draw(rng)
            if question not in self._held_out:
                drawn.append((question, answer))
        return [self.make_example(q, a) for q, a in drawn]

    def iter_eval(self):
        return iter(self.examples("eval", len(self._eval), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        return judgement_verdict(judge_integer(completion, example.ground_truth), self.weights, "integer", VERSION)
