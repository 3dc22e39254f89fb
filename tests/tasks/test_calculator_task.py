"""`calculator_arithmetic`: held-out questions disjoint from training and fixed by the seed, the prompt
offering the calculator in each call format, `respond` on scripted turns, and `score_episode` paying
the right final answer only: no credit for calling the tool, for a number inside a call, for an
echoed question or for an episode cut off before it answered."""

import math

import pytest

from rlvr.tasks import build_task, is_registered
from rlvr.tasks.calculator import CalculatorTask
from rlvr.tasks.environment import Environment, Episode, Turn, is_environment


def question(task, split="eval", index=0):
    example = task.examples(split, index + 1, seed=0)[index]
    return example, example.metadata["a"], example.metadata["b"]


def play(task, example, assistant_turns, truncated_by=None):
    """Run scripted assistant turns through the environment; returns (episode, replies)."""
    state = task.start(example)
    turns, replies = [], []
    for text in assistant_turns:
        turns.append(Turn("assistant", text))
        reply = task.respond(state, text)
        replies.append(reply)
        if reply.done:
            break
        turns.append(Turn(reply.role, reply.content))
    return Episode(example=example, turns=turns, state=state, truncated_by=truncated_by), replies


@pytest.fixture(scope="module")
def task():
    return build_task("calculator_arithmetic", options={"eval_size": 50})


def test_it_is_a_registered_environment(task):
    assert is_registered("calculator_arithmetic") and is_environment(task) and isinstance(task, Environment)
    assert task.max_turns == 3 and task.tool_schemas == ()  # tagged: the prompt itself describes the tool
    chat = build_task("calculator_arithmetic", options={"eval_size": 50, "call_format": "chat_template"})
    assert chat.tool_schemas[0]["function"]["name"] == "calculator"  # listed by the template, `tools=`
    assert task.stop_strings == ("</calculator>", "</answer>")


def test_questions_are_three_by_two_digit_products_held_out_and_fixed_by_the_seed(task):
    evals = task.examples("eval", 50, seed=0)
    assert all(100 <= e.metadata["a"] <= 999 and 10 <= e.metadata["b"] <= 99 for e in evals)
    assert all(int(e.ground_truth) == e.metadata["a"] * e.metadata["b"] for e in evals)
    held_out = {(e.metadata["a"], e.metadata["b"]) for e in evals}
    assert len(held_out) == 50
    train = task.examples("train", 3000, seed=1)
    assert not held_out & {(e.metadata["a"], e.metadata["b"]) for e in train}
    again = build_task("calculator_arithmetic", options={"eval_size": 50})
    assert [e.prompt for e in again.iter_eval()] == [e.prompt for e in evals]
    assert [e.prompt for e in again.examples("train", 5, seed=1)] == [e.prompt for e in train[:5]]
    other_seed = build_task("calculator_arithmetic", options={"eval_size": 50}, seed=1)
    assert [e.prompt for e in other_seed.iter_eval()] != [e.prompt for e in evals]


def test_the_prompt_offers_the_calculator_in_the_chosen_format(task):
    example, a, b = question(task)
    text = example.prompt[0]["content"]
    assert f"What is {a} * {b}?" in text and "<calculator>12*34</calculator>" in text and "<answer></answer>" in text
    chat = build_task("calculator_arithmetic", options={"call_format": "chat_template", "eval_size": 50})
    text = chat.examples("eval", 1, 0)[0].prompt[0]["content"]
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}\n</tool_call>' in text
    assert chat.stop_strings == ("</tool_call>", "</answer>")
    raw = build_task("calculator_arithmetic", options={"eval_size": 50}, use_chat_template=False)
    assert isinstance(raw.examples("eval", 1, 0)[0].prompt, str)


def test_bad_options_name_the_valid_choices():
    with pytest.raises(ValueError, match="call_format='json'; valid choices: chat_template, tagged"):
        CalculatorTask(call_format="json")
    with pytest.raises(ValueError, match="max_turns=0 must be an integer >= 1"):
        CalculatorTask(max_turns=0)


def test_the_tool_then_the_answer(task):
    example, a, b = question(task)
    product = a * b
    episode, replies = play(task, example, [f"Let me use it. <calculator>{a}*{b}</calculator>",
                                            f"So the answer is <answer>{product}</answer>"])
    first, last = replies
    assert (first.role, first.content, first.done) == ("tool", str(product), False)
    assert first.tool_calls == {"calculator": 1} and first.tool_errors == {}
    assert last.done and last.content is None
    verdict = task.score_episode(episode)
    assert verdict.components == {"answer": 1.0, "format": 1.0, "strict": 1.0}
    assert verdict.total == pytest.approx(1.1) and verdict.correct and verdict.status == "ok"


