"""reasoning-gym scorers that pay for a wrong answer: each dataset's own `score_answer` pays the wrong
answers built here, and the `answer` reward (`ANSWER_CREDIT`) pays them 0 and the entry's answer 1."""

from __future__ import annotations

import json
import math

import pytest

from rlvr.tasks.reasoning_gym_answers import answer_credit


def _dead_grid(entry):
    return [json.dumps([[0] * len(row) for row in json.loads(entry["answer"])])]


def _zero_matrix(entry):
    return ["\n".join(" ".join("0" for _ in row.split()) for row in entry["answer"].splitlines())]


def _first_root_and_shifted_roots(entry):
    roots = [float(r) for r in entry["answer"].split(",")] if entry["answer"] else []
    shifted = ", ".join(f"{r + 0.01:.4f}" for r in roots)
    return ([f"{roots[0]:.4f}"] if len(roots) > 1 else []) + ([shifted] if roots else ["0"])


def _last_digit_changed(entry):
    truth = entry["answer"]
    last = max(i for i, c in enumerate(truth) if c.isdigit())
    return [truth[:last] + str((int(truth[last]) + 1) % 10) + truth[last + 1:]]


def _path_with_a_detour(entry):
    """A valid path two steps longer than the shortest: one step aside and back after its first step (so
    that the shortest path is not inside it, which the containment rule alone would catch)."""
    matrix, path = entry["metadata"]["matrix"], entry["answer"].split()
    if len(path) < 2:
        return []
    steps = {"right": (0, 1, "left"), "down": (1, 0, "up"), "left": (0, -1, "right"), "up": (-1, 0, "down")}
    row, col = next((r, c) for r, line in enumerate(matrix) for c, cell in enumerate(line) if cell == "*")
    row, col = row + steps[path[0]][0], col + steps[path[0]][1]
    for step, (dr, dc, back) in steps.items():
        r, c = row + dr, col + dc
        if 0 <= r < len(matrix) and 0 <= c < len(matrix[0]) and matrix[r][c] != "X" and back != path[0]:
            return [" ".join([path[0], step, back, *path[1:]])]
    return []


def _one_cell_wrong(entry):
    solution = entry["metadata"]["solution"]
    rows = [[str(v) for v in row] for row in solution]
    rows[0][0] = str(solution[0][0] % len(solution) + 1)
    return ["\n".join(" ".join(row) for row in rows)]


def _non_word_ladder(entry):
    """From the start word to the end word one letter at a time, left to right: mostly not English words."""
    start, end = entry["metadata"]["start_word"], entry["metadata"]["end_word"]
    ladder, word = [start], list(start)
    for i, letter in enumerate(end):
        if word[i] != letter:
            word[i] = letter
            ladder.append("".join(word))
    return [",".join(ladder)]


# Wrong answers each dataset's scorer pays for (read in reasoning-gym 0.1.25, see ANSWER_CREDIT).
WRONG_ANSWERS = {
    "game_of_life": _dead_grid,
    "polynomial_equations": _first_root_and_shifted_roots,
    "pool_matrix": _zero_matrix,
    "power_function": lambda entry: ["0", "not a number"],
    "prime_factorization": lambda entry: [str(entry["metadata"]["number"]), "2"],
    "propositional_logic": lambda entry: [*entry["metadata"]["premises"], "P", "(P ∨ ¬P)"],
    "rearc": lambda entry: ["0"],
    "rectangle_count": lambda entry: [str(int(entry["answer"]) + 1)],
    "rubiks_cube": lambda entry: ["U", "R R"],
    "rush_hour": lambda entry: ["A+1", "A-1"],
    "sentence_reordering": lambda entry: [entry["question"].split(": ", 1)[1].strip(), "a b"],
    "shortest_path": _path_with_a_detour,
    "sudoku": _one_cell_wrong,
    "time_intervals": _last_digit_changed,
    "tower_of_hanoi": lambda entry: [entry["answer"].splitlines()[0]],
    "tsumego": lambda entry: ["A1", "pass"],
    "word_ladder": _non_word_ladder,
    "word_sorting": lambda entry: [", ".join(entry["metadata"]["original_words"]),
                                   ", ".join(reversed(entry["metadata"]["sorted_words"]))],
}
# An accepted answer where the entry has none (any solution is checked by the scorer). propositional_logic's
# own example answer is at times a premise copied (`¬P` from `¬P, Q`); two premises joined by ∧ follow too.
RIGHT_ANSWER = {"propositional_logic": lambda meta: f"({meta['premises'][0]} ∧ {meta['premises'][-1]})",
                "rubiks_cube": lambda meta: meta["example_correct_answer"]}


