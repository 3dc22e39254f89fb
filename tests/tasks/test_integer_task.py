"""The `integer` task: operand ranges, the two prompts, the held-out split, and verdicts whose form
bonus is paid only for a right answer (so collapsing to one bare guess for every prompt pays nothing)."""

import math
import re
import statistics

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.integer import PROMPTS


def old_integer_total(completion: str, answer: float) -> float:
    """The reward before `strict` existed (version 1): answer + 0.2 when the completion is only an integer."""
    only_integer = completion.strip().lstrip("-").isdigit()
    return (0.0 if math.isnan(answer) else answer) + 0.2 * only_integer


@pytest.mark.parametrize("completion, answer, format_, strict, status, total", [
    ("122", 1.0, 1.0, 1.0, "ok", 1.2),  # right and bare: the only way to the bonus
    (" 122\n", 1.0, 1.0, 1.0, "ok", 1.2),
    ("59 + 63 = 122", 1.0, 0.0, 0.0, "ok", 1.0),  # the right equation
    ("<answer>122</answer>", 1.0, 0.0, 0.0, "ok", 1.0),
    ("109", 0.0, 1.0, 0.0, "ok", 0.0),  # a bare wrong guess: 0, as much as a wrong equation (was 0.2)
    ("59 + 63 = 121", 0.0, 0.0, 0.0, "ok", 0.0),
    ("-122", 0.0, 1.0, 0.0, "ok", 0.0),
    ("1,122", 0.0, 0.0, 0.0, "ok", 0.0),
    ("120 or 122 or 121", 0.0, 0.0, 0.0, "ok", 0.0),  # the last integer counts
    ("122.5", math.nan, 0.0, 0.0, "unjudgeable", 0.0),  # a decimal: its integer part is not the answer
    ("122.000001", math.nan, 0.0, 0.0, "unjudgeable", 0.0),
    ("The sum is 122.", 1.0, 0.0, 0.0, "ok", 1.0),  # a sentence's full stop is not a decimal point
    ("one hundred twenty-two", math.nan, 0.0, 0.0, "unjudgeable", 0.0),
    ("", math.nan, 0.0, 0.0, "unjudgeable", 0.0),
])
def test_only_integer_verdicts(completion, answer, format_, strict, status, total):
    task = build_task("integer")
    example = task.example_for(59, "+", 63)
    verdict = task.score(completion, example)
    assert verdict.status == status
    assert verdict.components["format"] == format_ and verdict.components["strict"] == strict
    assert (math.isnan(verdict.components["answer"]) and math.isnan(answer)) or verdict.components["answer"] == answer
    assert verdict.total == pytest.approx(total)
    assert verdict.correct == (answer == 1.0)


def test_collapse_to_one_bare_integer_no_longer_pays():
    """The recorded collapse: `109` for every prompt. Old reward 0.2 a completion, new 0 unless 109 is right."""
    task = build_task("integer", options={"operands": [[10, 99], [10, 99]], "operations": ["+"], "eval_size": 64})
    examples = task.examples("eval", 64, 0)
    collapsed = [task.score("109", e) for e in examples]
    right = sum(e.ground_truth == "109" for e in examples)
    old = [old_integer_total("109", v.components["answer"]) for v in collapsed]
    new = [v.total for v in collapsed]
    assert statistics.mean(old) == pytest.approx(0.2 + right / 64)  # every bare guess earned the format
    assert statistics.mean(new) == pytest.approx(1.2 * right / 64)
    assert statistics.mean(new) < 0.1 < 0.2 <= statistics.mean(old)
    # Working out each sum, right 9.4% of the time (6 of 64, as the base model greedily did): 0.094 a completion.
    working = [task.score(f"{e.metadata['a']} + {e.metadata['b']} = "
                          f"{int(e.ground_truth) + (0 if i < 6 else 1)}", e) for i, e in enumerate(examples)]
    assert statistics.mean(v.total for v in working) == pytest.approx(6 / 64)
    assert statistics.mean(old) > statistics.mean(v.total for v in working) > statistics.mean(new)