def test_a_failed_call_costs_the_format_bonus_not_the_answer(task):
    example, a, b = question(task)
    episode, replies = play(task, example, [f"<calculator>{a} times {b}</calculator>",
                                            f"<calculator>{a}*{b}</calculator>", f"<answer>{a * b}</answer>"])
    assert replies[0].content.startswith("error: not arithmetic") and replies[0].tool_errors == {"calculator": 1}
    assert episode.state.tool_calls == {"calculator": 2} and episode.state.tool_errors == {"calculator": 1}
    verdict = task.score_episode(episode)
    assert verdict.components == {"answer": 1.0, "format": 0.0, "strict": 0.0} and verdict.total == 1.0


def test_an_answer_beside_a_call_ends_the_episode_without_running_it(task):
    example, a, b = question(task)
    state = task.start(example)
    reply = task.respond(state, f"<calculator>{a}*{b}</calculator> <answer>{a * b}</answer>")
    assert reply.done and state.tool_calls == {}


def test_a_turn_without_a_call_is_the_answer(task):
    example, a, b = question(task)
    episode, replies = play(task, example, [f"It is {a * b}."])
    assert len(replies) == 1 and replies[0].done
    verdict = task.score_episode(episode)
    assert verdict.components["answer"] == 1.0 and verdict.components["format"] == 0.0  # untagged


def test_a_bare_wrong_guess_earns_nothing(task):
    example, a, b = question(task)
    verdict = task.score_episode(play(task, example, [f"<answer>{a * b + 10}</answer>"])[0])
    assert verdict.components == {"answer": 0.0, "format": 1.0, "strict": 0.0} and verdict.total == 0.0


def test_calling_the_tool_and_never_answering_earns_nothing(task):
    example, a, b = question(task)
    # The question to the tool, again and again, until max_turns cuts the episode.
    episode, replies = play(task, example, [f"<calculator>{a}*{b}</calculator>"] * 3, truncated_by="max_turns")
    assert all(not reply.done for reply in replies)
    verdict = task.score_episode(episode)
    assert verdict.components["answer"] == 0.0 and verdict.total == 0.0 and math.isfinite(verdict.total)
    assert "ended on a tool call" in verdict.detail and "truncated by max_turns" in verdict.detail


def test_the_product_inside_a_call_is_not_an_answer(task):
    example, a, b = question(task)
    # Echoing the tool's result back into a call: the last integer of the turn is the product, but
    # nothing was answered.
    episode, _ = play(task, example, [f"<calculator>{a}*{b}</calculator>", f"<calculator>{a * b}</calculator>"],
                      truncated_by="max_turns")
    assert task.score_episode(episode).components["answer"] == 0.0


def test_echoing_the_prompt_earns_nothing(task):
    example, a, b = question(task)
    echo = example.prompt[0]["content"]
    verdict = task.score(echo, example)
    assert verdict.components["answer"] == 0.0 and verdict.total == 0.0
    # the question without the example call, as a final turn: its last integer is an operand
    verdict = task.score(f"What is {a} * {b}?", example)
    assert verdict.total == 0.0


def test_a_final_answer_without_a_number_is_wrong_not_unjudgeable(task):
    example, _, _ = question(task)
    verdict = task.score("I cannot do this.", example)
    assert verdict.components["answer"] == 0.0 and verdict.total == 0.0 and verdict.status == "ok"


def test_only_the_last_turn_counts(task):
    example, a, b = question(task)
    episode = Episode(example=example, turns=[Turn("assistant", f"<answer>{a * b}</answer>"),
                                              Turn("user", "are you sure?"), Turn("assistant", "<answer>7</answer>")])
    assert task.score_episode(episode).components["answer"] == 0.0


def test_the_chat_template_format_on_scripted_turns():
    chat = CalculatorTask(call_format="chat_template", eval_size=50)
    example = chat.examples("eval", 1, 0)[0]
    a, b = example.metadata["a"], example.metadata["b"]
    call = f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}\n</tool_call>'
    episode, replies = play(chat, example, [call, f"<answer>{a * b}</answer>"])
    assert replies[0].content == str(a * b) and replies[0].role == "tool"
    assert chat.score_episode(episode).total == pytest.approx(1.1)
    # an unknown tool is an error naming the calculator, counted apart
    reply = chat.respond(chat.start(example), '<tool_call>{"name": "calc", "arguments": {}}</tool_call>')
    assert "the tools are calculator" in reply.content and reply.tool_errors == {"unknown_tool": 1}


def test_division_by_zero_is_the_calculators_own_error(task):
    example, a, _ = question(task)
    reply = task.respond(task.start(example), f"<calculator>{a}/0</calculator>")
    assert reply.content == "error: division by zero" and reply.tool_errors == {"calculator": 1} and not reply.done


def test_an_unknown_tool_call_costs_the_format_bonus():
    chat = CalculatorTask(call_format="chat_template", eval_size=50)
    example = chat.examples("eval", 1, 0)[0]
    a, b = example.metadata["a"], example.metadata["b"]
    episode, replies = play(chat, example, ['<tool_call>{"name": "multiply", "arguments": {}}</tool_call>',
                                            f"<answer>{a * b}</answer>"])
    assert replies[0].tool_errors == {"unknown_tool": 1}
    assert chat.score_episode(episode).components == {"answer": 1.0, "format": 0.0, "strict": 0.0}
