"""Every mutation `scripts/mutate.py` runs (listed in `scripts/mutations.py`) still applies to the code.

The mutation script edits source files by exact text replacement. A refactor that renames the
line a mutation targets strands it: the script then stops before running anything, and the
guarantee that each injected bug is caught silently lapses. The same holds for the tests each
mutation names (a file or `file::function`). This check runs in seconds (no mutant is executed)
so such a refactor fails the default suite at once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutate():
    spec = importlib.util.spec_from_file_location("rlvr_mutate_script", REPO / "scripts" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def test_every_mutation_search_text_occurs_exactly_once(mutate):
    assert mutate.MUTATIONS, "the mutation script lists no mutations"
    assert mutate.stranded_mutations(mutate.MUTATIONS) == []


def test_mutation_names_unique_and_each_changes_the_code(mutate):
    names = [m.name for m in mutate.MUTATIONS]
    assert len(names) == len(set(names))
    for mutation in mutate.MUTATIONS:
        assert mutation.replacements, mutation.name
        for old, new in mutation.replacements:
            assert old and old != new, mutation.name


def test_the_check_reports_a_stranded_or_ambiguous_mutation(mutate, tmp_path):
    # The same check must fail on a mutation whose text is gone, occurs twice, or whose file moved.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = a + b\ny = a + b\nz = c * d\n")
    good = mutate.mutation("good", "pkg/mod.py", "ok", ("z = c * d", "z = c / d"))
    gone = mutate.mutation("gone", "pkg/mod.py", "renamed line", ("w = c * d", "w = c / d"))
    twice = mutate.mutation("twice", "pkg/mod.py", "ambiguous", ("a + b", "a - b"))
    moved = mutate.mutation("moved", "pkg/other.py", "file moved", ("z = c * d", "z = c / d"))
    problems = mutate.stranded_mutations([good, gone, twice, moved], repo=str(tmp_path))
    assert len(problems) == 3
    assert "gone: search text found 0 times" in problems[0]
    assert "twice: search text found 2 times" in problems[1]
    assert "moved: file pkg/other.py does not exist" in problems[2]


def test_every_mutated_file_is_copied_into_the_sandbox(mutate):
    # A mutation of a file the script does not copy would run the unmutated tests against the real tree.
    for mutation in mutate.MUTATIONS:
        assert any(mutation.path == c or mutation.path.startswith(c + "/") for c in mutate.COPIED), mutation.path


def test_every_mutation_names_tests_that_exist_and_are_copied(mutate):
    assert mutate.missing_tests(mutate.MUTATIONS) == []
    for mutation in mutate.MUTATIONS:
        assert mutation.tests, mutation.name
        for entry in mutation.tests:
            path = entry.partition("::")[0]
            assert any(path == c or path.startswith(c + "/") for c in mutate.COPIED), (mutation.name, entry)


def test_the_test_check_reports_a_missing_file_or_function(mutate, tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one():\n    pass\n")
    good = mutate.mutation("good", "m.py", "ok", ("a", "b"), tests=("tests/test_a.py", "tests/test_a.py::test_one"))
    gone = mutate.mutation("gone", "m.py", "file moved", ("a", "b"), tests=("tests/test_b.py",))
    renamed = mutate.mutation("renamed", "m.py", "test renamed", ("a", "b"), tests=("tests/test_a.py::test_two",))
    assert mutate.missing_tests([good, gone, renamed], repo=str(tmp_path)) == [
        "gone: test path tests/test_b.py does not exist", "renamed: tests/test_a.py defines no test test_two"]
    assert good.tests and mutate.mutation("core", "m.py", "default", ("a", "b")).tests == ("tests/core",)


def test_the_unmutated_run_covers_every_mutations_tests_once(mutate):
    first = mutate.mutation("a", "m.py", "", ("a", "b"), tests=("tests/core", "tests/test_x.py::test_y"))
    second = mutate.mutation("b", "m.py", "", ("a", "b"), tests=("tests/test_x.py", "tests/core"))
    third = mutate.mutation("c", "m.py", "", ("a", "b"), tests=("tests/core/test_k.py::test_k", "tests/test_z.py::t"))
    assert mutate.union_of_tests([first, second, third]) == ["tests/core", "tests/test_x.py", "tests/test_z.py::t"]
