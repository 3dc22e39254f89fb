"""Sampling speed-ups change nothing: merged LoRA and the shared prompt prefill."""

from __future__ import annotations

import torch

from rlvr.models import LoraSettings, load_policy, merged_adapter
from rlvr.rollout import SamplingSettings, hf_generate
from rlvr.testing import random_lora_b


def _lora_policy(model_dir):
    loaded = load_policy(str(model_dir), lora=LoraSettings(rank=4, alpha=8))
    random_lora_b(loaded.policy, seed=0, std=0.3)
    return loaded


def test_merged_adapter_matches_and_restores_weights_exactly(tiny_model_dir):
    loaded = _lora_policy(tiny_model_dir)
    policy = loaded.policy
    ids = torch.tensor([[5, 9, 20, 31, 7, 8]])
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    with torch.no_grad():
        adapter_logits = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base_logits = policy(input_ids=ids).logits
        assert (adapter_logits - base_logits).abs().max() > 1e-2  # the adapter does something
        for _ in range(3):
            with merged_adapter(policy):
                merged_logits = policy(input_ids=ids).logits
            torch.testing.assert_close(merged_logits, adapter_logits, rtol=1e-5, atol=1e-5)
    after = policy.state_dict()
    for key, value in before.items():
        assert torch.equal(after[key], value), key  # bit for bit, no drift across cycles
    with torch.no_grad():
        torch.testing.assert_close(policy(input_ids=ids).logits, adapter_logits, rtol=0, atol=0)


def test_shared_prefill_samples_exactly_like_plain_generate(tiny_model_dir):
    loaded = _lora_policy(tiny_model_dir)
    prompts = ["hello there", "a much longer prompt here", "xy"]
    outputs = {}
    for share in (False, True):
        torch.manual_seed(3)
        settings = SamplingSettings(max_new_tokens=10, share_prompt_prefill=share)
        outputs[share] = hf_generate(loaded.policy, loaded.tokenizer, prompts, 4, settings)
    assert torch.equal(outputs[True].input_ids, outputs[False].input_ids)
    assert torch.equal(outputs[True].attention_mask, outputs[False].attention_mask)
    assert outputs[True].completion_texts == outputs[False].completion_texts
    # Different seeds do give different samples (the comparison above is not vacuous).
    torch.manual_seed(4)
    other = hf_generate(loaded.policy, loaded.tokenizer, prompts, 4, SamplingSettings(max_new_tokens=10))
    assert not torch.equal(other.input_ids, outputs[True].input_ids)
