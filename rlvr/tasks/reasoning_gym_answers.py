"""Which reasoning-gym scorers evaluate the answer text, and the one shape of text each is given.

Audited against reasoning-gym 0.1.25 (every `score_answer` read, and each one run with marked
answers under an audit hook that records what gets compiled). Nine pass the answer to Python's
`eval` or sympy's `parse_expr`; for those the answer is parsed into data of the shape the scorer
expects (`rlvr.tasks.verification.safe_parse`) and re-rendered, and only that canonical text reaches the
scorer. Anything else is refused (`unjudgeable`). The other datasets compare, regex-match or
`json.loads` the text without evaluating it and get the answer as written. A dataset in neither
list (a newer reasoning-gym) cannot be used until it is audited: `check_audited` says so.
`answer_credit` turns a scorer's score into the `answer` reward: some scorers pay a flat credit
for any parsable answer or a similarity credit for a near miss, which is not correctness.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Callable

from rlvr.tasks.verification.answers import parse_rational
from rlvr.tasks.verification.safe_parse import (Grammar, Refused, parse_expression, parse_literal, render_expression,
                                                render_literal)

# Plain-text forms, as the questions ask for them. ASCII classes only: `\d` would admit other
# scripts' digits. Single spaces and canonical integers (no `+`, no leading zeros), so that the
# re-rendering of what matches is the text itself and exact-match scoring is unchanged.
INTEGER = r"(?:0|-?[1-9][0-9]{0,29})"
INTEGER_ROW = re.compile(rf"{INTEGER}(?: {INTEGER})*")
BOARD_ROW = re.compile(r"[Q_](?: [Q_])*")
LETTERS = re.compile(r"[A-Za-z]{1,10000}")

# Single letters that name something in sympy's namespace, which `parse_expr` would not read as
# a symbol (E is Euler's number where a grammar allows it as a constant).
SYMPY_LETTERS = frozenset("EINOQS")
LETTER_SYMBOLS = frozenset(chr(c) for c in [*range(65, 91), *range(97, 123)]) - SYMPY_LETTERS
ARITHMETIC = Grammar(operators=frozenset("+-*/"))
POLYNOMIAL = Grammar(operators=frozenset({"+", "-", "*", "/", "**"}), symbols=LETTER_SYMBOLS)
INTEGRATION_FUNCTIONS = frozenset(
    "sin cos tan cot sec csc asin acos atan acot sinh cosh tanh asinh acosh atanh exp log ln sqrt "
    "Abs Integral".split()
)
ANTIDERIVATIVE = Grammar(operators=frozenset({"+", "-", "*", "/", "**"}),
                         symbols=LETTER_SYMBOLS | {"E", "pi"}, functions=INTEGRATION_FUNCTIONS, allow_float=True)


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise Refused(reason)


def _is_int(value) -> bool:
    return type(value) is int


def _int_rows(text: str) -> list[str]:
    rows = text.split("\n")
    _require(all(INTEGER_ROW.fullmatch(row) for row in rows), "not rows of single-space-separated integers")
    return rows


def spiral_matrix(answer: str, entry: dict) -> str:
    """`1 2 3 4` (the asked form, compared exactly) or a list of integers (scored 0.1 by the scorer)."""
    if INTEGER_ROW.fullmatch(answer):
        return " ".join(str(int(token)) for token in answer.split(" "))
    value = parse_literal(answer)
    _require(isinstance(value, list) and all(_is_int(item) for item in value), "not a list of integers")
    return render_literal(value)


def binary_matrix(answer: str, entry: dict) -> str:
    """Rows of integers, one row a line, or a list of lists of integers."""
    if INTEGER_ROW.fullmatch(answer.split("\n", 1)[0]):
        return "\n".join(" ".join(str(int(t)) for t in row.split(" ")) for row in _int_rows(answer))
    value = parse_literal(answer)
    _require(isinstance(value, list) and all(isinstance(row, list) and all(_is_int(x) for x in row) for row in value),
             "not a list of lists of integers")
    return render_literal(value)


def n_queens(answer: str, entry: dict) -> str:
    """A board of `Q` and `_`, one row a line, or a list of lists of strings."""
    rows = answer.split("\n")
    if all(BOARD_ROW.fullmatch(row) for row in rows):
        return "\n".join(" ".join(row.split(" ")) for row in rows)
    value = parse_literal(answer)
    _require(isinstance(value, list) and all(isinstance(row, list) and all(type(x) is str for x in row)
                                             for row in value), "not a board or a list of lists of strings")
    return render_literal(value)


def string_insertion(answer: str, entry: dict) -> str:
    """Letters (compared exactly), or a list of strings / one string literal (joined by the scorer)."""
    if LETTERS.fullmatch(answer):
        return answer
    value = parse_literal(answer)
    _require(type(value) is str or (isinstance(value, list) and all(type(x) is str for x in value)),
             "not letters or a list of strings")
    return render_literal(value)


def arithmetic_expression(answer: str, entry: dict) -> str:
    """countdown, puzzle24: integers with `+ - * /` and parentheses."""
    return render_expression(parse_expression(answer, ARITHMETIC))


def polynomial(answer: str, entry: dict) -> str:
    """polynomial_multiplication: integers and single-letter symbols with `+ - * / **`."""
    return render_expression(parse_expression(answer, POLYNOMIAL))


def antiderivative(answer: str, entry: dict) -> str:
    """simple/intermediate_integration: symbols, `C`, `E`, `pi`, numbers and the usual functions."""
    return render_expression(parse_expression(answer, ANTIDERIVATIVE))


Shape = Callable[[str, dict], str]
EVALUATING: dict[str, Shape] = {
    "binary_matrix": binary_matrix,
    "countdown": arithmetic_expression,
    "intermediate_integration": antiderivative,
    "n_queens": n_queens,
    "polynomial_multiplication": polynomial,
    "puzzle24": arithmetic_expression,
    "simple_integration": antiderivative,
    "spiral_matrix": spiral_matrix,
    "string_insertion": string_insertion,
}
NON_EVALUATING = frozenset("""
ab acre advanced_geometry aiw arc_1d arc_agi base_conversion basic_arithmetic bf binary_alternation
bitwise_arithmetic boxnet caesar_cipher calendar_arithmetic chain_sum circuit_logic codeio coin_flip
color_cube_rotation complex_arithmetic count_bits count_primes course_schedule cryptarithm
decimal_arithmetic decimal_chain_sum dice emoji_mystery family_relationships figlet_font
fraction_simplification futoshiki game_of_life game_of_life_halting gcd graph_color group_anagrams
gsm_symbolic isomorphic_strings jugs kakurasu knight_swap knights_knaves largest_island lcm
leg_counting letter_counting letter_jumble list_functions mahjong_puzzle manipulate_matrix maze
mini_sudoku modulo_grid needle_haystack number_filtering number_format number_sequence number_sorting
palindrome_generation palindrome_partitioning path_star polynomial_equations pool_matrix power_function
prime_factorization products propositional_logic quantum_lock ransom_note rearc rectangle_count
rotate_matrix rotten_oranges rubiks_cube rush_hour self_reference sentence_reordering shortest_path
simple_equations simple_geometry sokoban spell_backward string_manipulation string_splitting
string_synthesis sudoku survo syllogism time_intervals tower_of_hanoi tsumego word_ladder
word_sequence_reversal word_sorting zebra_puzzles
""".split())


def check_audited(dataset: str) -> None:
    """Raise when `dataset`'s scorer has not been audited for evaluating its answer."""
    if dataset not in EVALUATING and dataset not in NON_EVALUATING:
        hint = " (mix datasets with reasoning_gym:mix instead)" if dataset == "composite" else ""
        raise ValueError(f"reasoning-gym dataset {dataset!r} is not among the audited scorers{hint}; "
                         f"audited: {', '.join(sorted([*EVALUATING, *NON_EVALUATING]))}")


