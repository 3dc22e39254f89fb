"""`reasoning_gym:<name>`: any reasoning-gym dataset, scored by the dataset's own `score_answer`.

`task.name=reasoning_gym:spell_backward`; `task.options` go to `reasoning_gym.create_dataset`
(e.g. `max_word_len: 5`) apart from this task's own keys (`prompt`, `size`, `eval_size`,
`timeout_seconds`). `reasoning_gym:mix` mixes datasets by weight: `datasets: {spell_backward:
0.5, countdown: 0.5}`, per-dataset settings in `configs: {countdown: {...}}`. Components:
`answer` (score_answer of the last `<answer>` span, in [0, 1]; no partial credit for an answer that
only contains the oracle, which the default scorer pays, and none at all where a scorer's partial
scores are paid for wrong answers: `ANSWER_CREDIT`), `format` (1 when that span is an
answer of the model's own: non-empty, after `</think>` with r1_zero, and not a span copied from
the prompt such as R1-Zero's `<answer> answer here </answer>`; else 0) and `binary` (1 when
correct and formatted). Defaults: answer 1, format 0.1, binary 0.

Nine `score_answer` functions pass the answer to Python's `eval` or sympy's `parse_expr`. So
the worker first parses the answer into data of the shape that dataset's scorer expects and
hands the scorer only the canonical re-rendering of that data
(`rlvr.tasks.reasoning_gym_answers`); an answer that does not parse is `unjudgeable`. Scoring
runs in the sandboxed worker process under a time and memory limit, so `9**9**9**9` in an
antiderivative becomes `timeout`. Only datasets whose scorers have been audited can be used.
"""

from __future__ import annotations

import math
import random
from typing import Iterator, Optional

from rlvr.tasks.verification.answers import extract_answer_tag, produced_answer
from rlvr.tasks.task import (Example, Verdict, check_count_option, check_seconds_option, prompt_text,
                             resolve_weights, weighted_total)
from rlvr.tasks.verification.grading import DEFAULT_TIMEOUT_SECONDS, require_package
from rlvr.tasks.prompts import (ANSWER_AFTER, DEFAULT_PROMPT, STOP_STRINGS, check_prompt,
                               prompt_uses_chat_template, render_question)
from rlvr.tasks.reasoning_gym_demos import demonstration_text
from rlvr.tasks.reasoning_gym_answers import answer_credit, check_audited, reference_answer
from rlvr.tasks.verification.worker import call_with_timeout

# 6: no credit for wrong answers in 19 more datasets (ANSWER_CREDIT), polynomial roots within rounding;
# 5: countdown, puzzle24 (with the puzzle's numbers), spell_backward pay full credit or none;
# 4: no partial credit for an answer that merely contains the oracle; 3: format for an own span only
VERSION = "7"
EVAL_SEED_OFFSET = 1_000_003


class ReasoningGymTask:
    name = "reasoning_gym"
    component_names = ("answer", "format", "binary")
    primary_component = "answer"
    extracts_answers = True  # Verdict.answer: the <answer> span (maj@k votes on it)
    # `rlvr eval --chat-template auto`: raw text for a raw-text prompt (`r1_zero`, the default).
    chat_template_for = staticmethod(prompt_uses_chat_template)
    default_weights = {"answer": 1.0, "format": 0.1, "binary": 0.0}

    def __init__(self, dataset: Optional[str] = None, reward_weights=None, use_chat_template=True, seed=0,
                 prompt=DEFAULT_PROMPT, size=100_000, eval_size=200, timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
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
        for name in self.mix:
            check_audited(name)
        if not all(0 < w < math.inf for w in self.mix.values()):
            raise ValueError(f"{self.name}: mixture weights must be finite and > 0, got {self.mix}")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template, self.prompt = use_chat_template, prompt
        self.stop_strings = STOP_STRINGS[prompt]
        self.answer_after = ANSWER_AFTER[prompt]
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
            hint = "" if isinstance(exc, TypeError) else f" (a smaller task.options.size, now {self.size}, may fit)"
            raise ValueError(f"{self.name}: cannot create reasoning-gym dataset {name!r} of {size} questions: "
                             f"{exc}{hint}") from None

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

    def reference_answer(self, example: Example) -> Optional[str]:
        """An answer the scorer pays in full, where the entry holds none (`rlvr check --reward`'s control)."""
        return reference_answer(example.metadata["source_dataset"], example.metadata["entry"])

    def demonstration(self, example: Example, slip: bool = False) -> list[str]:
        """A right completion written by a program (`rlvr.tasks.reasoning_gym_demos`): the SFT warm-up's data;
        with `slip`, the same working with one step wrong (where the dataset writes one)."""
        text = demonstration_text(example.metadata["source_dataset"], example.metadata["entry"],
                                  opens_think=self.answer_after is not None, slip=slip)
        return [text]

    def iter_eval(self) -> Iterator[Example]:
        return iter(self.examples("eval", len(self._held_out), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        name = example.metadata["source_dataset"]
        verifier = f"reasoning_gym/{name}"
        own = produced_answer(completion, prompt_text(example.prompt), after=self.answer_after)
        format_score = float(own is not None)
        answer = extract_answer_tag(completion)
        if answer is None:
            components = {"answer": 0.0, "format": format_score, "binary": 0.0}
            status, detail, correct = "ok", "no <answer>...</answer> span", False
        else:
            result = call_with_timeout("reasoning_gym_score", name, self.configs[name], answer,
                                       example.metadata["entry"], timeout=self.timeout_seconds)
            refused = result.status == "ok" and "refused" in result.value
            if result.status != "ok" or refused:
                components = {"answer": math.nan, "format": format_score, "binary": math.nan}
                status = "unjudgeable" if refused else result.status
                detail = f"refused: {result.value['refused']}" if refused else result.detail
                correct = False
            else:
                value = answer_credit(name, float(result.value["score"]), result.value["text"],
                                      example.metadata["entry"])
                correct = value >= 1.0
                components = {"answer": value, "format": format_score,
                              "binary": float(correct and format_score == 1.0)}
                status, detail = "ok", f"answer={result.value['text'][:200]!r}"
        return Verdict(components=components, total=weighted_total(components, self.weights), status=status,
                       verifier=verifier, version=VERSION, correct=correct, detail=detail, answer=answer)
