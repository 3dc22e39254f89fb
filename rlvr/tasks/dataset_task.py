"""`dataset`: your own question-answer rows, a prompt template, and a verifier by name or your own function.

Rows come from a jsonl / json / parquet / csv file or a Hugging Face dataset (`path`, or
`train_path` / `eval_path`, or `dataset`; held-out split as in `gsm8k`). `prompt_field` and
`answer_field` name the columns; `prompt_template` (`"Q: {question}"`, any column by name, or
`r1_zero`) and `system_prompt` shape the prompt. `verifier` is a name from `VERIFIERS`
(`rlvr.tasks.verification.verifiers`) or `module:function` / `file.py:function`: your function is called in
this process, with the completion text, as `fn(completion, ground_truth)` or
`fn(completion, ground_truth, row)`, and returns a number (the `answer` component; NaN when it
cannot judge; correct when >= 1) or a `Verdict`. Its exceptions are not caught here: they reach
the caller of `score`, like those of any task. Every row is checked when the data is read.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import string
from typing import Any, Callable, Optional

from rlvr.tasks.task import Example, Verdict, weighted_total
from rlvr.tasks.external import FORMS, describe_signature, load_reference, split_reference
from rlvr.tasks.verification.grading import DEFAULT_TIMEOUT_SECONDS, judgement_verdict, require_package
from rlvr.tasks.problems import Problem, ProblemTask, load_splits
from rlvr.tasks.prompts import R1_ZERO_TEMPLATE
from rlvr.tasks.verification.verifiers import VERIFIERS, NamedVerifier

NAME = "dataset"
R1_ZERO = "r1_zero"  # prompt_template: DeepSeek R1-Zero's raw-text template around the prompt field


def template_fields(template: str) -> list[str]:
    """The column names a `str.format` template refers to (`{question}`, `{meta[level]}` -> meta)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{NAME}: task.options.prompt_template {template!r}: {exc} "
                         "(write a literal brace as {{ or }})") from None
    fields = []
    for _, field_name, _, _ in parsed:
        if field_name is None:
            continue
        head = field_name.split(".")[0].split("[")[0]
        if not head or head.isdigit():
            raise ValueError(f"{NAME}: task.options.prompt_template {template!r}: name a column in every "
                             "{...}, e.g. {question}")
        fields.append(head)
    return fields


def prompt_text_template(prompt_template: Optional[str], prompt_field: str) -> str:
    """The `str.format` template of the prompt text: the user's, R1-Zero's, or the prompt field alone."""
    if prompt_template == R1_ZERO:
        return R1_ZERO_TEMPLATE.replace("{question}", "{" + prompt_field + "}")
    return prompt_template if prompt_template is not None else "{" + prompt_field + "}"


class FunctionVerifier:
    """A user function `fn(completion, ground_truth[, row])` returning a number or a `Verdict`."""

    def __init__(self, reference: str, component_names: tuple[str, ...]):
        what = f"{NAME}: task.options.verifier {reference!r}"
        self.reference = reference
        self.function: Callable = load_reference(reference, what)
        if not callable(self.function):
            raise ValueError(f"{what} is a {type(self.function).__name__}, not a function")
        self.passes_row = _binds(self.function, 3)
        if not self.passes_row and not _binds(self.function, 2):
            raise ValueError(f"{what}: a verifier is called as fn(completion, ground_truth) or "
                             f"fn(completion, ground_truth, row); this one is {describe_signature(self.function)}")
        self.component_names = component_names

    def verdict(self, completion: str, example: Example, weights: dict[str, float]) -> Verdict:
        args = (completion, example.ground_truth) + ((example.metadata["row"],) if self.passes_row else ())
        result = self.function(*args)
        if isinstance(result, Verdict):
            if set(result.components) != set(self.component_names):
                raise ValueError(f"verifier {self.reference} returned components {sorted(result.components)}; "
                                 f"declared: {list(self.component_names)} (task.options.components)")
            return dataclasses.replace(result, total=weighted_total(result.components, weights))
        if isinstance(result, numbers.Real):
            value = float(result)
            components = {"answer": value}
            return Verdict(components=components, total=weighted_total(components, weights),
                           status="unjudgeable" if math.isnan(value) else "ok", verifier=self.reference,
                           version="user", correct=value >= 1.0)
        raise TypeError(f"verifier {self.reference} returned {type(result).__name__}; it must return a number "
                        "or a rlvr.tasks.Verdict")


def _binds(function: Callable, count: int) -> bool:
    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): assume the two-argument form
        return count == 2
    return True


