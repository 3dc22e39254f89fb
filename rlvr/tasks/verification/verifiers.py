"""Verifiers by name: how an answer is found in a completion and compared with the ground truth.

The `dataset` task picks one with `task.options.verifier`. Each is built from the graders the
`gsm8k`, `math` and `integer` tasks use (`rlvr.tasks.verification.grading`, `rlvr.tasks.verification.answers`), gives a
`Judgement` (`answer` 1 / 0 / NaN when it could not be judged, `format`), and may check each
ground truth when the data is read, so a bad row fails before any model loads. A ground truth
may be a list: the answer is correct when it matches any of them. None of them runs model
output as code; the symbolic step of `math` runs in the worker process under a time limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from rlvr.registry import Registry
from rlvr.tasks.verification.answers import extract_answer_tag, parse_rational
from rlvr.tasks.verification.grading import (GroundTruth, Grade, Judgement, grade_math, grade_number,
                                             judge_question_only, judge_r1_zero)
from rlvr.tasks.integer import judge_integer, parse_integer_truth


@dataclass(frozen=True)
class NamedVerifier:
    """judge(completion, ground_truth, timeout_seconds) -> Judgement.

    check_truth: raises ValueError for a ground truth this verifier cannot compare with.
    package: an optional package it needs, checked when the task is built.
    """

    description: str
    judge: Callable[[str, GroundTruth, float], Judgement]
    version: str = "1"
    check_truth: Optional[Callable[[GroundTruth], None]] = None
    package: Optional[str] = None


def _truths(ground_truth: GroundTruth) -> list:
    return list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]


def _check_number(ground_truth: GroundTruth) -> None:
    for truth in _truths(ground_truth):
        if parse_rational(str(truth)) is None:
            raise ValueError(f"ground truth {truth!r} is not a number (verifier `number`; `math` compares expressions)")


def _check_exact(ground_truth: GroundTruth) -> None:
    """A text or a finite number (or a non-empty list of them): what `exact` can compare a completion with."""
    truths = _truths(ground_truth)
    if not truths:
        raise ValueError("ground truth is an empty list: no answer can equal it (verifier `exact`)")
    for truth in truths:
        if isinstance(truth, float) and not math.isfinite(truth):
            raise ValueError(f"ground truth {truth!r} is not a finite number: no completion text equals it "
                             "(verifier `exact` compares text; write the answer as a string)")
        if not isinstance(truth, (str, int, float)):
            raise ValueError(f"ground truth {truth!r} is a {type(truth).__name__}; verifier `exact` compares text "
                             "with a string or a number, or a list of them (any one may match)")


def _check_integer(ground_truth: GroundTruth) -> None:
    for truth in _truths(ground_truth):
        parse_integer_truth(truth)


def _math_grader(timeout: float) -> Callable[[str, str], Grade]:
    def grade(answer: str, truth: str) -> Grade:
        return grade_math(answer, truth, timeout=timeout)

    return grade


def judge_exact(completion: str, ground_truth: GroundTruth) -> Judgement:
    """The `<answer>` span if there is one, else the whole completion, stripped, equals a ground truth."""
    tagged = extract_answer_tag(completion)
    answer = (tagged if tagged is not None else completion).strip()
    correct = any(answer == str(truth).strip() for truth in _truths(ground_truth))
    return Judgement(format=1.0, answer=float(correct), extracted=answer)


def judge_any_integer(completion: str, ground_truth: GroundTruth) -> Judgement:
    """`judge_integer` against each ground truth: correct if any matches."""
    judgements = [judge_integer(completion, truth) for truth in _truths(ground_truth)]
    return next((j for j in judgements if j.answer == 1.0), judgements[0])


VERIFIERS: Registry[NamedVerifier] = Registry("verifier")
VERIFIERS.add("exact", NamedVerifier(
    "the <answer> span (or the whole completion), stripped, equals the ground truth as text",
    lambda completion, truth, timeout: judge_exact(completion, truth), check_truth=_check_exact))
VERIFIERS.add("integer", NamedVerifier(
    "the last integer (in <answer> tags when present) equals the truth; format: only an integer",
    lambda completion, truth, timeout: judge_any_integer(completion, truth), check_truth=_check_integer))
VERIFIERS.add("number", NamedVerifier(
    "free-form answer (\\boxed{}, <answer>, #### N, else the last number) as an exact rational, as gsm8k",
    lambda completion, truth, timeout: judge_question_only(completion, truth, grade_number), check_truth=_check_number))
VERIFIERS.add("math", NamedVerifier(
    "free-form answer compared as math: normalised text, exact rationals, then math-verify, as the math task",
    lambda completion, truth, timeout: judge_question_only(completion, truth, _math_grader(timeout)),
    package="math_verify"))
VERIFIERS.add("r1_zero", NamedVerifier(
    "R1-Zero format ('</think> <answer>' ... '</answer>', else 0) and the <answer> compared as math",
    lambda completion, truth, timeout: judge_r1_zero(completion, truth, _math_grader(timeout)),
    package="math_verify"))
VERIFIERS.add("r1_zero_number", NamedVerifier(
    "R1-Zero format and the <answer> compared as an exact rational number, as gsm8k with r1_zero",
    lambda completion, truth, timeout: judge_r1_zero(completion, truth, grade_number), check_truth=_check_number))

