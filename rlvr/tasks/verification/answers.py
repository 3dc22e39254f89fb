"""Pulling a final answer out of text, and comparing numbers without evaluating anything.

Everything here is plain string work in linear time (`str.find` scans and regular expressions
whose repeats are bounded, so none backtracks quadratically; no `eval`, no sympy), so it needs no
time limit: `\\boxed{}` with nested braces, `<answer>` tags, the last number in a text, and exact
rational comparison of short numerals.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Optional

OPEN_TAG, CLOSE_TAG = "<answer>", "</answer>"
# A numeral as people write it: sign, thousands commas, decimals. Bounded lengths keep the
# exact arithmetic below cheap (no exponent notation: Fraction("1e999999999") would hang).
NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d{1,40})?|-?\d{1,60}(?:\.\d{1,40})?|-?\.\d{1,40}")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d{1,60}(?:\.\d{0,40})?|\.\d{1,40})")
_FRACTION = re.compile(r"([-+]?\d{1,60})/(\d{1,60})")
_LATEX_FRAC = re.compile(r"([-+]?)\\[dt]?frac(?:\{([-+]?\d{1,60})\}|(\d))(?:\{(\d{1,60})\}|(\d))")


def extract_boxed(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), nested braces included; None if absent.

    `\\boxed 5` (no braces) gives "5". An unclosed brace gives None.
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:]
    rest = rest[len("\\boxed"):] if rest.startswith("\\boxed") else rest[len("\\fbox"):]
    if rest.startswith(" "):  # `\boxed 5`
        match = re.match(r" +([^\s$]+)", rest)
        return match.group(1) if match else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for index, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:index]
    return None


def answer_tag_spans(text: str, *, first_only: bool = False) -> list[tuple[int, int]]:
    """(start, end) of each `<answer>...</answer>` content, left to right, as a lazy regex pairs them.

    Each `<answer>` pairs with the next `</answer>` after it and the scan resumes after that
    close, so every character is looked at a bounded number of times: linear time. (The regex
    `<answer>(.*?)</answer>` searched over a text of many unclosed `<answer>` runs to the end of
    the text from each of them: quadratic.)
    """
    spans: list[tuple[int, int]] = []
    position = 0
    while True:
        opening = text.find(OPEN_TAG, position)
        if opening < 0:
            return spans
        start = opening + len(OPEN_TAG)
        closing = text.find(CLOSE_TAG, start)
        if closing < 0:  # no close after this open, so none after any later open either
            return spans
        spans.append((start, closing))
        if first_only:
            return spans
        position = closing + len(CLOSE_TAG)


def extract_answer_tag(text: str) -> Optional[str]:
    """Content of the last complete `<answer>...</answer>` pair, stripped; None if there is none."""
    spans = answer_tag_spans(text)
    return text[spans[-1][0]:spans[-1][1]].strip() if spans else None


def first_answer_tag(text: str) -> Optional[str]:
    """Content of the first complete `<answer>...</answer>` pair, stripped; None if there is none."""
    spans = answer_tag_spans(text, first_only=True)
    return text[spans[0][0]:spans[0][1]].strip() if spans else None


def produced_answer(completion: str, prompt: str = "", *, after: Optional[str] = None) -> Optional[str]:
    """The content of the completion's last complete `<answer>` span when the model really answered there.

    None when there is no such span, when it is empty, when it does not start after the first
    `after` marker in the completion (`</think>` for the r1_zero prompt, whose `<think>` is in the
    prompt), or when its content is that of a span in `prompt` (an instruction copied back, such
    as R1-Zero's `<answer> answer here </answer>`). Format rewards are paid only for such a span.
    """
    spans = answer_tag_spans(completion)
    if not spans:
        return None
    start, end = spans[-1]
    content = completion[start:end].strip()
    if not content:
        return None
    if after is not None:
        marker = completion.find(after)
        if marker < 0 or marker + len(after) > start - len(OPEN_TAG):
            return None
    if content in {prompt[s:e].strip() for s, e in answer_tag_spans(prompt)}:
        return None
    return content


def last_number(text: str) -> Optional[str]:
    """The last numeral in `text` (commas and sign kept), or None."""
    matches = NUMBER_RE.findall(text)
    return matches[-1] if matches else None


def strip_number_decorations(text: str) -> str:
    """Drop what surrounds a number in an answer: $ and \\$, %, units in \\text{}, a trailing period.

    A whole answer in `\\text{...}` keeps its content (`\\text{Monday}` -> `Monday`); a `\\text{}`
    after something else is a unit and goes (`5 \\text{ cm}` -> `5`).
    """
    text = text.strip()
    whole = re.fullmatch(r"\\(?:text|mbox|textbf)\{([^{}]{0,200})\}", text)
    text = whole.group(1) if whole else re.sub(r"\\(?:text|mbox)\{[^{}]{0,40}\}", "", text)
    for token in ("\\$", "$", "\\%", "%", "\\!", "\\,", "\\;", "\\left", "\\right", "^\\circ", "^{\\circ}"):
        text = text.replace(token, "")
    return text.strip().rstrip(".").strip()


def parse_rational(text: str) -> Optional[Fraction]:
    """Exact value of a short numeral: `-12`, `1,234.50`, `.5`, `3/4`, `\\frac{3}{4}`, `\\frac34`.

    Returns None for anything else (expressions, words, exponents, over-long digit strings).
    """
    text = strip_number_decorations(text).replace(" ", "")
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d{1,40})?", text):
        text = text.replace(",", "")
    if _PLAIN_NUMBER.fullmatch(text):
        return Fraction(text.rstrip(".") or "0") if text not in ("-", "+", ".") else None
    match = _FRACTION.fullmatch(text)
    if match:
        denominator = int(match.group(2))
        return Fraction(int(match.group(1)), denominator) if denominator else None
    match = _LATEX_FRAC.fullmatch(text)
    if match:
        sign, numerator = match.group(1), match.group(2) or match.group(3)
        denominator = int(match.group(4) or match.group(5))
        if not denominator:
            return None
        value = Fraction(int(numerator), denominator)
        return -value if sign == "-" else value
    return None


def numbers_equal(answer: str, ground_truth: str) -> Optional[bool]:
    """Exact comparison when both sides are plain numerals; None when either side is not one."""
    left, right = parse_rational(answer), parse_rational(ground_truth)
    if left is None or right is None:
        return None
    return left == right


def gsm8k_final_answer(solution: str) -> str:
    """The number after `####` in a GSM8K solution, commas removed (`#### 1,000` -> `1000`)."""
    if "####" not in solution:
        raise ValueError(f"GSM8K answer has no '#### N' line: {solution[-80:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def drop_trailing_prose(text: str) -> str:
    """`1/2. That is the answer` -> `1/2`: a sentence after the answer goes when it holds no digit.

    A tail with digits (`1/2. Or maybe 1/3`) is kept, so a hedged answer is not cut down to its
    first guess.
    """
    head, separator, tail = text.strip().partition(". ")
    if separator and head and not re.search(r"\d", tail):
        return head
    return text