class DatasetTask(ProblemTask):
    name = NAME
    version = "1"

    @staticmethod
    def chat_template_for(options: dict) -> bool:
        """Raw text only for `prompt_template: r1_zero` (`rlvr eval --chat-template auto`)."""
        return options.get("prompt_template") != R1_ZERO

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, path=None, train_path=None,
                 eval_path=None, dataset=None, dataset_config=None, train_split="train", eval_split="test",
                 eval_size=None, split_seed=0, prompt_field="question", answer_field="answer",
                 system_prompt: Optional[str] = None, prompt_template: Optional[str] = None,
                 verifier: str = "exact", components: Optional[list[str]] = None,
                 stop_strings: Optional[list[str]] = None, timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
        self.named: Optional[NamedVerifier] = None
        self.custom: Optional[FunctionVerifier] = None
        if verifier in VERIFIERS:
            if components is not None:
                raise ValueError(f"{NAME}: task.options.components is for a verifier function of your own; "
                                 f"{verifier!r} gives answer and format")
            self.named = VERIFIERS.get(verifier)
            if self.named.package:
                require_package(self.named.package, f"{NAME} (verifier {verifier})")
            self.version = self.named.version
        elif split_reference(verifier) is not None:
            names = tuple(components) if components else ("answer",)
            self.custom = FunctionVerifier(verifier, names)
            self.component_names = names
            self.primary_component = "answer" if "answer" in names else names[0]
            self.extracts_answers = False  # unless the function's Verdicts set answer: no maj@k
            self.default_weights = dict.fromkeys(names, 1.0)
            self.version = "user"
        else:
            raise KeyError(f"{NAME}: unknown verifier {verifier!r}; valid choices: {', '.join(VERIFIERS.names())}, "
                           f"or a function of your own as {FORMS.replace('Name', 'function')}")
        self.verifier = verifier
        if prompt_template == R1_ZERO and use_chat_template:
            raise ValueError(f"{NAME}: prompt_template r1_zero is raw text; set task.use_chat_template=false")
        self.prompt_field, self.answer_field = prompt_field, answer_field
        self.system_prompt = system_prompt
        self.template = prompt_text_template(prompt_template, prompt_field)
        self.template_fields = template_fields(self.template)
        train, held_out = load_splits(
            NAME, self.to_problem, path=path, train_path=train_path, eval_path=eval_path, dataset=dataset,
            dataset_config=dataset_config, train_split=train_split, eval_split=eval_split, eval_size=eval_size,
            split_seed=split_seed)
        if not train and not held_out:
            raise ValueError(f"{NAME}: the data source holds no rows")
        super().__init__(train, held_out, reward_weights=reward_weights, use_chat_template=use_chat_template,
                         prompt=R1_ZERO if prompt_template == R1_ZERO else "question_only",
                         timeout_seconds=timeout_seconds)
        if stop_strings is not None:
            self.stop_strings = tuple(stop_strings)

    def to_problem(self, record: dict) -> Problem:
        for field, role in ((self.prompt_field, "prompt_field"), (self.answer_field, "answer_field")):
            if field not in record:
                raise ValueError(f"no field {field!r} (task.options.{role}); fields: {', '.join(map(str, record))}")
            if record[field] is None or isinstance(record[field], str) and not record[field].strip():
                raise ValueError(f"field {field!r} (task.options.{role}) is empty")
        missing = [f for f in self.template_fields if f not in record]
        if missing:
            raise ValueError(f"no field {missing[0]!r} (used in task.options.prompt_template); "
                             f"fields: {', '.join(map(str, record))}")
        truth = record[self.answer_field]
        if self.named is not None and self.named.check_truth is not None:
            self.named.check_truth(truth)
        try:
            text = self.template.format(**record)
        except (KeyError, IndexError, AttributeError, ValueError) as exc:
            raise ValueError(f"task.options.prompt_template {self.template!r} does not fit this row: "
                             f"{type(exc).__name__}: {exc}") from None
        return Problem(question=str(record[self.prompt_field]), ground_truth=truth,
                       metadata={"row": record, "prompt_text": text})

    def make_example(self, problem: Problem, index: int, split: str) -> Example:
        text = problem.metadata["prompt_text"]
        if self.use_chat_template:
            system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            prompt: Any = system + [{"role": "user", "content": text}]
        else:
            prompt = f"{self.system_prompt}\n\n{text}" if self.system_prompt else text
        metadata = {**problem.metadata, "question": problem.question, "index": index, "split": split}
        return Example(prompt=prompt, ground_truth=problem.ground_truth, metadata=metadata)

    def score(self, completion: str, example: Example) -> Verdict:
        if self.custom is not None:
            return self.custom.verdict(completion, example, self.weights)
        judgement = self.named.judge(completion, example.ground_truth, self.timeout_seconds)
        return judgement_verdict(self.require_produced_answer(judgement, completion, example), self.weights,
                                 self.verifier, self.version)
