"""Answer grading for math word problems, and the R1-Zero / question-only reward functions.

`grade_math` tries a fast exact path first (normalised strings, exact rationals) and only then
asks `math-verify` for symbolic equivalence, in the worker process under a hard time limit (see
`rlvr.tasks.verification.worker`), so a completion that makes the parser hang becomes `timeout`.
`grade_number` (GSM8K) is exact rational comparison and needs no symbolic step at all.
The reward functions follow CS336 assignment 5: format needs `</think> <answer>` and
`</answer>`; formatted and correct 1/1/1, formatted but wrong 1/0/0, unformatted 0/0/0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from rlvr.tasks.verification.answers import (
    drop_trailing_prose,
    extract_answer_tag,
    extract_boxed,
    last_number,
    numbers_equal,
    parse_rational,
    strip_number_decorations,
)
from rlvr.tasks.task import Verdict, weighted_total
from rlvr.tasks.verification.worker import call_with_timeout

DEFAULT_TIMEOUT_SECONDS = 5.0  # per symbolic check; math-verify's own default
MAX_ANSWER_CHARS = 2000  # a longer "answer" is not an answer
# A numeral with commas; the bounded repeats keep `findall` linear on a run of commas.
NUMBER_TOKEN_RE = re.compile(r"-?[\d,]{0,80}\.?\d{1,60}")


@dataclass
class Grade:
    """`correct` is None when the check could not finish (`status` says why)."""

    correct: Optional[bool]
    status: str = "ok"  # ok | timeout | error
    detail: str = ""


GroundTruth = Union[str, int, float, Sequence[str]]
Grader = Callable[[str, str], Grade]


def _normalise(text: str) -> str:
    text = strip_number_decorations(text)
    text = re.sub(r"\\[dt]frac", r"\\frac", text).replace("\\displaystyle", "")
    text = re.sub(r"^[a-zA-Z]\s*=\s*", "", text)  # `x = 5` -> `5`
    return re.sub(r"\s+", "", text)


def grade_number(answer: str, ground_truth: str) -> Grade:
    """GSM8K: exact rational comparison of the answer's number with the ground truth's.

    The answer may be a bare numeral (`1,000`, `$18`, `18.0`, `-3`), end in `= N`, or hold one
    number among words (`18 dollars`). Two different numbers (`18 or 20`) are not an answer.
    """
    answer = drop_trailing_prose(extract_boxed(answer) or answer)
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return Grade(False, detail="empty answer" if not answer else "answer too long")
    candidates = [answer, answer.rsplit("=", 1)[-1]]
    numbers = {parse_rational(n) for n in NUMBER_TOKEN_RE.findall(answer.replace(", ", " "))} - {None}
    if len(numbers) == 1:
        candidates.append(str(numbers.pop()))
    for candidate in candidates:
        equal = numbers_equal(candidate, ground_truth)
        if equal is not None:
            return Grade(equal)
    return Grade(False, detail="no single number in the answer")


def grade_math(answer: str, ground_truth: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Grade:
    """MATH: normalised string match, then exact rationals, then math-verify under `timeout`."""
    boxed = extract_boxed(answer)
    answer = drop_trailing_prose(boxed if boxed is not None else answer)
    if not answer:
        return Grade(False, detail="empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
        return Grade(False, detail="answer too long")
    if _normalise(answer) == _normalise(ground_truth):
        return Grade(True, detail="string match")
    equal = numbers_equal(answer, ground_truth)
    if equal is not None:
        return Grade(equal, detail="exact number")
    if several_candidates(answer):
        return Grade(False, detail="several candidate answers")
    result = call_with_timeout("math_verify_equal", _as_latex(ground_truth), _as_latex(answer), timeout=timeout)
    if result.status != "ok":
        return Grade(None, status=result.status, detail=result.detail)
    return Grade(bool(result.value), detail="math-verify")


_PROSE = re.compile(r"\b[A-Za-z]{2,}\s+[A-Za-z]{2,}\b")
_NUMERIC_TOKEN = re.compile(r"\\frac\{[^{}]*\}\{[^{}]*\}|\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?")


def several_candidates(answer: str) -> bool:
    """Prose holding more than one number (`1/2. Or maybe 1/3`): math-verify would pick one of
    them, which would reward hedging, so such an answer is graded wrong before it gets there."""
    if not _PROSE.search(re.sub(r"\\[A-Za-z]+", " ", answer)):
        return False
    return len(set(_NUMERIC_TOKEN.findall(answer))) > 1


def require_package(module: str, task_name: str) -> None:
    """Fail when the task is built, not on every verdict, if an optional package is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ValueError(f"task {task_name!r} needs the {module.replace('_', '-')!r} package: "
                         "pip install 'rlvr[tasks]'")