def scorer_text(dataset: str, answer: str, entry: dict) -> str:
    """The text handed to `dataset`'s scorer for `answer`: canonical where the scorer evaluates text.

    The dataset that really scores is the entry's `source_dataset` (a composite dataset forwards
    to it); both names must be audited. Raises `Refused` with the reason otherwise.
    """
    source = str((entry.get("metadata") or {}).get("source_dataset", dataset))
    for name in {dataset, source}:
        if name not in EVALUATING and name not in NON_EVALUATING:
            raise Refused(f"dataset {name!r} is not audited")
    shape = EVALUATING.get(source) or EVALUATING.get(dataset)
    return answer if shape is None else shape(answer, entry)


def without_containment_credit(score: float, answer: str, oracle) -> float:
    """0 for partial credit paid because the oracle is inside a longer answer, else `score`.

    reasoning-gym's default `score_answer` pays len(oracle) / len(answer) when the oracle is a
    substring of the answer, so `-5 1 2 3` earns 0.2 for `-5` and every number of the prompt
    written together earns more than any single wrong guess.
    """
    oracle = str(oracle).strip()
    if 0 < score < 1 and oracle and oracle in answer and answer.strip() != oracle:
        return 0.0
    return score


# A credit rule: (the scorer's score, the text it scored, the entry) -> the `answer` reward.
Credit = Callable[[float, str, dict], float]


