"""reasoning_gym tasks: round trips through each dataset's own answers, format reward, mixtures,
refused answers, and the time limit. (Escape attempts: tests/tasks/test_verifier_escapes.py.)"""

import math
import time

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.reasoning_gym_answers import without_containment_credit
from rlvr.tasks.verification.worker import WORKER, call_with_timeout

SHORT_WORDS = {"min_word_len": 3, "max_word_len": 5}


@pytest.fixture(scope="module")
def spell():
    return build_task("reasoning_gym:spell_backward", options={**SHORT_WORDS, "eval_size": 20, "size": 2000},
                      use_chat_template=False, seed=3)


def formatted(answer: str) -> str:
    return f" thinking </think> <answer>{answer}</answer>"


def test_round_trip_spell_backward(spell):
    """Each entry's own answer scores correct and fully formatted; a wrong answer does not."""
    for example in spell.examples("eval", 10, 0) + spell.examples("train", 10, 5):
        word = example.metadata["entry"]["metadata"]["word"]
        assert 3 <= len(word) <= 5
        right = spell.score(formatted(example.ground_truth), example)
        assert right.status == "ok" and right.correct
        assert right.components == {"answer": 1.0, "format": 1.0, "binary": 1.0}
        assert right.total == pytest.approx(1.1)  # answer 1 + format 0.1 * 1
        wrong = spell.score(formatted(word), example)  # forwards instead of backwards
        if word != word[::-1]:
            # the scorer's similarity credit for a near miss is not paid (ANSWER_CREDIT).
            assert not wrong.correct and wrong.components["answer"] == 0.0 and wrong.components["binary"] == 0.0


@pytest.mark.parametrize("name", ["countdown", "basic_arithmetic", "word_sorting"])
def test_round_trip_other_datasets(name):
    task = build_task(f"reasoning_gym:{name}", options={"eval_size": 4, "size": 100}, use_chat_template=False)
    for example in task.iter_eval():
        verdict = task.score(formatted(str(example.ground_truth)), example)
        assert verdict.correct and verdict.status == "ok", (name, example.ground_truth, verdict.detail)
        assert verdict.verifier == f"reasoning_gym/{name}"


def test_format_needs_an_answer_span_of_its_own(spell):
    """r1_zero: a non-empty span after `</think>`; the prompt's own `<think>` earns nothing any more."""
    example = spell.examples("eval", 1, 0)[0]
    assert spell.score(formatted("zzz"), example).components["format"] == 1.0  # wrong, but an answer
    missing = spell.score(" thinking, no tags", example)
    assert missing.components == {"answer": 0.0, "format": 0.0, "binary": 0.0} and missing.status == "ok"
    no_close = spell.score(" thinking <answer>zzz</answer>", example)  # never closed <think>
    assert no_close.components["format"] == 0.0
    chat = build_task("reasoning_gym:spell_backward",
                      options={**SHORT_WORDS, "eval_size": 2, "prompt": "question_only"})
    chat_example = chat.examples("eval", 1, 0)[0]
    assert chat.score("<answer>zzz</answer>", chat_example).components["format"] == 1.0  # no </think> asked for
    assert chat.score("<answer> </answer>", chat_example).components["format"] == 0.0


def test_eval_is_held_out_and_train_is_deterministic(spell):
    held_out = {e.metadata["entry"]["question"] for e in spell.iter_eval()}
    train = [e.metadata["entry"]["question"] for seed in range(40) for e in spell.examples("train", 8, seed)]
    assert not held_out & set(train)
    assert [e.prompt for e in spell.examples("train", 4, 7)] == [e.prompt for e in spell.examples("train", 4, 7)]
    assert spell.examples("train", 1, 0)[0].prompt.endswith("Assistant: <think>")


def test_mixture_draws_both_and_scores_each_with_its_own_verifier():
    task = build_task("reasoning_gym:mix", options={
        "datasets": {"spell_backward": 0.5, "countdown": 0.5}, "configs": {"spell_backward": SHORT_WORDS},
        "eval_size": 16, "size": 500}, use_chat_template=False)
    sources = [e.metadata["source_dataset"] for e in task.examples("train", 40, 0)]
    assert 8 < sources.count("countdown") < 32 and set(sources) == {"spell_backward", "countdown"}
    for example in task.iter_eval():
        verdict = task.score(formatted(example.ground_truth), example)
        assert verdict.correct and verdict.verifier == f"reasoning_gym/{example.metadata['source_dataset']}"


