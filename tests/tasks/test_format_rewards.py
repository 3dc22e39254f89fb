"""Format rewards pay only for an answer span the model wrote itself: non-empty, after `</think>` under
the r1_zero prompt, and not a span copied from the prompt. The recorded case: on leg_counting 11 of
16 greedy completions repeated R1-Zero's instruction text and, under the old rule (0.25 per tag
present, the prompt's `<think>` included), earned the whole format reward with no answer at all.
(The integer task's collapse to one bare guess: tests/tasks/test_integer_task.py.)"""

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.verification.answers import produced_answer
from rlvr.tasks.prompts import R1_ZERO_TEMPLATE

R1_PROMPT = R1_ZERO_TEMPLATE.format(question="How many legs do 2 cats have?")
# What the model wrote after "Assistant: <think>": the instruction copied back, cut at the stop string
# `</answer>`, and the longer copy that goes on to the template's own example.
ECHO_SHORT = (" The reasoning process is enclosed within <think> </think> and answer is enclosed within "
              "<answer> </answer>")
ECHO_LONG = ECHO_SHORT + (" tags, respectively, i.e., <think> reasoning process here </think> "
                          "<answer> answer here </answer>")


def old_tag_format(completion: str) -> float:
    """The format component before (reasoning-gym task version 2): 0.25 for each tag in `<think>` + completion."""
    text = "<think>" + completion
    return sum(0.25 for tag in ("<think>", "</think>", "<answer>", "</answer>") if tag in text)


@pytest.mark.parametrize("name, completion, prompt, after, expected", [
    ("answered", " 2 * 4 = 8 </think> <answer>8</answer>", R1_PROMPT, "</think>", "8"),
    ("empty span", " </think> <answer> </answer>", R1_PROMPT, "</think>", None),
    ("short echo", ECHO_SHORT, R1_PROMPT, "</think>", None),
    ("long echo", ECHO_LONG, R1_PROMPT, "</think>", None),
    ("answer before </think>", " <answer>8</answer> </think>", R1_PROMPT, "</think>", None),
    ("no </think>", " so <answer>8</answer>", R1_PROMPT, "</think>", None),
    ("no marker asked for", "<answer>8</answer>", "How many legs?", None, "8"),
    ("unclosed", " </think> <answer>8", R1_PROMPT, "</think>", None),
    ("last span counts", " </think> <answer>8</answer> <answer> answer here </answer>", R1_PROMPT, "</think>", None),
    ("prompt span content is fine elsewhere", " </think> <answer>answer here too</answer>", R1_PROMPT, "</think>",
     "answer here too"),
])
def test_produced_answer(name, completion, prompt, after, expected):
    assert produced_answer(completion, prompt, after=after) == expected, name


@pytest.fixture(scope="module")
def legs():
    return build_task("reasoning_gym:leg_counting", options={"eval_size": 2, "size": 50}, use_chat_template=False)


@pytest.mark.parametrize("completion", [ECHO_SHORT, ECHO_LONG])
def test_echoed_instruction_earns_no_format(legs, completion):
    example = legs.examples("eval", 1, 0)[0]
    assert example.prompt.endswith("Assistant: <think>")
    verdict = legs.score(completion, example)
    assert old_tag_format(completion) == 1.0  # old: the whole format reward, 0.1 of total reward
    assert verdict.components == {"answer": 0.0, "format": 0.0, "binary": 0.0}  # new
    assert verdict.total == 0.0


def test_a_real_answer_still_earns_the_format(legs):
    example = legs.examples("eval", 1, 0)[0]
    right = legs.score(f" counting </think> <answer>{example.ground_truth}</answer>", example)
    assert right.components == {"answer": 1.0, "format": 1.0, "binary": 1.0}
    assert right.total == pytest.approx(1.1)
    wrong = legs.score(" counting </think> <answer>3</answer>", example)
    assert wrong.components["format"] == 1.0 and wrong.components["answer"] == 0.0
    assert old_tag_format(" thinking, no tags") == 0.25  # old: the prompt's <think> alone earned a quarter
    assert legs.score(" thinking, no tags", example).components["format"] == 0.0


def test_r1_zero_gsm8k_format_needs_an_answer_of_its_own(tmp_path):
    data = tmp_path / "g.jsonl"
    data.write_text('{"question": "2 + 2?", "answer": "#### 4"}\n' + '{"question": "3 + 3?", "answer": "#### 6"}\n')
    task = build_task("gsm8k", options={"path": str(data), "eval_size": 1}, use_chat_template=False,
                      reward_weights={"format": 0.5})
    example = task.examples("eval", 1, 0)[0]
    echo = task.score(" x </think> <answer> answer here </answer>", example)
    assert echo.components["format"] == 0.0 and echo.total == 0.0  # was format 1, total 0.5
    right = task.score(f" x </think> <answer>{example.ground_truth}</answer>", example)
    assert right.components == {"answer": 1.0, "format": 1.0} and right.total == pytest.approx(1.5)
