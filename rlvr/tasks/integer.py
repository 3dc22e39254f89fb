"""`integer`: questions whose answer is one integer, with a small built-in arithmetic source.

Questions ("What is 37 * 12?") are generated from a seed, each operand from its own range
(`operands: [[10, 99], [1, 9]]`, or `low`/`high` for both); the eval questions are distinct, come
from their own stream and are removed from training. Two prompts (`task.options.prompt`):
`only_integer` asks for the integer alone; `show_work` asks for working and then the answer in
`<answer></answer>` tags (generation stops at `</answer>`). Components: `answer` (the integer in
the last non-empty `<answer>` span, else the last integer of the completion, equals the truth;
weight 1), `format` (the completion has the asked-for form: only an integer, or a tagged span
holding only an integer; weight 0, logged) and `strict` (right AND in that form; weight 0.2).
The bonus is paid only for a right answer: a bare wrong guess earns what a wrong equation earns,
0, so giving up the working is never cheaper than trying. A completion with no integer at all is
`unjudgeable` (`answer` NaN).
"""

from __future__ import annotations

import math
import random
import re

from rlvr.tasks.verification.answers import extract_answer_tag
from rlvr.tasks.task import Example, Verdict, check_count_option, resolve_weights
from rlvr.tasks.verification.grading import Judgement, judgement_verdict

# 3: a decimal's integer part is not an integer answer; 2: `strict` carries the form bonus (paid only
# when right), `format` weight 0, show_work prompt
VERSION = "3"
# Not part of a decimal: `122.5` and `122.000001` hold no integer (a sentence's `122.` does).
INTEGER_RE = re.compile(r"(?<![\d.])-?\d{1,40}(?!\d|\.\d)")
ONLY_INTEGER_RE = re.compile(r"\s*-?\d{1,40}\s*")
PROMPTS = {
    "only_integer": "What is {a} {op} {b}? Reply with only the integer.",
    "show_work": "What is {a} {op} {b}? Show your working, then give the final answer as an integer "
                 "inside <answer></answer> tags.",
}
TAGGED_PROMPTS = ("show_work",)  # the answer is asked for in tags: format is judged on the span
STOP_STRINGS = {"only_integer": (), "show_work": ("</answer>",)}
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
DEFAULT_LOW, DEFAULT_HIGH = 0, 99
EVAL_SEED_OFFSET = 7_919


def find_integers(text: str) -> list[int]:
    return [int(match) for match in INTEGER_RE.findall(text.replace(",", ""))]


def parse_integer_truth(ground_truth) -> int:
    """The ground truth as an integer (`42`, `"-7"`, `"1,000"`); ValueError for anything else."""
    text = str(ground_truth).strip().replace(",", "")
    if not ONLY_INTEGER_RE.fullmatch(text):
        raise ValueError(f"ground truth {ground_truth!r} is not an integer")
    return int(text)


def judge_integer(completion: str, ground_truth, *, tagged: bool = False) -> Judgement:
    """`answer`: the last integer of the last non-empty `<answer>` span, else of the whole completion,
    equals the truth. `format`: the completion is only an integer (`tagged`: the span is only an
    integer). No integer at all is `unjudgeable`."""
    span = extract_answer_tag(completion) or None  # an empty span is no answer
    integers = find_integers(span if span is not None else completion)
    shaped = span if tagged else completion
    formatted = float(shaped is not None and ONLY_INTEGER_RE.fullmatch(shaped) is not None)
    if not integers:
        return Judgement(format=formatted, answer=math.nan, status="unjudgeable", detail="no integer")
    correct = integers[-1] == parse_integer_truth(ground_truth)
    return Judgement(format=formatted, answer=float(correct), extracted=str(integers[-1]))


