"""Conformance with TRL's GRPOTrainer for loss_type cispo and sapo, and for top_entropy_quantile.

Driven as in tests/core/test_trl_conformance.py: TRL's `_compute_loss` on fixed log-probs (and
here entropies), against rlvr's registered loss, token selection and aggregation. Mapping:
TRL cispo = rlvr cispo with clip_low=1 (TRL has no lower bound) and clip_high = epsilon_high - 1
(TRL caps the weight at epsilon_high itself), aggregated token_mean over the generation batch's
tokens; TRL sapo = rlvr sapo (sapo_temperature_pos / _neg = tau_pos / tau_neg) with
seq_mean_token_mean; top_entropy_quantile = algorithm.entropy_top_fraction.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from rlvr.core import POLICY_LOSSES, aggregate_loss, kl_per_token, top_entropy_mask
from tests.core.test_trl_conformance import _rollout, _trl_trainer

CISPO_EPSILON_HIGH = 1.25  # TRL's cap on the weight; some ratios of the rollout lie above it
# TRL's torch.where over Python floats makes the temperatures float32: 1.05 would differ from the
# float64 value by 5e-8, so the temperatures here are exact in float32 (the defaults are 1.0 / 1.05).
SAPO_TAU_POS, SAPO_TAU_NEG = 1.0, 1.125


def _entropies(data: dict) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    entropy = torch.rand(data["logps"].shape, generator=generator) * 2  # float32, as TRL's quantile reads it
    return torch.where(data["completion_mask"].bool(), entropy, torch.full_like(entropy, 50.0))  # padding garbage


def _trl(loss_type: str, beta: float, data: dict, rows: slice, steps: int, logps: torch.Tensor,
         top_entropy_quantile: float = 1.0):
    trainer = _trl_trainer(loss_type, beta, steps)
    trainer.epsilon_high = CISPO_EPSILON_HIGH if loss_type == "cispo" else trainer.epsilon_high
    trainer.args.sapo_temperature_pos, trainer.args.sapo_temperature_neg = SAPO_TAU_POS, SAPO_TAU_NEG
    trainer.top_entropy_quantile = top_entropy_quantile
    trainer.accelerator.pad_across_processes = lambda tensor, dim=0, pad_index=0: tensor
    mask = data["completion_mask"][rows]
    batch, width = mask.shape
    entropies = _entropies(data)[rows].double()
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logps[rows], entropies, None)
    inputs = {
        "prompt_ids": torch.zeros(batch, data["prompt_width"], dtype=torch.long),
        "prompt_mask": torch.ones(batch, data["prompt_width"], dtype=torch.long),
        "completion_ids": torch.zeros(batch, width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": data["advantages"][rows],
        "old_per_token_logps": data["old"][rows],
        "ref_per_token_logps": data["ref"][rows],
        "num_items_in_batch": data["completion_mask"].sum(),
    }
    return trainer.compute_loss(None, inputs)


def _rlvr(name: str, beta: float, data: dict, rows: slice, logps: torch.Tensor, fraction: float = 1.0,
          **options):
    mask = data["completion_mask"][rows].double()
    per_token, _ = POLICY_LOSSES.get(name)(logps[rows], data["old"][rows], data["advantages"][rows], mask, **options)
    if fraction < 1:
        selected = top_entropy_mask(_entropies(data)[rows], mask, fraction)
        per_token = torch.where(selected, per_token, torch.zeros_like(per_token))
    if beta != 0.0:
        per_token = per_token + beta * kl_per_token(logps[rows], data["ref"][rows], "k3")
    mode = "token_mean" if name == "cispo" else "seq_mean_token_mean"
    return aggregate_loss(per_token, mask, mode, num_sequences=data["completion_mask"].shape[0],
                          num_tokens=data["completion_mask"].sum())


CASES = {
    "cispo": dict(clip_low=1.0, clip_high=CISPO_EPSILON_HIGH - 1.0),
    "sapo": dict(tau_pos=SAPO_TAU_POS, tau_neg=SAPO_TAU_NEG),
    "grpo": dict(clip_low=0.2, clip_high=0.28),
}
RLVR_LOSS = {"cispo": "cispo", "sapo": "sapo", "grpo": "grpo_clip"}


# (loss type, top_entropy_quantile); grpo without token selection is in tests/core/test_trl_conformance.py.
LOSS_AND_FRACTION = [("cispo", 1.0), ("cispo", 0.4), ("sapo", 1.0), ("sapo", 0.4), ("grpo", 0.4), ("grpo", 0.2)]


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type, fraction", LOSS_AND_FRACTION)
@pytest.mark.parametrize("steps", [1, 2])
def test_loss_and_gradient_match_trl(loss_type, beta, fraction, steps):
    data = _rollout()
    batch = data["logps"].shape[0]
    microbatches = [slice(k * batch // steps, (k + 1) * batch // steps) for k in range(steps)]
    trl_logps = data["logps"].clone().requires_grad_(True)
    rlvr_logps = data["logps"].clone().requires_grad_(True)
    trl_total = rlvr_total = 0.0
    for rows in microbatches:
        trl_loss = _trl(loss_type, beta, data, rows, steps, trl_logps, top_entropy_quantile=fraction)
        trl_loss.backward()
        trl_total += trl_loss.item()
        rlvr_loss = _rlvr(RLVR_LOSS[loss_type], beta, data, rows, rlvr_logps, fraction, **CASES[loss_type])
        rlvr_loss.backward()
        rlvr_total += rlvr_loss.item()
    assert rlvr_total == pytest.approx(trl_total, abs=1e-12)
    assert trl_logps.grad.abs().sum() > 0.02  # a fraction of 0.2 leaves few tokens with a gradient
    assert torch.allclose(rlvr_logps.grad, trl_logps.grad, atol=1e-12, rtol=0)


def test_the_cases_are_not_trivially_equal():
    """cispo's cap binds on this rollout, sapo differs from the clipped surrogate, and the selection drops tokens."""
    data = _rollout()
    everything = slice(0, data["logps"].shape[0])
    ratio = torch.exp(data["logps"] - data["old"])[data["completion_mask"].bool()]
    assert (ratio > CISPO_EPSILON_HIGH).any()
    sapo = _rlvr("sapo", 0.0, data, everything, data["logps"], **CASES["sapo"])
    grpo = _rlvr("grpo_clip", 0.0, data, everything, data["logps"], **CASES["grpo"])
    assert abs(sapo.item() - grpo.item()) > 1e-3
    selected = _rlvr("grpo_clip", 0.0, data, everything, data["logps"], 0.4, **CASES["grpo"])
    assert abs(selected.item() - grpo.item()) > 1e-3