def test_bad_names_and_options():
    with pytest.raises(ValueError, match="name the dataset"):
        build_task("reasoning_gym")
    with pytest.raises(ValueError, match="cannot create reasoning-gym dataset 'spell_backward'"):
        build_task("reasoning_gym:spell_backward", options={"no_such_option": 1}, use_chat_template=False)
    with pytest.raises(ValueError, match="reasoning_gym:mix: set task.options.datasets"):
        build_task("reasoning_gym:mix", use_chat_template=False)


@pytest.mark.parametrize("answer", [
    "__import__('os').getcwd()",  # an attribute of a call
    "open(1) + 2",  # a call of a function the arithmetic grammar does not name
    "exit + 2",  # a name that is not a symbol of the grammar (countdown has none)
])
def test_refused_answer_is_unjudgeable_not_wrong(answer):
    """A countdown answer that is not arithmetic is refused before the scorer (which would
    `parse_expr` it): NaN answer, the format still counts."""
    task = build_task("reasoning_gym:countdown", options={"eval_size": 1, "size": 10}, use_chat_template=False)
    example = task.examples("eval", 1, 0)[0]
    verdict = task.score(formatted(answer), example)
    assert verdict.status == "unjudgeable" and math.isnan(verdict.components["answer"])
    assert verdict.detail.startswith("refused: ")
    assert verdict.components["format"] == 1.0 and verdict.total == pytest.approx(0.1)


def test_a_comment_in_an_answer_never_reaches_the_scorer():
    """countdown's scorer counts every integer in its text: the `1` in the comment would make the
    numbers used differ from the ones given (0.05). The scorer gets the canonical rendering instead."""
    task = build_task("reasoning_gym:countdown", options={"eval_size": 2, "size": 10}, use_chat_template=False)
    for example in task.examples("eval", 2, 0):
        verdict = task.score(formatted(f"{example.ground_truth}  # 1"), example)
        assert verdict.status == "ok" and verdict.correct and verdict.components["answer"] == 1.0, verdict
        assert "#" not in verdict.detail


def test_unaudited_dataset_is_refused_when_the_task_is_built():
    with pytest.raises(ValueError, match="'composite' is not among the audited scorers.*reasoning_gym:mix"):
        build_task("reasoning_gym:composite", use_chat_template=False)


def test_scorer_hang_becomes_timeout_within_twice_the_limit():
    """simple_integration parses the answer with sympy; `9**9**9**9` would compute for hours."""
    limit = 1.0
    task = build_task("reasoning_gym:simple_integration", options={"eval_size": 1, "size": 10,
                                                                   "timeout_seconds": limit}, use_chat_template=False)
    example = task.examples("eval", 1, 0)[0]
    WORKER.warm_up("reasoning_gym")
    started = time.monotonic()
    verdict = task.score(formatted("9**9**9**9"), example)
    assert time.monotonic() - started < 2 * limit
    assert verdict.status == "timeout" and math.isnan(verdict.components["answer"])
    assert task.score(formatted(example.ground_truth), example).correct  # the next check works


def test_an_answer_that_only_contains_the_oracle_earns_no_partial_credit():
    """basic_arithmetic's default scorer pays len(oracle) / len(answer) for an answer holding the oracle:
    every number of the prompt written together would earn it without solving anything."""
    task = build_task("reasoning_gym:basic_arithmetic", options={"eval_size": 4, "size": 100},
                      use_chat_template=False)
    for example in task.iter_eval():
        truth = str(example.ground_truth)
        padded = task.score(formatted(f"{truth} 1 2 3"), example)
        assert padded.components["answer"] == 0.0 and padded.status == "ok", (truth, padded.detail)
        assert task.score(formatted(f"1 2 {truth}"), example).components["answer"] == 0.0
        assert task.score(formatted(truth), example).components["answer"] == 1.0


def test_containment_rule_keeps_other_partial_credit():
    assert without_containment_credit(0.25, "-45 1 2", "-45") == 0.0
    assert without_containment_credit(0.6, "olleh", "hello") == 0.6  # a near miss, not the oracle inside
    assert without_containment_credit(1.0, "-45", "-45") == 1.0
    assert without_containment_credit(0.5, " -45 ", "-45") == 0.5  # the oracle itself, padded: not containment


def raw_score(task, answer: str, example) -> float:
    """What the dataset's own scorer pays, before `answer_credit`."""
    name = example.metadata["source_dataset"]
    result = call_with_timeout("reasoning_gym_score", name, task.configs[name], answer, example.metadata["entry"],
                               timeout=task.timeout_seconds)
    assert result.status == "ok", result.detail
    return result.value["score"]


