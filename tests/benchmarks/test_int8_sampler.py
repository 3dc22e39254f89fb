"""benchmarks/int8_sampler.py on the tiny model: both readings come back, and the drift reading is a KL."""

from __future__ import annotations

import pytest
import torch

from benchmarks.int8_sampler import int8_weight, main


def test_the_int8_weight_is_a_per_channel_copy():
    weight = torch.randn(6, 8) * torch.tensor([0.01, 0.1, 1.0, 10.0, 0.5, 2.0])[:, None]  # rows of other scales
    x = torch.randn(3, 8)
    got = torch.ops.quantized.linear_dynamic(x, int8_weight(weight), True)
    exact = x @ weight.T
    # Per channel: each row's error is a small share of that row's own scale (one scale for all would
    # drown the 0.01 row: its step would be 10 / 127).
    for row in range(6):
        scale = (x.abs().sum(1).max() * weight[row].abs().max()).item()
        assert (got[:, row] - exact[:, row]).abs().max() < 0.05 * scale


def test_a_run_reports_speeds_and_drift(tiny_model_dir, capsys):
    result = main(["--model", str(tiny_model_dir), "--rows", "1", "3", "--repeats", "2", "--threads", "1"])
    assert set(result["speeds"]) == {1, 3}
    assert all(value > 0 for speed in result["speeds"].values() for value in speed.values())
    for name in ("int8", "bf16"):
        drift = result["drift"][name]
        assert drift["kl_max"] >= drift["kl_mean"] >= -1e-6 and 0 <= drift["argmax_agree"] <= 1
    assert result["drift"]["int8"]["kl_mean"] > 0  # the copy is not the model itself
    assert "KL(fp32 || int8)" in capsys.readouterr().out
