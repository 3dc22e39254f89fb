"""`math`: competition problems (MATH style) with a LaTeX final answer, judged by math-verify.

Data: jsonl records with `problem` and either `answer` or a `solution` containing `\\boxed{}`
(nested braces handled), optional `level` ("Level 5" or 5) and `type`/`subject`; from
`task.options.path`, `train_path` / `eval_path`, or a Hugging Face `dataset` name. Filters:
`levels` (e.g. [5], the common hard subset) and `subjects` (e.g. [Algebra]). Equivalence: a
fast normalised-string and exact-number path, then math-verify (0.5 = 1/2 = \\frac12, units and
`\\%` dropped) in a worker process under `timeout_seconds` (a hang becomes `timeout`).
"""

from __future__ import annotations

import re
from typing import Optional

from rlvr.tasks.verification.answers import extract_boxed
from rlvr.tasks.verification.grading import DEFAULT_TIMEOUT_SECONDS, Grade, Grader, grade_math, require_package
from rlvr.tasks.problems import Problem, ProblemTask, load_splits
from rlvr.tasks.prompts import DEFAULT_PROMPT


def _level(value) -> Optional[int]:
    match = re.search(r"\d+", str(value)) if value is not None else None
    return int(match.group(0)) if match else None


def _subject(value) -> str:
    return re.sub(r"[\s_-]+", "_", str(value or "")).strip("_").lower()


class MathTask(ProblemTask):
    name = "math"
    verifier = "math_verify"
    version = "2"  # 2: with r1_zero the format needs an answer span of the model's own
    # The answer form `rlvr check --reward` uses under `question_only`, which asks for none: MATH
    # solutions end in `\\boxed{}`, and a bare LaTeX answer is read by its last number.
    unasked_answer_format = "boxed"

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, prompt=DEFAULT_PROMPT,
                 path=None, train_path=None, eval_path=None, dataset=None, dataset_config=None,
                 train_split="train", eval_split="test", eval_size=None, split_seed=0,
                 levels=None, subjects=None, timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
        require_package("math_verify", self.name)
        self.levels = None if levels is None else {
            _level(v) for v in (levels if isinstance(levels, list) else [levels])}
        self.subjects = None if subjects is None else {
            _subject(v) for v in (subjects if isinstance(subjects, list) else [subjects])}
        self.skipped = 0  # records without an extractable answer
        train, held_out = load_splits(
            self.name, self.to_problem, path=path, train_path=train_path, eval_path=eval_path, dataset=dataset,
            dataset_config=dataset_config, train_split=train_split, eval_split=eval_split,
            eval_size=eval_size, split_seed=split_seed,
        )
        super().__init__(train, held_out, reward_weights=reward_weights, use_chat_template=use_chat_template,
                         prompt=prompt, timeout_seconds=timeout_seconds)

    def to_problem(self, record: dict) -> Optional[Problem]:
        question = record.get("problem", record.get("question"))
        if question is None:
            raise ValueError(f"math: a record needs a 'problem' field, got {sorted(record)}")
        level = _level(record.get("level"))
        subject = _subject(record.get("type", record.get("subject")))
        if self.levels is not None and level not in self.levels:
            return None
        if self.subjects is not None and subject not in self.subjects:
            return None
        answer = record.get("answer")
        if answer is None:
            answer = extract_boxed(str(record.get("solution", "")))
        if answer is None or not str(answer).strip():
            self.skipped += 1
            return None
        return Problem(question=question, ground_truth=str(answer).strip(),
                       metadata={"level": level, "subject": subject})

    def grader(self) -> Grader:
        timeout = self.timeout_seconds

        def grade(answer: str, truth: str) -> Grade:
            return grade_math(answer, truth, timeout=timeout)

        return grade
