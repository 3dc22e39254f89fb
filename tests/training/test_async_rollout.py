"""One-step off-policy rollouts (`rollout.async_steps=1`): which weights sample which batch, the stale
policy's log-probs and the correction they feed, exact resume, and that async_steps=0 is today's loop.

Versions count finished iterations: v_k is the policy after k updates; iteration k (0-based) updates v_k.
On-policy, iteration k trains on v_k's samples; one step off-policy on v_{k-1}'s (v_0's for k = 0), and
the last iteration samples one batch more (v_{K-1}'s, kept for a resume). `RecordingBackend` notes the
trainable weights of the model each batch is sampled with; the patched `update_policy` notes the live
policy's before each update, and the batch it trains on.
"""

from __future__ import annotations

import threading

import pytest
import torch

import rlvr.training.async_rollout as async_rollout
import rlvr.training.iteration as iteration
import rlvr.training.rl as rl
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.models import LoraSettings, load_policy
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, InProcessBackend, decode_loop
from rlvr.rollout.decode_loop import decode_loop_from_ids
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.rollout.test_backend_contract import NAME as ENGINE_NAME, EngineCopyBackend

RECORDING = "recording_for_async_tests"
LORA = {"model.lora_rank": 4, "model.lora_alpha": 8}


def trainable_state(model) -> dict[str, torch.Tensor]:
    """The LoRA tensors of `model`, cloned (the live policy's trainable ones, or the sampler copy's same names)."""
    return {name: param.detach().clone() for name, param in model.named_parameters() if "lora_" in name}


def same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class Recorder:
    def __init__(self):
        self.sampled = []  # per batch: the sampling model's LoRA tensors when sampling started
        self.sampled_after = []  # ... and when it ended
        self.sampling_models = []
        self.threads = []
        self.versions = []  # v_k: the live policy's LoRA tensors before update k
        self.batches = []  # the batch update k trained on
        self.updated = [threading.Event() for _ in range(16)]  # set when update k has finished
        self.policy = None


RECORD = Recorder()


def recording_decode_loop(model, tokenizer, prompts, group_size, settings, **options):
    index = len(RECORD.sampled)
    RECORD.sampled.append(trainable_state(model))
    RECORD.sampling_models.append(model)
    RECORD.threads.append(threading.current_thread().name)
    if index >= 1 and threading.current_thread() is not threading.main_thread():
        # A prefetch: hold sampling until the update running meanwhile has stepped the optimizer.
        assert RECORD.updated[index - 1].wait(timeout=120)
    generation = decode_loop(model, tokenizer, prompts, group_size, settings, **options)
    RECORD.sampled_after.append(trainable_state(model))
    return generation


class RecordingBackend(InProcessBackend):
    sample_fn = staticmethod(recording_decode_loop)
    ids_fn = staticmethod(decode_loop_from_ids)


@pytest.fixture
def recorder(monkeypatch):
    global RECORD
    RECORD = Recorder()
    ROLLOUT_BACKENDS.add(RECORDING, RecordingBackend)
    real_update = iteration.update_policy

    def recording_update(policy, optimizer, scheduler, batch, *args, **kwargs):
        RECORD.policy = policy
        RECORD.versions.append(trainable_state(policy))
        RECORD.batches.append(batch)
        result = real_update(policy, optimizer, scheduler, batch, *args, **kwargs)
        RECORD.updated[len(RECORD.versions) - 1].set()
        return result

    monkeypatch.setattr(iteration, "update_policy", recording_update)
    try:
        yield RECORD
    finally:
        ROLLOUT_BACKENDS.remove(RECORDING)


def _train(model_dir, run_dir, **extra):
    overrides = {"train.eval_size": 0, "rollout.backend": RECORDING, "algorithm.ppo_epochs": 1, **LORA, **extra}
    rl.train(load_config(None, tiny_overrides(model_dir, run_dir, **overrides)))
    return read_jsonl(run_dir / "metrics.jsonl")


@pytest.mark.parametrize("async_steps", [0, 1])
def test_which_weights_sample_each_batch(recorder, tiny_model_dir, tmp_path, async_steps):
    records = _train(tiny_model_dir, tmp_path / "run", **{"train.iterations": 4, "rollout.async_steps": async_steps,
                                                          "optim.lr": 5e-2})
    versions = recorder.versions  # v_0 .. v_3
    assert len(versions) == 4
    assert all(not same_state(versions[k], versions[k + 1]) for k in range(3))  # every update moved the weights
    if async_steps == 0:
        expected = [0, 1, 2, 3]  # iteration k: v_k, sampled by the policy itself in the loop's thread
        assert all(model is recorder.policy for model in recorder.sampling_models)
        assert set(recorder.threads) == {threading.main_thread().name}
        assert not any(key.startswith("rollout/") for record in records for key in record)
    else:
        expected = [0, 0, 1, 2, 3]  # iterations 0-3, then the batch a resume would train on first
        assert [r["rollout/policy_lag"] for r in records] == [0, 1, 1, 1]
        assert all(model is not recorder.policy for model in recorder.sampling_models)  # the sampler's copy
        assert set(recorder.threads) == {"rlvr-rollout"}
        # The last checkpoint keeps that batch, sampled by v_3.
        saved = torch.load(tmp_path / "run" / "checkpoints" / "iter_000004" / "trainer_state.pt", weights_only=False)
        assert saved["state"][async_rollout.PENDING_ROLLOUT].policy_version == 3
    assert len(recorder.sampled) == len(expected)
    for index, version in enumerate(expected):
        assert same_state(recorder.sampled[index], versions[version]), (index, version)
        # The optimizer stepped the live policy while batches 1.. were sampled: the sampled weights held still.
        assert same_state(recorder.sampled_after[index], versions[version]), index


