"""One precision path for the policy's, the old and the reference LM-head log-probs: KL exactly 0 in bf16.

The policy's pass (gradient, a frozen head: `_FrozenHeadLogprob`; a trainable head: checkpointed
chunks) and the no-grad passes (old and reference log-probs) must compute the same numbers from the
same weights, bit for bit, or a bf16 run starts with a KL penalty and a ratio that are rounding
noise. The numbers are checked against a naive fp32 log-softmax written here, and the old no-grad
path (the head product in bf16, upcast after) is shown to differ on the same inputs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from rlvr.core import build_completion_mask, head_logprobs
from rlvr.core.kl import approx_kl, kl_per_token
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.testing import build_tiny_model
from tests.core.test_completion_logprobs import GROUP, _batch

ROWS, HIDDEN, VOCAB = 40, 32, 97
CHUNK = 2**28  # one chunk for all rows; `SMALL_CHUNK` below splits them
SMALL_CHUNK = VOCAB * 4 * 7  # 7 rows of fp32 logits per chunk


def _head_and_hidden(trainable: bool = False, bias: bool = False):
    """A bf16 LM head [V, H] and bf16 hidden states [R, H] with logits of a few units (bf16 ulp 1/64 to 1/32)."""
    generator = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=bias).to(torch.bfloat16)
    with torch.no_grad():
        head.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=generator) * 0.5)
        if bias:
            head.bias.copy_(torch.randn(VOCAB, generator=generator))
    head.requires_grad_(trainable)
    hidden = (torch.randn(ROWS, HIDDEN, generator=generator) * 1.5).to(torch.bfloat16)  # [R, H]
    targets = torch.randint(0, VOCAB, (ROWS,), generator=generator)  # [R]
    return head, hidden, targets


def _naive_fp32(head, hidden, targets, temperature):
    """Upcast, then the product and log-softmax: [R]."""
    logits = hidden.float() @ head.weight.detach().float().t()  # [R, V]
    if head.bias is not None:
        logits = logits + head.bias.detach().float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def _old_bf16_product(head, hidden, targets, temperature):
    """The former no-grad path: the head product in bf16, then upcast. [R]."""
    with torch.no_grad():
        logits = head(hidden).float()  # [R, V], each logit rounded to bf16
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [CHUNK, SMALL_CHUNK])
def test_frozen_head_policy_and_no_grad_passes_bitwise_equal(temperature, chunk):
    head, hidden, targets = _head_and_hidden()
    policy, policy_entropy = head_logprobs(head, hidden.clone().requires_grad_(True), targets, temperature, chunk,
                                           True)  # [R], `_FrozenHeadLogprob`
    with torch.no_grad():
        reference, reference_entropy = head_logprobs(head, hidden, targets, temperature, chunk, True)  # [R]
    assert policy.dtype == torch.float32 and policy.requires_grad
    assert torch.equal(policy.detach(), reference)
    assert torch.equal(policy_entropy, reference_entropy)
    assert torch.equal(kl_per_token(policy.detach()[None], reference[None]), torch.zeros(1, ROWS))
    # Right numbers, and the old path visibly wrong on the same inputs.
    naive = _naive_fp32(head, hidden, targets, temperature)
    assert torch.allclose(reference, naive, rtol=0, atol=2e-5)
    old_gap = (_old_bf16_product(head, hidden, targets, temperature) - policy.detach()).abs().max().item()
    assert old_gap > 1e-3  # about a bf16 ulp of the logits
    assert kl_per_token(policy.detach()[None], _old_bf16_product(head, hidden, targets, temperature)[None]).max() > 0


@pytest.mark.parametrize("bias", [False, True])
def test_trainable_head_and_frozen_copy_bitwise_equal(bias):
    """Full fine-tuning: a trainable head (checkpointed chunks) against the reference's frozen copy."""
    head, hidden, targets = _head_and_hidden(trainable=True, bias=bias)
    frozen = copy.deepcopy(head).requires_grad_(False)
    policy, _ = head_logprobs(head, hidden, targets, 1.0, SMALL_CHUNK, True)  # [R], gradient to the head
    with torch.no_grad():
        reference, _ = head_logprobs(frozen, hidden, targets, 1.0, SMALL_CHUNK, True)
    assert policy.requires_grad
    assert torch.equal(policy.detach(), reference)
    assert torch.allclose(reference, _naive_fp32(head, hidden, targets, 1.0), rtol=0, atol=2e-5)
    policy.sum().backward()
    assert head.weight.grad is not None and head.weight.grad.dtype == torch.bfloat16


def _tiny_bf16_lora():
    model = build_tiny_model(dtype=torch.bfloat16)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0)
    return get_peft_model(model, config).eval()  # B = 0: the policy's weights equal the reference's


def test_lora_policy_old_and_reference_logprobs_bitwise_equal_in_bf16():
    """The start of a LoRA run in bf16: policy (gradient), old (no grad) and reference (adapter off) agree."""
    model = _tiny_bf16_lora()
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    policy, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    with torch.no_grad():
        old, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    with model.disable_adapter(), torch.no_grad():
        reference, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    assert policy.requires_grad and policy.dtype == torch.float32
    assert torch.equal(policy.detach(), old)
    assert torch.equal(policy.detach(), reference)
    assert approx_kl(policy.detach(), reference, mask).item() == 0.0
    assert (policy.detach() * mask).abs().sum() > 0  # not trivially zero


def test_full_finetune_policy_and_frozen_reference_bitwise_equal_in_bf16():
    model = build_tiny_model(dtype=torch.bfloat16)
    reference_model = copy.deepcopy(model).requires_grad_(False)
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    policy, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    with torch.no_grad():
        reference, _ = compute_completion_logprobs(reference_model, input_ids, attention_mask, prompt_len,
                                                   group_size=GROUP)
    assert torch.equal(policy.detach(), reference)
    assert approx_kl(policy.detach(), reference, mask).item() == 0.0
