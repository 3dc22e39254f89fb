"""Answer text turned into data without running it: literal structures and arithmetic expressions.

Some scorers evaluate the answer text (`eval`, sympy's `parse_expr`). Text is therefore parsed
with Python's `ast` (which only builds a tree and never executes anything) and the tree is walked
against a whitelist: literal lists, tuples, integers, strings and finite floats, or an arithmetic
expression over numbers, named symbols and a named set of math functions. Any other node (a
call of anything else, an attribute, a subscript, a lambda, a walrus, an f-string, a comprehension,
a comparison...) raises `Refused`. The data is then rendered back into canonical text
(`render_literal`, `render_expression`), so a scorer that evaluates text sees only what was
rebuilt from whitelisted data, never the model's own characters (comments, escapes, unicode
look-alikes and all are gone). Parsing is linear in the text, which is capped at
`MAX_TEXT_CHARS`, and trees are capped in depth and size.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any, Union

MAX_TEXT_CHARS = 20_000  # longer answers are refused unparsed
MAX_DEPTH = 100  # nesting of lists or operators; Python's compiler recurses on it too
MAX_NODES = 20_000
MAX_INT_DIGITS = 30  # larger integer literals are refused (no answer here needs them)


class Refused(ValueError):
    """The text is not data of the expected shape; the message says why."""


def parse_tree(text: str) -> ast.expr:
    """The expression tree of `text` (never executed); `Refused` when it is not one expression."""
    if len(text) > MAX_TEXT_CHARS:
        raise Refused(f"answer longer than {MAX_TEXT_CHARS} characters")
    if "\x00" in text:
        raise Refused("answer contains a NUL character")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        raise Refused(f"not a Python literal or expression ({type(exc).__name__})") from None
    return tree.body


class _Budget:
    """Counts nodes so a huge flat answer is refused before any work proportional to its size."""

    def __init__(self) -> None:
        self.nodes = 0

    def visit(self, node: ast.AST, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise Refused(f"more than {MAX_NODES} elements")
        if depth > MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH}")


def _number(node: ast.Constant, allow_float: bool) -> Union[int, float]:
    value = node.value
    if type(value) is int:  # bool is a subclass of int and is refused here
        if len(str(abs(value))) > MAX_INT_DIGITS:
            raise Refused(f"integer with more than {MAX_INT_DIGITS} digits")
        return value
    if type(value) is float and allow_float:
        if not math.isfinite(value):
            raise Refused("a float that is not finite")
        return value
    raise Refused(f"constant of type {type(value).__name__} is not allowed here")


# ----------------------------------------------------------------------------- literal structures


def parse_literal(text: str) -> Any:
    """Lists and tuples (both become lists) of ints, strings and finite floats, nested."""
    budget = _Budget()

    def walk(node: ast.expr, depth: int) -> Any:
        budget.visit(node, depth)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [walk(element, depth + 1) for element in node.elts]
        if isinstance(node, ast.Constant) and type(node.value) is str:
            return node.value
        if isinstance(node, ast.Constant):
            return _number(node, allow_float=True)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
                and isinstance(node.operand, ast.Constant):
            value = _number(node.operand, allow_float=True)
            return -value if isinstance(node.op, ast.USub) else value
        raise Refused(f"{type(node).__name__} is not a literal")

    return walk(parse_tree(text), 0)


def render_literal(value: Any) -> str:
    """Python source for `value` (lists, ints, finite floats, strings) that evaluates back to it."""
    if isinstance(value, list):
        return "[" + ", ".join(render_literal(element) for element in value) + "]"
    if type(value) is int:
        return str(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    if type(value) is str:
        return repr(value)
    raise TypeError(f"cannot render {type(value).__name__}")


# ----------------------------------------------------------------------------- arithmetic expressions


@dataclass(frozen=True)
class Grammar:
    """What an expression may contain: binary operators (`+ - * / **`), symbol and function names."""

    operators: frozenset[str]
    symbols: frozenset[str] = frozenset()
    functions: frozenset[str] = frozenset()
    allow_float: bool = False
    max_arguments: int = 2


@dataclass(frozen=True)
class Num:
    value: Union[int, float]


@dataclass(frozen=True)
class Sym:
    name: str


@dataclass(frozen=True)
class Neg:
    operand: "Node"


@dataclass(frozen=True)
class BinOp:
    operator: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Call:
    function: str
    arguments: tuple["Node", ...]


Node = Union[Num, Sym, Neg, BinOp, Call]
OPERATOR_NAMES = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def parse_expression(text: str, grammar: Grammar) -> Node:
    """The expression in `text` as a `Node` tree, or `Refused` naming the first thing not allowed."""
    budget = _Budget()

    def walk(node: ast.expr, depth: int) -> Node:
        budget.visit(node, depth)
        if isinstance(node, ast.Constant):
            return Num(_number(node, grammar.allow_float))
        if isinstance(node, ast.Name):
            if node.id not in grammar.symbols:
                raise Refused(f"name {node.id[:40]!r} is not allowed here")
            return Sym(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = walk(node.operand, depth + 1)
            return Neg(operand) if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            operator = OPERATOR_NAMES.get(type(node.op))
            if operator not in grammar.operators:
                raise Refused(f"operator {type(node.op).__name__} is not allowed here")
            return BinOp(operator, walk(node.left, depth + 1), walk(node.right, depth + 1))
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in grammar.functions:
                raise Refused("a call of something other than an allowed math function")
            if node.keywords or not 1 <= len(node.args) <= grammar.max_arguments:
                raise Refused(f"{node.func.id}() takes 1 to {grammar.max_arguments} plain arguments here")
            if any(isinstance(argument, ast.Starred) for argument in node.args):
                raise Refused("starred arguments are not allowed")
            return Call(node.func.id, tuple(walk(argument, depth + 1) for argument in node.args))
        raise Refused(f"{type(node).__name__} is not allowed in an arithmetic answer")

    return walk(parse_tree(text), 0)


def render_expression(node: Node) -> str:
    """Canonical source for `node`: every compound operand in parentheses, so the reading is unique.

    `-3**2` (a negated power) renders `-(3 ** 2)` and `(-3)**2` renders `(-3) ** 2`: the tree,
    not operator precedence, decides what is computed.
    """

    def operand(child: Node) -> str:
        text = render_expression(child)
        return f"({text})" if isinstance(child, (BinOp, Neg)) else text

    if isinstance(node, Num):
        return repr(node.value) if isinstance(node.value, float) else str(node.value)
    if isinstance(node, Sym):
        return node.name
    if isinstance(node, Neg):
        return f"-{operand(node.operand)}"
    if isinstance(node, BinOp):
        return f"{operand(node.left)} {node.operator} {operand(node.right)}"
    if isinstance(node, Call):
        return f"{node.function}({', '.join(render_expression(argument) for argument in node.arguments)})"
    raise TypeError(f"not an expression node: {node!r}")

