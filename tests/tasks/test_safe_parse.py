"""Answer parsing without execution (`rlvr.tasks.verification.safe_parse`) and the per-dataset shapes handed to
reasoning-gym scorers that evaluate text (`rlvr.tasks.reasoning_gym_answers`); in-process, no worker."""

import pytest

from rlvr.tasks.reasoning_gym_answers import (
    ANTIDERIVATIVE,
    ARITHMETIC,
    EVALUATING,
    NON_EVALUATING,
    POLYNOMIAL,
    check_audited,
    scorer_text,
)
from rlvr.tasks.verification.safe_parse import (
    MAX_DEPTH,
    MAX_TEXT_CHARS,
    Refused,
    parse_expression,
    parse_literal,
    render_expression,
    render_literal,
)


@pytest.mark.parametrize("text, value", [
    ("[1, -2, 3]", [1, -2, 3]),
    ("(1, 2)", [1, 2]),  # tuples become lists: the scorers only iterate
    ("1, 2", [1, 2]),
    ("[['Q', '_'], ['_', 'Q']]", [["Q", "_"], ["_", "Q"]]),
    ("['a' 'b']", ["ab"]),  # adjacent literals concatenate at parse time
    ("'\\x41'", "A"),  # an escape is decoded into data; it is never evaluated
    ("[0.5, +3]", [0.5, 3]),
])
def test_literals_parse_to_data(text, value):
    assert parse_literal(text) == value


@pytest.mark.parametrize("text", [
    "[open('x')]", "[x]", "[1][0]", "[1].__class__", "{1: 2}", "{1}", "[True]", "[None]", "[b'x']", "[...]",
    "[1 + 2]", "[-x]", "[f'{1}']", "[lambda: 1]", "[(y := 1)]", "[i for i in ()]", "[*()]", "[1e999]",
    "[" + "9" * 31 + "]", "[1 if 1 else 2]", "[1, 2",
])
def test_non_literals_are_refused(text):
    with pytest.raises(Refused):
        parse_literal(text)


def test_render_literal_evaluates_back_to_the_data():
    """A naive second route: Python's own literal reader on the rendering gives the data back."""
    import ast

    for value in ([1, -2, [3]], ["it's", 'a "quote"', "\\", "\n", "ｅｘｅｃ"], [0.1, -2.5e-07], "plain"):
        assert ast.literal_eval(render_literal(value)) == value
    assert render_literal([["Q", "_"]]) == "[['Q', '_']]"


@pytest.mark.parametrize("text, rendered", [
    ("94*4 - 61 - 6", "((94 * 4) - 61) - 6"),
    ("10*(8 - 5) - 6", "(10 * (8 - 5)) - 6"),
    ("-3**2", "-(3 ** 2)"),  # Python reads a negated power
    ("(-3)**2", "(-3) ** 2"),
    ("2*-3", "2 * (-3)"),
    ("+7", "7"),
    ("9 - (5 - 2)", "9 - (5 - 2)"),
    ("2**3**2", "2 ** (3 ** 2)"),  # right-associative
    ("# 1 + 1\n1 + 2", "1 + 2"),  # comments are gone from what the scorer sees
    ("1\\\n+ 2", "1 + 2"),
])
def test_render_expression_keeps_the_meaning(text, rendered):
    assert render_expression(parse_expression(text, POLYNOMIAL)) == rendered
    # Independent check: Python's own arithmetic on the original and on the rendering agree.
    assert eval(rendered) == eval(text)  # noqa: S307 - test-owned constant arithmetic


def test_render_expression_names_and_calls():
    tree = parse_expression("-x**2*sin(pi*x)/C", ANTIDERIVATIVE)
    assert render_expression(tree) == "((-(x ** 2)) * sin(pi * x)) / C"


@pytest.mark.parametrize("text, grammar", [
    ("2**10", ARITHMETIC),  # countdown/puzzle24: + - * / only
    ("x + 1", ARITHMETIC),
    ("sqrt(4)", ARITHMETIC),
    ("1.5 + 1", ARITHMETIC),
    ("4 ^ 2", POLYNOMIAL),
    ("x < 2", POLYNOMIAL),
    ("S(1)/2", ANTIDERIVATIVE),  # sympify of a string would be an eval
    ("N(x)", ANTIDERIVATIVE),
    ("sin(x, evaluate=False)", ANTIDERIVATIVE),
    ("sin(*x)", ANTIDERIVATIVE),
    ("x.diff(x)", ANTIDERIVATIVE),
    ("sin", ANTIDERIVATIVE),
    ("Integral(x, (x, 0, 1))", ANTIDERIVATIVE),
    ("__import__('os')", ANTIDERIVATIVE),
    ("ｏｐｅｎ('x')", ANTIDERIVATIVE),  # NFKC-normalised to `open` by the parser: not a function we allow
    ("I*x", POLYNOMIAL),  # sympy's imaginary unit, not a symbol
])
def test_expressions_outside_the_grammar_are_refused(text, grammar):
    with pytest.raises(Refused):
        parse_expression(text, grammar)


