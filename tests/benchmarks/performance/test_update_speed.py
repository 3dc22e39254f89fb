"""benchmarks/performance/update_speed.py's W2-shaped batch: groups share a prompt, lengths are as drawn, and the
trimmed split computes fewer tokens than the whole-width one."""

from __future__ import annotations

import torch

from benchmarks.performance.update_speed import completion_lengths, computed_tokens, config_for, make_batch


def test_the_batch_has_the_drawn_lengths_and_shared_prompts():
    lengths = completion_lengths(16, 40, 0.4, 5)
    assert len(lengths) == 16 and max(lengths) == 40 and min(lengths) >= 5
    assert lengths == completion_lengths(16, 40, 0.4, 5)  # drawn once, from a fixed seed
    batch = make_batch(prompt_tokens=6, prompt_spread=3, lengths=lengths, vocab=500)
    assert batch.completion_mask.sum(-1).tolist() == [float(n) for n in lengths]
    prompts = batch.input_ids[:, : batch.prompt_len].view(4, 4, -1)
    assert bool((prompts == prompts[:, :1]).all())  # each group's rows share their prompt
    real_prompt = batch.attention_mask[:, : batch.prompt_len].sum(-1).view(4, 4)[:, 0].tolist()
    assert real_prompt == [6, 7, 8, 9]  # left padding differs between groups


def test_trimming_computes_fewer_tokens_than_the_whole_width():
    lengths = completion_lengths(16, 40, 0.4, 5)
    batch = make_batch(prompt_tokens=6, prompt_spread=3, lengths=lengths, vocab=500)
    whole = computed_tokens(batch, config_for("whole", 4, 40), "whole")
    trimmed = computed_tokens(batch, config_for("trimmed", 4, 40), "trimmed")
    assert whole == batch.input_ids.numel() and trimmed < whole
    assert torch.is_tensor(batch.advantages)


def test_the_peft_side_runs_peft_forward_and_the_fused_one_is_put_back(tmp_path):
    import pytest
    from peft.tuners.lora import Linear as PeftLoraLinear

    from benchmarks.performance.update_speed import lora_forward
    from rlvr.models import LoraSettings, load_policy
    from rlvr.testing import save_tiny_model

    policy = load_policy(save_tiny_model(tmp_path / "tiny"), lora=LoraSettings(rank=4, alpha=8)).policy
    layers = [m for m in policy.modules() if isinstance(m, PeftLoraLinear)]
    fused = [vars(m)["forward"] for m in layers]
    with lora_forward(policy, "fused"):
        assert [vars(m).get("forward") for m in layers] == fused
    with lora_forward(policy, "peft"):
        assert not any("forward" in vars(m) for m in layers)  # the class's, PEFT's own
    assert [vars(m).get("forward") for m in layers] == fused
    with pytest.raises(ValueError, match="choices: fused, peft"):
        with lora_forward(policy, "compiled"):
            pass