def _logprobs_at(model_dir, state: dict, batch) -> torch.Tensor:
    """log pi of the batch's tokens under a freshly loaded policy holding `state`, by one plain forward. [N, L-1]"""
    loaded = load_policy(str(model_dir), lora=LoraSettings(rank=4, alpha=8))
    params = dict(loaded.policy.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
    logprobs, _ = compute_completion_logprobs(loaded.policy, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                              enable_grad=False, with_entropy=False)
    return logprobs * batch.completion_mask  # [N, L-1]


def test_sampler_logprobs_are_the_stale_policys_and_the_correction_weighs_them(recorder, tiny_model_dir, tmp_path):
    cap = 2.0
    records = _train(tiny_model_dir, tmp_path / "run", **{"train.iterations": 3, "rollout.async_steps": 1,
                                                          "optim.lr": 5e-2, "rollout.tis_cap": cap})
    for k in range(3):
        batch = recorder.batches[k]
        mask = batch.completion_mask
        stale = _logprobs_at(tiny_model_dir, recorder.versions[max(k - 1, 0)], batch)  # v_{k-1} (v_0 at k = 0)
        current = _logprobs_at(tiny_model_dir, recorder.versions[k], batch)  # v_k: the first epoch's old log-probs
        assert batch.sampler_logprobs is not None
        torch.testing.assert_close(batch.sampler_logprobs * mask, stale, atol=2e-5, rtol=0)
        weights = torch.exp(current - stale).clamp(max=cap)  # tis_token: min(pi_old / pi_sampler, C)
        expected = float((weights * mask).sum() / mask.sum())
        assert records[k]["rollout/is_weight_mean"] == pytest.approx(expected, abs=1e-5)
        gap = float(((current - stale).abs() * mask).sum() / mask.sum())
        assert records[k]["rollout/logprob_abs_diff_mean"] == pytest.approx(gap, abs=1e-5)
        if k == 0:  # sampled by v_0, trained at v_0
            assert records[k]["rollout/is_weight_mean"] == 1.0 and gap == 0.0
        else:  # the lag is visible and weighed: the weights are not all 1
            assert gap > 1e-3 and abs(records[k]["rollout/is_weight_mean"] - 1) > 1e-3
            assert float(((weights - 1).abs() * mask).max()) > 1e-2
        # The old log-probs are the current policy's: the first epoch itself is on-policy.
        assert records[k]["ratio/first_epoch_max_dev"] < 1e-6


def test_async_steps_0_is_the_loop_without_the_key(tiny_model_dir, tmp_path):
    extra = {"train.iterations": 2, "train.eval_size": 2, **LORA}
    runs = {}
    for name, more in (("without", {}), ("zero", {"rollout.async_steps": 0})):
        run_dir = tmp_path / name
        assert main(["train", *tiny_overrides(tiny_model_dir, run_dir, **extra, **more)]) == 0
        runs[name] = run_dir
    _assert_same_runs(runs["without"], runs["zero"], tiny_model_dir)
    state = torch.load(sorted((runs["zero"] / "checkpoints").glob("iter_*"))[-1] / "trainer_state.pt",
                       weights_only=False)
    assert async_rollout.PENDING_ROLLOUT not in state["state"]


def _assert_same_runs(a, b, model_dir):
    skip = ("time/", "elapsed_s", "tokens_per_second", "peak_rss_bytes", "eval/seconds")
    for name in ("metrics.jsonl", "eval.jsonl"):
        records_a, records_b = read_jsonl(a / name), read_jsonl(b / name)
        assert len(records_a) == len(records_b) > 0
        for x, y in zip(records_a, records_b):
            assert {k: v for k, v in x.items() if not k.startswith(skip)} == \
                   {k: v for k, v in y.items() if not k.startswith(skip)}
    weights_a, weights_b = _checkpoint_weights(a, model_dir), _checkpoint_weights(b, model_dir)
    assert weights_a and same_state(weights_a, weights_b)


def _checkpoint_weights(run_dir, model_dir):
    from rlvr.models import load_trainable

    loaded = load_policy(str(model_dir), lora=LoraSettings(rank=4, alpha=8))
    load_trainable(loaded, sorted((run_dir / "checkpoints").glob("iter_*"))[-1] / "model")
    return trainable_state(loaded.policy)


def test_the_thread_changes_nothing_but_the_time(tiny_model_dir, tmp_path, monkeypatch):
    extra = {"train.iterations": 3, "train.eval_size": 2, "train.eval_temperature": 1.0, "rollout.async_steps": 1,
             **LORA}
    threaded = tmp_path / "threaded"
    assert main(["train", *tiny_overrides(tiny_model_dir, threaded, **extra)]) == 0
    monkeypatch.setattr(async_rollout, "draws_tokens_at_random", lambda loss_fn: True)  # sample, then update
    inline = tmp_path / "inline"
    assert main(["train", *tiny_overrides(tiny_model_dir, inline, **extra)]) == 0
    _assert_same_runs(threaded, inline, tiny_model_dir)
    records = read_jsonl(inline / "metrics.jsonl")
    assert [r["rollout/policy_lag"] for r in records] == [0, 1, 1]
    assert records[-1]["rollout/logprob_abs_diff_mean"] > 0


ASYNC_RESUME_CASES = {
    "grpo": {},
    # Clip-Cov draws tokens from the global RNG in the update: sampled first, then updated (no thread).
    "clip_cov": {"algorithm.name": "clip_cov", "algorithm.clip_cov_ratio": 0.1, "algorithm.clip_cov_lb": -100,
                 "algorithm.clip_cov_ub": 100},
}


@pytest.mark.parametrize("case", sorted(ASYNC_RESUME_CASES))
def test_async_resume_equals_uninterrupted(tiny_model_dir, tmp_path, case):
    extra = {"train.iterations": 4, "train.save_every": 2, "train.eval_every": 2, "rollout.async_steps": 1,
             "train.keep_checkpoints": 5, **LORA, **ASYNC_RESUME_CASES[case]}
    full = tmp_path / "full"
    assert main(["train", *tiny_overrides(tiny_model_dir, full, **extra)]) == 0
    part = tmp_path / "part"
    assert main(["train", *tiny_overrides(tiny_model_dir, part, **{**extra, "train.iterations": 2})]) == 0
    # The checkpoint holds the batch iteration 3 trains on, sampled by v_1 before iteration 2's update.
    saved = torch.load(part / "checkpoints" / "iter_000002" / "trainer_state.pt", weights_only=False)["state"]
    assert saved[async_rollout.PENDING_ROLLOUT].policy_version == 1
    assert main(["train", "--resume", str(part), "train.iterations=4"]) == 0
    full_records = read_jsonl(full / "metrics.jsonl")
    assert [r["rollout/policy_lag"] for r in full_records] == [0, 1, 1, 1]
    assert all(r["rollout/logprob_abs_diff_mean"] > 0 for r in full_records[1:])
    _assert_same_runs(full, part, tiny_model_dir)


def test_async_steps_is_0_or_1():
    assert load_config(None, ["rollout.async_steps=1"]).rollout.async_steps == 1
    assert load_config(None, []).rollout.async_steps == 0
    with pytest.raises(ConfigError, match=r"rollout.async_steps must be an integer in \[0, 1\], got 2"):
        load_config(None, ["rollout.async_steps=2"])
    with pytest.raises(ConfigError, match=r"rollout.async_steps must be an integer in \[0, 1\], got -1"):
        load_config(None, ["rollout.async_steps=-1"])
    with pytest.raises(ConfigError, match=r"rollout.async_steps: expected an integer"):
        load_config(None, ["rollout.async_steps=0.5"])


def test_async_steps_refuses_data_parallel():
    class Ranks:
        enabled = True

    with pytest.raises(ValueError, match=r"async_steps=1 .* does not run data-parallel.*async_steps=0"):
        async_rollout.OneStepOffRollouts(session=None, settings=None, config=None, dist=Ranks())


def test_an_engine_of_its_own_takes_the_weights_before_the_update(tiny_model_dir, tmp_path):
    """`EngineCopyBackend` copies the policy when sync() opens and reports its log-probs + shift: on-policy the
    gap is the shift alone; one step off-policy the engine holds v_{k-1} and the gap grows."""
    shift = 0.25
    ROLLOUT_BACKENDS.add(ENGINE_NAME, EngineCopyBackend)
    EngineCopyBackend.syncs = 0
    try:
        records = {}
        for steps in (0, 1):
            run_dir = tmp_path / f"async{steps}"
            rl.train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
                "rollout.backend": ENGINE_NAME, "rollout.backend_options.logprob_shift": shift, "train.iterations": 3,
                "train.eval_size": 0, "rollout.async_steps": steps, "optim.lr": 5e-2, **LORA})))
            records[steps] = read_jsonl(run_dir / "metrics.jsonl")
    finally:
        ROLLOUT_BACKENDS.remove(ENGINE_NAME)
    assert EngineCopyBackend.syncs == 3 + 4  # on-policy: one per iteration; async: the first batch, then one each
    for record in records[0]:
        assert record["rollout/logprob_abs_diff_mean"] == pytest.approx(shift, abs=1e-4)
    assert records[1][0]["rollout/logprob_abs_diff_mean"] == pytest.approx(shift, abs=1e-4)  # lag 0
    for record in records[1][1:]:
        assert abs(record["rollout/logprob_abs_diff_mean"] - shift) > 1e-3
