"""The rollout backend contract: options checked at load, sync before every rollout, the sampler's
own log-probs and loss mask carried beside the trainer's, and a backend added from one file.

`EngineCopyBackend` stands for an engine of its own (as vLLM is): it samples from a private copy
of the policy that only `sync` refreshes, and reports its log-probs shifted by a known amount, so
the gap metrics and the TIS weights have exact expected values.
"""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, Generation, RolloutBackend, decode_loop
from rlvr.training.collect import CollectedGroups, SampledGroup, rollout_batch
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

NAME = "engine_copy_for_tests"


class EngineCopyBackend(RolloutBackend):
    """Samples from its own copy of the policy; `sync` copies the policy's weights into it."""

    OPTIONS = {"logprob_shift": "added to the reported log-probs", "mask_first": "loss mask 0 on the first token"}
    syncs = 0

    @classmethod
    def build(cls, loaded, rollout):
        backend = cls(loaded.policy, loaded.tokenizer)
        backend.engine = copy.deepcopy(loaded.policy)
        backend.shift = float(rollout.backend_options.get("logprob_shift", 0.0))
        backend.mask_first = bool(rollout.backend_options.get("mask_first", False))
        return backend

    def synced(self):
        type(self).syncs += 1
        self.engine.load_state_dict(self.policy.state_dict())
        return contextlib.nullcontext()

    def generate(self, prompts, group_size, settings):
        assert self.in_sync
        generation = decode_loop(self.engine, self.tokenizer, prompts, group_size, settings)
        prompt_len = generation.prompt_len
        with torch.no_grad():
            logprobs, _ = compute_completion_logprobs(self.engine, generation.input_ids, generation.attention_mask,
                                                      prompt_len, enable_grad=False, with_entropy=False)
        loss_mask = generation.loss_mask.clone()  # [N, C]
        if self.mask_first:
            loss_mask[:, 0] = 0
        sampler = (logprobs[:, prompt_len - 1:] + self.shift) * loss_mask  # [N, C]
        return Generation(input_ids=generation.input_ids, attention_mask=generation.attention_mask,
                          prompt_len=prompt_len, completion_texts=generation.completion_texts,
                          completion_lengths=generation.completion_lengths, truncated=generation.truncated,
                          loss_mask=loss_mask, sampler_logprobs=sampler)


@pytest.fixture
def engine_copy_backend():
    ROLLOUT_BACKENDS.add(NAME, EngineCopyBackend)
    EngineCopyBackend.syncs = 0
    try:
        yield EngineCopyBackend
    finally:
        ROLLOUT_BACKENDS.remove(NAME)


def test_unknown_backend_option_fails_at_load_with_the_valid_ones(engine_copy_backend, tmp_path):
    with pytest.raises(ConfigError, match=r"rollout.backend_options: unknown option 'logprob_shfit'.*"
                                          r"did you mean 'logprob_shift'.*valid options: logprob_shift, mask_first"):
        load_config(None, [f"rollout.backend={NAME}", "rollout.backend_options.logprob_shfit=0.5"])
    with pytest.raises(ConfigError, match=r"unknown option 'cache_kind'.*valid options: cache, compact_fraction"):
        load_config(None, ["rollout.backend_options.cache_kind=dynamic"])
    with pytest.raises(ConfigError, match=r"cache='growing' is not one of auto, preallocated, dynamic"):
        load_config(None, ["rollout.backend_options.cache=growing"])
    with pytest.raises(ConfigError, match=r"hf_generate.*takes no options|HFGenerateBackend; valid options: \(none"):
        load_config(None, ["rollout.backend=hf_generate", "rollout.backend_options.cache=dynamic"])
    assert load_config(None, ["rollout.backend_options.cache=dynamic"]).rollout.backend_options == {"cache": "dynamic"}


