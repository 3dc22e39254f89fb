"""guess_number: guesses read from the tags, the feedback, the reward formula by hand, disjoint eval numbers."""

from __future__ import annotations

import pytest

from rlvr.tasks import TASKS, build_task
from rlvr.tasks.environment import Episode, Turn, is_environment
from rlvr.tasks.guess_number import REMINDER, GuessNumberTask, feedback, read_guess


@pytest.mark.parametrize("text, expected", [
    ("<guess>50</guess>", 50),
    ("I think <guess> 7 </guess>", 7),
    ("<guess>3</guess> no, <guess>90</guess>", 90),  # the last one counts
    ("<guess>0</guess>", None),  # out of range
    ("<guess>101</guess>", None),
    ("50", None),  # no tags
    ("<guess>fifty</guess>", None),
    ("<guess>12.5</guess>", None),
    ("", None),
])
def test_read_guess(text, expected):
    assert read_guess(text) == expected


def test_feedback_says_higher_lower_correct():
    assert feedback(30, 62) == "higher" and feedback(80, 62) == "lower" and feedback(62, 62) == "correct"
    assert feedback(None, 62) == REMINDER


def episode(task, target, guesses, truncated_by=None):
    example = task.example_for(target)
    turns = []
    for guess in guesses:
        turns += [Turn("assistant", guess), Turn("user", "x")]
    return Episode(example=example, turns=turns, truncated_by=truncated_by)


def test_reward_formula_by_hand():
    task = GuessNumberTask(max_turns=7)
    # solved at turn 3 of 7: solved 1, speed (7 - 3) / 6 = 2/3, total 1 + 0.5 * 2/3
    verdict = task.score_episode(episode(task, 40, ["<guess>50</guess>", "<guess>25</guess>", "<guess>40</guess>"]))
    assert verdict.components["solved"] == 1.0 and verdict.correct
    assert verdict.components["speed"] == pytest.approx(2 / 3)
    assert verdict.total == pytest.approx(1 + 0.5 * 2 / 3)
    first = task.score_episode(episode(task, 40, ["<guess>40</guess>"]))
    assert first.total == pytest.approx(1.5)  # fewer turns, more reward
    last = task.score_episode(episode(task, 40, ["<guess>1</guess>"] * 6 + ["<guess>40</guess>"]))
    assert last.total == pytest.approx(1.0)
    # Well-formed but never right, and malformed: nothing; the form alone pays nothing.
    wrong = task.score_episode(episode(task, 40, ["<guess>10</guess>"] * 7, truncated_by="max_turns"))
    assert wrong.total == 0.0 and wrong.components["valid_guesses"] == 1.0 and wrong.status == "ok"
    junk = task.score_episode(episode(task, 40, ["forty", "40"]))
    assert junk.total == 0.0 and junk.components["valid_guesses"] == 0.0
    # A right guess after the turn budget does not count.
    late = task.score_episode(episode(task, 40, ["<guess>1</guess>"] * 7 + ["<guess>40</guess>"]))
    assert late.total == 0.0


def test_the_environment_answers_and_ends_on_the_number():
    task = GuessNumberTask()
    state = task.start(task.example_for(62))
    assert [task.respond(state, f"<guess>{g}</guess>").content for g in (50, 75)] == ["higher", "lower"]
    reply = task.respond(state, "<guess>62</guess>")
    assert reply.content == "correct" and reply.done
    bad = task.respond(state, "sixty")
    assert bad.content == REMINDER and not bad.done


def test_examples_are_deterministic_and_the_eval_numbers_never_train():
    task = build_task("guess_number", options={"eval_size": 20}, seed=3)
    assert is_environment(task) and "guess_number" in TASKS
    train = [int(e.ground_truth) for e in task.examples("train", 500, seed=11)]
    assert train == [int(e.ground_truth) for e in task.examples("train", 500, seed=11)]
    assert train != [int(e.ground_truth) for e in task.examples("train", 500, seed=12)]
    held_out = {int(e.ground_truth) for e in task.iter_eval()}
    assert len(held_out) == 20 and not held_out & set(train)
    assert len(set(train)) == 80  # every other number is drawn
    with pytest.raises(ValueError, match="eval_size"):
        GuessNumberTask(eval_size=60)
    with pytest.raises(ValueError, match="unknown split"):
        task.examples("test", 1, 0)


def test_the_demonstration_is_binary_search_and_finds_every_number_within_the_budget():
    task = build_task("guess_number")
    assert task.demonstration(task.example_for(100)) == [f"<guess>{n}</guess>" for n in (50, 75, 88, 94, 97, 99, 100)]
    assert task.demonstration(task.example_for(1)) == [f"<guess>{n}</guess>" for n in (50, 25, 12, 6, 3, 1)]
    lengths = []
    for target in range(1, 101):
        example = task.example_for(target)
        state, turns = task.start(example), task.demonstration(example)
        answers = [task.respond(state, turn) for turn in turns]
        assert [a.done for a in answers] == [False] * (len(turns) - 1) + [True]  # ends on its last guess only
        episode = Episode(example=example, turns=[Turn("assistant", t) for t in turns])
        assert task.score_episode(episode).components["solved"] == 1.0
        lengths.append(len(turns))
    # Halving what is left: never more than 7 guesses, and a linear or off-by-one search would take more.
    assert max(lengths) == 7 and sum(lengths) / 100 == pytest.approx(5.8)
