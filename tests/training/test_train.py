"""End-to-end training on a tiny random model: CLI smoke run, resume, and rollout layout."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.models import LoraSettings, load_policy, load_trainable
from rlvr.observe.metric_names import EVAL_MAJ_AT_PREFIX, EVAL_MEAN_AT_PREFIX, EVAL_PASS_AT_PREFIX
from rlvr.rollout import SamplingSettings, hf_generate
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.observe.test_metric_names import PREFIXES, REPO, names_used
from tests.training.test_ppo import PPO_METRICS

# Written only by a sampled eval (train.eval_samples > 1): tests/cli/test_eval_sampled.py runs one.
SAMPLED_EVAL_PREFIXES = (EVAL_PASS_AT_PREFIX, EVAL_MEAN_AT_PREFIX, EVAL_MAJ_AT_PREFIX)

REQUIRED_METRICS = [
    "reward/mean", "reward/std", "reward/share", "frac_no_contrast_groups", "frac_nonzero_advantages",
    "policy_loss_per_token", "kl", "entropy", "clip_frac/low", "clip_frac/high", "grad_norm", "lr",
    "truncated_frac", "completion_len/mean", "optimizer_steps", "skipped_nonfinite_updates",
    "time/generation", "time/scoring", "time/logprobs", "time/update", "tokens_per_second", "peak_rss_bytes",
]


def _weights(run_dir, model_dir):
    loaded = load_policy(str(model_dir), lora=LoraSettings(rank=4, alpha=8))
    load_trainable(loaded, sorted((run_dir / "checkpoints").glob("iter_*"))[-1] / "model")
    return {k: v.clone() for k, v in loaded.policy.named_parameters() if v.requires_grad}


def test_cli_smoke_two_iterations(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "smoke"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 2, "model.lora_rank": 4,
                                                           "model.lora_alpha": 8, "algorithm.kl_coef": 0.04})
    assert main(["train", *overrides]) == 0
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "eval.jsonl"):
        assert (run_dir / name).exists(), name
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    for record in records:
        for key in REQUIRED_METRICS:
            assert key in record, key
            assert record[key] is not None and math.isfinite(record[key]), key
        assert record["optimizer_steps"] == 2  # grpo: 2 epochs, one optimizer step each
        assert record["frac_no_contrast_groups"] < 1.0  # the toy task has contrast
        assert record["kl"] >= 0
    # Every metric the health checks and the report read is in this run's records (PPO's value
    # metrics: in a PPO run's, tests/training/test_ppo.py; episode/*: in an environment run's,
    # tests/training/test_episode_training.py).
    written = {key for record in records + read_jsonl(run_dir / "eval.jsonl") for key in record}
    for reader in ("rlvr/observe/health.py", "rlvr/report/figures.py", "rlvr/report/run_data.py"):
        used = {name for name in names_used((REPO / reader).read_text())
                if not name.startswith(("episode/", *SAMPLED_EVAL_PREFIXES))}
        for name in used - set(PPO_METRICS):
            assert name in written or (name in PREFIXES and any(key.startswith(name) for key in written)), (
                reader, name)
    assert records[0]["kl"] == 0.0  # the policy starts equal to the reference (LoRA B = 0)
    assert records[1]["kl"] > 0  # and moves away from it
    # First epoch is on-policy: the ratio is exactly 1 there.
    assert records[0]["ratio/first_epoch_max_dev"] < 1e-6
    # Parameters changed: the LoRA B matrices start at zero and must not stay there.
    trained = _weights(run_dir, tiny_model_dir)
    lora_b = [v for k, v in trained.items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)


# PPO: the value head (and a separate value model with its own adapter) is part of the state a resume
# restores; the separate case also takes the KL penalty in the reward and a value warm-up iteration.
RESUME_CASES = {
    "grpo": {"algorithm.name": "grpo"},
    "ppo": {"algorithm.name": "ppo", "rollout.batch_size": 4, "rollout.group_size": 2},
    "ppo_separate": {"algorithm.name": "ppo", "algorithm.value_model": "separate", "algorithm.kl_in_reward": 0.05,
                     "algorithm.value_warmup_iterations": 1},
    # Clip-Cov draws the tokens it detaches with a generator seeded from the checkpointed RNG; a wide
    # covariance window and a 10% budget make the draw change the update.
    # Two optimizer steps an epoch (8 rows, 4 a step): the scheduler counts them and a resume goes on from them.
    "steps_per_epoch": {"algorithm.name": "grpo", "optim.minibatch_size": 2, "optim.grad_accum_steps": 2,
                        "algorithm.log_kl": True},
    "clip_cov": {"algorithm.name": "clip_cov", "algorithm.clip_cov_ratio": 0.1, "algorithm.clip_cov_lb": -100,
                 "algorithm.clip_cov_ub": 100},
}


def _value_tensors(run_dir):
    from safetensors.torch import load_file

    folder = sorted((run_dir / "checkpoints").glob("iter_*"))[-1] / "value"
    return {**load_file(str(folder / "value_head.safetensors")),
            **({f"model/{k}": v for k, v in load_file(str(folder / "model" / "adapter_model.safetensors")).items()}
               if (folder / "model").exists() else {})}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_equals_uninterrupted(tiny_model_dir, tmp_path, case):
    extra = {"train.iterations": 4, "train.save_every": 2, "train.eval_every": 2, **RESUME_CASES[case],
             "model.lora_rank": 4, "model.lora_alpha": 8, "train.keep_checkpoints": 5}
    full = tmp_path / "full"
    assert main(["train", *tiny_overrides(tiny_model_dir, full, **extra)]) == 0
    part = tmp_path / "part"
    assert main(["train", *tiny_overrides(tiny_model_dir, part, **{**extra, "train.iterations": 2})]) == 0
    # Simulate a crash that logged a line after the last checkpoint: resume must drop it.
    with open(part / "metrics.jsonl", "a") as handle:
        handle.write('{"iteration": 3, "reward/mean": 123.0}\n')
    assert main(["train", "--resume", str(part), "train.iterations=4"]) == 0
    full_records, part_records = read_jsonl(full / "metrics.jsonl"), read_jsonl(part / "metrics.jsonl")
    assert [r["iteration"] for r in part_records] == [1, 2, 3, 4]
    skip = ("time/", "elapsed_s", "tokens_per_second", "peak_rss_bytes")
    for a, b in zip(full_records, part_records):
        for key, value in a.items():
            if key.startswith(skip):
                continue
            if isinstance(value, (int, float)):
                assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
            else:  # e.g. health/warnings: the resumed run rebuilt the same warning streaks
                assert b[key] == value, key
    full_w, part_w = _weights(full, tiny_model_dir), _weights(part, tiny_model_dir)
    for key in full_w:
        assert torch.equal(full_w[key], part_w[key]), key
    if case.startswith("ppo"):
        full_v, part_v = _value_tensors(full), _value_tensors(part)
        assert full_v.keys() == part_v.keys() and len(full_v) > (2 if case == "ppo_separate" else 1)
        for key in full_v:
            assert torch.equal(full_v[key], part_v[key]), key
        assert full_v["weight"].abs().max() > 0  # the head learned (it starts at zero)
        assert full_records[-1]["value/explained_variance"] == part_records[-1]["value/explained_variance"]
    if case == "steps_per_epoch":
        assert [r["optimizer_steps"] for r in full_records] == [4, 4, 4, 4]  # 2 epochs x 2 steps
        assert full_records[-1]["optimizer_steps_total"] == 16 and full_records[-1]["kl"] > 0
    if case == "clip_cov":
        assert all(record["policy_loss/cov_clipped"] > 0 for record in full_records)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, capsys):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert "config.yaml is missing" in capsys.readouterr().err


def test_generation_is_prompt_major_and_mask_covers_generated_tokens(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir))
    tokenizer = loaded.tokenizer
    prompts = ["a", "bbbbbbb", "cc"]  # different lengths: left padding differs per prompt
    group = 3
    torch.manual_seed(0)
    generation = hf_generate(loaded.policy, tokenizer, prompts, group, SamplingSettings(max_new_tokens=7))
    prompt_len = generation.prompt_len
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    for row in range(len(prompts) * group):
        # Prompt-major: rows g*G .. g*G+G-1 all carry prompt g.
        assert torch.equal(generation.input_ids[row, :prompt_len], encoded["input_ids"][row // group])
        assert torch.equal(generation.attention_mask[row, :prompt_len], encoded["attention_mask"][row // group])
        completion = generation.input_ids[row, prompt_len:].tolist()
        length = int(generation.completion_lengths[row])
        mask = generation.attention_mask[row, prompt_len:].tolist()
        assert mask == [1] * length + [0] * (len(completion) - length)
        eos = tokenizer.eos_token_id
        if eos in completion:
            assert length == completion.index(eos) + 1  # EOS itself is generated and counted
            assert not generation.truncated[row]
        else:
            assert length == 7 and generation.truncated[row]


def test_config_errors_reach_the_cli(capsys):
    assert main(["train", "optim.lrr=3"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'optim.lrr'" in err and "valid keys" in err


def test_nonfinite_updates_are_skipped_and_counted(tiny_model_dir, tmp_path):
    from rlvr.core import POLICY_LOSSES

    if "test_nan_loss" not in POLICY_LOSSES:
        @POLICY_LOSSES.register("test_nan_loss")
        def nan_loss(logprobs, old_logprobs, advantages, mask, *, clip_low=0.2, clip_high=None):
            return logprobs * float("nan"), {}

    run_dir = tmp_path / "nan"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 1,
                                                           "algorithm.policy_loss": "test_nan_loss",
                                                           "model.lora_rank": 4, "model.lora_alpha": 8})
    assert main(["train", *overrides]) == 0
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["skipped_nonfinite_updates"] == 2 and record["optimizer_steps"] == 0
    trained = _weights(run_dir, tiny_model_dir)
    assert all(torch.count_nonzero(v) == 0 for k, v in trained.items() if "lora_B" in k)  # nothing applied


def test_rollouts_stop_at_the_tasks_stop_string(tiny_model_dir, tmp_path):
    """With rollout.stop_strings empty, generation ends at the task's own stop string (kept)."""
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings
    from rlvr.tasks import build_task
    from rlvr.training.collect import collect_groups

    config = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "run", **{
        "rollout.max_new_tokens": 40, "rollout.group_size": 8}))
    loaded = load_policy(str(tiny_model_dir))
    task = build_task("char_count", use_chat_template=False)
    task.stop_strings = ("a",)
    backend = ROLLOUT_BACKENDS.get(config.rollout.backend)(loaded.policy, loaded.tokenizer)
    settings = SamplingSettings.for_task(config.rollout, task)
    assert settings.stop_strings == ("a",)
    torch.manual_seed(0)
    collected = collect_groups(backend, task, settings, config, 0)
    texts = [t for group in collected.groups for t in group.texts]
    lengths = torch.cat([group.lengths for group in collected.groups]).tolist()
    completions = torch.cat([group.input_ids[:, group.prompt_len:] for group in collected.groups])  # [N, C]
    stopped = [t for t in texts if t.endswith("a")]
    assert stopped, "no completion reached the stop string: the test would not see a missing stop"
    assert all("a" not in t[:-1] for t in texts)  # nothing generated past the stop string
    decode = loaded.tokenizer.decode
    for row, (text, length) in enumerate(zip(texts, lengths)):
        if text.endswith("a"):  # the mask ends exactly with the token that completed the stop string
            assert decode(completions[row, :length], skip_special_tokens=True).endswith("a")
            assert "a" not in decode(completions[row, : length - 1], skip_special_tokens=True)
    # rollout.stop_strings, when set, replaces the task's.
    config.rollout.stop_strings = ["b"]
    assert SamplingSettings.for_task(config.rollout, task).stop_strings == ("b",)