def containment_rule(score: float, text: str, entry: dict) -> float:
    return without_containment_credit(score, text, entry["answer"])


def full_credit_only(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit, else 0: its lower scores are paid for a wrong answer."""
    return 1.0 if score >= 1.0 else 0.0


def exact_oracle_only(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit and the answer is the oracle as written, else 0."""
    return 1.0 if score >= 1.0 and text.strip() == str(entry["answer"]).strip() else 0.0


def finite_full_credit_only(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit for an answer that names no NaN, else 0."""
    return 1.0 if score >= 1.0 and "nan" not in text.lower() else 0.0


def no_flat_credit(score: float, text: str, entry: dict) -> float:
    """The score when it is above the scorer's flat consolation payments (at most 0.1), else 0; the
    rest as `containment_rule`."""
    return containment_rule(score, text, entry) if score > 0.1 else 0.0


# polynomial_equations' score is the mean of exp(-10 x distance) over the roots, less 0.5 for each one
# missing or extra, so a root 0.0003 off in three still scores 0.999. A root may be one unit off in the 4th
# decimal (the question's rounding rule is ambiguous), not more.
ROOT_TOLERANCE = 1.5e-4


def _roots(text: str) -> list[float] | None:
    """The comma-separated numbers of `text` in order of size; [] for no roots (`""`); None if any is no number."""
    if text.strip() in ("", '""'):
        return []
    try:
        return sorted(float(value) for value in text.split(","))
    except ValueError:
        return None


def roots_within_rounding(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays and the answer names the oracle's roots, each within `ROOT_TOLERANCE`, else 0.

    The scorer ignores what is no number, so where the equation has no real roots any text scores 1."""
    answer, oracle = _roots(text), _roots(str(entry["answer"] or ""))
    if score <= 0 or answer is None or oracle is None or len(answer) != len(oracle):
        return 0.0
    return 1.0 if all(abs(a - o) <= ROOT_TOLERANCE for a, o in zip(answer, oracle)) else 0.0


def no_premise_copy(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit for a conclusion that is not one of the question's premises, else 0."""
    premises = {"".join(str(p).split()) for p in entry["metadata"]["premises"]}
    return 1.0 if score >= 1.0 and "".join(text.split()) not in premises else 0.0


# `3.051757812e-05`, as coin_flip writes small probabilities; at most three exponent digits, so that
# the exact value is cheap to build (this runs outside the worker's time limit).
SCIENTIFIC = re.compile(r"-?[0-9]{1,40}(?:\.[0-9]{1,40})?[eE][-+]?[0-9]{1,3}")


def parse_number(text: str) -> Fraction | None:
    """The exact value of a numeral, a fraction or a number in scientific notation, else None."""
    value = parse_rational(text)
    if value is None and SCIENTIFIC.fullmatch(text.strip()):
        value = Fraction(text.strip())
    return value


def number_within(relative_tolerance: float) -> Credit:
    """A rule: 1 when the scorer pays full credit and the answer is one number within `relative_tolerance`
    x |oracle| of the oracle, else 0. Relative, so that `0` is no answer to a small probability; the
    scorer's first number of the text, or its shared prefix, does not decide."""
    def credit(score: float, text: str, entry: dict) -> float:
        answer, oracle = parse_number(text), parse_number(str(entry["answer"]))
        close = answer is not None and oracle is not None and abs(answer - oracle) <= relative_tolerance * abs(oracle)
        return 1.0 if score >= 1.0 and close else 0.0
    return credit


def oracle_ignoring_case(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit and the answer is the oracle up to letter case, else 0."""
    return 1.0 if score >= 1.0 and text.strip().lower() == str(entry["answer"]).strip().lower() else 0.0


def same_numbers_in_order(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit and the answer's list holds the oracle's numbers, in its order."""
    def numbers(listed: str) -> list[float] | None:
        try:
            values = json.loads(listed.replace("'", '"'))
            return [float(value) for value in values] if isinstance(values, list) else None
        except (ValueError, TypeError):
            return None
    answer = numbers(text)
    return 1.0 if score >= 1.0 and answer is not None and answer == numbers(str(entry["answer"])) else 0.0


def given_numbers_only(score: float, text: str, entry: dict) -> float:
    """1 when the scorer pays full credit and the expression uses the puzzle's numbers, each once."""
    used = sorted(int(n) for n in re.findall(r"[0-9]+", text))
    return 1.0 if score >= 1.0 and used == sorted(int(n) for n in entry["metadata"]["numbers"]) else 0.0


# Datasets whose scores below 1 say nothing about correctness, with what they pay for (read in
# reasoning-gym 0.1.25). Any other dataset keeps its partial credit, less containment credit.
ANSWER_CREDIT: dict[str, tuple[Credit, str]] = {
    "advanced_geometry": (no_flat_credit, "0.05 for any wrong non-empty number, 0.01 for anything else; "
                                          "the 0.5 for an incircle radius right to two decimals is kept"),
    "arc_agi": (full_credit_only, "0.05 for any text that parses as a board, the output or not (`0`)"),
    "boxnet": (full_credit_only, "max(0.05, share of boxes moved to their targets) for any JSON plan (`[]`)"),
    "calendar_arithmetic": (full_credit_only, "0.1 for any wrong weekday (a constant `Monday` earns 0.23 on "
                                              "average), 0.05 for one in another case, and exp(-5 x relative "
                                              "error) for any day count, so a typical number earns without "
                                              "counting"),
    "codeio": (full_credit_only, "a JSON similarity share, at least 0.01, for any JSON object that is not "
                                 "the output"),
    "coin_flip": (number_within(1e-4), "the share of leading characters shared with the oracle, over the "
                                       "shorter of the two: `0` earns 1.0 for `0.3125`"),
    "color_cube_rotation": (full_credit_only, "0.01 for any answer that is not the colour"),
    "complex_arithmetic": (finite_full_credit_only, "min(1, exp(-distance)) for any number, and 1 for `NaN` "
                                                    "(exp(-nan) is nan, and min(1.0, nan) is 1.0) on every prompt"),
    "countdown": (full_credit_only, "0.05 for any parsable expression, right numbers or not, "
                                    "0.01 for anything else"),
    "cryptarithm": (full_credit_only, "0.01 for any parsable letter assignment that does not satisfy the sum"),
    "decimal_arithmetic": (number_within(0.0), "1 for anything within 10^-3 (the operands' decimal places), "
                                               "though the question asks for 12 significant digits: `0` for "
                                               "0.00033"),
    "emoji_mystery": (full_credit_only, "the share of characters in place for any text of the sentence's "
                                        "length, 0.01 for any other text"),
    "figlet_font": (full_credit_only, "0.1 for each letter in its place"),
    "fraction_simplification": (full_credit_only, "0.05 for any non-empty wrong fraction, 0.1 for one that "
                                                  "shares the unsimplified numerator or denominator"),
    "futoshiki": (full_credit_only, "0.9 x the share of cells right for any grid of digits"),
    "game_of_life": (full_credit_only, "the share of cells right: an all-dead grid earns about 0.95"),
    "game_of_life_halting": (oracle_ignoring_case, "1 for any non-empty answer (`bool(answer) == "
                                                   "bool(oracle)`, and the oracle `False` is a non-empty string)"),
    "graph_color": (full_credit_only, "0.01 for any JSON mapping that is no proper colouring (`{}`)"),
    "group_anagrams": (full_credit_only, "0.01 for any JSON that is not the grouping (`[]`)"),
    "gsm_symbolic": (number_within(0.0), "0.01 for any number, and 1 when the first number of the text, "
                                         "its minus sign dropped (`\\b` cannot precede `-`), is the answer"),
    "jugs": (full_credit_only, "0.01 for any JSON list of moves that does not solve the puzzle (`[]`)"),
    "knight_swap": (full_credit_only, "0.05 for legal moves that swap nothing, optimal / length for a "
                                      "longer swap"),
    "knights_knaves": (full_credit_only, "0.3 + 0.7 x the share of people right for any assignment naming "
                                         "everyone: one constant role for all earns it"),
    "letter_jumble": (full_credit_only, "the share of words in place"),
    "mini_sudoku": (full_credit_only, "0.9 x the share of cells right for any grid of digits"),
    "number_sorting": (same_numbers_in_order, "1 for any sorted list whose numbers are each within 1 of the "
                                              "oracle's"),
    "palindrome_generation": (full_credit_only, "0.02 for any text that is no palindrome, 0.05 for a "
                                                "palindrome of other letters"),
    "polynomial_equations": (roots_within_rounding, "mean exp(-10 x distance) over the roots, less 0.5 a root "
                                                    "missing or extra (`0` earns 0.5 where 0 is one of two roots, "
                                                    "a last digit dropped 0.999), and 1 for any text without a "
                                                    "number where there is no real root"),
    "pool_matrix": (full_credit_only, "0.1 for any matrix of the right shape (all zeros)"),
    "power_function": (full_credit_only, "0.01 for any answer, number or not"),
    "prime_factorization": (full_credit_only, "0.5 for factors whose product is the number (the number itself, "
                                              "copied from the question), 0.01 for anything else"),
    "propositional_logic": (no_premise_copy, "1 for a premise copied from the question (it follows from "
                                             "itself), 0.25 for a trivial one (`P`, `P ∨ ¬P`), 0.05 for any wrong "
                                             "conclusion"),
    "puzzle24": (given_numbers_only, "0.01 for any answer, and 1 for any four numbers in range that make "
                                     "24 (`6*4*1*1` solved every puzzle), the puzzle's numbers or not"),
    "quantum_lock": (full_credit_only, "0.5 for a longer sequence than the shortest one asked for"),
    "rearc": (full_credit_only, "0.05 for any parsable wrong board"),
    "rectangle_count": (full_credit_only, "0.8 x (1 - distance / 5) for a count off by up to 4: a count off by "
                                          "one earns 0.64"),
    "rubiks_cube": (full_credit_only, "0.01 for any answer that does not solve the cube (its partial credit, "
                                      "the share of stickers in place, fails in 0.1.25 and falls back to 0.01)"),
    "rush_hour": (full_credit_only, "0.01 for any legal moves that do not free the car"),
    "sentence_reordering": (full_credit_only, "the share of words in place for as many words, 0.05 for "
                                              "any other text"),
    "shortest_path": (full_credit_only, "0.5 for a longer path than the shortest one asked for"),
    "spell_backward": (exact_oracle_only, "1/len(word) for each letter in its place, 0.8 for the word "
                                          "followed by more letters, 1 for the word in another case"),
    "sudoku": (full_credit_only, "0.9 x the share of cells right for rows of digits: any filled grid earns "
                                 "for the givens"),
    "time_intervals": (full_credit_only, "1 - error / (the largest difference the dataset draws) for any "
                                         "duration: `00:00:00` earns about 0.9"),
    "tower_of_hanoi": (no_flat_credit, "0.05 for legal moves that do not solve it (the first move alone); a "
                                       "longer solution keeps its optimal / moves"),
    "tsumego": (no_flat_credit, "0.05 for any coordinate, 0.01 for anything else"),
    "word_ladder": (full_credit_only, "1 halved for each step that is not an English word: a ladder of "
                                      "non-words (`TIPS,BIPS,BRPS,BRAS,BRAN`) earns 0.25"),
    "word_sorting": (full_credit_only, "the share of words in place, at least 0.2 for the words in any "
                                       "order (the question's own)"),
}


# Datasets whose entries hold no answer (`None`: any solution the scorer verifies is one) but whose
# metadata holds one solution, and how to write it as the question asks.
REFERENCE_ANSWERS: dict[str, Callable[[dict], str]] = {
    "graph_color": lambda entry: json.dumps({str(vertex): colour
                                             for vertex, colour in entry["metadata"]["possible_answer"].items()}),
}


def reference_answer(dataset: str, entry: dict) -> str | None:
    """An answer `dataset`'s scorer pays in full for `entry`: its own answer, else one solution from
    its metadata (`REFERENCE_ANSWERS`), else None."""
    if entry.get("answer") is not None:
        return str(entry["answer"])
    write = REFERENCE_ANSWERS.get(dataset)
    return None if write is None else write(entry)


def answer_credit(dataset: str, score: float, text: str, entry: dict) -> float:
    """The `answer` reward for the score `dataset`'s scorer gave `text` (what it saw: `scorer_text`)."""
    credit = ANSWER_CREDIT.get(dataset, (containment_rule, ""))[0]
    return credit(score, text, entry)
