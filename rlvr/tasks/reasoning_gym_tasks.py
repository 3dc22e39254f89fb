"""`reasoning_gym:<name>`: any reasoning-gym dataset, scored by the dataset's own `score_answer`.

`task.name=reasoning_gym:spell_backward`; `task.options` go to `reasoning_gym.create_dataset`
(e.g. `max_word_len: 5`) apart from this task's own keys (`prompt`, `size`, `eval_size`,
`timeout_seconds`). `reasoning_gym:mix` mixes datasets by weight: `datasets: {spell_backward:
0.5, countdown: 0.5}`, per-dataset settings in `configs: {countdown: {...}}`. Components:
`answer` (score_answer of the last `<answer>` span, in [0, 1]), `format` (0.25 for each of
`<think>`, `</think>`, `<answer>`, `</answer>`; its weight is the format weight) and `binary`
(1 when correct and fully formatted). Defaults: answer 1, format 0.1, binary 0.

Some `score_answer` functions pass the answer to Python's `eval` or sympy's `parse_expr`. So an
answer is screened first: without a function call an expression can do nothing but compute,
so an answer that calls anything other than a short list of math functions, or names a dunder,
is refused (`unjudgeable`); what passes is scored in the worker process under a time and
memory limit, so `9**9**9**9` becomes `timeout`.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from typing import Iterator, Optional

from rlvr.tasks.answers import extract_answer_tag
from rlvr.tasks.base import (Example, Verdict, check_count_option, check_seconds_option, resolve_weights,
                             weighted_total)
from rlvr.tasks.grading import DEFAULT_TIMEOUT_SECONDS, require_package
from rlvr.tasks.prompts import COMPLETION_PREFIX, STOP_STRINGS, check_prompt, render_question
from rlvr.tasks.worker import call_with_timeout

VERSION = "1"
TAGS = ("<think>", "</think>", "<answer>", "</answer>")
EVAL_SEED_OFFSET = 1_000_003
# Calls an answer may contain: pure math, nothing with side effects.
SAFE_CALLS = frozenset(
    "sqrt cbrt sin cos tan asin acos atan sinh cosh tanh log ln exp abs Abs floor ceiling ceil "
    "factorial binomial gcd lcm min max round Rational Integer Float".split()
)
# A `(` right after one of these opens a group, it does not call anything.
OPENING_CONTEXT = set("+-*/%=<>,([{:|&^~!@")


def refusal(answer: str) -> Optional[str]:
    """Why `answer` must not reach a scorer that may evaluate it, or None when it is safe.

    Python identifiers are NFKC-normalised, so the check runs on the normalised text (fullwidth
    letters cannot sneak a name past it). Backslash continuations and comments before a `(` are
    seen through: the character that decides is the last one before the `(` that is not blank.
    """
    text = unicodedata.normalize("NFKC", answer)
    if "__" in text:
        return "refused: contains '__'"
    for match in re.finditer(r"\(", text):
        before = re.sub(r"[\s\\]+$", "", text[: match.start()])
        if not before or before[-1] in OPENING_CONTEXT:
            continue
        token = re.search(r"(?<![\w.])\w+$", before)
        if token and (token.group(0)[0].isdigit() or token.group(0) in SAFE_CALLS):
            continue
        return f"refused: looks like a call ({before[-20:]}()"
    return None


def tag_format_score(text: str) -> float:
    return sum(0.25 for tag in TAGS if tag in text)


class ReasoningGymTask:
    name = "reasoning_gym"
    component_names = ("answer", "format", "binary")
    default_weights = {"answer": 1.0, "format": 0.1, "binary": 0.0}

    def __init__(self, dataset: Optional[str] = None, reward_weights=None, use_chat_template=True, seed=0,
                 prompt="r1_zero", size=100_000, eval_size=200, timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
                 datasets: Optional[dict] = None, configs: Optional[dict] = None, **config):
        if not dataset:
            raise ValueError("reasoning_gym: name the dataset, e.g. task.name=reasoning_gym:spell_backward "
                             "(or reasoning_gym:mix with task.options.datasets)")
        self.name = f"reasoning_gym:{dataset}"
        require_package("reasoning_gym", self.name)
        check_prompt(self.name, prompt, use_chat_template)
        if dataset == "mix":
            if not datasets or config:
                raise ValueError("reasoning_gym:mix: set task.options.datasets {name: weight} and put settings "
                                 "in task.options.configs {name: {...}}")
            self.mix = {str(k): float(v) for k, v in datasets.items()}
            self.configs = {name: dict((configs or {}).get(name, {})) for name in self.mix}
        else:
            if datasets or configs:
                raise ValueError(f"{self.name}: `datasets` and `configs` are for reasoning_gym:mix")
            self.mix, self.configs = {dataset: 1.0}, {dataset: dict(config)}
        if not all(0 < w < math.inf for w in self.mix.values()):
            raise ValueError(f"{self.name}: mixture weights must be finite and > 0, got {self.mix}")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template, self.prompt = use_chat_template, prompt
        self.stop_strings = STOP_STRINGS[prompt]
        self.completion_prefix = COMPLETION_PREFIX[prompt]
        self.timeout_seconds = check_seconds_option(self.name, "timeout_seconds", timeout_seconds)
        self.size, self.seed = check_count_option(self.name, "size", size, minimum=1), seed
        check_count_option(self.name, "eval_size", eval_size)
        self._train = {name: self._create(name, seed, self.size) for name in self.mix}
        self._held_out = self._draw_eval(int(eval_size))
        self._held_out_questions = {entry["question"] for _, entry in self._held_out}

    def _create(self, name: str, seed: int, size: int):
        import reasoning_gym

        try:
            return reasoning_gym.create_dataset(name, **{**self.configs[name], "seed": seed, "size": size})
        except (TypeError, ValueError, AssertionError) as exc:
            raise ValueError(f"{self.name}: cannot create reasoning-gym dataset {name!r}: {exc}") from None

    def _draw_eval(self, count: int) -> list[tuple[str, dict]]:
        rng = random.Random(self.seed + EVAL_SEED_OFFSET)
        names = list(self.mix)
        picks = [rng.choices(names, weights=[self.mix[n] for n in names])[0] for _ in range(count)]
        sources = {n: self._create(n, self.seed + EVAL_SEED_OFFSET, max(1, picks.count(n))) for n in names}
        next_index = dict.fromkeys(names, 0)
        drawn = []
        for name in picks:
            drawn.append((name, sources[name][next_index[name]]))
            next_index[name] += 1
        return drawn

    def make_example(self, name: str, entry: dict) -> Example:
        return Example(prompt=render_question(self.prompt, entry["question"], self.use_chat_template),
                       ground_truth=entry["answer"], metadata={"source_dataset": name, "entry": entry})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.make_example(name, entry) for name, entry in self._held_out[:count]]
        if split != "train":
            raise ValueError(f"{self.name}: unknown split {split!r}; valid splits: train, eval")
        rng = random.Random(seed)
        names = list(self.mix)
        drawn: list[Example] = []
        for _ in range(100 * max(1, count)):
            if len(drawn) == count:
                break
            name = rng.choices(names, weights=[self.mix[n] for n in names])[0]
            entry = self._train[name][rng.randrange(self.size)]
            if entry["question"] not in self._held_out_questions:
                drawn.append(self.make_example(name, entry))
        if len(drawn) < count:
            raise ValueError(f"{self.name}: could not draw {count} training questions outside the eval split")
        return drawn

    def iter_eval(self) -> Iterator[Example]:
        return iter(self.examples("eval", len(self._held_out), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        name = example.metadata["source_dataset"]
        verifier = f"reasoning_gym/{name}"
        format_score = tag_format_score(self.completion_prefix + completion)
        answer = extract_answer_tag(completion)
        if answer is None:
            components = {"answer": 0.0, "format": format_score, "binary": 0.0}
            status, detail, correct = "ok", "no <answer>...</answer> span", False
        elif (reason := refusal(answer)) is not None:
            components = {"answer": math.nan, "format": format_score, "binary": math.nan}
            status, detail, correct = "unjudgeable", reason, False
        else:
            result = call_with_timeout("reasoning_gym_score", name, self.configs[name], answer,
                                       example.metadata["entry"], timeout=self.timeout_seconds)
            if result.status != "ok":
                components = {"answer": math.nan, "format": format_score, "binary": math.nan}
                status, detail, correct = result.status, result.detail, False
            else:
                value = float(result.value)
                correct = value >= 1.0
                components = {"answer": value, "format": format_score,
                              "binary": float(correct and format_score == 1.0)}
                status, detail = "ok", f"answer={answer[:200]!r}"
        return Verdict(components=components, total=weighted_total(components, self.weights), status=status,
                       verifier=verifier, version=VERSION, correct=correct, detail=detail)
