"""The built-in tools: `calculator` (arithmetic by the `safe_parse` grammar, never code) and `python`.

`calculator` parses its expression with `rlvr.tasks.verification.safe_parse` (Python's parser builds a tree that
is never executed; only numbers, `+ - * / **` and parentheses pass) and evaluates the tree here with
exact fractions, under bounds on exponents and result size, so `9**9**9` is an error, not a hang.
`python` runs code in a sandboxed worker process of its own (`rlvr.tasks.verification.worker`,
`rlvr.tasks.verification.sandbox`): `PYTHON_TIMEOUT_SECONDS` per call, `PYTHON_MEMORY_MB` of address space, no
network, no new processes, no writes outside the worker's temporary folder.
"""

from __future__ import annotations

from fractions import Fraction

from rlvr.tasks.verification.safe_parse import BinOp, Grammar, Neg, Node, Num, Refused, parse_expression
from rlvr.tasks.verification.worker import VerifierWorker
from rlvr.tools.execution import MAX_OUTPUT_CHARS, ToolError
from rlvr.tools.toolbox import TOOLS, make_tool

ARITHMETIC = Grammar(operators=frozenset({"+", "-", "*", "/", "**"}), allow_float=True)
MAX_EXPRESSION_CHARS = 500
MAX_RESULT_DIGITS = 1000  # of any intermediate numerator or denominator
MAX_RESULT_BITS = int(MAX_RESULT_DIGITS * 3.33)
# What models write for the same operators.
SPELLINGS = {"×": "*", "·": "*", "÷": "/", "^": "**", "−": "-"}
PYTHON_TIMEOUT_SECONDS = 5.0
PYTHON_MEMORY_MB = 512


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
        raise ToolError(f"the result has more than {MAX_RESULT_DIGITS} digits")
    return value


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ToolError("only whole-number exponents are supported")
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if abs(exponent.numerator) * max(size - 1, 0) > MAX_RESULT_BITS:
        raise ToolError(f"the result has more than {MAX_RESULT_DIGITS} digits")
    if base == 0 and exponent < 0:
        raise ToolError("division by zero")
    return base ** exponent.numerator


def evaluate(node: Node) -> Fraction:
    """The exact value of an arithmetic tree from `parse_expression(text, ARITHMETIC)`."""
    if isinstance(node, Num):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, Neg):
        return -evaluate(node.operand)
    if isinstance(node, BinOp):
        left, right = evaluate(node.left), evaluate(node.right)
        if node.operator == "+":
            return _bounded(left + right)
        if node.operator == "-":
            return _bounded(left - right)
        if node.operator == "*":
            return _bounded(left * right)
        if node.operator == "/":
            if right == 0:
                raise ToolError("division by zero")
            return _bounded(left / right)
        return _bounded(_power(left, right))
    raise ToolError(f"{type(node).__name__} is not arithmetic")


def render_number(value: Fraction) -> str:
    """An integer exactly; any other value as a decimal of 12 significant digits."""
    if value.denominator == 1:
        return str(value.numerator)
    try:
        return f"{float(value):.12g}"
    except OverflowError:
        raise ToolError("the result is too large to show as a decimal") from None


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly: numbers, + - * / ** and parentheses.

    Args:
        expression: the arithmetic to do, e.g. 123*45 or (7+3)/4
    """
    text = expression.strip().rstrip("=").strip()
    for written, operator in SPELLINGS.items():
        text = text.replace(written, operator)
    if not text:
        raise ToolError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = parse_expression(text, ARITHMETIC)
    except Refused as exc:
        raise ToolError(f"not arithmetic ({exc}); use numbers, + - * / ** and parentheses") from None
    return render_number(evaluate(tree))


# Its own worker, not the verifiers': code the model writes never shares a process with a scorer.
# Model code runs there on purpose: behind bubblewrap and seccomp where they run (the audit hook alone is not a
# jail: code in the same process can patch what it reads).
PYTHON_WORKER = VerifierWorker(extra_functions="rlvr.tools.python_worker", memory_mb=PYTHON_MEMORY_MB, jailed=True)


def run_python(code: str, *, timeout: float = PYTHON_TIMEOUT_SECONDS, worker: VerifierWorker | None = None) -> str:
    """What `code` printed, run in the sandboxed worker; ToolError for a timeout, a refusal, a crash, an exception."""
    result = (worker or PYTHON_WORKER).call("run_python", code, MAX_OUTPUT_CHARS, timeout=timeout)
    if result.status == "timeout":
        raise ToolError(f"the code ran past the time limit of {timeout:g} s")
    if result.status != "ok":
        detail = result.detail.replace("verifier sandbox", "sandbox")
        if "died" in detail:
            detail = f"the code was stopped (memory limit {PYTHON_MEMORY_MB} MB or CPU time)"
        raise ToolError(f"{detail}")
    output = result.value["output"].rstrip("\n")
    if result.value["dropped"]:
        output += f"\n[output truncated: {result.value['dropped']} more characters]"
    if result.value["error"]:
        raise ToolError(result.value["error"] + (f"\nprinted before the error:\n{output}" if output else ""))
    return output if output else "(no output)"


def python(code: str) -> str:
    """Run Python code and return what it prints (the value of a final expression is shown too).

    Args:
        code: the Python source to run
    """
    return run_python(code)


TOOLS.add("calculator", make_tool(calculator))
TOOLS.add("python", make_tool(python, timeout_seconds=None))  # the worker enforces its own time limit
