"""Answer extraction, math equivalence and the R1-Zero reward, by table; and the hard time limit.

Expected values are what a person grading the answer would say; each table has wrong answers
next to the right ones, so a grader that says "correct" to everything fails.
"""

import math
import time

import pytest

from rlvr.tasks.verification.answers import drop_trailing_prose, extract_answer_tag, extract_boxed, parse_rational
from rlvr.tasks.verification.grading import grade_math, grade_number, question_only_reward_fn, r1_zero_reward_fn
from rlvr.tasks.verification.worker import WORKER, call_with_timeout


def fmt(answer: str, thinking: str = "reasoning") -> str:
    """A completion of the r1_zero prompt (which already ends in `<think>`)."""
    return f"{thinking} </think> <answer>{answer}</answer>"


@pytest.mark.parametrize("name, text, expected", [
    ("plain", r"so \boxed{5}", "5"),
    ("nested braces", r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    ("deeply nested", r"\boxed{\sqrt{\frac{a}{b^{2}}}} done", r"\sqrt{\frac{a}{b^{2}}}"),
    ("last box wins", r"\boxed{1} then \boxed{2}", "2"),
    ("fbox", r"\fbox{7}", "7"),
    ("no braces", r"\boxed 42", "42"),
    ("unclosed", r"\boxed{\frac{1}{2}", None),
    ("absent", "42", None),
])
def test_extract_boxed(name, text, expected):
    assert extract_boxed(text) == expected, name


@pytest.mark.parametrize("text, expected", [
    ("<answer>5</answer>", "5"),
    ("<answer> 5 </answer>", "5"),
    ("<answer>1</answer> and <answer>2</answer>", "2"),
    ("<answer></answer>", ""),
    ("<answer>5", None),
    ("5</answer>", None),
])
def test_extract_answer_tag(text, expected):
    assert extract_answer_tag(text) == expected


@pytest.mark.parametrize("text, value", [
    ("0.5", (1, 2)), ("1/2", (1, 2)), (r"\frac{1}{2}", (1, 2)), (r"\frac12", (1, 2)), (r"\dfrac{1}{2}", (1, 2)),
    ("1/2.", (1, 2)), ("-3.0", (-3, 1)), ("$1,000", (1000, 1)), (r"\$18.00", (18, 1)), ("50%", (50, 1)),
    (r"5 \text{ cm}", (5, 1)), (r"-\frac{3}{4}", (-3, 4)), (".25", (1, 4)),
    ("1e5", None), ("x", None), ("1/0", None), ("1" * 100, None), ("", None),
])
def test_parse_rational(text, value):
    parsed = parse_rational(text)
    assert ((parsed is None) if value is None
            else (parsed is not None and (parsed.numerator, parsed.denominator) == value))


def test_drop_trailing_prose_keeps_hedges():
    assert drop_trailing_prose("1/2. That is the answer.") == "1/2"
    assert drop_trailing_prose("1/2. Or maybe 1/3") == "1/2. Or maybe 1/3"


# name, response, ground truth, (format, answer, reward)
R1_ZERO_TABLE = [
    ("decimal vs fraction", fmt("0.5"), "1/2", (1, 1, 1)),
    ("fraction vs decimal", fmt("1/2"), "0.5", (1, 1, 1)),
    ("latex frac", fmt(r"\frac{1}{2}"), "0.5", (1, 1, 1)),
    ("frac12 in box", fmt(r"\boxed{\frac12}"), r"\frac{1}{2}", (1, 1, 1)),
    ("trailing period and text", fmt("1/2. That is the answer."), "0.5", (1, 1, 1)),
    ("symbolic", fmt("x+1"), "1+x", (1, 1, 1)),
    ("sqrt forms", fmt(r"\frac{\sqrt{2}}{2}"), r"\frac{1}{\sqrt{2}}", (1, 1, 1)),
    ("percent", fmt(r"50\%"), "50", (1, 1, 1)),
    ("units", fmt(r"5 \text{ cm}"), "5", (1, 1, 1)),
    ("dollars", fmt(r"\$10"), "10", (1, 1, 1)),
    ("gt as list", fmt("2"), ["1", "2"], (1, 1, 1)),
    ("equation form", fmt("x = 5"), "5", (1, 1, 1)),
    ("unit in words", fmt("12 inches"), "12", (1, 1, 1)),
    ("set order", fmt(r"\{1, 2\}"), r"\{2,1\}", (1, 1, 1)),
    ("surd", fmt(r"2\sqrt{3}"), r"\sqrt{12}", (1, 1, 1)),
    ("pi", fmt(r"\pi/2"), r"\frac{\pi}{2}", (1, 1, 1)),
    ("wrong set", fmt(r"\{1, 3\}"), r"\{1,2\}", (1, 0, 0)),
    ("wrong surd", fmt(r"3\sqrt{2}"), r"\sqrt{12}", (1, 0, 0)),
    ("wrong number", fmt("0.6"), "1/2", (1, 0, 0)),
    ("wrong expression", fmt("x+2"), "x+1", (1, 0, 0)),
    ("multiple answers", fmt("3, 5"), "5", (1, 0, 0)),
    ("hedged", fmt("1/2. Or maybe 1/3"), "1/3", (1, 0, 0)),
    ("empty tags", fmt(""), "", (1, 0, 0)),
    ("tags without content", fmt("   "), "5", (1, 0, 0)),
    ("answer outside tags", "The answer is 5 </think> <answer>7</answer>", "5", (1, 0, 0)),
    ("last tag counts", "</think> <answer>5</answer> <answer>7</answer>", "7", (1, 1, 1)),
    ("no think close", "<answer>5</answer>", "5", (0, 0, 0)),
    ("no space between tags", "</think><answer>5</answer>", "5", (0, 0, 0)),
    ("unclosed answer", "</think> <answer>5", "5", (0, 0, 0)),
    ("correct but unformatted", "The answer is 5.", "5", (0, 0, 0)),
    ("empty response", "", "5", (0, 0, 0)),
]


@pytest.mark.parametrize("name, response, truth, expected", R1_ZERO_TABLE, ids=[row[0] for row in R1_ZERO_TABLE])
def test_r1_zero_reward_fn(name, response, truth, expected):
    rewards = r1_zero_reward_fn(response, truth)
    assert set(rewards) == {"format_reward", "answer_reward", "reward"}
    assert (rewards["format_reward"], rewards["answer_reward"], rewards["reward"]) == expected, name


def test_format_alone_earns_nothing():
    """Farming the format (tags around anything) gets format 1 but reward 0."""
    rewards = [r1_zero_reward_fn(fmt(guess), "17")["reward"] for guess in ("", " ", "?", "answer", "16")]
    assert rewards == [0.0] * 5


@pytest.mark.parametrize("response, truth, answer", [
    ("So the total is 18 dollars.", "18", 1.0),
    (r"Thus \boxed{\frac{1}{2}} and more text 7", "0.5", 1.0),
    ("Calculation... #### 72", "72", 1.0),
    ("I think it is 17, not 18.", "17", 0.0),  # the last number counts
    ("no idea", "3", 0.0),
])
def test_question_only_reward_fn(response, truth, answer):
    rewards = question_only_reward_fn(response, truth)
    assert rewards["format_reward"] == 1.0 and rewards["answer_reward"] == answer == rewards["reward"]


@pytest.mark.parametrize("answer, truth, correct", [
    ("18", "18", True), ("$18", "18", True), ("18.00", "18", True), ("1,000", "1000", True),
    (r"\$1,000.50", "1000.5", True), ("-3", "-3", True), ("3", "-3", False), ("18 dollars", "18", True),
    ("9 * 2 = 18", "18", True), (r"\boxed{18}", "18", True), ("18 or 20", "20", False), ("17", "18", False),
    ("", "18", False), ("eighteen", "18", False), ("0.5", "1/2", True),
])
def test_grade_number(answer, truth, correct):
    assert grade_number(answer, truth).correct is correct


def test_grade_math_fast_paths_need_no_worker():
    """String and exact-number matches are decided without the symbolic step."""
    assert grade_math("5", "5").detail == "string match"
    assert grade_math("0.50", "1/2").detail == "exact number"
    assert grade_math("0.6", "1/2").correct is False


LIMIT = 1.0


def test_pathological_input_times_out_within_the_limit():
    """`9^{9^{9^9}}` makes sympy try to build a number with ~10^369 digits: it must come back as
    `timeout` in well under 2x the limit, and the next check must work again."""
    WORKER.warm_up("math_verify")
    started = time.monotonic()
    rewards = r1_zero_reward_fn(fmt("9^{9^{9^{9}}}"), "1", timeout=LIMIT)
    elapsed = time.monotonic() - started
    assert math.isnan(rewards["answer_reward"]) and math.isnan(rewards["reward"])
    assert rewards["format_reward"] == 1.0
    assert elapsed < 2 * LIMIT, elapsed
    grade = grade_math("9^{9^{9^{9}}}", "1", timeout=LIMIT)
    assert grade.correct is None and grade.status == "timeout"
    # A fresh worker answers the next symbolic check.
    assert r1_zero_reward_fn(fmt("x+1"), "1+x")["reward"] == 1.0


def test_worker_limit_is_hard_and_errors_are_reported():
    WORKER.warm_up()
    started = time.monotonic()
    result = call_with_timeout("sleep", 30.0, timeout=0.3)
    assert result.status == "timeout" and time.monotonic() - started < 0.6
    assert call_with_timeout("echo", {"a": [1, 2]}, timeout=5).value == {"a": [1, 2]}
    with pytest.raises(KeyError, match="unknown verifier function 'eval'"):
        call_with_timeout("eval", "1+1", timeout=1)