def test_countdown_pays_a_wrong_expression_nothing():
    """countdown's scorer pays 0.05 for any parsable expression, so a guess that solves nothing earned
    reward on every prompt. The `answer` component is 1 for a right expression and exactly 0 otherwise."""
    task = build_task("reasoning_gym:countdown", options={"eval_size": 4, "size": 10}, use_chat_template=False)
    for example in task.iter_eval():
        numbers = example.metadata["entry"]["metadata"]["numbers"]
        target = example.metadata["entry"]["metadata"]["target"]
        # the given numbers, each once, added or subtracted: well-formed, and the one that misses the target
        total, difference = sum(numbers), numbers[0] - sum(numbers[1:])
        all_numbers = " - ".join(map(str, numbers)) if total == target else " + ".join(map(str, numbers))
        assert (difference if total == target else total) != target
        for wrong in (all_numbers, "1 + 2", str(target + 1)):
            verdict = task.score(formatted(wrong), example)
            assert verdict.status == "ok" and verdict.components["answer"] == 0.0, (wrong, verdict)
            assert verdict.components["format"] == 1.0 and verdict.total == pytest.approx(0.1)
            # the scorer's own score, and the rule before this one, would pay it
            assert raw_score(task, wrong, example) == pytest.approx(0.05)
            assert without_containment_credit(0.05, wrong, example.ground_truth) == 0.05
        right = task.score(formatted(str(example.ground_truth)), example)
        assert right.components == {"answer": 1.0, "format": 1.0, "binary": 1.0}


def test_spell_backward_pays_only_the_exact_reversed_word():
    """spell_backward's scorer pays 1/len per letter in its place, 0.8 for extra letters after the word
    and 1.0 for the word in another case; only the reversed word as written earns `answer`."""
    task = build_task("reasoning_gym:spell_backward", options={**SHORT_WORDS, "eval_size": 6, "size": 100},
                      use_chat_template=False, seed=5)
    for example in task.iter_eval():
        truth = str(example.ground_truth)
        near = [truth[:-1], truth + "x", truth.swapcase(), truth[:-1] + ("a" if truth[-1] != "a" else "b")]
        for wrong in near:
            verdict = task.score(formatted(wrong), example)
            assert verdict.status == "ok" and verdict.components["answer"] == 0.0 and not verdict.correct, wrong
            assert raw_score(task, wrong, example) > 0.5  # what the scorer pays
            if truth not in wrong:  # and what the containment rule alone let through
                assert without_containment_credit(raw_score(task, wrong, example), wrong, truth) > 0.5
        assert raw_score(task, truth.swapcase(), example) == 1.0  # the scorer ignores case
        echoed = task.score(example.prompt + " </think> " + formatted(truth[:-1]), example)
        assert echoed.components["answer"] == 0.0
        assert task.score(formatted(truth), example).components == {"answer": 1.0, "format": 1.0, "binary": 1.0}


PUZZLE = {"answer": "4*(4 + 2)*1", "metadata": {"numbers": [1, 4, 2, 4]}}


@pytest.mark.parametrize("dataset, score, text, oracle, expected", [
    ("countdown", 0.05, "1 + 2", "3*4 - 5", 0.0),  # any parsable expression
    ("countdown", 0.01, "", "3*4 - 5", 0.0),
    ("countdown", 1.0, "4*3 - 5", "3*4 - 5", 1.0),  # another right expression: the scorer decides
    ("puzzle24", 0.01, "1 + 1", PUZZLE, 0.0),
    ("puzzle24", 1.0, "6*4*1*1", PUZZLE, 0.0),  # 24 from numbers in range, not the puzzle's: the scorer pays 1
    ("puzzle24", 1.0, "(2 + 4)*4*1", PUZZLE, 1.0),
    ("spell_backward", 0.6, "olleq", "olleh", 0.0),  # letters in place
    ("spell_backward", 0.8, "ollehx", "olleh", 0.0),  # the word, then more letters
    ("spell_backward", 1.0, "OLLEH", "olleh", 0.0),  # the scorer compares lowercased text
    ("spell_backward", 1.0, " olleh ", "olleh", 1.0),
    ("basic_arithmetic", 0.25, "-45 1 2", "-45", 0.0),  # no rule of its own: containment credit only
    ("knights_knaves", 0.65, "Zoey is a knight", "Zoey is a knave", 0.0),  # 0.3 + 0.7 x share right
    ("advanced_geometry", 0.05, "12.34", "30.5", 0.0),  # any wrong number
    ("advanced_geometry", 0.5, "1.23", "1.2345", 0.5),  # an incircle radius right to two decimals
    ("calendar_arithmetic", 0.1, "Monday", "Tuesday", 0.0),  # any weekday
    ("complex_arithmetic", 1.0, "NaN", "3.0 + 2.0i", 0.0),  # min(1.0, exp(-nan)) is 1.0
    ("complex_arithmetic", 1.0, "3.0 + 2.0i", "3.0 + 2.0i", 1.0),
])
def test_answer_credit_rules(dataset, score, text, oracle, expected):
    from rlvr.tasks.reasoning_gym_answers import answer_credit

    entry = oracle if isinstance(oracle, dict) else {"answer": oracle, "metadata": {}}
    assert answer_credit(dataset, score, text, entry) == expected


