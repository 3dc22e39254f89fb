"""`format_copy`: copy an integer into `<answer></answer>` tags.

The smallest task on which a real instruct model visibly learns in minutes on a CPU. Reward
components (each 0 or 1, weighted): `answer` (weight 1.0) the tagged answer is exactly the
integer, `tag` (0.2) the first tagged answer is one integer (an empty, unclosed or echoed tag
pair earns nothing), `strict` (0.1) the whole completion is exactly `<answer>N</answer>`; ceiling
1.3. Eval: exact match, greedy.
"""

from __future__ import annotations

import random
import re

from rlvr.tasks.verification.answers import first_answer_tag
from rlvr.tasks.task import Example, Verdict, check_count_option, resolve_weights, weighted_total

PROMPT = "Copy the number {n} into <answer></answer> tags. Reply with only <answer>{n}</answer> and nothing else."
VERSION = "2"  # 2: `tag` needs one integer in the first tag pair (was: any `<answer>` in the text)
INTEGER = re.compile(r"-?[0-9]{1,40}")
LOW, HIGH = -9999, 9999
# Held-out numbers come from their own stream and are removed from the training stream.
EVAL_SEED_OFFSET = 1_000_003


class FormatCopyTask:
    name = "format_copy"
    component_names = ("answer", "tag", "strict")
    primary_component = "answer"
    extracts_answers = True  # Verdict.answer: the first tagged answer (maj@k votes on it)
    stop_strings: tuple[str, ...] = ()  # the completion ends at EOS
    default_weights = {"answer": 1.0, "tag": 0.2, "strict": 0.1}

    def __init__(self, reward_weights: dict | None = None, use_chat_template: bool = True,
                 eval_size: int = 256, seed: int = 0, low: int = LOW, high: int = HIGH):
        check_count_option(self.name, "eval_size", eval_size)
        for key, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"format_copy: task.options.{key}={value!r} must be an integer")
        if low > high:
            raise ValueError(f"format_copy: low={low} must be <= high={high}")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.low, self.high = low, high
        eval_rng = random.Random(seed + EVAL_SEED_OFFSET)
        self._eval_numbers = [eval_rng.randint(low, high) for _ in range(eval_size)]
        self._held_out = set(self._eval_numbers)

    def make_example(self, number: int) -> Example:
        text = PROMPT.format(n=number)
        prompt = [{"role": "user", "content": text}] if self.use_chat_template else text
        return Example(prompt=prompt, ground_truth=str(number), metadata={"number": number})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.make_example(n) for n in self._eval_numbers[:count]]
        if split != "train":
            raise ValueError(f"format_copy: unknown split {split!r}; valid splits: train, eval")
        rng = random.Random(seed)
        numbers: list[int] = []
        while len(numbers) < count:
            number = rng.randint(self.low, self.high)
            if number not in self._held_out or len(self._held_out) >= self.high - self.low + 1:
                numbers.append(number)
        return [self.make_example(n) for n in numbers]

    def iter_eval(self):
        return iter(self.examples("eval", len(self._eval_numbers), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        target = str(example.ground_truth)
        answer = first_answer_tag(completion)  # linear time, whatever the completion holds
        components = {
            "answer": float(answer == target),
            "tag": float(answer is not None and INTEGER.fullmatch(answer) is not None),
            "strict": float(completion.strip() == f"<answer>{target}</answer>"),
        }
        return Verdict(
            components=components,
            total=weighted_total(components, self.weights),
            status="ok",
            verifier="format_copy",
            version=VERSION,
            correct=answer == target,
            detail="" if answer is not None else "no <answer>...</answer> span",
            answer=answer,
        )