@pytest.mark.parametrize("completion, answer, format_, strict, total", [
    ("59 + 63 = 122 <answer>122</answer>", 1.0, 1.0, 1.0, 1.2),
    ("59 + 63 = 122 <answer>122</answer> To add 91 and 73, first", 1.0, 1.0, 1.0, 1.2),  # rambling after the tag
    ("59 + 63 = 122. To add 91 and 73, first", 0.0, 0.0, 0.0, 0.0),  # untagged: the last integer counts
    ("<answer>59 + 63 = 122</answer>", 1.0, 0.0, 0.0, 1.0),  # right, but the span is not only the integer
    ("122", 1.0, 0.0, 0.0, 1.0),  # no tags: the last integer, no bonus
    ("59 + 63 = 122 <answer>121</answer>", 0.0, 1.0, 0.0, 0.0),  # the tag wins over the working
    ("<answer></answer> 122", 1.0, 0.0, 0.0, 1.0),  # an empty span is no answer
])
def test_show_work_scores_the_tagged_answer(completion, answer, format_, strict, total):
    task = build_task("integer", options={"prompt": "show_work"})
    verdict = task.score(completion, task.example_for(59, "+", 63))
    assert (verdict.components["answer"], verdict.components["format"], verdict.components["strict"]) == (
        answer, format_, strict)
    assert verdict.total == pytest.approx(total)
    assert task.stop_strings == ("</answer>",) and build_task("integer").stop_strings == ()


def test_echoed_instruction_earns_nothing():
    task = build_task("integer", options={"prompt": "show_work"})
    example = task.example_for(59, "+", 63)
    assert "<answer></answer>" in example.prompt[0]["content"]
    for echo in ("give the final answer as an integer inside <answer></answer>", "<answer>N</answer>"):
        verdict = task.score(echo, example)
        assert verdict.components["format"] == 0.0 and verdict.components["strict"] == 0.0
        assert verdict.total == 0.0 and not verdict.correct


def test_operand_ranges_say_two_digit_times_one_digit():
    task = build_task("integer", options={"operands": [[10, 99], [1, 9]], "operations": ["*"], "eval_size": 50})
    seen = task.examples("train", 300, 1) + task.examples("eval", 50, 0)
    for example in seen:
        a, op, b = example.metadata["a"], example.metadata["op"], example.metadata["b"]
        assert 10 <= a <= 99 and 1 <= b <= 9 and op == "*"
        assert int(example.ground_truth) == a * b
        words = example.metadata["question"].split("?")[0].split()[2:5]
        assert words == [str(a), "*", str(b)]
    assert min(e.metadata["a"] for e in seen) < 20 and max(e.metadata["a"] for e in seen) > 90
    assert {e.metadata["b"] for e in seen} == set(range(1, 10))
    both = build_task("integer", options={"low": 2, "high": 12, "operations": ["*"], "eval_size": 40})
    pairs = {(e.metadata["a"], e.metadata["b"]) for e in both.examples("train", 400, 0)}
    assert all(2 <= a <= 12 and 2 <= b <= 12 for a, b in pairs) and len(pairs) > 40


def test_eval_questions_are_distinct_and_held_out():
    task = build_task("integer", options={"operands": [[2, 12], [2, 12]], "operations": ["*"], "eval_size": 60})
    held_out = [(e.metadata["a"], e.metadata["b"]) for e in task.iter_eval()]
    assert len(held_out) == len(set(held_out)) == 60  # 60 of the 121 distinct questions
    train = {(e.metadata["a"], e.metadata["b"]) for seed in range(20) for e in task.examples("train", 10, seed)}
    assert train and not train & set(held_out)
    assert len(train | set(held_out)) <= 121


@pytest.mark.parametrize("options, message", [
    ({"operands": [[10, 99]]}, "must be two [low, high] ranges"),
    ({"operands": [[10, 99], [9, 1]]}, "operand 2 range [9, 1] needs low <= high"),
    ({"operands": [[10, 99], [1, 9]], "low": 3}, "either task.options.operands or low/high"),
    ({"operands": [[1.5, 9], [1, 9]]}, "operands[0][0]=1.5 must be an integer"),
    ({"low": 1.5}, "task.options.low=1.5 must be an integer"),
    ({"operations": ["/"]}, "choose among +, -, *"),
    ({"prompt": "chatty"}, "unknown prompt 'chatty'; valid prompts: " + ", ".join(PROMPTS)),
    ({"operands": [[2, 12], [2, 12]], "operations": ["*"]}, "eval_size=200 would hold out more than half of the "
                                                            "121 distinct questions; use eval_size <= 60"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_task("integer", options=options)


def test_unjudgeable_is_unscorable_when_no_weighted_component_judges_it():
    task = build_task("integer", reward_weights={"strict": 0.0})
    example = task.example_for(1, "+", 1)
    assert not task.score("two", example).scorable  # answer NaN, the rest weighted 0
    assert task.score("3", example).total == 0.0
    assert build_task("integer").score("two", example).total == 0.0  # strict (0.2) judges it: 0


def test_a_decimal_is_not_its_integer_part():
    task = build_task("integer", options={"prompt": "show_work"})
    example = task.example_for(59, "+", 63)
    for completion in ("<answer>122.5</answer>", "59 + 63 = 122.000001"):
        verdict = task.score(completion, example)
        assert not verdict.correct and verdict.components["answer"] != 1.0, completion
    assert task.score("59 + 63 = 122.", example).correct
