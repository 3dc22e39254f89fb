"""Escape attempts against every reasoning-gym dataset whose scorer evaluates the answer text.

Each attempt is scored through the task, as a completion from the model would be. None may create
the canary file or connect to a listening localhost socket, and each must come back `unjudgeable`
or as a plain wrong answer (never an exception, never a sandbox refusal: the parser must stop it
before the scorer runs). The datasets' own answers must still score 1.0, so refusing everything
would fail here too.
"""

import math
import socket

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.verification.grading import question_only_reward_fn, r1_zero_reward_fn

# reasoning-gym 0.1.25's datasets whose `score_answer` evals or `parse_expr`s the answer, found by
# reading every scorer and by running each with marked answers under an audit hook.
EVALUATING_DATASETS = ["binary_matrix", "countdown", "intermediate_integration", "n_queens",
                       "polynomial_multiplication", "puzzle24", "simple_integration", "spiral_matrix",
                       "string_insertion"]

# `{canary}` is a path that must never exist, `{port}` a port that must never see a connection.
ESCAPES = [
    # the comment hides a call from a character-before-`(` screen; \x28 is `(` inside the string
    "[exec #+\n(\"import os;os.system\\x28'touch {canary}'\\x29\")]",
    "exec #\n(\"open('{canary}', 'w')\")",
    "exec\\\n(\"open('{canary}', 'w')\")",
    "__import__('os').system('touch {canary}')",
    "open('{canary}', 'w').write('x')",
    "[open('{canary}', 'w')]",
    "[[open('{canary}', 'w')]]",
    "(lambda: open('{canary}', 'w'))()",
    "[(f := open('{canary}', 'w'))]",
    "f\"{{open('{canary}', 'w')}}\"",
    "getattr(__builtins__, 'ex' + 'ec')(\"open('{canary}', 'w')\")",
    "().__class__.__bases__[0].__subclasses__()",
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0](['touch', '{canary}'])",
    "ｅｘｅｃ(\"open('{canary}', 'w')\")",  # fullwidth letters: NFKC makes them `exec`
    "ᵉval(\"open('{canary}', 'w')\")",  # a modifier letter that NFKC maps to `e`
    "eval(bytes.fromhex('{hex_payload}').decode())",
    "exec('\\x6f\\x70\\x65\\x6e(\"{canary}\", \"w\")')",
    "exec(\"\"\"open('{canary}', 'w')\"\"\")",
    "exec('exec(\"open(\\'{canary}\\', \\'w\\')\")')",
    "exec(''.join(map(chr, {ord_payload})))",
    "__import__('socket').create_connection(('127.0.0.1', {port}))",
    "exec(\"import socket; socket.socket().connect(('127.0.0.1', {port}))\")",
    "sin(__import__('os').system('touch {canary}'))",
    "x**(open('{canary}', 'w'))",
    "Integral(open('{canary}', 'w'), x)",
    "S(\"__import__('os').system('touch {canary}')\")",
    "sympify(\"open('{canary}', 'w')\")",
    "parse_expr(\"open('{canary}', 'w')\")",
    "x.__class__.__mro__[-1].__subclasses__()",
    "sqrt(2).func.__globals__['__builtins__']['open']('{canary}', 'w')",
    "1 if open('{canary}', 'w') else 2",
    "[*map(exec, [\"open('{canary}', 'w')\"])]",
    "globals()['__builtins__']",
    "breakpoint()",
    "[1, 2][open('{canary}', 'w') and 0]",
    "{{'a': open('{canary}', 'w')}}",
    "[x for x in [open('{canary}', 'w')]]",
    "type('X', (), {{'__del__': lambda s: open('{canary}', 'w')}})()",
]


def fill(template: str, canary: str, port: int) -> str:
    source = f"open('{canary}', 'w')"
    return template.format(canary=canary, port=port, hex_payload=source.encode().hex(),
                           ord_payload=[ord(c) for c in source])


def formatted(answer: str) -> str:
    return f" thinking </think> <answer>{answer}</answer>"


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    with pytest.raises(BlockingIOError):  # nothing ever connected
        server.accept()
    server.close()


def test_the_battery_covers_every_dataset_that_evaluates_text():
    from rlvr.tasks.reasoning_gym_answers import EVALUATING

    assert sorted(EVALUATING) == EVALUATING_DATASETS


@pytest.mark.parametrize("dataset", EVALUATING_DATASETS)
def test_escape_attempts_are_refused_and_own_answers_still_score(dataset, tmp_path, listener):
    task = build_task(f"reasoning_gym:{dataset}", options={"eval_size": 3, "size": 30}, use_chat_template=False)
    examples = task.examples("eval", 3, 0)
    for example in examples:  # the dataset's own answer field, as the model would write it
        verdict = task.score(formatted(str(example.metadata["entry"]["answer"])), example)
        assert verdict.status == "ok" and verdict.components["answer"] == 1.0, (dataset, verdict)
    canary = tmp_path / "pwned"
    port = listener.getsockname()[1]
    for template in ESCAPES:
        answer = fill(template, str(canary), port)
        verdict = task.score(formatted(answer), examples[0])
        assert not canary.exists(), (dataset, answer)
        assert verdict.status in ("ok", "unjudgeable"), (dataset, answer, verdict)
        if verdict.status == "unjudgeable":
            assert math.isnan(verdict.components["answer"]) and verdict.detail.startswith("refused: ")
        else:
            assert not verdict.correct and verdict.components["answer"] < 1.0, (dataset, answer, verdict)


def test_escape_attempts_against_the_math_grader(tmp_path, listener):
    """math-verify (in the same worker) is given the same attempts: none runs, none raises. (Its
    expression path hands sympy only digits and operators; the question-only grader may still
    find a number in the text, which is not an escape.)"""
    canary = tmp_path / "pwned"
    for template in ESCAPES:
        answer = fill(template, str(canary), listener.getsockname()[1])
        for rewards in (r1_zero_reward_fn(formatted(answer), "x^2"), question_only_reward_fn(answer, "x^2")):
            assert rewards["format_reward"] == 1.0 and not canary.exists(), answer
            assert rewards["answer_reward"] in (0.0, 1.0) or math.isnan(rewards["answer_reward"])