def test_a_backend_registered_from_a_test_file_trains(engine_copy_backend, tiny_model_dir, tmp_path):
    from rlvr.training.rl import train

    shift = 0.25
    run_dir = tmp_path / "run"
    config = load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "rollout.backend": NAME, "rollout.backend_options.logprob_shift": shift, "train.iterations": 2,
        "train.eval_size": 0, "algorithm.kl_coef": 0.0, "rollout.tis_cap": 2.0}))
    train(config)
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    assert EngineCopyBackend.syncs == 2  # once before each rollout (nested blocks do not sync again)
    # The sampler reports trainer + shift on weights synced before each rollout: a stale engine in the
    # second iteration (the weights moved, lr 1e-2) would give another gap.
    for record in records:
        assert record["rollout/logprob_abs_diff_mean"] == pytest.approx(shift, abs=1e-4)
        assert record["rollout/logprob_abs_diff_max"] == pytest.approx(shift, abs=1e-4)
        # k3 with log r = logp_trainer - logp_sampler = -shift: e^-s - 1 + s (the reversed KL: e^s - 1 - s = 0.0340)
        assert record["rollout/mismatch_kl"] == pytest.approx(math.exp(-shift) - 1 + shift, abs=1e-4)
        assert record["rollout/is_weight_mean"] == pytest.approx(math.exp(-shift), abs=1e-4)
        assert record["rollout/is_capped_frac"] == 0.0 and record["rollout/is_dropped_frac"] == 0.0
        assert record["rollout/mismatch_ratio_out_frac"] == 0.0  # e^-0.25 = 0.78 is inside [0.5, 2]
        # The trainer's old log-probs are its own: the first epoch stays exactly on-policy.
        assert record["ratio/first_epoch_max_dev"] < 1e-6


def test_in_process_backends_report_no_sampler_logprobs_and_log_no_gap(tiny_model_dir, tmp_path):
    from rlvr.training.rl import train

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 1, "train.eval_size": 0})))
    record = read_jsonl(run_dir / "metrics.jsonl")[0]
    assert not [key for key in record if key.startswith("rollout/")]


def _group(prompt_ids, completion_ids, lengths, loss_mask, sampler):
    """A SampledGroup of G rows: prompt [P] shared, completions [G, C]."""
    rows = len(completion_ids)
    prompt = torch.tensor(prompt_ids).repeat(rows, 1)  # [G, P]
    completion = torch.tensor(completion_ids)  # [G, C]
    mask = torch.cat([torch.ones_like(prompt),
                      (torch.arange(completion.shape[1])[None] < torch.tensor(lengths)[:, None]).long()], 1)
    return SampledGroup(example=None, prompt="", input_ids=torch.cat([prompt, completion], 1), attention_mask=mask,
                        prompt_len=len(prompt_ids), texts=[""] * rows, verdicts=[], lengths=torch.tensor(lengths),
                        truncated=torch.zeros(rows, dtype=torch.bool), rewards=torch.zeros(rows),
                        loss_mask=torch.tensor(loss_mask), sampler_logprobs=torch.tensor(sampler))


def test_rollout_batch_lays_the_loss_mask_and_sampler_logprobs_out_like_the_logprobs():
    # Group 0: prompt width 2, completions of width 3; group 1: prompt width 1, width 2. Batch: P = 2, C = 3.
    first = _group([5, 6], [[7, 8, 9], [7, 0, 0]], [3, 1], [[0, 1, 1], [1, 0, 0]], [[-1.0, -2.0, -3.0], [-4.0, 0, 0]])
    second = _group([5], [[8, 9], [9, 0]], [2, 1], [[1, 1], [1, 0]], [[-5.0, -6.0], [-7.0, 0.0]])
    collected = CollectedGroups(groups=[first, second], group_size=2, sampled_groups=2, filled_no_contrast=0,
                                rounds=1, generation_seconds=0.0, scoring_seconds=0.0)

    class Tokenizer:
        pad_token_id, eos_token_id = 0, 0

    batch = rollout_batch(collected, Tokenizer(), "layout")
    assert batch.prompt_len == 2 and batch.input_ids.shape == (4, 5)
    # Column t scores token t+1: completion token j is column P - 1 + j = 1 + j.
    assert batch.completion_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 0, 0]]
    assert batch.sampler_logprobs.tolist() == [[0, -1, -2, -3], [0, -4, 0, 0], [0, -5, -6, 0], [0, -7, 0, 0]]
    assert batch.old_logprobs is None  # the sampler's numbers are never taken for the trainer's


def test_generation_checks_the_per_token_fields_and_defaults_the_loss_mask():
    ids = torch.ones(2, 5, dtype=torch.long)  # P = 2, C = 3
    made = Generation(input_ids=ids, attention_mask=ids, prompt_len=2, completion_texts=["", ""],
                      completion_lengths=torch.tensor([3, 1]), truncated=torch.zeros(2, dtype=torch.bool))
    assert made.loss_mask.tolist() == [[1, 1, 1], [1, 0, 0]] and made.sampler_logprobs is None
    with pytest.raises(ValueError, match=r"sampler_logprobs must be \[N, C\] = \[2, 3\]"):
        Generation(input_ids=ids, attention_mask=ids, prompt_len=2, completion_texts=["", ""],
                   completion_lengths=torch.tensor([3, 1]), truncated=torch.zeros(2, dtype=torch.bool),
                   sampler_logprobs=torch.zeros(2, 5))


