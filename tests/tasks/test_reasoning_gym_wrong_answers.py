"""reasoning-gym scorers that pay a wrong answer, scored by the datasets' own `score_answer`: the
`answer` reward (`ANSWER_CREDIT`) pays 0 for each such answer and 1 for the entry's own answer."""

from __future__ import annotations

import json
from decimal import Decimal

from fractions import Fraction

import pytest
import reasoning_gym

from rlvr.tasks.reasoning_gym_answers import answer_credit, reference_answer


def changed_last_char(text: str) -> str:
    return text[:-1] + ("z" if text[-1] != "z" else "y")


def changed_first_digit(grid: str) -> str:
    """The grid with its first digit replaced by another one in 1..4 (a board of size >= 4)."""
    index = next(i for i, c in enumerate(grid) if c.isdigit())
    return grid[:index] + str(int(grid[index]) % 4 + 1) + grid[index + 1:]


def one_role_flipped(entry: dict) -> str:
    """The knights-and-knaves answer with the last person's role swapped."""
    meta = entry["metadata"]
    terms, solution = meta["knight_knave_terms"], list(meta["solution"])
    solution[-1] = not solution[-1]
    return ", and ".join(f"{name} is {terms['a_knight'] if knight else terms['a_knave']}"
                         for name, knight in zip(meta["names"], solution)) + "."


def last_word_replaced(text: str) -> str:
    words = text.split(" ")
    return " ".join(words[:-1] + ["qqq"])


def first_move_only(entry: dict) -> str | None:
    """Legal moves that swap nothing: the first move of the solution (None for an impossible puzzle)."""
    if not entry["metadata"]["is_possible"]:
        return None
    return json.dumps(json.loads(entry["answer"])[:1])


# Wrong but well-formed answers these scorers pay part of the credit for (0.01 to 0.9).
PARTIAL_GUESSES = {
    "arc_agi": lambda entry: "0",
    "boxnet": lambda entry: "[]",
    "codeio": lambda entry: '{"x": 1}',
    "color_cube_rotation": lambda entry: "red" if entry["answer"] != "red" else "blue",
    "emoji_mystery": lambda entry: changed_last_char(entry["answer"]),
    "figlet_font": lambda entry: changed_last_char(entry["answer"]).upper(),
    "futoshiki": lambda entry: changed_first_digit(entry["answer"]),
    "group_anagrams": lambda entry: "[]",
    "gsm_symbolic": lambda entry: str(int(float(entry["answer"])) + 1),
    "knight_swap": first_move_only,
    "knights_knaves": one_role_flipped,
    "letter_jumble": lambda entry: last_word_replaced(entry["answer"]),
    "mini_sudoku": lambda entry: changed_first_digit(entry["answer"]),
}


@pytest.mark.parametrize("dataset", sorted(PARTIAL_GUESSES))
def test_partial_credit_for_a_wrong_answer_is_not_paid(dataset):
    data = reasoning_gym.create_dataset(dataset, size=8, seed=1)
    paid = 0
    for entry in data:
        guess = PARTIAL_GUESSES[dataset](entry)
        if guess is None:
            continue
        raw = data.score_answer(guess, entry)
        assert raw < 1.0, (guess, raw)  # wrong by construction
        paid += raw > 0
        assert answer_credit(dataset, raw, guess, entry) == 0.0, (guess, raw)
        truth = reference_answer(dataset, entry)
        if truth is not None:
            assert answer_credit(dataset, data.score_answer(truth, entry), truth, entry) == 1.0
    assert paid >= 4  # the scorer pays these: the rule is what keeps them at 0


def plus_half_thousandth(answer: str) -> str:
    return str(Decimal(answer) + Decimal("0.0005"))


def each_number_shifted(answer: str) -> str:
    return json.dumps([str(float(n) + 0.5) for n in json.loads(answer.replace("'", '"'))])


