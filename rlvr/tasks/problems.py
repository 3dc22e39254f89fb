"""What the question-answer tasks (`gsm8k`, `math`, `dataset`) share: data sources, splits, prompts, scoring.

Data comes from local files (`path` with a held-out slice, or `train_path` / `eval_path`;
`train_path` alone is sliced like `path`; jsonl, json, parquet or csv, see `rlvr.tasks.data_files`)
or, only when the user names one, a Hugging Face dataset (`dataset`). A bad row is an error
naming its file and position. The eval split is held out: a training question that also appears
in the eval split is dropped. Reward components:
`answer` (1 correct, 0 wrong, NaN when the check timed out) and `format` (1 when the prompt's
format was followed; with r1_zero only for a non-empty answer span of the model's own, not one
copied from the prompt); default weights answer 1, format 0, so the format alone earns nothing.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from rlvr.tasks.verification.answers import produced_answer
from rlvr.tasks.task import (Example, Verdict, check_count_option, check_seconds_option, prompt_text, train_indices,
                             resolve_weights)
from rlvr.tasks.data_files import Row, hf_rows, read_rows
from rlvr.tasks.verification.grading import (DEFAULT_TIMEOUT_SECONDS, Grader, Judgement, judge_question_only,
                                             judge_r1_zero, judgement_verdict)
from rlvr.tasks.prompts import (ANSWER_AFTER, DEFAULT_PROMPT, STOP_STRINGS, check_prompt,
                               prompt_uses_chat_template, render_question)


@dataclass
class Problem:
    question: str
    ground_truth: Any
    metadata: dict = field(default_factory=dict)


class Problems(Sequence):
    """Problems made on demand from rows: a data file's rows are read again by index, never all held.

    `positions` are the indices (into `rows`) of the rows that make a problem, in order;
    `held_out_duplicates` counts the training rows dropped because their question is held out.
    """

    def __init__(self, rows: Sequence[Row], to_problem: Callable[[dict], Optional[Problem]], positions: Sequence[int],
                 held_out_duplicates: int = 0):
        self.rows, self.to_problem = rows, to_problem
        self.positions = array("q", positions)  # 8 bytes a problem
        self.held_out_duplicates = held_out_duplicates

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.subset(range(len(self))[index])
        return self.to_problem(self.rows[self.positions[index]].record)

    def __iter__(self) -> Iterator[Problem]:
        """In order, in one pass over the rows when the positions ascend (as every split's do)."""
        if any(later <= earlier for earlier, later in zip(self.positions, self.positions[1:])):
            yield from (self[index] for index in range(len(self)))
            return
        wanted = iter(self.positions)
        target = next(wanted, None)
        for position, row in enumerate(self.rows):
            if target is None:
                return
            if position == target:
                yield self.to_problem(row.record)
                target = next(wanted, None)

    def subset(self, indices, held_out_duplicates: int = 0) -> "Problems":
        """The problems at `indices` (positions into this sequence), in that order."""
        return Problems(self.rows, self.to_problem, [self.positions[i] for i in indices], held_out_duplicates)


def _convert(rows: Sequence[Row], to_problem: Callable[[dict], Optional[Problem]]) -> Problems:
    """Problems from rows, each row checked once now; a record the task cannot read is an error naming where it is."""
    positions = []
    for position, row in enumerate(rows):
        try:
            problem = to_problem(row.record)
        except ValueError as exc:
            raise ValueError(f"{row.where}: {exc}") from None
        if problem is not None:
            positions.append(position)
    return Problems(rows, to_problem, positions)


def check_split_options(task_name: str, eval_size, split_seed) -> None:
    """The split options' ranges, checked before any data or model is loaded."""
    if eval_size is not None:  # null: 10% of `path` (or of a lone `train_path`), all of `eval_path`
        check_count_option(task_name, "eval_size", eval_size)
    check_count_option(task_name, "split_seed", split_seed)


def _hold_out(problems: Problems, eval_size: Optional[int], split_seed: int) -> tuple[Problems, Problems]:
    """(train, held out): a seeded `eval_size` slice (default 10%, at least 1) held out of one list."""
    size = eval_size if eval_size is not None else max(1, len(problems) // 10)
    order = list(range(len(problems)))
    random.Random(split_seed).shuffle(order)
    held = set(order[:size])
    return problems.subset([i for i in range(len(problems)) if i not in held]), problems.subset(sorted(held))


# The keywords of `load_splits` that name local data files.
DATA_FILE_OPTIONS = ("path", "train_path", "eval_path")


def load_splits(task_name: str, to_problem: Callable[[dict], Optional[Problem]], *, path=None, train_path=None,
                eval_path=None, dataset=None, dataset_config=None, train_split="train", eval_split="test",
                eval_size=None, split_seed=0) -> tuple[Problems, Problems]:
    """(train, eval) problems. With one `path`, a seeded `eval_size` slice (default 10%) is held out.

    `train_path` without `eval_path` is read like `path`: a slice is held out (and a note says so),
    so a run never evaluates on nothing or on its own training questions; `eval_size=0` keeps all.
    """
    check_split_options(task_name, eval_size, split_seed)
    sources = [bool(path), bool(train_path or eval_path), bool(dataset)]
    if sum(sources) != 1:
        raise ValueError(
            f"{task_name}: give exactly one data source in task.options: `path` (one file, a slice held out "
            "for eval), `train_path` and/or `eval_path` (data files), or `dataset` (a Hugging Face dataset name)"
        )
    one_file = bool(path) or (bool(train_path) and not eval_path)  # a slice of it is held out
    if dataset:
        none = Problems([], to_problem, [])
        train = _convert(hf_rows(dataset, dataset_config, train_split), to_problem) if train_split else none
        held_out = _convert(hf_rows(dataset, dataset_config, eval_split), to_problem) if eval_split else none
    elif one_file:
        train, held_out = _hold_out(_convert(read_rows(path or train_path), to_problem), eval_size, split_seed)
        if not path:
            print(f"note: {task_name}: no eval_path given: {len(held_out)} problems of train_path are held out "
                  "for eval (task.options.eval_size sets how many; eval_path names a separate file)",
                  file=sys.stderr)
    else:
        train = _convert(read_rows(train_path), to_problem) if train_path else Problems([], to_problem, [])
        held_out = _convert(read_rows(eval_path), to_problem)
    if eval_size is not None and not one_file:
        held_out = held_out[:eval_size]
    eval_questions = {p.question for p in held_out}
    kept = [i for i, problem in enumerate(train) if problem.question not in eval_questions]
    return train.subset(kept, held_out_duplicates=len(train) - len(kept)), held_out


class ProblemTask:
    """A question with a checkable final answer, under the `r1_zero` or `question_only` prompt."""

    name = "problems"
    verifier = "problems"
    version = "1"
    # `rlvr eval --chat-template auto`: raw text for a raw-text prompt (`r1_zero`, the default).
    chat_template_for = staticmethod(prompt_uses_chat_template)
    component_names = ("answer", "format")
    primary_component = "answer"
    extracts_answers = True  # Verdict.answer: the answer span judged (maj@k votes on it)
    default_weights = {"answer": 1.0, "format": 0.0}
    # The task.options that name local data files (`load_splits`), checked before anything heavy is imported.
    data_file_options = DATA_FILE_OPTIONS

    def __init__(self, train: Sequence[Problem], held_out: Sequence[Problem], *, reward_weights=None,
                 use_chat_template=True, prompt=DEFAULT_PROMPT, timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
        check_prompt(self.name, prompt, use_chat_template)
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.prompt = prompt
        self.stop_strings = STOP_STRINGS[prompt]
        self.timeout_seconds = check_seconds_option(self.name, "timeout_seconds", timeout_seconds)
        self.train, self.held_out = train, held_out

    def grader(self) -> Grader:
        raise NotImplementedError

    def make_example(self, problem: Problem, index: int, split: str) -> Example:
        prompt = render_question(self.prompt, problem.question, self.use_chat_template)
        metadata = {**problem.metadata, "question": problem.question, "index": index, "split": split}
        return Example(prompt=prompt, ground_truth=problem.ground_truth, metadata=metadata)

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.make_example(p, i, "eval") for i, p in enumerate(self.held_out[:count])]
        if split != "train":
            raise ValueError(f"{self.name}: unknown split {split!r}; valid splits: train, eval")
        if not self.train:
            raise ValueError(self._no_training_problems())
        indices = train_indices(count, len(self.train), seed)
        return [self.make_example(self.train[i], i, "train") for i in indices]

    def _no_training_problems(self) -> str:
        dropped = getattr(self.train, "held_out_duplicates", 0)
        if not dropped:
            return f"{self.name}: no training problems (set task.options.path or train_path)"
        return (f"{self.name}: no training problems: all {dropped} training rows ask a question of the held-out "
                "(eval) split and were dropped as its duplicates, so that a run never trains on what it is "
                "evaluated on; give training rows whose questions differ from the eval rows (task.options.train_path "
                "and eval_path), or hold out fewer rows (task.options.eval_size)")

    def iter_eval(self) -> Iterator[Example]:
        return iter(self.examples("eval", len(self.held_out), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        judge = judge_r1_zero if self.prompt == "r1_zero" else judge_question_only
        try:
            judgement = judge(completion, example.ground_truth, self.grader())
        except Exception as exc:  # noqa: BLE001 - a verifier bug must not stop a run
            return Verdict(components={"answer": float("nan"), "format": float("nan")}, total=float("nan"),
                           status="error", verifier=self.verifier, version=self.version,
                           detail=f"{type(exc).__name__}: {exc}")
        return judgement_verdict(self.require_produced_answer(judgement, completion, example), self.weights,
                                 self.verifier, self.version)

    def require_produced_answer(self, judgement: Judgement, completion: str, example: Example) -> Judgement:
        """r1_zero: the format counts only for a non-empty answer span after `</think>` that is not copied
        from the prompt (`produced_answer`); the answer is judged as before."""
        after = ANSWER_AFTER[self.prompt]
        if self.prompt != "r1_zero" or judgement.format != 1.0:
            return judgement
        if produced_answer(completion, prompt_text(example.prompt), after=after) is not None:
            return judgement
        return dataclasses.replace(judgement, format=0.0,
                                   detail="; ".join(filter(None, [judgement.detail, "no answer span of its own"])))