def test_tis_weights_the_policy_loss_by_the_trainer_over_sampler_ratio(engine_copy_backend, tiny_model_dir, tmp_path):
    """One epoch at the sampling weights: every token's weight is exp(-shift), so the policy loss scales by it."""
    from rlvr.training.rl import train

    shift = 0.25
    records = {}
    for cap in (2.0, 0.0):
        run_dir = tmp_path / f"cap{cap}"
        train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
            "rollout.backend": NAME, "rollout.backend_options.logprob_shift": shift, "train.iterations": 1,
            "train.eval_size": 0, "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1, "rollout.tis_cap": cap,
            "train.seed": 1})))
        records[cap] = read_jsonl(run_dir / "metrics.jsonl")[0]
    weighted, plain = records[2.0]["policy_loss_per_token"], records[0.0]["policy_loss_per_token"]
    assert abs(plain) > 1e-3  # a loss far enough from 0 for the ratio to mean something
    assert weighted == pytest.approx(math.exp(-shift) * plain, rel=1e-4)
    assert "rollout/is_weight_mean" not in records[0.0]  # tis_cap=0: no correction
    assert records[0.0]["rollout/logprob_abs_diff_mean"] == pytest.approx(shift, abs=1e-4)  # the gap is still logged
    for record in records.values():
        assert record["ratio/first_epoch_max_dev"] < 1e-6  # old log-probs: the trainer's, never the sampler's


@pytest.mark.parametrize("correction, cap, scale, dropped", [
    # shift 0.25: every token's ratio is e^-0.25 = 0.78, every completion's geometric mean too.
    ("mask_token", 2.0, 1.0, 0.0),  # 0.78 is inside [1/2, 2]: every token kept, unweighted
    ("mask_token", 1.2, 0.0, 1.0),  # outside [0.83, 1.2]: every token dropped, no policy loss left
    ("mask_sequence", 1.2, 0.0, 1.0),
])
def test_the_masking_corrections_keep_or_drop_tokens_in_the_loop(engine_copy_backend, tiny_model_dir, tmp_path,
                                                                correction, cap, scale, dropped):
    from rlvr.training.rl import train

    records = {}
    for name, overrides in (("plain", {"rollout.tis_cap": 0.0}),
                            ("corrected", {"rollout.tis_cap": cap, "rollout.correction": correction})):
        run_dir = tmp_path / name
        train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
            "rollout.backend": NAME, "rollout.backend_options.logprob_shift": 0.25, "train.iterations": 1,
            "train.eval_size": 0, "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1, "train.seed": 1,
            **overrides})))
        records[name] = read_jsonl(run_dir / "metrics.jsonl")[0]
    plain = records["plain"]["policy_loss_per_token"]
    assert abs(plain) > 1e-3
    assert records["corrected"]["policy_loss_per_token"] == pytest.approx(scale * plain, rel=1e-4, abs=1e-7)
    assert records["corrected"]["rollout/is_dropped_frac"] == dropped
    assert records["corrected"]["rollout/is_weight_mean"] == pytest.approx(1.0 - dropped, abs=1e-6)
    # The gap is the same for both runs, and no token's ratio leaves [0.5, 2] at this shift.
    assert records["corrected"]["rollout/mismatch_ratio_out_frac"] == 0.0


def test_sequence_tis_weighs_each_completion_by_its_whole_ratio(engine_copy_backend, tiny_model_dir, tmp_path):
    """tis_sequence: weight min(e^(-0.25 n), C) for a completion of n tokens, so a token's weight depends on
    its completion's length (tis_token gives every token e^-0.25)."""
    from rlvr.training.rl import train

    records = {}
    for correction in ("tis_token", "tis_sequence"):
        run_dir = tmp_path / correction
        train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
            "rollout.backend": NAME, "rollout.backend_options.logprob_shift": 0.25, "train.iterations": 1,
            "train.eval_size": 0, "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1, "train.seed": 1,
            "rollout.tis_cap": 2.0, "rollout.correction": correction})))
        records[correction] = read_jsonl(run_dir / "metrics.jsonl")[0]
    assert records["tis_token"]["rollout/is_weight_mean"] == pytest.approx(math.exp(-0.25), abs=1e-4)
    # Completions of the tiny model run several tokens: e^(-0.25 n) < e^-0.25 for n >= 2.
    sequence_mean = records["tis_sequence"]["rollout/is_weight_mean"]
    assert sequence_mean < math.exp(-0.25) - 0.05 and sequence_mean > 0.0
    assert records["tis_sequence"]["rollout/is_capped_frac"] == 0.0