@pytest.mark.parametrize("dataset", sorted(WRONG_ANSWERS))
def test_partial_credit_for_a_wrong_answer_is_not_paid(dataset):
    """The scorer pays these wrong answers (an all-dead Game of Life grid earned 0.95, the number itself
    0.5 as its own prime factorization, a premise 1 as a conclusion): `answer` pays them 0, a right one 1."""
    import reasoning_gym

    data = reasoning_gym.create_dataset(dataset, size=6, seed=1)
    paid = 0
    for entry in data:
        for guess in WRONG_ANSWERS[dataset](entry):
            raw = data.score_answer(guess, entry)
            if raw >= 1.0 and guess not in entry["metadata"].get("premises", []):
                continue  # right by chance (a prime's factorization is the prime)
            paid += raw > 0
            assert answer_credit(dataset, raw, guess, entry) == 0.0, (guess, raw)
        right = entry["answer"] if entry["answer"] is not None else RIGHT_ANSWER.get(dataset, lambda m: None)(
            entry["metadata"])
        if right is not None:
            assert data.score_answer(right, entry) == 1.0
            assert answer_credit(dataset, 1.0, right, entry) == 1.0
    assert paid >= 4  # the scorer pays these answers: the rule is what keeps them at 0


LOCK = {"answer": "B → B → B → B", "metadata": {}}
LOGIC = {"answer": None, "metadata": {"premises": ["Q", "(Q → P)"]}}


@pytest.mark.parametrize("dataset, score, text, entry, expected", [
    ("quantum_lock", 0.5, "A → B → B → A → B", LOCK, 0.0),  # longer than the shortest sequence asked for
    ("quantum_lock", 1.0, "B → B → B → B", LOCK, 1.0),
    ("game_of_life", 0.95, "[[0,0],[0,0]]", {"answer": "[[0,1],[0,0]]", "metadata": {}}, 0.0),  # cells right
    ("prime_factorization", 0.5, "12", {"answer": "2 × 2 × 3", "metadata": {}}, 0.0),  # the number itself
    ("prime_factorization", 1.0, "2 × 2 × 3", {"answer": "2 × 2 × 3", "metadata": {}}, 1.0),
    ("propositional_logic", 1.0, "(Q→P)", LOGIC, 0.0),  # a premise, spaced otherwise
    ("propositional_logic", 0.25, "P", LOGIC, 0.0),  # a single letter: trivial
    ("propositional_logic", 1.0, "(P ∧ Q)", LOGIC, 1.0),
    ("tower_of_hanoi", 0.5, "a solution twice the optimal length", LOCK, 0.5),  # solved in more moves: kept
    ("tower_of_hanoi", 0.05, "Move disk 1 from Peg 1 to Peg 2", LOCK, 0.0),
    ("tsumego", 0.05, "C4", {"answer": "D4", "metadata": {}}, 0.0),
])
def test_credit_rules_on_given_scores(dataset, score, text, entry, expected):
    assert answer_credit(dataset, score, text, entry) == expected


def test_polynomial_roots_within_rounding_earn_full_credit():
    """polynomial_equations' score for roots 0.00004 off is below 1: a rounding difference still earns 1. One
    root of three 0.0003 off (a last digit dropped) still scores 0.999 and earns 0, as do roots 0.01 off."""
    import reasoning_gym

    data = reasoning_gym.create_dataset("polynomial_equations", size=12, seed=1)
    checked = 0
    for entry in data:
        roots = [float(r) for r in entry["answer"].split(",")]
        rounded_apart = ", ".join(f"{r + 0.00004:.5f}" for r in roots)
        raw = data.score_answer(rounded_apart, entry)
        assert 0.999 < raw < 1.0  # full_credit_only would pay it nothing
        assert answer_credit("polynomial_equations", raw, rounded_apart, entry) == 1.0
        one_off = ", ".join(f"{r + (0.0003 if k == 0 else 0):.4f}" for k, r in enumerate(roots))
        assert data.score_answer(one_off, entry) > 0.99
        assert answer_credit("polynomial_equations", data.score_answer(one_off, entry), one_off, entry) == 0.0
        off = ", ".join(f"{r + 0.01:.4f}" for r in roots)
        assert data.score_answer(off, entry) == pytest.approx(math.exp(-0.1), abs=1e-3)
        assert answer_credit("polynomial_equations", data.score_answer(off, entry), off, entry) == 0.0
        checked += 1
    assert checked >= 6
    # no real roots: the scorer ignores what is no number, so any text scores 1; `""` is the asked answer
    none = {"answer": "", "metadata": {}}
    for text, expected in (("no idea", 0.0), ("x = 2", 0.0), ('""', 1.0)):
        assert data.score_answer(text, none) == 1.0
        assert answer_credit("polynomial_equations", 1.0, text, none) == expected, text


def test_a_dataset_too_small_for_the_size_names_the_option():
    """word_ladder has fewer ladders than the default 100000 questions: the error says which option to lower."""
    from rlvr.tasks import build_task

    with pytest.raises(ValueError, match=r"word_ladder' of 100000 questions: .*task.options.size, now 100000"):
        build_task("reasoning_gym:word_ladder", use_chat_template=False)
    task = build_task("reasoning_gym:word_ladder", options={"size": 500, "eval_size": 2}, use_chat_template=False)
    assert len(task.examples("train", 3, seed=0)) == 3
