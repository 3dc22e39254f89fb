"""LoRA checkpoints load in PEFT itself: `PeftModel.from_pretrained(base, checkpoint/model)` gives rlvr's policy.

Only APIs that predate the PEFT-format writer are used here (load_policy, save_trainable), so the
same file can be run against an older rlvr to show the failure it guards against.
"""

from __future__ import annotations

import json

import torch

from rlvr.core import compute_per_token_logprobs
from rlvr.models import LoraSettings, load_policy, save_trainable
from rlvr.testing import random_lora_b

LORA = LoraSettings(rank=4, alpha=8)


def _trained_looking_policy(model_dir):
    """A LoRA policy whose B matrices are not zero (a fresh adapter is the identity and proves nothing)."""
    loaded = load_policy(str(model_dir), lora=LORA)
    random_lora_b(loaded.policy, seed=0, std=0.5)
    return loaded


def _logprobs(model):
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 64, (3, 12), generator=generator)  # [N, L], no special tokens
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0  # one left-padded row
    return compute_per_token_logprobs(model, input_ids, attention_mask, enable_grad=False)  # [N, L-1]


def test_peft_loads_an_rlvr_checkpoint_with_the_same_logprobs(tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    loaded = _trained_looking_policy(tiny_model_dir)
    folder = save_trainable(loaded, tmp_path / "model")
    expected = _logprobs(loaded.policy.eval())

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    base_logprobs = _logprobs(base)
    peft_model = PeftModel.from_pretrained(base, str(folder)).eval()  # raised NoMatchingPeftModuleError before
    got = _logprobs(peft_model)
    assert (got - expected).abs().max() < 1e-5
    # The adapter matters: without it the log-probs are far off, so equality above is not vacuous.
    assert (base_logprobs - expected).abs().max() > 0.1


def test_adapter_config_is_the_one_peft_writes_with_sorted_target_modules(tiny_model_dir, tmp_path):
    loaded = _trained_looking_policy(tiny_model_dir)
    ours = json.loads((save_trainable(loaded, tmp_path / "ours") / "adapter_config.json").read_text())
    loaded.policy.save_pretrained(str(tmp_path / "peft"))
    peft_written = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert ours["target_modules"] == sorted(LORA.target_modules)  # a list, not the text of a set
    assert ours == {**peft_written, "target_modules": sorted(peft_written["target_modules"])}