# Wrong answers these scorers pay in full, and why.
FULL_CREDIT_WRONG = {
    "coin_flip": lambda entry: "0",  # a shared prefix `0` over the shorter length: 1/1
    "decimal_arithmetic": lambda entry: plus_half_thousandth(entry["answer"]),  # within 10^-3
    "game_of_life_halting": lambda entry: "True" if entry["answer"] == "False" else "False",  # bool("False")
    "gsm_symbolic": lambda entry: "-" + entry["answer"],  # `\b-?\d+` does not read the minus sign
    "number_sorting": lambda entry: each_number_shifted(entry["answer"]),  # each within 1
}


@pytest.mark.parametrize("dataset", sorted(FULL_CREDIT_WRONG))
def test_full_credit_for_a_wrong_answer_is_not_paid(dataset):
    data = reasoning_gym.create_dataset(dataset, size=6, seed=1)
    fooled = 0
    for entry in data:
        guess = FULL_CREDIT_WRONG[dataset](entry)
        raw = data.score_answer(guess, entry)
        fooled += raw >= 1.0
        assert answer_credit(dataset, raw, guess, entry) == 0.0, (guess, raw)
        assert answer_credit(dataset, data.score_answer(entry["answer"], entry), entry["answer"], entry) == 1.0
    assert fooled >= 4  # the scorer pays these wrong answers in full


@pytest.mark.parametrize("dataset, right", [
    ("coin_flip", lambda entry: str(Fraction(entry["answer"]))),  # 5/16 for 0.3125
    ("game_of_life_halting", lambda entry: entry["answer"].lower()),
    ("number_sorting", lambda entry: json.dumps([float(n) for n in json.loads(entry["answer"].replace("'", '"'))])),
])
def test_the_answer_written_another_way_is_still_paid(dataset, right):
    data = reasoning_gym.create_dataset(dataset, size=6, seed=1)
    rewritten = 0
    for entry in data:
        answer = right(entry)
        rewritten += answer != entry["answer"]  # coin_flip's `1` is `1` as a fraction too
        assert answer_credit(dataset, data.score_answer(answer, entry), answer, entry) == 1.0, answer
    assert rewritten >= 4


def test_graph_color_has_a_reference_answer_and_boxnet_none():
    """graph_color's entries hold no answer (any proper colouring is one): the reference is the colouring
    in its metadata, written as the JSON map the question asks for."""
    data = reasoning_gym.create_dataset("graph_color", size=4, seed=1)
    for entry in data:
        assert entry["answer"] is None
        colouring = reference_answer("graph_color", entry)
        assert data.score_answer(colouring, entry) == 1.0
        assert data.score_answer(str(entry["metadata"]["possible_answer"]), entry) < 1.0  # the Python repr is no JSON
    boxnet = reasoning_gym.create_dataset("boxnet", size=1, seed=1)
    assert reference_answer("boxnet", boxnet[0]) is None
    assert reference_answer("coin_flip", {"answer": "0.5"}) == "0.5"


@pytest.mark.parametrize("dataset, score, text, oracle, expected", [
    ("coin_flip", 1.0, "0", "0.3125", 0.0),  # the scorer's shared prefix `0`
    ("coin_flip", 1.0, "0", "3.051757812e-05", 0.0),  # within 1e-4, but no answer to a probability of 3e-05
    ("coin_flip", 1.0, "5/16", "0.3125", 1.0),
    ("game_of_life_halting", 1.0, "True", "False", 0.0),  # bool("True") == bool("False")
    ("game_of_life_halting", 1.0, "false", "False", 1.0),
    ("number_sorting", 1.0, "['1.5', '2.5']", "['1.0', '2.0']", 0.0),  # each within 1
    ("number_sorting", 1.0, "[1, 2]", "['1.0', '2.0']", 1.0),
    ("gsm_symbolic", 1.0, "-18", "18", 0.0),  # read as 18
    ("decimal_arithmetic", 1.0, "6.321", "6.32098837209", 0.0),  # within 10^-3, 4 of 12 digits
    ("knights_knaves", 0.65, "Zoey is a knight, and Ann is a knight.", "Zoey is a knight, and Ann is a knave.", 0.0),
])
def test_answer_credit_rules_for_wrong_answers_paid(dataset, score, text, oracle, expected):
    assert answer_credit(dataset, score, text, {"answer": oracle, "metadata": {}}) == expected
