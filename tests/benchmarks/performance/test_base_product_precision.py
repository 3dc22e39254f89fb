"""benchmarks/performance/base_product_precision.py on a tiny fp32 LoRA model: the gap it reports is the bf16 base
products' (zero when both sides are fp32), its ratio-noise steps leave the adapter as it found it, and the step
really moved the policy (the fp32 log-ratio is not 0)."""

from __future__ import annotations

import torch

from benchmarks.performance import base_product_precision as bench
from rlvr.models import LoraSettings, load_policy
from rlvr.models import lora_kernel
from rlvr.testing import random_lora_b


def _policy(tiny_model_dir):
    torch.manual_seed(0)
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8, dropout=0.0))
    random_lora_b(loaded.policy, seed=0, std=0.3)
    return loaded.policy.eval(), loaded.tokenizer


def test_the_gap_is_the_rounding_s_and_the_adapter_is_restored(tiny_model_dir, monkeypatch):
    policy, tokenizer = _policy(tiny_model_dir)
    monkeypatch.setattr(bench, "TEXTS", ["ab 12 cd", "a long 3 x y z"])
    before = {name: p.detach().clone() for name, p in policy.named_parameters() if p.requires_grad}
    result = bench.precision(policy, tokenizer, steps=[1e-2], seed=1)
    assert result["logprob_abs_diff_mean"] > 1e-6 and result["kl_fp32_bf16_mean"] > 0
    (noise,) = result["ratio_noise"]
    assert noise["log_ratio_abs_mean"] > 1e-4  # the step moved the policy
    for name, p in policy.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, before[name]), name
    assert lora_kernel.base_product_dtype(policy) is None  # left at the weights' own precision

    # Control: with "bf16" products that are fp32 after all, there is no gap and no noise.
    real = lora_kernel.set_base_product_dtype
    monkeypatch.setattr(lora_kernel, "set_base_product_dtype", lambda model, dtype: real(model, None))
    control = bench.precision(policy, tokenizer, steps=[1e-2], seed=1)
    assert control["logprob_abs_diff_mean"] == 0 and control["ratio_noise"][0]["noise_abs_mean"] == 0
