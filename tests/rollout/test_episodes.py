"""The episode driver: token in, token out, loss mask 0 on the environment's tokens, limits, order, metrics.

A scripted backend plays the policy (each call's rows get the token ids the test chose), so the
expected sequences are written out by hand; the tokenizer merges "1"+"2" into one token, so a
transcript's text does not tokenize back to the ids that were sampled. Then the real backends.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from rlvr.rollout import ROLLOUT_BACKENDS, Generation, RolloutBackend, SamplingSettings, sample_and_score
from rlvr.rollout.episodes import ReplyRenderer, demonstration_pairs, run_episodes, transcript
from rlvr.rollout.generation import render_prompts
from rlvr.tasks.task import Example, Verdict
from rlvr.tasks.environment import EnvReply, is_environment
from rlvr.testing import IM_END_TOKEN_ID, build_tiny_model, build_tiny_tokenizer
from rlvr.observe.rollout_stats import EpisodeCounts, episode_stats

TOKENIZER = build_tiny_tokenizer(merges=(("1", "2"),))
EOS = IM_END_TOKEN_ID


def ids(text: str) -> list[int]:
    return TOKENIZER(text, add_special_tokens=False)["input_ids"]


def char_ids(text: str) -> list[int]:
    """One id per character, as a policy may sample them (never the merged '12')."""
    return [TOKENIZER.convert_tokens_to_ids(c) for c in text]


class CountdownEnv:
    """Ends after `metadata['turns']` assistant turns; replies `ok<n>`; one `calc` call per turn, the 2nd fails."""

    name = "countdown"
    component_names = ("turns",)
    stop_strings = ()
    tool_schemas = ()

    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def examples(self, split, count, seed):
        return [Example(prompt=f"p{i}", ground_truth=None, metadata={"turns": i + 1}) for i in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 2, 0))

    def score(self, completion, example):
        raise AssertionError("an environment's single completions are never scored")

    def start(self, example):
        return {"left": example.metadata["turns"], "said": 0}

    def respond(self, state, assistant_text):
        state["left"] -= 1
        state["said"] += 1
        return EnvReply(content=f"ok{state['said']}", done=state["left"] == 0, tool_calls={"calc": 1},
                        tool_errors={"calc": 1} if state["said"] == 2 else {})

    def score_episode(self, episode):
        turns = len(episode.assistant_turns)
        return Verdict(components={"turns": float(turns)}, total=float(turns), status="ok", verifier="countdown",
                       version="1")


class ScriptedBackend(RolloutBackend):
    """generate_from_ids answers call k's row r with script(k, r, prompt ids), cut at max_new_tokens."""

    def __init__(self, script):
        super().__init__(None, TOKENIZER)
        self.script, self.calls = script, []

    def synced(self):
        return contextlib.nullcontext()

    def generate(self, prompts, group_size, settings):
        raise AssertionError("episodes sample through generate_from_ids")

    def generate_from_ids(self, prompt_ids, settings):
        self.calls.append([list(p) for p in prompt_ids])
        rows = [self.script(len(self.calls) - 1, r, p)[: settings.max_new_tokens] for r, p in enumerate(prompt_ids)]
        width = max(len(p) for p in prompt_ids)
        columns = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width + columns), EOS)
        attention = torch.zeros_like(input_ids)
        for i, (p, r) in enumerate(zip(prompt_ids, rows)):
            input_ids[i, width - len(p):width] = torch.tensor(p)
            input_ids[i, width:width + len(r)] = torch.tensor(r)
            attention[i, width - len(p):width + len(r)] = 1
        lengths = torch.tensor([len(r) for r in rows])
        ended = torch.tensor([bool(r) and (r[-1] == EOS or TOKENIZER.decode(r).endswith(settings.stop_strings or "\0"))
                              for r in rows])
        return Generation(input_ids=input_ids, attention_mask=attention, prompt_len=width,
                          completion_texts=[TOKENIZER.decode(r, skip_special_tokens=True) for r in rows],
                          completion_lengths=lengths, truncated=~ended & (lengths >= settings.max_new_tokens))


def chat_reply(content: str, after_eos: bool) -> str:
    """The tiny template's text after an assistant turn, written out: end of turn, the user message, the prompt."""
    return ("\n" if after_eos else "<|im_end|>\n") + f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def settings(**kw):
    return SamplingSettings(**{"max_new_tokens": 6, "max_episode_tokens": 1000, **kw})