def test_top_entropy_mask_equals_trls():
    trainer = object.__new__(GRPOTrainer)
    trainer.accelerator = SimpleNamespace(pad_across_processes=lambda tensor, dim=0, pad_index=0: tensor,
                                          gather=lambda tensor: tensor)
    data = _rollout()
    entropy, mask = _entropies(data), data["completion_mask"]
    for fraction in (0.05, 0.2, 0.5, 0.9, 1.0):
        ours = top_entropy_mask(entropy, mask, fraction)
        theirs = trainer.get_high_entropy_mask(entropy, mask, 1 - fraction)
        assert torch.equal(ours, theirs), fraction


def test_top_entropy_mask_by_hand():
    # Ten tokens with entropies 0..9 and two padding tokens of entropy 100: the 0.8 quantile is
    # 0.8 * 9 = 7.2 of the way up, so tokens 8 and 9 (20%) are kept; padding never is.
    entropy = torch.tensor([[0.0, 1, 2, 3, 4, 5, 100], [6, 7, 8, 9, 100, 100, 100]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0]])
    kept = top_entropy_mask(entropy, mask, 0.2)
    assert kept.nonzero().tolist() == [[1, 2], [1, 3]]
    # Ties at the threshold are all kept: five equal entropies at 0.2 keep all five.
    assert top_entropy_mask(torch.ones(1, 5), torch.ones(1, 5), 0.2).all()
    assert not top_entropy_mask(entropy, torch.zeros_like(mask), 0.2).any()
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        top_entropy_mask(entropy, mask, 0.0)