def test_puzzle24_pays_only_an_expression_of_the_puzzles_numbers():
    """puzzle24's scorer checks that four numbers in range make 24, not that they are the puzzle's: one
    constant answer solved every puzzle."""
    task = build_task("reasoning_gym:puzzle24", options={"eval_size": 6, "size": 10}, use_chat_template=False)
    for example in task.iter_eval():
        numbers = sorted(example.metadata["entry"]["metadata"]["numbers"])
        for constant in ("6*4*1*1", "8*3*1*1"):
            if sorted([int(n) for n in constant.split("*")]) == numbers:
                continue
            assert raw_score(task, constant, example) == 1.0  # what the scorer pays
            verdict = task.score(formatted(constant), example)
            assert verdict.components["answer"] == 0.0 and not verdict.correct, (numbers, verdict)
        right = task.score(formatted(str(example.ground_truth)), example)
        assert right.components == {"answer": 1.0, "format": 1.0, "binary": 1.0}, right


# Wrong but well-formed answers the datasets' own scorers pay a consolation for (0.01-0.1).
CONSOLATION_GUESSES = {
    "jugs": ["[]", '["fill A"]'], "graph_color": ["{}"], "cryptarithm": ["A=1,B=2"],
    "palindrome_generation": ["ab"], "fraction_simplification": ["7/9"],
    "calendar_arithmetic": ["Monday", "5"], "advanced_geometry": ["12.34", "(1, 2)"],
}


@pytest.mark.parametrize("dataset", sorted(CONSOLATION_GUESSES))
def test_consolation_credit_for_a_wrong_answer_is_not_paid(dataset):
    """These scorers pay a flat amount for any parsable wrong answer (a constant `Monday` earned 0.23
    on average): `answer` pays 0 for it, and 1 for the entry's own answer."""
    import reasoning_gym

    from rlvr.tasks.reasoning_gym_answers import answer_credit

    data = reasoning_gym.create_dataset(dataset, size=6, seed=1)
    paid = 0
    for entry in data:
        for guess in CONSOLATION_GUESSES[dataset]:
            raw = data.score_answer(guess, entry)
            if raw >= 1.0:  # a guess that happens to be right (Monday on a Monday)
                continue
            paid += raw > 0
            assert answer_credit(dataset, raw, guess, entry) == 0.0, (guess, raw)
        if entry["answer"] is not None and data.score_answer(entry["answer"], entry) == 1.0:
            assert answer_credit(dataset, 1.0, entry["answer"], entry) == 1.0
    assert paid >= 4  # the scorer pays these guesses: the rule is what keeps them at 0


def test_complex_arithmetic_pays_nan_and_near_misses_nothing():
    """complex_arithmetic's scorer pays min(1, exp(-distance)): `NaN` makes that min(1.0, nan) = 1.0,
    full credit on every prompt, and any number earns something. `answer` pays only a right answer."""
    import reasoning_gym

    from rlvr.tasks.reasoning_gym_answers import answer_credit

    data = reasoning_gym.create_dataset("complex_arithmetic", size=6, seed=1)
    for entry in data:
        for guess in ("NaN", "nan+nanj", "(NaN)"):
            assert data.score_answer(guess, entry) == 1.0  # what the scorer pays
            assert answer_credit("complex_arithmetic", 1.0, guess, entry) == 0.0
        raw = data.score_answer("0", entry)
        assert 0 <= raw < 1 and answer_credit("complex_arithmetic", raw, "0", entry) == 0.0
        assert answer_credit("complex_arithmetic", data.score_answer(entry["answer"], entry), entry["answer"],
                             entry) == 1.0
