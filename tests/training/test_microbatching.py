"""The training passes on microbatches cut to their own columns, and packed by `optim.microbatch_tokens`,
give the update, the reference log-probs and PPO's old values of whole-width microbatches.

The batch (tiny random model, float64): 4 groups of 2 whose prompts are left-padded differently
(2, 5, 3 and 5 real tokens of 5) and whose completions run from 1 to 10 tokens of 10, so each
group's microbatch is narrower than the batch and token packing reorders the groups. Two epochs:
the second reads the first epoch's log-probs back from wherever its microbatches put them.
"""

from __future__ import annotations

import pytest
import torch

import rlvr.training.update as update_module
from rlvr.config import load_config
from rlvr.core import RolloutBatch, build_completion_mask, compute_per_token_logprobs
from rlvr.core.microbatches import Microbatch, iter_microbatches, plan_microbatches
from rlvr.models import LoraSettings, load_policy, trainable_parameters
from rlvr.models.value_model import build_value_model
from rlvr.observe.metric_names import ENTROPY, KL, LOSS, POLICY_LOSS_PER_TOKEN, VALUE_LOSS_PER_TOKEN
from rlvr.training.microbatching import forward_group_size, training_microbatches
from rlvr.training.optim import make_scheduler
from rlvr.training.reference import batch_logprobs
from rlvr.training.update import update_policy
from rlvr.training.values import with_old_values

PROMPT_LEN, WIDTH, GROUP = 5, 10, 2
PROMPT_TOKENS = [2, 5, 3, 5]  # per group
COMPLETION_LENGTHS = [1, 3, 10, 6, 2, 2, 4, 9]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, 1.5, -1.5, -0.7, 0.7]


def _config(model_dir, preset="grpo", **extra):
    overrides = {"model.name": str(model_dir), "model.dtype": "float64", "algorithm.name": preset,
                 "algorithm.kl_coef": 0.04, "algorithm.ppo_epochs": 2, "rollout.batch_size": 4,
                 "rollout.group_size": GROUP, "rollout.max_new_tokens": WIDTH, "optim.minibatch_size": 2,
                 "optim.grad_accum_steps": 4, "optim.max_grad_norm": 1e6, **extra}
    return load_config(None, [f"{key}={value}" for key, value in overrides.items()])