def run(script, task, examples, group_size, use_chat_template=True, **kw):
    backend = ScriptedBackend(script)
    prompts = render_prompts(TOKENIZER, examples, use_chat_template)
    with backend.sync():
        result = run_episodes(backend, task, examples, prompts, group_size=group_size, settings=settings(**kw),
                              use_chat_template=use_chat_template)
    return backend, prompts, result


def test_sampled_ids_are_kept_and_replies_are_inserted_as_masked_tokens():
    turn1 = char_ids("12") + [EOS]  # decodes to "12", which encodes to the one merged token
    turn2 = char_ids("a12") + [EOS]
    task = CountdownEnv()
    example = task.examples("train", 2, 0)[1]  # two turns
    backend, prompts, result = run(lambda k, r, p: turn1 if k == 0 else turn2, task, [example], 1)
    prompt = ids(prompts[0])
    reply = ids(chat_reply("ok1", after_eos=True))
    # The second call continued exactly the ids the episode held: prompt, sampled, reply.
    assert backend.calls == [[prompt], [prompt + turn1 + reply]]
    generation = result.generation
    row = generation.input_ids[0, generation.prompt_len:].tolist()
    assert row == turn1 + reply + turn2  # the last reply ("ok2", done) has no turn after it: not inserted
    assert generation.loss_mask[0].tolist() == [1] * len(turn1) + [0] * len(reply) + [1] * len(turn2)
    assert int(generation.completion_lengths[0]) == len(turn1) + len(turn2)
    # Re-tokenizing the transcript would have trained on other ids.
    assert ids(TOKENIZER.decode(row)) != row
    assert result.records[0].episode.turns[0].content == "12"
    assert transcript(result.records[0].episode, mark_environment=True) == "12\n⟦user: ok1⟧\na12\n⟦user: ok2⟧"


def test_a_turn_cut_by_a_stop_string_gets_the_whole_end_of_turn_and_raw_prompts_the_raw_reply():
    task = CountdownEnv()
    example = task.examples("train", 2, 0)[1]
    turn = char_ids("a!")
    _, prompts, chat = run(lambda k, r, p: turn, task, [example], 1, stop_strings=("!",))
    expected_reply = ids(chat_reply("ok1", after_eos=False))
    assert expected_reply[0] == EOS  # the template's end of turn, which the policy did not sample
    row = chat.generation.input_ids[0, chat.generation.prompt_len:].tolist()
    assert row == turn + expected_reply + turn
    _, _, raw = run(lambda k, r, p: turn, task, [example], 1, use_chat_template=False, stop_strings=("!",))
    row = raw.generation.input_ids[0, raw.generation.prompt_len:].tolist()
    assert row == turn + ids("\nok1\n") + turn
    assert raw.generation.loss_mask[0].tolist() == [1, 1] + [0] * len(ids("\nok1\n")) + [1, 1]


def test_episodes_are_prompt_major_and_each_turn_is_one_call_over_the_live_ones():
    task = CountdownEnv()
    examples = task.examples("train", 2, 0)  # example 0 ends after 1 turn, example 1 after 2
    backend, prompts, result = run(lambda k, r, p: char_ids("ab") + [EOS], task, examples, 2)
    assert [len(call) for call in backend.calls] == [4, 2]  # turn 2: only example 1's two episodes
    first = [ids(p) for p in prompts]
    assert backend.calls[0] == [first[0], first[0], first[1], first[1]]
    assert [record.turns for record in result.records] == [1, 1, 2, 2]
    assert [record.episode.example.prompt for record in result.records] == ["p0", "p0", "p1", "p1"]
    assert [v.total for v in result.verdicts] == [1.0, 1.0, 2.0, 2.0]
    generation = result.generation
    for row, example in enumerate([0, 0, 1, 1]):  # each row's prompt, left-padded
        prompt = first[example]
        assert generation.input_ids[row, generation.prompt_len - len(prompt):generation.prompt_len].tolist() == prompt
        assert int(generation.attention_mask[row, :generation.prompt_len].sum()) == len(prompt)


