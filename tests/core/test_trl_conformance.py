"""Conformance with TRL's GRPOTrainer loss for loss_type grpo, dr_grpo and dapo.

TRL's `_compute_loss` is driven directly: the trainer object is created without running its
constructor, given the few attributes the loss path reads, and its model forward
(`_get_per_token_logps_and_entropies`) is replaced by fixed per-token log-probs. The same
log-probs, old log-probs, reference log-probs, advantages and masks go through rlvr's
registered `grpo_clip` loss, the k3 KL term and the matching aggregation mode; loss values and
gradients with respect to the log-probs must agree.

Mapping: TRL grpo = seq_mean_token_mean; dr_grpo = seq_mean_token_sum_norm with
normalize_constant = max_completion_length; dapo = token_mean with num_tokens = TRL's
num_items_in_batch (the token count of the whole generation batch).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from rlvr.core import POLICY_LOSSES, aggregate_loss, kl_per_token

EPSILON_LOW, EPSILON_HIGH = 0.2, 0.28
MAX_COMPLETION_LENGTH = 8  # larger than the completion width, so Dr. GRPO's constant matters
MODES = {
    "grpo": "seq_mean_token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",
}


def _trl_trainer(loss_type: str, beta: float, accumulation_steps: int) -> GRPOTrainer:
    trainer = object.__new__(GRPOTrainer)  # skip __init__: no model, dataset or accelerator setup
    accelerator = SimpleNamespace(
        num_processes=1,
        is_main_process=True,
        gather=lambda tensor: tensor,
        gather_for_metrics=lambda tensor: tensor,
        reduce=lambda tensor, reduction="sum": tensor,
    )
    attributes = {
        "accelerator": accelerator,
        "args": SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=accumulation_steps),
        "model": SimpleNamespace(training=True),
        "loss_type": loss_type,
        "beta": beta,
        "epsilon_low": EPSILON_LOW,
        "epsilon_high": EPSILON_HIGH,
        "importance_sampling_level": "token",
        "top_entropy_quantile": 1.0,
        "off_policy_mask_threshold": None,
        "use_vllm": False,
        "vllm_importance_sampling_correction": False,
        "_entropy_bonus_enabled": False,
        "aux_loss_enabled": False,
        "max_completion_length": MAX_COMPLETION_LENGTH,
        "current_gradient_accumulation_steps": accumulation_steps,
        "_metrics": {"train": defaultdict(list), "eval": defaultdict(list)},
    }
    for name, value in attributes.items():
        setattr(trainer, name, value)
    return trainer


def _rollout():
    generator = torch.Generator().manual_seed(0)
    batch, width, prompt_width = 6, 6, 3
    logps = -torch.rand(batch, width, generator=generator, dtype=torch.float64) * 3 - 0.1
    # Old and reference log-probs differ enough that some ratios leave [0.8, 1.28] on both sides.
    old = logps + 0.35 * torch.randn(batch, width, generator=generator, dtype=torch.float64)
    ref = logps + 0.5 * torch.randn(batch, width, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.2, -0.7, 0.3, -1.5, 0.9, -0.2], dtype=torch.float64)
    lengths = [6, 2, 4, 1, 5, 3]  # ragged completions
    completion_mask = torch.zeros(batch, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        completion_mask[row, :length] = 1
    return {
        "logps": logps,
        "old": old,
        "ref": ref,
        "advantages": advantages,
        "completion_mask": completion_mask,
        "prompt_width": prompt_width,
    }


def _trl_loss(loss_type: str, beta: float, data: dict, rows: slice, accumulation_steps: int, logps: torch.Tensor):
    trainer = _trl_trainer(loss_type, beta, accumulation_steps)
    mask = data["completion_mask"][rows]
    batch, width = mask.shape
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (
        logps[rows],
        torch.zeros(batch, width, dtype=torch.float64),
        None,
    )
    inputs = {
        "prompt_ids": torch.zeros(batch, data["prompt_width"], dtype=torch.long),
        "prompt_mask": torch.ones(batch, data["prompt_width"], dtype=torch.long),
        "completion_ids": torch.zeros(batch, width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": data["advantages"][rows],
        "old_per_token_logps": data["old"][rows],
        "ref_per_token_logps": data["ref"][rows],
        "num_items_in_batch": data["completion_mask"].sum(),  # TRL: tokens of the whole generation batch
    }
    loss = trainer.compute_loss(None, inputs)
    return loss, trainer._metrics["train"]


def _rlvr_loss(loss_type: str, beta: float, data: dict, rows: slice, logps: torch.Tensor):
    mask = data["completion_mask"][rows].double()
    per_token, metrics = POLICY_LOSSES.get("grpo_clip")(
        logps[rows], data["old"][rows], data["advantages"][rows], mask, clip_low=EPSILON_LOW, clip_high=EPSILON_HIGH
    )
    if beta != 0.0:
        per_token = per_token + beta * kl_per_token(logps[rows], data["ref"][rows], "k3")
    loss = aggregate_loss(
        per_token,
        mask,
        MODES[loss_type],
        normalize_constant=MAX_COMPLETION_LENGTH,
        num_sequences=data["completion_mask"].shape[0],
        num_tokens=data["completion_mask"].sum(),
    )
    return loss, metrics


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_loss_and_gradient_match_trl(loss_type, beta, accumulation_steps):
    data = _rollout()
    batch = data["logps"].shape[0]
    rows_per_step = batch // accumulation_steps
    microbatches = [slice(k * rows_per_step, (k + 1) * rows_per_step) for k in range(accumulation_steps)]

    trl_logps = data["logps"].clone().requires_grad_(True)
    trl_total = 0.0
    trl_clipped_fractions = []
    for rows in microbatches:
        loss, trl_metrics = _trl_loss(loss_type, beta, data, rows, accumulation_steps, trl_logps)
        loss.backward()
        trl_total += loss.item()
        trl_clipped_fractions.append(trl_metrics["clip_ratio/region_mean"][-1])

    rlvr_logps = data["logps"].clone().requires_grad_(True)
    rlvr_total = 0.0
    for rows, trl_clipped_fraction in zip(microbatches, trl_clipped_fractions):
        loss, metrics = _rlvr_loss(loss_type, beta, data, rows, rlvr_logps)
        loss.backward()
        rlvr_total += loss.item()
        mask = data["completion_mask"][rows].double()
        clipped_fraction = (metrics["clipped"] * mask).sum() / mask.sum()
        assert clipped_fraction.item() == pytest.approx(trl_clipped_fraction, abs=1e-6)  # TRL logs in fp32

    assert sum(trl_clipped_fractions) > 0  # the clipped branch is exercised
    assert rlvr_total == pytest.approx(trl_total, abs=1e-12)
    assert trl_logps.grad.abs().sum() > 0.1
    assert torch.allclose(rlvr_logps.grad, trl_logps.grad, atol=1e-12, rtol=0)


def test_modes_disagree_with_each_other_on_this_rollout():
    # Guards the conformance test against inputs on which the three TRL loss types coincide.
    data = _rollout()
    everything = slice(0, data["logps"].shape[0])
    values = [_trl_loss(loss_type, 0.0, data, everything, 1, data["logps"])[0].item() for loss_type in MODES]
    assert min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]) > 1e-3
    no_clip = POLICY_LOSSES.get("grpo_no_clip")
    unclipped, _ = no_clip(data["logps"], data["old"], data["advantages"], data["completion_mask"])
    unclipped_loss = aggregate_loss(unclipped, data["completion_mask"].double(), "seq_mean_token_mean")
    assert abs(unclipped_loss.item() - values[0]) > 1e-3
