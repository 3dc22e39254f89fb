"""benchmarks/performance/int8_sampler.py on the tiny model: both readings come back, and the drift reading is a KL."""

from __future__ import annotations

import torch

from benchmarks.performance.int8_sampler import int8_weight, main, weight_only_int8, weight_only_int8_copy


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


def test_the_weight_only_int8_product_is_the_product_with_the_rounded_weight():
    torch.manual_seed(0)
    weight = torch.randn(6, 8) * torch.tensor([0.01, 0.1, 1.0, 10.0, 0.5, 2.0])[:, None]  # rows of other scales
    x = torch.randn(3, 8)
    quantized, scales = weight_only_int8(weight)
    assert quantized.dtype == torch.int8 and scales.shape == (6,)
    rounded = quantized.float() * scales[:, None]  # [out, in]
    # Per channel: every row is within half a step of its own grid (one scale for all would not be).
    assert ((rounded - weight).abs() <= scales[:, None] / 2 + 1e-7).all()
    got = torch.ops.aten._weight_int8pack_mm(x, quantized, scales)
    torch.testing.assert_close(got, x @ rounded.T, rtol=1e-5, atol=1e-5)
    assert (got - x @ weight.T).abs().max() > 1e-4  # and it is not the fp32 product


def test_the_weight_only_copy_rounds_every_linear_and_leaves_the_model(tiny_model_dir):
    from rlvr.models import load_policy

    model = load_policy(str(tiny_model_dir), lora=None).policy
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    other = weight_only_int8_copy(model)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name])
    linears = [m for m in other.modules() if isinstance(m, torch.nn.Linear)]
    assert linears
    for module in linears:
        quantized, scales = weight_only_int8(module.weight.detach())
        torch.testing.assert_close(module.weight.detach(), quantized.float() * scales[:, None], rtol=0, atol=1e-6)


def test_a_run_reports_speeds_and_drift(tiny_model_dir, capsys):
    result = main(["--model", str(tiny_model_dir), "--rows", "1", "3", "--repeats", "2", "--threads", "1"])
    assert set(result["speeds"]) == {1, 3}
    assert all(value > 0 for speed in result["speeds"].values() for value in speed.values())
    for name in ("int8", "weight-only int8", "bf16"):
        drift = result["drift"][name]
        assert drift["kl_max"] >= drift["kl_mean"] >= -1e-6 and 0 <= drift["argmax_agree"] <= 1
    assert result["drift"]["int8"]["kl_mean"] > 0  # the copy is not the model itself
    assert "KL(fp32 || int8)" in capsys.readouterr().out
