"""`decode_loop`'s option `dtype`: decoding steps in another dtype than the policy's, reported as another policy.

What must hold: the cast weights step exactly as the model converted to that dtype does; a chosen
token's reported log-prob is its log-prob under the filtered softmax it was drawn from, and the
draw is the one `sample_tokens` makes; the reported log-probs sit in the columns of their tokens,
close to the trainer's but not the trainer's (in the policy's own dtype nothing is reported);
training on them logs the gap and weighs it out; episodes continue turns on the lower-precision
keys; and a dtype the steps cannot run in is refused with the choices.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.models import load_policy
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, decode_loop, sample_and_score
from rlvr.rollout.decode_loop import filter_scores, sample_tokens, sample_tokens_with_logprobs, start_decoding
from rlvr.rollout.decode_step import DecoderWeights
from rlvr.tasks.task import Example
from rlvr.testing import build_tiny_model, build_tiny_tokenizer
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.rollout.test_episodes import CountdownEnv

PROMPTS = ["say a 1", "say bb 22 long prompt here", "c"]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_policy(str(tiny_model_dir))


def test_cast_weights_step_exactly_as_the_model_converted_to_bf16(loaded):
    model, tokenizer = loaded.policy, loaded.tokenizer
    encoded = tokenizer(PROMPTS[:2], return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]  # [2, P], the first row left-padded
    capacity = ids.shape[1] + 4
    converted = copy.deepcopy(model).to(torch.bfloat16)
    with torch.inference_mode():
        ours = DecoderWeights.of(model, capacity).cast(torch.bfloat16)
        # The converted model's rotary table comes from an inv_freq buffer rounded to bf16; the cast keeps
        # the policy's fp32 one (the cos/sin are cast to bf16 either way), so compare on the same table.
        theirs = dataclasses.replace(DecoderWeights.of(converted, capacity), rotary=ours.rotary)
        fp32 = DecoderWeights.of(model, capacity)
        assert DecoderWeights.of(converted, capacity).cast(torch.bfloat16).head is not None  # a no-op cast works
        first, steps = {}, {}
        for name, weights in (("ours", ours), ("theirs", theirs), ("fp32", fp32)):
            net = model if name == "fp32" else converted  # the same bf16 prefill for the two compared
            first[name], steps[name] = start_decoding(net, ids, mask, 2, weights, capacity)
        assert steps["ours"].cache.buffer.dtype == torch.bfloat16
        chosen = first["theirs"].float().argmax(-1)  # [4]
        for _ in range(3):
            logits = {name: step.step(chosen) for name, step in steps.items()}  # [4, V] each
            assert logits["ours"].dtype == torch.bfloat16
            assert torch.equal(logits["ours"], logits["theirs"])
            # the step really ran in bf16: fp32 steps give other logits
            assert (logits["ours"].float() - logits["fp32"]).abs().max() > 1e-3
            chosen = logits["theirs"].float().argmax(-1)


@pytest.mark.parametrize("settings", [
    SamplingSettings(max_new_tokens=1, temperature=0.7),
    SamplingSettings(max_new_tokens=1, temperature=1.3, top_k=5),
    SamplingSettings(max_new_tokens=1, top_p=0.6, min_p=0.05),
    SamplingSettings(max_new_tokens=1, temperature=0.5, do_sample=False),
])
def test_the_reported_logprob_is_the_drawn_distributions_and_the_draw_is_sample_tokens(settings):
    generator = torch.Generator().manual_seed(0)
    scores = 3 * torch.randn(64, 50, generator=generator)  # [A, V]
    torch.manual_seed(1)
    plain = sample_tokens(scores, settings)
    torch.manual_seed(1)
    chosen, logprobs = sample_tokens_with_logprobs(scores, settings)  # [A] each
    assert torch.equal(chosen, plain)
    assert logprobs.dtype == torch.float32
    expected = torch.log_softmax(filter_scores(scores.double(), settings), -1).gather(-1, chosen[:, None])[:, 0]
    torch.testing.assert_close(logprobs.double(), expected, atol=1e-5, rtol=0)
    # The plausible slips give other numbers: the raw softmax, or the temperature without the filters.
    raw = torch.log_softmax(scores, -1).gather(-1, chosen[:, None])[:, 0]
    tempered = torch.log_softmax(scores / settings.temperature, -1).gather(-1, chosen[:, None])[:, 0]
    assert (raw - logprobs).abs().max() > 0.05
    if settings.top_k or settings.top_p < 1 or settings.min_p:
        assert (tempered - logprobs).abs().max() > 0.05


def test_bf16_steps_report_their_logprobs_in_their_tokens_columns(loaded):
    model, tokenizer = loaded.policy, loaded.tokenizer
    temperature = 0.7
    settings = SamplingSettings(max_new_tokens=8, temperature=temperature)
    torch.manual_seed(0)
    generation = decode_loop(model, tokenizer, PROMPTS, 4, settings, dtype="bfloat16")
    sampler = generation.sampler_logprobs  # [N, C]
    mask = generation.loss_mask.bool()  # [N, C]
    assert sampler is not None and sampler.shape == mask.shape
    assert int(mask.sum()) > int(mask.shape[0]) and not mask.all()  # rows of several lengths
    assert (sampler[~mask] == 0).all() and (sampler[mask] < 0).all()
    prompt_len = generation.prompt_len
    with torch.no_grad():
        trainer, _ = compute_completion_logprobs(model, generation.input_ids, generation.attention_mask, prompt_len,
                                                 enable_grad=False, with_entropy=False, temperature=temperature)
    trainer = trainer[:, prompt_len - 1:]  # [N, C]: column j scores completion token j
    gap = (sampler - trainer).abs()[mask]
    assert 1e-4 < float(gap.mean()) < 0.05  # bf16 noise: not the trainer's own, and not another token's
    shifted = (sampler[:, 1:] - trainer[:, :-1]).abs()[mask[:, 1:]]
    assert float(shifted.mean()) > 10 * float(gap.mean())
    # The first token comes from the fp32 prefill: there the two agree to fp32 precision.
    torch.testing.assert_close(sampler[:, 0], trainer[:, 0], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", ["model", "float32"])
def test_in_the_policys_own_dtype_the_sampler_is_the_trainer_and_reports_nothing(loaded, dtype):
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0)
    torch.manual_seed(2)
    generation = decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, 2, settings, dtype=dtype)
    torch.manual_seed(2)
    default = decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, 2, settings)
    assert generation.sampler_logprobs is None
    assert torch.equal(generation.input_ids, default.input_ids)


def test_bad_dtypes_are_refused_with_the_choices(loaded, tmp_path):
    settings = SamplingSettings(max_new_tokens=2)
    with pytest.raises(ValueError, match=r"unknown dtype 'bf16'; choose from model, float32, bfloat16, float16"):
        decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, 1, settings, dtype="bf16")
    with pytest.raises(ValueError, match=r"dtype='bfloat16' runs on the preallocated cache"):
        decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, 1, settings, cache="dynamic", dtype="bfloat16")
    with pytest.raises(ConfigError, match=r"unknown dtype 'bf16'; choose from model, float32, bfloat16, float16"):
        load_config(None, ["rollout.backend_options.dtype=bf16"])
    with pytest.raises(ConfigError, match=r"dtype='bfloat16' runs on the preallocated cache"):
        load_config(None, ["rollout.backend_options.dtype=bfloat16", "rollout.backend_options.cache=dynamic"])
    assert load_config(None, ["rollout.backend_options.dtype=bfloat16"]).rollout.backend_options == {
        "dtype": "bfloat16"}


def test_a_model_the_steps_do_not_cover_is_refused_in_another_dtype(loaded):
    model = copy.deepcopy(loaded.policy)
    handle = model.get_decoder().layers[0].register_forward_hook(lambda *args: None)
    try:
        with pytest.raises(ValueError, match=r"needs the preallocated cache, which does not support this model "
                                             r"\(a forward hook on"):
            decode_loop(model, loaded.tokenizer, PROMPTS, 1, SamplingSettings(max_new_tokens=2), dtype="bfloat16")
    finally:
        handle.remove()


def test_training_on_bf16_samples_logs_the_gap_and_corrects_it(tiny_model_dir, tmp_path):
    from rlvr.training.rl import train

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "rollout.backend_options.dtype": "bfloat16", "train.iterations": 2, "train.eval_size": 0,
        "algorithm.kl_coef": 0.0})))
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        assert 1e-4 < record["rollout/logprob_abs_diff_mean"] < 0.05
        assert 0 < record["rollout/mismatch_kl"] < 1e-2
        assert record["rollout/is_weight_mean"] == pytest.approx(1.0, abs=0.05)
        assert record["rollout/is_weight_mean"] != 1.0
        assert record["ratio/first_epoch_max_dev"] < 1e-6  # the old log-probs are the trainer's own


def test_episodes_continue_turns_on_bf16_keys():
    tokenizer = build_tiny_tokenizer()
    backend = ROLLOUT_BACKENDS.get("decode_loop")(build_tiny_model(seed=3).eval(), tokenizer, dtype="bfloat16")
    examples = [Example(prompt="say", ground_truth=None, metadata={"turns": 4})]
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, max_episode_tokens=200,
                                stop_strings=tuple("aeiou"))
    torch.manual_seed(4)
    scored = sample_and_score(backend, CountdownEnv(max_turns=4), examples, group_size=3, settings=settings,
                              use_chat_template=True)
    assert backend.turn_cache.reused_tokens > 0  # later turns continued on the held (bf16) keys
    generation = scored.generation
    owned = generation.loss_mask.bool()  # [N, C]: the policy's tokens; the environment's replies are 0
    assert (generation.sampler_logprobs[owned] < 0).all() and (generation.sampler_logprobs[~owned] == 0).all()
    assert max(len(record.episode.turns) for record in scored.episodes) >= 3


def test_one_step_off_policy_keeps_the_bf16_samplers_own_logprobs(tiny_model_dir, tmp_path):
    """The stale copy samples in bf16: its reported log-probs are what it sampled from, not rescored in fp32."""
    from rlvr.training.rl import train

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "rollout.backend_options.dtype": "bfloat16", "rollout.async_steps": 1, "train.iterations": 2,
        "train.eval_size": 0, "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1})))
    first = read_jsonl(run_dir / "metrics.jsonl")[0]
    assert first["rollout/policy_lag"] == 0
    # Lag 0: fp32 rescoring by the copy would give a gap of exactly 0; the bf16 steps' own log-probs do not.
    assert 1e-4 < first["rollout/logprob_abs_diff_mean"] < 0.05


def test_one_step_off_policy_does_not_rescore_what_the_bf16_sampler_reported(tiny_model_dir, tmp_path, monkeypatch):
    from rlvr.training import async_rollout
    from rlvr.training.rl import train

    calls = []
    real = async_rollout.policy_logprobs
    monkeypatch.setattr(async_rollout, "policy_logprobs", lambda *args: calls.append(1) or real(*args))
    for dtype in ("bfloat16", "model"):
        run_dir = tmp_path / dtype
        train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
            "rollout.backend_options.dtype": dtype, "rollout.async_steps": 1, "train.iterations": 2,
            "train.eval_size": 0, "algorithm.ppo_epochs": 1})))
        # bf16: the sampler's own log-probs are kept; the policy's dtype: the copy scores its samples (3 batches)
        assert len(calls) == (0 if dtype == "bfloat16" else 3)
