"""Install checks of the fused LoRA kernels in bf16: a kernel that only rounds differently is installed,
a wrong one is refused in bf16 as in fp32, and a refusal is logged with the largest difference.

In bf16 PEFT rounds the low-rank product before the add and the fused kernel rounds once: about one
bf16 ulp apart, which the former fp32 tolerances (rtol 1e-4, atol 1e-5) refused, silently.
"""

from __future__ import annotations

import logging

import pytest
import torch
from peft import LoraConfig, get_peft_model

import rlvr.models.lora_kernel as lora_kernel
import rlvr.models.lora_mlp as lora_mlp
from rlvr.models.kernel_check import check_tolerance, compare
from rlvr.models.kernels import apply_memory_kernels, own_forward
from rlvr.testing import build_tiny_model
from tests.core.test_completion_logprobs import _batch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
NUM_LAYERS = 2
DTYPES = [torch.float32, torch.bfloat16]


def _lora_model(dtype):
    """A tiny LoRA model with the fused SwiGLU MLP, the adapter in the model's dtype (as `load_policy` keeps
    it), alpha / r = 2 so a scaling applied twice doubles the low-rank term."""
    torch.manual_seed(0)  # PEFT draws lora_A from the global generator
    model = build_tiny_model(seed=3, dtype=dtype, num_layers=NUM_LAYERS)
    apply_memory_kernels(model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0)
    return get_peft_model(model, config, autocast_adapter_dtype=False).train()


def _scaling_applied_twice(forward):
    """A plausible wrong kernel: alpha / r applied to B and again to the product (s^2 instead of s)."""
    return lambda x, weight, bias, lora_a, lora_b, scaling: forward(x, weight, bias, lora_a, lora_b, scaling * scaling)


def test_tolerance_is_a_few_ulps_of_the_dtype_with_an_fp32_floor():
    assert check_tolerance(torch.bfloat16) == 4 * 2**-7  # bf16 eps = 2^-7
    assert check_tolerance(torch.float16) == 4 * 2**-10
    assert check_tolerance(torch.float32) == 1e-5  # 4 * 2^-23 = 4.8e-7 is below the floor
    assert check_tolerance(torch.float64) == 1e-5
    # Worked by hand, relative to the largest magnitude 2: one bf16 ulp at 2 is 2^-6, so 2^-7 of the scale.
    theirs = torch.tensor([2.0, -1.0, 0.5])
    one_ulp = compare([("output", torch.tensor([2.0 + 2**-6, -1.0, 0.5]).bfloat16(), theirs.bfloat16())])
    assert one_ulp.passed and one_ulp.worst == 2**-7
    wrong = compare([("output", torch.tensor([2.0, -1.25, 0.5]).bfloat16(), theirs.bfloat16())])
    assert not wrong.passed and wrong.worst == 0.125 and "above the 0.0312 allowed in bfloat16" in wrong.detail
    small = compare([("output", torch.tensor([2.0 + 2**-10, -1.0, 0.5]), theirs)])
    assert not small.passed and small.worst == 2**-11  # fine in bf16, refused in fp32
    two = compare([("output", theirs, theirs), ("input gradient", torch.tensor([4.0, 0.0, 0.0]), theirs * 2)])
    assert not two.passed and two.what == "input gradient" and two.worst == 0.5  # the worst pair is reported
    nan = theirs.clone()
    nan[1] = float("nan")
    assert not compare([("output", nan, theirs)]).passed


def test_bf16_fused_lora_and_mlp_are_installed_and_used(monkeypatch):
    model = _lora_model(torch.bfloat16)
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    check = lora_kernel._same_as_peft(layer, lambda x: lora_kernel._fused_forward(layer, x))
    assert check.passed
    assert check.worst > 1e-4  # power: the former fp32 tolerance refused this rounding difference
    assert lora_kernel.install_fused_lora(model) == len(TARGETS) * NUM_LAYERS
    assert lora_mlp.install_fused_lora_mlp(model) == NUM_LAYERS
    assert own_forward(layer) is lora_kernel._fused_forward
    calls = {"lora": 0, "mlp": 0}
    fused_linear, fused_mlp = lora_kernel.lora_linear, lora_mlp.SiluMulLoraLinear.apply

    def counting_linear(*args):
        calls["lora"] += 1
        return fused_linear(*args)

    def counting_mlp(*args):
        calls["mlp"] += 1
        return fused_mlp(*args)

    monkeypatch.setattr(lora_kernel, "lora_linear", counting_linear)
    monkeypatch.setattr(lora_mlp.SiluMulLoraLinear, "apply", counting_mlp)
    input_ids, attention_mask, _ = _batch()
    model(input_ids=input_ids, attention_mask=attention_mask).logits.float().sum().backward()
    # Per layer: 4 attention projections, gate and up through `lora_linear`, down through `SiluMulLoraLinear`.
    assert calls == {"lora": 6 * NUM_LAYERS, "mlp": NUM_LAYERS}


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_wrong_lora_kernel_is_refused_and_logged(monkeypatch, caplog, dtype):
    monkeypatch.setattr(lora_kernel, "lora_linear_forward", _scaling_applied_twice(lora_kernel.lora_linear_forward))
    model = _lora_model(dtype)
    with caplog.at_level(logging.WARNING, logger="rlvr.models.kernels"):
        assert lora_kernel.install_fused_lora(model) == 0
    assert own_forward(model.get_base_model().model.layers[0].self_attn.q_proj) is None
    lines = [record.getMessage() for record in caplog.records if "not installed" in record.getMessage()]
    assert len(lines) == 1
    assert "_fused_forward" in lines[0] and "largest difference" in lines[0]
    assert str(dtype).removeprefix("torch.") in lines[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_wrong_fused_lora_mlp_is_refused_and_logged(monkeypatch, caplog, dtype):
    monkeypatch.setattr(lora_mlp, "lora_linear_forward", _scaling_applied_twice(lora_mlp.lora_linear_forward))
    model = _lora_model(dtype)
    assert lora_kernel.install_fused_lora(model) == len(TARGETS) * NUM_LAYERS  # the projections are right
    with caplog.at_level(logging.WARNING, logger="rlvr.models.kernels"):
        assert lora_mlp.install_fused_lora_mlp(model) == 0
    assert own_forward(model.get_base_model().model.layers[0].mlp) is not lora_mlp._swiglu_lora_forward
    lines = [record.getMessage() for record in caplog.records if "not installed" in record.getMessage()]
    assert len(lines) == 1 and "_swiglu_lora_forward" in lines[0] and "largest difference" in lines[0]


def test_nothing_is_logged_when_the_kernels_are_installed(caplog):
    model = _lora_model(torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="rlvr.models.kernels"):
        lora_kernel.install_fused_lora(model)
        lora_mlp.install_fused_lora_mlp(model)
    assert not [record for record in caplog.records if "not installed" in record.getMessage()]