def test_each_limit_truncates_and_is_counted():
    task = CountdownEnv(max_turns=2)
    example = Example(prompt="p", ground_truth=None, metadata={"turns": 10})
    ended = char_ids("ab") + [EOS]
    _, _, by_turns = run(lambda k, r, p: ended, task, [example], 1)
    assert by_turns.records[0].episode.truncated_by == "max_turns" and by_turns.records[0].turns == 2
    _, _, override = run(lambda k, r, p: ended, task, [example], 1, max_turns=3)  # rollout.max_turns wins
    assert override.records[0].turns == 3 and override.records[0].episode.truncated_by == "max_turns"
    _, _, by_turn_tokens = run(lambda k, r, p: char_ids("abcdefghij"), task, [example], 1)
    record = by_turn_tokens.records[0]
    assert record.episode.truncated_by == "turn_tokens" and record.token_ids == char_ids("abcdef")
    # 3 + reply + ... : the second turn's budget is what is left of 12 tokens after 3 + len(reply).
    reply = ids(chat_reply("ok1", after_eos=True))
    limit = 3 + len(reply) + 2
    _, _, by_episode = run(lambda k, r, p: ended if k == 0 else char_ids("abcdefghij"), task, [example], 1,
                           max_episode_tokens=limit)
    record = by_episode.records[0]
    assert record.episode.truncated_by == "episode_tokens" and len(record.token_ids) == limit
    assert record.token_ids[-2:] == char_ids("ab")
    assert bool(by_episode.generation.truncated[0]) and not bool(
        run(lambda k, r, p: ended, task, [Example(prompt="p", ground_truth=None, metadata={"turns": 1})], 1)[2]
        .generation.truncated[0])


def test_episode_metrics_by_hand():
    episodes = [EpisodeCounts(turns=2, tool_calls={"calc": 2}, tool_errors={"calc": 1}, env_tokens=6, tokens=10,
                              truncated_by=None),
                EpisodeCounts(turns=4, tool_calls={"calc": 1, "python": 3}, tool_errors={}, env_tokens=4, tokens=30,
                              truncated_by="max_turns")]
    stats = episode_stats(episodes)
    assert stats["episode/turns"] == 3.0
    assert stats["episode/tool_calls"] == 3.0  # (2 + 4) / 2
    assert stats["episode/tool_errors"] == 0.5
    assert stats["episode/tool_calls/python"] == 1.5 and stats["episode/tool_errors/python"] == 0.0
    assert stats["episode/env_token_frac"] == pytest.approx(10 / 40)  # not the mean of 0.6 and 0.133
    assert stats["episode/truncated/max_turns"] == 0.5 and stats["episode/truncated/turn_tokens"] == 0.0


def test_the_reply_renderer_refuses_a_missing_template():
    bare = build_tiny_tokenizer()
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        ReplyRenderer(bare, True, {EOS})