def test_size_and_depth_are_capped():
    with pytest.raises(Refused, match="longer than"):
        parse_literal("[" + "1," * MAX_TEXT_CHARS + "]")
    with pytest.raises(Refused, match="nested deeper"):
        parse_expression("-" * (MAX_DEPTH + 5) + "1", ARITHMETIC)
    with pytest.raises(Refused):  # the parser's own recursion limit becomes a refusal, not a crash
        parse_expression("1+" * 10_000 + "1", ARITHMETIC)
    assert parse_literal("[" + "1," * 1000 + "]") == [1] * 1000


# ----------------------------------------------------------------------------- dataset shapes


def test_every_installed_dataset_is_audited_exactly_once():
    """A reasoning-gym upgrade that adds a dataset makes this fail until its scorer is read."""
    from reasoning_gym.factory import DATASETS

    assert not set(EVALUATING) & NON_EVALUATING
    assert set(DATASETS) - {"composite"} == set(EVALUATING) | NON_EVALUATING
    with pytest.raises(ValueError, match="not among the audited"):
        check_audited("no_such_dataset")
    check_audited("spell_backward")


@pytest.mark.parametrize("dataset, answer, text", [
    ("spiral_matrix", "1 2 3", "1 2 3"),
    ("spiral_matrix", "(1, 2, 3)", "[1, 2, 3]"),
    ("binary_matrix", "0 1\n1 2", "0 1\n1 2"),
    ("binary_matrix", "[[0, 1], [1, 2]]", "[[0, 1], [1, 2]]"),
    ("n_queens", "Q _\n_ Q", "Q _\n_ Q"),
    ("n_queens", "[['Q', '_'], ['_', 'Q']]", "[['Q', '_'], ['_', 'Q']]"),
    ("string_insertion", "ABCDE", "ABCDE"),
    ("string_insertion", "['A', 'B']", "['A', 'B']"),
    ("countdown", "94*4 - 61 - 6", "((94 * 4) - 61) - 6"),
    ("puzzle24", "9*3*8/9", "((9 * 3) * 8) / 9"),
    ("polynomial_multiplication", "-x**2 + 3*y", "(-(x ** 2)) + (3 * y)"),
    ("simple_integration", "x**2/2 + C", "((x ** 2) / 2) + C"),
    ("intermediate_integration", "E**x*sin(pi*x) + Integral(log(x), x)",
     "((E ** x) * sin(pi * x)) + Integral(log(x), x)"),
    ("spell_backward", "__import__('os') # not evaluated by this scorer",
     "__import__('os') # not evaluated by this scorer"),
])
def test_scorer_text_is_the_canonical_rendering(dataset, answer, text):
    assert scorer_text(dataset, answer, {"metadata": {"source_dataset": dataset}}) == text


@pytest.mark.parametrize("dataset, answer", [
    ("spiral_matrix", "1  2 3"),  # not the asked form, and not a literal either
    ("spiral_matrix", "01 2"),
    ("spiral_matrix", "[[1, 2]]"),  # the wrong shape for this scorer
    ("binary_matrix", "0 1\n1 x"),
    ("binary_matrix", "[1, 2]"),
    ("n_queens", "[[1]]"),
    ("string_insertion", "AB CD"),
    ("string_insertion", "[1]"),
    ("countdown", "3 * 8 = 24"),
])
def test_answers_of_the_wrong_shape_are_refused(dataset, answer):
    with pytest.raises(Refused):
        scorer_text(dataset, answer, {"metadata": {"source_dataset": dataset}})


def test_a_composite_entry_is_shaped_by_the_dataset_that_scores_it():
    entry = {"metadata": {"source_dataset": "countdown"}}
    with pytest.raises(Refused, match="'composite' is not audited"):
        scorer_text("composite", "1 + 2", entry)
    with pytest.raises(Refused):  # an evaluating source behind a non-evaluating name is still shaped
        scorer_text("spell_backward", "open('x')", entry)
