"""Tests for loss aggregation modes and for exact gradient accumulation with global counts."""

from __future__ import annotations

import pytest
import torch

from rlvr.core import LOSS_AGGREGATIONS, aggregate_loss


def _ragged():
    # Row 0 has 4 tokens, row 1 has 2, row 2 has 1; masked cells hold garbage.
    per_token_loss = torch.tensor(
        [[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, float("nan"), 1e30], [6.0, float("inf"), 0.0, 0.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    return per_token_loss, mask


def test_modes_by_hand_on_a_ragged_mask():
    per_token_loss, mask = _ragged()
    # seq_mean_token_mean: row means 2.5, 15, 6 -> 23.5 / 3.
    seq_mean = aggregate_loss(per_token_loss, mask, "seq_mean_token_mean")
    # token_mean: (10 + 30 + 6) / 7 tokens.
    token_mean = aggregate_loss(per_token_loss, mask, "token_mean")
    # seq_mean_token_sum_norm with C = 4: row sums 10, 30, 6 -> (2.5 + 7.5 + 1.5) / 3.
    sum_norm = aggregate_loss(per_token_loss, mask, "seq_mean_token_sum_norm", normalize_constant=4.0)
    assert seq_mean.item() == pytest.approx(23.5 / 3, abs=1e-12)
    assert token_mean.item() == pytest.approx(46 / 7, abs=1e-12)
    assert sum_norm.item() == pytest.approx(11.5 / 3, abs=1e-12)
    values = [seq_mean.item(), token_mean.item(), sum_norm.item()]
    assert min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]) > 1.0


def test_mode_gradients_weight_tokens_as_documented():
    per_token_loss, mask = _ragged()
    per_token_loss = torch.nan_to_num(per_token_loss, nan=0.0, posinf=0.0).clamp(max=100).requires_grad_(True)
    aggregate_loss(per_token_loss, mask, "seq_mean_token_mean").backward()
    # Each sequence weighs 1/3, split over its tokens: 1/12, 1/6, 1/3.
    assert torch.allclose(per_token_loss.grad[:, 0], torch.tensor([1 / 12, 1 / 6, 1 / 3], dtype=torch.float64))
    per_token_loss.grad = None
    aggregate_loss(per_token_loss, mask, "token_mean").backward()
    assert torch.allclose(per_token_loss.grad, mask / 7)  # every token 1/7
    assert per_token_loss.grad[1, 2] == 0


def test_sum_norm_needs_a_constant_and_unknown_modes_fail():
    per_token_loss, mask = _ragged()
    with pytest.raises(ValueError, match="normalize_constant"):
        aggregate_loss(per_token_loss, mask, "seq_mean_token_sum_norm")
    with pytest.raises(KeyError, match="seq_mean_token_mean, seq_mean_token_sum_norm, token_mean"):
        aggregate_loss(per_token_loss, mask, "sequence_mean")
    assert LOSS_AGGREGATIONS.names() == ["seq_mean_token_mean", "seq_mean_token_sum_norm", "token_mean"]


def test_token_mean_with_global_count_accumulates_exactly():
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(6, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    features = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    mask = torch.zeros(6, 5, dtype=torch.float64)
    for row, length in enumerate([5, 1, 1, 1, 4, 2]):  # microbatches of 2 rows: 6, 2 and 6 tokens
        mask[row, :length] = 1.0
    full = aggregate_loss(weights * features, mask, "token_mean")
    full.backward()
    full_grad, weights.grad = weights.grad.clone(), None
    total_tokens = mask.sum()
    accumulated = 0.0
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):
        loss = aggregate_loss((weights * features)[rows], mask[rows], "token_mean", num_tokens=total_tokens)
        loss.backward()
        accumulated += loss.item()
    assert accumulated == pytest.approx(full.item(), abs=1e-12)
    assert torch.allclose(weights.grad, full_grad, atol=1e-12, rtol=0)
    # A mean of per-microbatch means (local counts, divided by 3 steps) is a different gradient.
    weights.grad = None
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):
        (aggregate_loss((weights * features)[rows], mask[rows], "token_mean") / 3).backward()
    assert (weights.grad - full_grad).abs().max() > 1e-2


@pytest.mark.parametrize("mode", ["seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_sequence_modes_with_global_count_accumulate_exactly(mode):
    per_token_loss, mask = _ragged()
    per_token_loss = torch.nan_to_num(per_token_loss, nan=0.0, posinf=0.0).clamp(max=100)
    full = aggregate_loss(per_token_loss, mask, mode, normalize_constant=4.0)
    parts = [
        aggregate_loss(per_token_loss[rows], mask[rows], mode, normalize_constant=4.0, num_sequences=3)
        for rows in (slice(0, 1), slice(1, 3))
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-12)


def test_empty_rows_and_batches_give_zero_not_nan():
    per_token_loss = torch.tensor([[5.0, 5.0], [float("nan"), 1.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert aggregate_loss(per_token_loss, mask, "seq_mean_token_mean").item() == 2.5  # (5 + 0) / 2
    assert aggregate_loss(per_token_loss, mask, "token_mean").item() == 5.0
    assert aggregate_loss(per_token_loss, torch.zeros(2, 2), "token_mean").item() == 0.0
    assert aggregate_loss(per_token_loss, torch.zeros(2, 2), "seq_mean_token_mean").item() == 0.0