@pytest.mark.parametrize("backend_name", ["decode_loop", "hf_generate"])
def test_real_backends_train_on_exactly_the_ids_they_sampled(backend_name):
    """Each row's policy tokens are the concatenation of what generate_from_ids returned for it, in order."""
    model = build_tiny_model(vocab_size=len(TOKENIZER), seed=3)
    backend = ROLLOUT_BACKENDS.get(backend_name)(model, TOKENIZER)
    sampled_by_call = []
    original = backend.generate_from_ids

    def recording(prompt_ids, call_settings):
        generation = original(prompt_ids, call_settings)
        sampled_by_call.append([generation.input_ids[i, generation.prompt_len:][:int(n)].tolist()
                                for i, n in enumerate(generation.completion_lengths)])
        return generation

    backend.generate_from_ids = recording
    task = CountdownEnv(max_turns=3)
    examples = [Example(prompt="say", ground_truth=None, metadata={"turns": 3}),
                Example(prompt="go on", ground_truth=None, metadata={"turns": 2})]
    torch.manual_seed(0)
    # Every vowel and space ends a turn, so turns end well inside the budget and episodes have several.
    scored = sample_and_score(backend, task, examples, group_size=2,
                              settings=SamplingSettings(max_new_tokens=8, stop_strings=tuple("aeiou "),
                                                        max_episode_tokens=200),
                              use_chat_template=True)
    generation = scored.generation
    assert is_environment(task) and scored.episodes is not None
    assert max(record.turns for record in scored.episodes) >= 2
    policy_tokens = {row: [] for row in range(4)}
    for call_index, call in enumerate(sampled_by_call):
        live = [row for row in range(4) if scored.episodes[row].turns > call_index]  # in row order
        assert len(call) == len(live)
        for row, tokens in zip(live, call):
            policy_tokens[row] += tokens
    prompts = [ids(p) for p in scored.prompts]
    for row, record in enumerate(scored.episodes):  # prompt-major: rows 0, 1 are example 0's
        prompt = prompts[row // 2]
        assert generation.input_ids[row, generation.prompt_len - len(prompt):generation.prompt_len].tolist() == prompt
        assert record.episode.example is examples[row // 2]
        completion = generation.input_ids[row, generation.prompt_len:]
        mask = generation.loss_mask[row].bool()
        assert completion[mask].tolist() == policy_tokens[row]
        assert int(mask.sum()) + record.env_tokens == int(generation.attention_mask[row, generation.prompt_len:].sum())


def test_the_last_allowed_turn_gets_no_reply_tokens_and_counts_as_cut():
    task = CountdownEnv(max_turns=2)
    example = Example(prompt="p", ground_truth=None, metadata={"turns": 10})
    turn = char_ids("ab") + [EOS]
    _, _, result = run(lambda k, r, p: turn, task, [example], 1)
    record = result.records[0]
    assert record.token_ids[-len(turn):] == turn and record.policy_mask[-1] == 1  # ends on the policy's token
    assert record.token_ids == turn + ids(chat_reply("ok1", after_eos=True)) + turn
    assert bool(result.generation.truncated[0])
    assert [t.role for t in record.episode.turns] == ["assistant", "user", "assistant", "user"]  # "ok2" shown


@pytest.mark.parametrize("backend_name", ["decode_loop", "hf_generate"])
def test_no_episode_passes_max_episode_tokens_and_each_cut_is_named_right(backend_name):
    model = build_tiny_model(vocab_size=len(TOKENIZER), seed=3)
    backend = ROLLOUT_BACKENDS.get(backend_name)(model, TOKENIZER)
    task = CountdownEnv(max_turns=6)
    examples = [Example(prompt=f"go {i}", ground_truth=None, metadata={"turns": 6}) for i in range(3)]
    limit, per_turn = 30, 8
    torch.manual_seed(2)
    scored = sample_and_score(backend, task, examples, group_size=2, use_chat_template=False,
                              settings=SamplingSettings(max_new_tokens=per_turn, stop_strings=tuple("aeiou "),
                                                        max_episode_tokens=limit))
    cuts = [record.episode.truncated_by for record in scored.episodes]
    assert "episode_tokens" in cuts
    for record in scored.episodes:
        assert len(record.token_ids) <= limit
        last_turn = len(record.policy_mask) - record.policy_mask[::-1].index(0) if 0 in record.policy_mask else 0
        last_turn_tokens = len(record.policy_mask) - last_turn
        if record.episode.truncated_by == "turn_tokens":
            assert last_turn_tokens == per_turn
        if record.episode.truncated_by == "episode_tokens":
            assert len(record.token_ids) == limit or last_turn_tokens < per_turn


def test_an_environment_that_raises_ends_that_episode_as_an_error_not_the_rollout():
    class Broken(CountdownEnv):
        def respond(self, state, assistant_text):
            if state["said"] == 1:
                raise KeyError("boom")
            return super().respond(state, assistant_text)

    task = Broken()
    examples = [Example(prompt="p", ground_truth=None, metadata={"turns": 1}),
                Example(prompt="q", ground_truth=None, metadata={"turns": 3})]
    _, _, result = run(lambda k, r, p: char_ids("ab") + [EOS], task, examples, 1)
    assert result.verdicts[0].status == "ok" and result.verdicts[0].total == 1.0
    assert result.verdicts[1].status == "error" and "KeyError" in result.verdicts[1].detail
    assert result.records[1].turns == 2


def test_a_calculator_episode_runs_the_call_masks_its_result_and_pays_the_final_answer():
    from rlvr.tasks import build_task

    task = build_task("calculator_arithmetic", options={"eval_size": 5})
    example = task.examples("train", 1, 0)[0]
    product = int(example.ground_truth)
    call = char_ids("<calculator>6*7</calculator>")  # ends at the call's stop string
    answer = char_ids(f"<answer>{product}</answer>")
    backend, prompts, result = run(lambda k, r, p: call if k == 0 else answer, task, [example], 1,
                                   max_new_tokens=40, stop_strings=task.stop_strings)
    record = result.records[0]
    assert [t.role for t in record.episode.turns] == ["assistant", "tool", "assistant"]
    assert record.episode.turns[1].content.strip() == "42"  # the calculator ran: 6*7, never the model's product
    assert record.tool_calls == {"calculator": 1} and not any(record.tool_errors.values())
    row = result.generation.input_ids[0, result.generation.prompt_len:].tolist()
    mask = result.generation.loss_mask[0].tolist()
    assert row[: len(call)] == call and row[len(row) - len(answer):] == answer
    assert mask == [1] * len(call) + [0] * (len(row) - len(call) - len(answer)) + [1] * len(answer)
    assert "42" in TOKENIZER.decode([t for t, m in zip(row, mask) if m == 0])  # the result: masked tokens
    verdict = result.verdicts[0]
    assert verdict.components["answer"] == 1.0 and verdict.correct
    # Ending on the call (the episode cut after one turn) answers nothing: no reward for calling.
    _, _, cut = run(lambda k, r, p: call, task, [example], 1, max_new_tokens=40, stop_strings=task.stop_strings,
                    max_turns=1)
    assert cut.verdicts[0].components["answer"] == 0.0 and cut.records[0].episode.truncated_by == "max_turns"
    # An episode that never calls still counts the offered tool, at 0 (what the tool_unused warning reads).
    _, _, direct = run(lambda k, r, p: answer, task, [example], 1, max_new_tokens=40, stop_strings=task.stop_strings)
    assert direct.records[0].tool_calls == {"calculator": 0} and direct.records[0].tool_errors == {"calculator": 0}


def test_a_demonstration_becomes_sft_pairs_whose_prompts_are_the_text_the_driver_holds():
    from rlvr.tasks import build_task

    task = build_task("calculator_arithmetic", options={"eval_size": 5})
    example = task.examples("train", 1, 3)[0]
    a, b = example.metadata["a"], example.metadata["b"]
    prompt = render_prompts(TOKENIZER, [example], True)[0]
    turns = task.demonstration(example)
    assert turns == [f"<calculator>{a}*{b}</calculator>", f"<answer>{a * b}</answer>"]
    pairs, verdict = demonstration_pairs(task, TOKENIZER, example, prompt, turns, use_chat_template=True)
    assert verdict.components["answer"] == 1.0 and verdict.correct
    assert [p["response"] for p in pairs] == [turns[0], turns[1] + TOKENIZER.eos_token]  # EOS ends the last only
    assert pairs[0]["prompt"] == prompt
    # The second prompt: the call, then the calculator's own output as the driver renders a tool reply.
    tool_reply = ReplyRenderer(TOKENIZER, True, {EOS}).text("tool", str(a * b), None)
    assert pairs[1]["prompt"] == prompt + turns[0] + tool_reply and str(a * b) in tool_reply
    # The same script sampled through the driver holds that text before its answer turn.
    _, _, result = run(lambda k, r, p: char_ids(turns[k]), task, [example], 1, max_new_tokens=40,
                       stop_strings=task.stop_strings)
    row = result.generation.input_ids[0, result.generation.prompt_len:].tolist()
    before_answer = row[: len(row) - len(char_ids(turns[1]))]
    assert TOKENIZER.decode(before_answer, skip_special_tokens=False) == pairs[1]["prompt"][len(prompt):]
    # A wrong demonstration is replayed, not trusted: its verdict says so.
    wrong, wrong_verdict = demonstration_pairs(task, TOKENIZER, example, prompt,
                                               [turns[0], f"<answer>{a * b + 1}</answer>"], use_chat_template=True)
    assert len(wrong) == 2 and wrong_verdict.components["answer"] == 0.0


def test_a_demonstration_the_environment_does_not_follow_is_refused():
    env = CountdownEnv()
    example = env.examples("train", 2, 0)[1]  # ends after 2 turns
    with pytest.raises(ValueError, match="still waits after the last turn 1 of 1"):
        demonstration_pairs(env, TOKENIZER, example, "p", ["a"], use_chat_template=False)
    with pytest.raises(ValueError, match="ended the episode after turn 2 of 3"):
        demonstration_pairs(env, TOKENIZER, example, "p", ["a", "b", "c"], use_chat_template=False)
    with pytest.raises(ValueError, match="at least one"):
        demonstration_pairs(env, TOKENIZER, example, "p", [], use_chat_template=False)
    pairs, _ = demonstration_pairs(env, TOKENIZER, example, "p", ["a", "b"], use_chat_template=False)
    assert pairs[1]["prompt"] == "pa\nok1\n"  # the raw reply between turns, as the driver writes it


def test_tool_schemas_reach_a_template_with_a_tool_format_and_one_without_is_refused():
    from rlvr.tasks import build_task
    from tests.tools.test_tool_formats import QWEN_LIKE_TEMPLATE, tiny_tokenizer

    chat = build_task("calculator_arithmetic", options={"eval_size": 5, "call_format": "chat_template"})
    examples = chat.examples("train", 1, 0)
    qwen_like = tiny_tokenizer(QWEN_LIKE_TEMPLATE)
    listed = render_prompts(qwen_like, examples, True, tools=chat.tool_schemas)[0]
    assert "<tools>" in listed and '"name": "calculator"' in listed
    assert "<tools>" not in render_prompts(qwen_like, examples, True)[0]  # without tools= the template lists none
    chat.check_tokenizer(qwen_like)
    with pytest.raises(ValueError, match="no tool format.*tagged"):
        sample_and_score(ScriptedBackend(lambda k, r, p: [EOS]), chat, examples, group_size=1,
                         settings=settings(), use_chat_template=True)  # the tiny template has no tool format


def test_the_held_out_eval_reports_its_episodes_turns_calls_and_errors():
    from rlvr.training.evaluation import eval_metrics, evaluate_examples

    env = CountdownEnv()
    examples = env.examples("eval", 3, 0)  # end after 1, 2 and 3 turns; each turn one call, the 2nd fails
    backend = ScriptedBackend(lambda k, r, p: char_ids("ab") + [EOS])
    records = evaluate_examples(backend, env, examples, settings(), use_chat_template=True, batch_size=2)
    metrics = eval_metrics(records, seconds=1.0)
    assert metrics["eval/episode/turns"] == pytest.approx((1 + 2 + 3) / 3)
    assert metrics["eval/episode/tool_calls"] == pytest.approx(2.0)
    assert metrics["eval/episode/tool_errors/calc"] == pytest.approx(2 / 3)  # the 2- and 3-turn episodes
    assert metrics["eval/episode/truncated/max_turns"] == 0.0
    # Policy tokens: 3 a turn (a, b, EOS); the rest after the prompt are the environment's replies.
    policy = 3 * (1 + 2 + 3)
    env_tokens = sum(r["env_tokens"] for r in records)
    assert env_tokens > 0
    assert metrics["eval/episode/env_token_frac"] == pytest.approx(env_tokens / (env_tokens + policy))
    # Single completions add no episode metrics.
    plain = [{**r, "verdict": r["verdict"]} for r in records]
    for r in plain:
        for key in ("turns", "tool_calls", "tool_errors", "env_tokens", "truncated_by", "transcript"):
            r.pop(key)
    assert not any(key.startswith("eval/episode/") for key in eval_metrics(plain, seconds=1.0))


def test_the_held_out_eval_counts_an_episode_as_a_training_rollout_counts_it():
    """One definition of each episode metric: eval/episode/* of scripted episodes equal training's
    episode/* of the same episodes sampled through sample_and_score."""
    from rlvr.training.evaluation import eval_metrics, evaluate_examples

    env = CountdownEnv()
    examples = env.examples("eval", 3, 0)
    script = lambda k, r, p: char_ids("abc") + [EOS]  # noqa: E731 - the same reply whatever the row
    records = evaluate_examples(ScriptedBackend(script), env, examples, settings(), use_chat_template=True,
                                batch_size=3)
    scored = sample_and_score(ScriptedBackend(script), env, examples, group_size=1, settings=settings(),
                              use_chat_template=True)
    training = episode_stats([EpisodeCounts.of(record) for record in scored.episodes])
    evaluated = eval_metrics(records, seconds=1.0)
    assert 0.0 < training["episode/env_token_frac"] < 1.0
    for name, value in training.items():
        assert evaluated["eval/" + name] == pytest.approx(value), name