def _batch() -> RolloutBatch:
    generator = torch.Generator().manual_seed(3)
    rows = len(COMPLETION_LENGTHS)
    prompts = torch.randint(3, 64, (rows // GROUP, PROMPT_LEN), generator=generator).repeat_interleave(GROUP, 0)
    completions = torch.randint(3, 64, (rows, WIDTH), generator=generator)
    input_ids = torch.cat([prompts, completions], dim=1)  # [8, 15]
    attention = torch.zeros_like(input_ids)
    for row, length in enumerate(COMPLETION_LENGTHS):
        attention[row, PROMPT_LEN - PROMPT_TOKENS[row // GROUP] : PROMPT_LEN + length] = 1
    input_ids = torch.where(attention.bool(), input_ids, torch.zeros_like(input_ids))  # pad id 0
    completion_mask = build_completion_mask(input_ids, attention, PROMPT_LEN).double()  # [8, 14]
    ref = -0.5 - 2 * torch.rand(completion_mask.shape, generator=generator, dtype=torch.float64)
    returns = torch.rand(completion_mask.shape, generator=generator, dtype=torch.float64) * 1.5
    return RolloutBatch(
        input_ids=input_ids, attention_mask=attention, prompt_len=PROMPT_LEN, completion_mask=completion_mask,
        old_logprobs=None, ref_logprobs=ref * completion_mask, rewards=torch.tensor(ADVANTAGES).double(),
        advantages=torch.tensor(ADVANTAGES, dtype=torch.float64), group_ids=torch.arange(rows) // GROUP,
        old_values=torch.zeros(completion_mask.shape, dtype=torch.float64), returns=returns * completion_mask,
    )


def _whole_width(batch, config, device, *, group_size):
    """Microbatches as before trimming: `minibatch_size` consecutive rows at the batch's full width."""
    for rows in plan_microbatches(batch.attention_mask, batch.prompt_len, rows=config.optim.minibatch_size):
        index = torch.tensor(rows)
        yield Microbatch(batch=batch.select(index).to(device), rows=index, first_column=0)


def _update(model_dir, config, preset, monkeypatch, splitter=None):
    """Weights, metrics and the microbatch widths of one update_policy call."""
    widths = []
    split = splitter or training_microbatches

    def recording(batch, config, device, *, group_size):
        for micro in split(batch, config, device, group_size=group_size):
            widths.append(tuple(micro.batch.input_ids.shape))
            yield micro

    monkeypatch.setattr(update_module, "training_microbatches", recording)
    torch.manual_seed(0)
    loaded = load_policy(str(model_dir), dtype="float64", need_reference=False, lora=LoraSettings(rank=4, alpha=8))
    batch = _batch()
    value_model = None
    if preset == "ppo":
        value_model = build_value_model("shared", loaded)
        column = torch.arange(batch.completion_mask.shape[1], dtype=torch.float64) / 8  # [L-1]
        batch = batch.replace(advantages=(batch.advantages[:, None] + column) * batch.completion_mask)
    else:
        batch = batch.replace(old_values=None, returns=None)
    params = trainable_parameters(loaded.policy) + ([] if value_model is None else value_model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.5)
    result = update_policy(loaded.policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config,
                           params, value_model=value_model)
    weights = {name: p.detach().clone() for name, p in loaded.policy.named_parameters() if p.requires_grad}
    if value_model is not None:
        weights["value_head"] = value_model.head.weight.detach().clone()
    return weights, result.metrics, widths


@pytest.mark.parametrize("preset", ["grpo", "ppo"])
@pytest.mark.parametrize("budget", [None, 30])
def test_trimmed_and_packed_microbatches_give_the_whole_width_update(tiny_model_dir, monkeypatch, preset, budget):
    extra = {} if budget is None else {"optim.microbatch_tokens": budget}
    config = _config(tiny_model_dir, preset, **extra)
    expected, expected_metrics, full_widths = _update(tiny_model_dir, _config(tiny_model_dir, preset), preset,
                                                      monkeypatch, splitter=_whole_width)
    weights, metrics, widths = _update(tiny_model_dir, config, preset, monkeypatch)
    assert set(full_widths) == {(2, PROMPT_LEN + WIDTH)}
    assert sum(rows * columns for rows, columns in widths) < sum(r * c for r, c in full_widths)  # less computed
    if budget is not None:
        assert any(rows > 2 for rows, _ in widths)  # packing merged groups
        assert all(rows * columns <= budget or rows == GROUP for rows, columns in widths)
    for name, value in expected.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-9, atol=1e-11, msg=name)
    names = [LOSS, KL, ENTROPY, POLICY_LOSS_PER_TOKEN] + ([VALUE_LOSS_PER_TOKEN] if preset == "ppo" else [])
    for name in names:
        assert metrics[name] == pytest.approx(expected_metrics[name], rel=1e-9, abs=1e-12), name


def test_the_update_moves_the_weights_so_equality_means_something(tiny_model_dir, monkeypatch):
    """A wrong second-epoch old log-prob (here: the rows of two groups swapped) moves them elsewhere."""
    config = _config(tiny_model_dir)
    expected, _, _ = _update(tiny_model_dir, config, "grpo", monkeypatch, splitter=_whole_width)

    def swapped(batch, config, device, *, group_size):
        for micro in _whole_width(batch, config, device, group_size=group_size):
            yield Microbatch(batch=micro.batch, rows=micro.rows.flip(0), first_column=0)

    wrong, _, _ = _update(tiny_model_dir, config, "grpo", monkeypatch, splitter=swapped)
    gap = max(float((wrong[name] - expected[name]).abs().max()) for name in expected)
    assert gap > 1e-6


@pytest.mark.parametrize("budget", [None, 30])
def test_reference_logprobs_and_old_values_match_the_whole_batch(tiny_model_dir, budget):
    extra = {} if budget is None else {"optim.microbatch_tokens": budget}
    config = _config(tiny_model_dir, "ppo", **extra)
    torch.manual_seed(0)
    loaded = load_policy(str(tiny_model_dir), dtype="float64", need_reference=False,
                         lora=LoraSettings(rank=4, alpha=8))
    batch = _batch().replace(old_values=None, returns=None)
    mask = batch.completion_mask
    full = compute_per_token_logprobs(loaded.policy, batch.input_ids, batch.attention_mask, enable_grad=False)
    logprobs = batch_logprobs(loaded.policy, batch, config)
    torch.testing.assert_close(logprobs, full * mask, rtol=1e-9, atol=1e-11)
    value_model = build_value_model("shared", loaded)
    torch.nn.init.normal_(value_model.head.weight, std=0.5)  # non-zero values
    scored = with_old_values(loaded.policy, value_model, batch, config, with_logprobs=True)
    torch.testing.assert_close(scored.old_logprobs, full * mask, rtol=1e-9, atol=1e-11)
    whole = with_old_values(loaded.policy, value_model, batch, _config(tiny_model_dir, "ppo", **{
        "optim.minibatch_size": 8, "optim.grad_accum_steps": 1}), with_logprobs=False)  # one microbatch: the batch
    torch.testing.assert_close(scored.old_values, whole.old_values, rtol=1e-9, atol=1e-11)
    assert float(scored.old_values.abs().sum()) > 0.1


def test_a_token_budget_shares_prompts_and_checkpointing_does_not(tiny_model_dir):
    assert forward_group_size(_config(tiny_model_dir, **{"optim.microbatch_tokens": 30})) == GROUP
    assert forward_group_size(_config(tiny_model_dir, **{"optim.minibatch_size": 1, "optim.grad_accum_steps": 8})) == 1
    checkpointed = _config(tiny_model_dir, **{"optim.microbatch_tokens": 30, "model.gradient_checkpointing": True})
    assert forward_group_size(checkpointed) == 1
    assert forward_group_size(checkpointed, with_grad=False) == GROUP
    # Units of one row when the forward shares nothing.
    micros = list(iter_microbatches(_batch(), rows=2, group_size=1, token_budget=30))
    assert sorted(len(m.rows) for m in micros) != [2, 2, 2, 2]


def test_a_token_budget_under_gradient_checkpointing_packs_rows_and_gives_the_same_update(tiny_model_dir, monkeypatch):
    """Checkpointing cannot share a prompt's cache across a group: the budget packs single rows instead."""
    expected, _, _ = _update(tiny_model_dir, _config(tiny_model_dir), "grpo", monkeypatch, splitter=_whole_width)
    config = _config(tiny_model_dir, **{"optim.microbatch_tokens": 30, "model.gradient_checkpointing": True})
    weights, _, widths = _update(tiny_model_dir, config, "grpo", monkeypatch)
    shapes = {size: [tuple(m.batch.input_ids.shape) for m in iter_microbatches(_batch(), rows=2, group_size=size,
                                                                                 token_budget=30)]
              for size in (1, GROUP)}
    assert shapes[1] != shapes[GROUP] and widths == shapes[1] * 2  # units of one row, in both epochs
    # Not sharing a prompt changes the order of the log-prob path's fp32 head arithmetic: equal to ~1e-7.
    for name, value in expected.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-5, atol=1e-6, msg=name)
