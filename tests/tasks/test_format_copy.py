"""format_copy: reward components by table, held-out eval numbers, deterministic prompts."""

import pytest

from rlvr.tasks import TASKS, build_task

TASK = build_task("format_copy")
EX = TASK.make_example(42)


@pytest.mark.parametrize(
    "name, completion, answer, tag, strict, total",
    [
        ("exact", "<answer>42</answer>", 1, 1, 1, 1.3),
        ("exact with spaces", "  <answer>42</answer>\n", 1, 1, 1, 1.3),
        ("answer padded inside tag", "<answer> 42 </answer>", 1, 1, 0, 1.2),
        ("extra text", "Sure! <answer>42</answer>", 1, 1, 0, 1.2),
        ("wrong number", "<answer>43</answer>", 0, 1, 0, 0.2),
        ("negative sign lost", "<answer>-42</answer>", 0, 1, 0, 0.2),
        ("empty tags", "<answer></answer>", 0, 0, 0, 0.0),
        ("blank tags", "<answer> </answer>", 0, 0, 0, 0.0),
        ("unclosed tag", "<answer>42", 0, 0, 0, 0.0),
        ("echoed instruction", "Copy the number 42 into <answer></answer> tags. Reply with only <answer>42</answer>",
         0, 0, 0, 0.0),
        ("prompt inside tags", "<answer>Copy the number 42 into <answer></answer>", 0, 0, 0, 0.0),
        ("code inside tags", "<answer>__import__('os')</answer>", 0, 0, 0, 0.0),
        ("fullwidth digits", "<answer>\uff14\uff12</answer>", 0, 0, 0, 0.0),
        ("no tags", "42", 0, 0, 0, 0.0),
        ("empty", "", 0, 0, 0, 0.0),
        ("first answer counts", "<answer>41</answer><answer>42</answer>", 0, 1, 0, 0.2),
    ],
)
def test_reward_table(name, completion, answer, tag, strict, total):
    verdict = TASK.score(completion, EX)
    assert verdict.components == {"answer": answer, "tag": tag, "strict": strict}, name
    assert verdict.total == pytest.approx(total)
    assert verdict.correct == bool(answer)
    assert verdict.status == "ok" and verdict.verifier == "format_copy"


def test_reward_weights_from_config():
    task = build_task("format_copy", reward_weights={"tag": 0.0})
    assert task.score("<answer>42</answer>", EX).total == pytest.approx(1.1)  # 1.0 + 0 * 0.2 + 0.1
    with pytest.raises(ValueError, match="unknown component 'format'; valid components: answer, tag, strict"):
        build_task("format_copy", reward_weights={"format": 1.0})


def test_eval_numbers_are_held_out_and_train_is_deterministic():
    eval_numbers = {e.metadata["number"] for e in TASK.examples("eval", 256, 0)}
    train = [e.metadata["number"] for seed in range(50) for e in TASK.examples("train", 8, seed)]
    assert not eval_numbers & set(train)
    assert [e.metadata["number"] for e in TASK.examples("train", 8, 3)] == \
        [e.metadata["number"] for e in TASK.examples("train", 8, 3)]
    assert TASK.examples("train", 8, 3)[0].prompt != TASK.examples("train", 8, 4)[0].prompt


def test_prompt_forms():
    assert isinstance(EX.prompt, list) and "<answer>42</answer>" in EX.prompt[0]["content"]
    raw = build_task("format_copy", use_chat_template=False).make_example(7)
    assert isinstance(raw.prompt, str)
    with pytest.raises(ValueError, match="unknown split 'test'; valid splits: train, eval"):
        TASK.examples("test", 1, 0)
    assert "format_copy" in TASKS