def _as_latex(text: str) -> str:
    text = strip_number_decorations(text) or text
    return text if "$" in text else f"${text}$"


def grade_any(answer: str, ground_truth: GroundTruth, grader: Grader) -> Grade:
    """Correct if the answer matches any of the ground truths; a timeout wins over "wrong"."""
    truths = [ground_truth] if isinstance(ground_truth, (str, int, float)) else list(ground_truth)
    worst = Grade(False)
    for truth in truths:
        grade = grader(answer, str(truth))
        if grade.correct:
            return grade
        if grade.correct is None:
            worst = grade
    return worst


# ----------------------------------------------------------------------------- reward functions


@dataclass
class Judgement:
    """Format and answer rewards of one completion; `answer` is NaN when it could not be judged."""

    format: float
    answer: float
    status: str = "ok"
    detail: str = ""
    extracted: Optional[str] = None


def judgement_verdict(judgement: Judgement, weights: dict[str, float], verifier: str, version: str,
                      extra: Optional[dict[str, float]] = None) -> Verdict:
    """The verdict of a judgement: components `answer`, `format` (and `extra`), weighted total, the answer found
    (in `detail` and as `Verdict.answer`)."""
    components = {"answer": judgement.answer, "format": judgement.format, **(extra or {})}
    detail = judgement.detail
    if judgement.extracted is not None:
        detail = f"answer={judgement.extracted[:200]!r}" + (f"; {detail}" if detail else "")
    return Verdict(components=components, total=weighted_total(components, weights), status=judgement.status,
                   verifier=verifier, version=version, correct=judgement.answer == 1.0, detail=detail,
                   answer=judgement.extracted)


def r1_zero_formatted(response: str) -> bool:
    return "</think> <answer>" in response and "</answer>" in response


def judge_r1_zero(response: str, ground_truth: GroundTruth, grader: Grader) -> Judgement:
    """Strict R1-Zero format; the answer is the last complete `<answer>...</answer>` span."""
    if not r1_zero_formatted(response):
        return Judgement(0.0, 0.0, detail="unformatted: needs '</think> <answer>' and '</answer>'")
    answer = extract_answer_tag(response)
    if not answer:
        return Judgement(1.0, 0.0, detail="empty <answer></answer>", extracted=answer)
    grade = grade_any(answer, ground_truth, grader)
    if grade.correct is None:
        return Judgement(1.0, math.nan, status=grade.status, detail=grade.detail, extracted=answer)
    return Judgement(1.0, float(grade.correct), detail=grade.detail, extracted=answer)


def question_only_answer(response: str) -> Optional[str]:
    """A free-form response's final answer: `\\boxed{}`, then `<answer>`, then `#### N`, then the last number."""
    for extract in (extract_boxed, extract_answer_tag):
        found = extract(response)
        if found:
            return found
    if "####" in response:
        return response.rsplit("####", 1)[1].strip().split("\n")[0] or None
    return last_number(response)


def judge_question_only(response: str, ground_truth: GroundTruth, grader: Grader) -> Judgement:
    """No format is asked for (format reward 1); the answer is found by `question_only_answer`."""
    answer = question_only_answer(response)
    if not answer:
        return Judgement(1.0, 0.0, detail="no answer found")
    grade = grade_any(answer, ground_truth, grader)
    if grade.correct is None:
        return Judgement(1.0, math.nan, status=grade.status, detail=grade.detail, extracted=answer)
    return Judgement(1.0, float(grade.correct), detail=grade.detail, extracted=answer)


def _as_reward_dict(judgement: Judgement) -> dict[str, float]:
    # The total needs the format, so a formatted completion whose answer timed out has reward NaN.
    reward = judgement.answer if judgement.format == 1.0 else 0.0
    return {"format_reward": judgement.format, "answer_reward": judgement.answer, "reward": reward}


def _default_grader(timeout: float) -> Grader:
    def grader(answer: str, truth: str) -> Grade:
        return grade_math(answer, truth, timeout=timeout)

    return grader


def r1_zero_reward_fn(response: str, ground_truth: GroundTruth, *,
                      timeout: float = DEFAULT_TIMEOUT_SECONDS) -> dict[str, float]:
    """CS336: `{"format_reward", "answer_reward", "reward"}`; answer and reward are NaN on a timeout."""
    return _as_reward_dict(judge_r1_zero(response, ground_truth, _default_grader(timeout)))


def question_only_reward_fn(response: str, ground_truth: GroundTruth, *,
                            timeout: float = DEFAULT_TIMEOUT_SECONDS) -> dict[str, float]:
    """CS336's question-only prompt: format reward always 1, answer from the free-form response."""
    return _as_reward_dict(judge_question_only(response, ground_truth, _default_grader(timeout)))
