"""PPO in the RL loop on a tiny random model: a run with groups of one, the value warm-up, one
backbone pass per minibatch with a shared value head, and the advantage stage with old values.

The math itself (GAE, whitening, the value loss) is tested against hand-worked values in
tests/core/test_value.py; resume and data parallelism with a value model in tests/training/test_train.py,
tests/parallel/test_distributed.py and tests/parallel/test_fsdp.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.core import RolloutBatch, masked_whiten
from rlvr.observe.metric_names import (
    EXPLAINED_VARIANCE,
    FRAC_NO_CONTRAST_GROUPS,
    HEALTH_WARNINGS,
    RETURN_MEAN,
    TIME_VALUES,
    VALUE_CLIP_FRAC,
    VALUE_LOSS_PER_TOKEN,
    VALUE_MEAN,
)
from rlvr.models import LoraSettings, load_policy, load_trainable, trainable_parameters
from rlvr.models.value_model import ValueHead, build_value_model
from rlvr.training.advantage_stage import with_advantages
from rlvr.training.optim import make_scheduler
from rlvr.training.update import update_policy
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.parallel.test_distributed import _config, _full_batch, ppo_inputs
from tests.observe.test_metric_names import PREFIXES, REPO, names_used

PPO_METRICS = (VALUE_LOSS_PER_TOKEN, VALUE_CLIP_FRAC, VALUE_MEAN, RETURN_MEAN, EXPLAINED_VARIANCE, TIME_VALUES)
SMALL = {"model.lora_rank": 4, "model.lora_alpha": 8}


def test_ppo_run_with_groups_of_one(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "ppo"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{**SMALL, "algorithm.name": "ppo", "train.iterations": 3,
                                                           "rollout.batch_size": 8, "rollout.group_size": 1,
                                                           "algorithm.kl_in_reward": 0.05})
    assert main(["train", *overrides]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2, 3]
    for record in records:
        for key in PPO_METRICS:
            assert key in record and math.isfinite(record[key]), key
        assert record["optimizer_steps"] == 2
        # A group of one has no contrast and needs none: no zero-variance share, no warning about it.
        assert FRAC_NO_CONTRAST_GROUPS not in record and "no_contrast" not in record[HEALTH_WARNINGS]
        assert record["frac_nonzero_advantages"] > 0.5
    # The head starts at zero: every value 0, explained variance exactly 0; then it learns.
    assert records[0][VALUE_MEAN] == 0.0 and records[0][EXPLAINED_VARIANCE] == 0.0
    assert records[1][VALUE_MEAN] != 0.0 and records[1][VALUE_LOSS_PER_TOKEN] > 0
    assert records[0]["ratio/first_epoch_max_dev"] < 1e-6  # the value pass's old log-probs equal the update's
    # The KL penalty in the reward: a reference pass each iteration, its KL logged at sampling time
    # (0 while the LoRA adapter is still 0, then the policy moves away).
    assert all("time/logprobs" in record for record in records)
    assert records[0]["kl"] == 0.0 and records[2]["kl"] > 0
    # Every metric the health checks and the report read is written by a group run (tests/training/test_train.py)
    # or by this one.
    written = {key for record in records + read_jsonl(run_dir / "eval.jsonl") for key in record}
    assert EXPLAINED_VARIANCE in names_used((REPO / "rlvr/observe/health.py").read_text())
    for reader in ("rlvr/observe/health.py", "rlvr/report/figures.py", "rlvr/report/run_data.py"):
        for name in names_used((REPO / reader).read_text()) & set(PPO_METRICS):
            assert name in written or (name in PREFIXES and any(key.startswith(name) for key in written))
    checkpoint = sorted((run_dir / "checkpoints").glob("iter_*"))[-1]
    assert (checkpoint / "value" / "value_head.safetensors").is_file()


@pytest.mark.parametrize("value_model", ["shared", "separate"])
def test_value_warmup_trains_the_value_and_leaves_the_policy(tiny_model_dir, tmp_path, value_model):
    run_dir = tmp_path / value_model
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        **SMALL, "algorithm.name": "ppo", "algorithm.value_model": value_model, "train.iterations": 1,
        "algorithm.value_warmup_iterations": 1, "train.eval_size": 0})
    assert main(["train", *overrides]) == 0
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert "policy_loss_per_token" not in record and record[VALUE_LOSS_PER_TOKEN] > 0
    checkpoint = sorted((run_dir / "checkpoints").glob("iter_*"))[-1]
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    load_trainable(loaded, checkpoint / "model")
    lora_b = [p for name, p in loaded.policy.named_parameters() if "lora_B" in name]
    assert lora_b and all(torch.count_nonzero(p) == 0 for p in lora_b)  # the policy did not move
    from safetensors.torch import load_file

    head = load_file(str(checkpoint / "value" / "value_head.safetensors"))
    assert head["weight"].abs().max() > 0  # the head did
    if value_model == "separate":  # so did the value model's own adapter
        adapter = load_file(str(checkpoint / "value" / "model" / "adapter_model.safetensors"))
        assert any(torch.count_nonzero(t) > 0 for name, t in adapter.items() if "lora_B" in name)


def _count_decoder_calls(model) -> list:
    calls = []
    decoder = model.get_base_model().get_decoder()
    decoder.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls


@pytest.mark.parametrize("preset", ["grpo", "ppo"])
def test_a_shared_value_head_costs_no_extra_backbone_pass(tiny_model_dir, preset):
    """The update runs the decoder as often with PPO's shared value head as GRPO does without one:
    log-probs and values come from the same pass (2 decoder calls per minibatch: prompt, completions)."""
    config = _config(preset, str(tiny_model_dir))
    torch.manual_seed(0)
    loaded = load_policy(str(tiny_model_dir), dtype="float64", lora=LoraSettings(rank=4, alpha=8))
    value_model, batch = ppo_inputs(preset, loaded, _full_batch())
    params = trainable_parameters(loaded.policy) + ([] if value_model is None else value_model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1)
    calls = _count_decoder_calls(loaded.policy)
    update_policy(loaded.policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config, params,
                  value_model=value_model)
    minibatches = config.optim.grad_accum_steps  # 4 minibatches of 2 rows
    assert len(calls) == 2 * minibatches * config.algorithm.ppo_epochs  # 16 either way
    if value_model is not None:  # and a separate value model does run a second backbone
        separate = build_value_model("separate", loaded, lambda: load_policy(
            str(tiny_model_dir), dtype="float64", lora=LoraSettings(rank=4, alpha=8)))
        calls_separate = _count_decoder_calls(separate.separate.policy)
        params = trainable_parameters(loaded.policy) + separate.parameters()
        optimizer = torch.optim.SGD(params, lr=0.1)
        calls.clear()
        update_policy(loaded.policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config, params,
                      value_model=separate)
        assert len(calls) == len(calls_separate) == 2 * minibatches * config.algorithm.ppo_epochs


def _algo(**changes):
    base = dict(advantage_estimator="gae", std="population", normalize_advantages=False, advantage_clip=0.0,
                gae_gamma=1.0, gae_lambda=0.5, kl_in_reward=0.0)
    return SimpleNamespace(**{**base, **changes})


def _ppo_batch(old_values, mask, old_logprobs=None, ref_logprobs=None) -> RolloutBatch:
    rows, width = mask.shape
    return RolloutBatch(
        input_ids=torch.ones(rows, width + 1, dtype=torch.long),
        attention_mask=torch.ones(rows, width + 1, dtype=torch.long), prompt_len=2, completion_mask=mask,
        old_logprobs=old_logprobs, ref_logprobs=ref_logprobs,
        rewards=torch.zeros(rows), advantages=None, group_ids=torch.arange(rows), old_values=old_values,
    )


def test_the_advantage_stage_with_old_values_by_hand():
    # Three rows, completions in columns 1.. (column 0 scores a prompt token); the last is unscorable.
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    old_values = torch.tensor([[0.0, 0.5, 0.2], [0.0, 0.4, 9.0], [0.0, 0.3, 0.3]])
    rewards = torch.tensor([1.0, 0.0, float("nan")])
    batch = _ppo_batch(old_values, mask)
    staged = with_advantages(batch, rewards, _algo())
    # gamma 1, lambda 0.5. Row 0: t=2: delta = 1 - 0.2 = 0.8, A = 0.8; t=1: delta = 0.2 - 0.5 = -0.3,
    # A = -0.3 + 0.5 * 0.8 = 0.1. Row 1 (one token, padding's 9 never read): A = 0 - 0.4 = -0.4.
    # Row 2 is unscorable: advantages 0, and its targets are its own old values (no value error).
    assert torch.allclose(staged.advantages, torch.tensor([[0.0, 0.1, 0.8], [0.0, -0.4, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.allclose(staged.returns, torch.tensor([[0.0, 0.6, 1.0], [0.0, 0.0, 0.0], [0.0, 0.3, 0.3]]))
    assert batch.advantages is None and batch.returns is None  # the stage left its input alone
    # Whitened over the 5 completion tokens; the returns are not (they are the value targets).
    whitened = with_advantages(batch, rewards, _algo(normalize_advantages=True))
    assert torch.allclose(whitened.advantages, masked_whiten(staged.advantages, mask), atol=1e-6)
    assert whitened.advantages[mask != 0].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(whitened.returns, staged.returns)
    # The KL penalty in the reward: k1 = log pi - log pi_ref = 0.5 on row 0's first token, beta 0.2:
    # its reward becomes -0.1, so A(1) = -0.1 - 0.3 + 0.5 * 0.8 = 0.0 and R(1) = 0.5.
    old_logprobs = torch.tensor([[0.0, -1.0, -1.0]] * 3)
    ref_logprobs = torch.tensor([[0.0, -1.5, -1.0]] * 3)
    shaped = with_advantages(_ppo_batch(old_values, mask, old_logprobs, ref_logprobs), rewards,
                             _algo(kl_in_reward=0.2))
    assert shaped.advantages[0].tolist() == pytest.approx([0.0, 0.0, 0.8])
    assert shaped.returns[0, 1].item() == pytest.approx(0.5)
    # A group estimator on the same batch ignores the values: one advantage per sequence.
    grouped = with_advantages(_ppo_batch(None, mask), torch.tensor([1.0, 0.0, 0.5]),
                              _algo(advantage_estimator="no_baseline"))
    assert grouped.advantages.tolist() == [1.0, 0.0, 0.5] and grouped.returns is None


def test_value_head_zero_start_and_dtype():
    head = ValueHead(4, dtype=torch.bfloat16)
    assert head.weight.dtype == torch.float32 and head(torch.ones(2, 3, 4, dtype=torch.bfloat16)).shape == (2, 3)
    state = torch.random.get_rng_state()
    ValueHead(8)
    assert torch.equal(state, torch.random.get_rng_state())  # no random numbers drawn


def test_ppo_config_through_the_cli_refuses_a_group_estimator_with_a_value_model(capsys):
    assert main(["train", "algorithm.name=grpo", "algorithm.value_model=shared"]) == 2
    assert "set algorithm.value_model=none" in capsys.readouterr().err
    assert load_config(None, ["algorithm.name=ppo", "rollout.group_size=1"]).rollout.group_size == 1