def operand_ranges(low, high, operands) -> tuple[tuple[int, int], tuple[int, int]]:
    """((low_a, high_a), (low_b, high_b)) from `operands` or from `low`/`high` (both operands), checked."""
    def integer(key, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"integer: task.options.{key}={value!r} must be an integer")
        return value

    if operands is not None:
        if low is not None or high is not None:
            raise ValueError("integer: give either task.options.operands or low/high, not both")
        if (not isinstance(operands, (list, tuple)) or len(operands) != 2
                or not all(isinstance(r, (list, tuple)) and len(r) == 2 for r in operands)):
            raise ValueError(f"integer: task.options.operands={operands!r} must be two [low, high] ranges, "
                             "e.g. [[10, 99], [1, 9]]")
        ranges = tuple((integer(f"operands[{i}][0]", r[0]), integer(f"operands[{i}][1]", r[1]))
                       for i, r in enumerate(operands))
    else:
        low = DEFAULT_LOW if low is None else integer("low", low)
        high = DEFAULT_HIGH if high is None else integer("high", high)
        ranges = ((low, high), (low, high))
    for index, (lo, hi) in enumerate(ranges):
        if lo > hi:
            raise ValueError(f"integer: operand {index + 1} range [{lo}, {hi}] needs low <= high")
    return ranges


class IntegerTask:
    name = "integer"
    component_names = ("answer", "format", "strict")
    primary_component = "answer"
    extracts_answers = True  # Verdict.answer: the last integer (maj@k votes on it)
    default_weights = {"answer": 1.0, "format": 0.0, "strict": 0.2}

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, low=None, high=None, operands=None,
                 operations=("+", "-", "*"), prompt="only_integer", eval_size=200):
        check_count_option(self.name, "eval_size", eval_size)
        unknown = sorted(set(operations) - set(OPERATIONS))
        if unknown or not operations:
            raise ValueError(f"integer: task.options.operations={list(operations)!r}: choose among "
                             f"{', '.join(OPERATIONS)}")
        if prompt not in PROMPTS:
            raise ValueError(f"integer: unknown prompt {prompt!r}; valid prompts: {', '.join(PROMPTS)}")
        self.ranges = operand_ranges(low, high, operands)
        self.operations = tuple(dict.fromkeys(operations))
        (low_a, high_a), (low_b, high_b) = self.ranges
        distinct = (high_a - low_a + 1) * (high_b - low_b + 1) * len(self.operations)
        if eval_size > distinct // 2:
            raise ValueError(f"integer: eval_size={eval_size} would hold out more than half of the {distinct} "
                             f"distinct questions; use eval_size <= {distinct // 2} or wider operand ranges")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.prompt = prompt
        self.stop_strings = STOP_STRINGS[prompt]
        rng = random.Random(seed + EVAL_SEED_OFFSET)
        self._eval: list[tuple[int, str, int]] = []
        self._held_out: set[tuple[int, str, int]] = set()
        while len(self._eval) < eval_size:  # distinct questions; at most half the space, so this ends
            drawn = self._draw(rng)
            if drawn not in self._held_out:
                self._eval.append(drawn)
                self._held_out.add(drawn)

    def _draw(self, rng: random.Random) -> tuple[int, str, int]:
        (low_a, high_a), (low_b, high_b) = self.ranges
        a, b = rng.randint(low_a, high_a), rng.randint(low_b, high_b)
        return a, rng.choice(self.operations), b

    def make_example(self, question: str, answer: int) -> Example:
        prompt = [{"role": "user", "content": question}] if self.use_chat_template else question
        return Example(prompt=prompt, ground_truth=str(answer), metadata={"question": question})

    def example_for(self, a: int, op: str, b: int) -> Example:
        example = self.make_example(PROMPTS[self.prompt].format(a=a, op=op, b=b), OPERATIONS[op](a, b))
        example.metadata.update(a=a, op=op, b=b)
        return example

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.example_for(*question) for question in self._eval[:count]]
        if split != "train":
            raise ValueError(f"integer: unknown split {split!r}; valid splits: train, eval")
        rng = random.Random(seed)
        drawn: list[tuple[int, str, int]] = []
        while len(drawn) < count:  # at least half the questions are outside the eval split
            question = self._draw(rng)
            if question not in self._held_out:
                drawn.append(question)
        return [self.example_for(*question) for question in drawn]

    def iter_eval(self):
        return iter(self.examples("eval", len(self._eval), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        judgement = judge_integer(completion, example.ground_truth, tagged=self.prompt in TAGGED_PROMPTS)
        strict = float(judgement.format == 1.0 and judgement.answer == 1.0)
        return judgement_verdict(judgement, self.weights, "integer", VERSION, extra={"strict": strict})
