"""The shared-prefix completion path equals the plain full-sequence path, values and gradients.

`compute_completion_logprobs` runs each group's prompt once and applies the LM head only at
completion positions; every number it returns must equal `compute_per_token_logprobs` on the
completion columns, with LoRA active (its B matrices non-zero so the prompt's hidden states
depend on the trainable weights) and left-padded prompts of different lengths.
"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from rlvr.core import (
    build_completion_mask,
    compute_per_token_logprobs,
    compute_per_token_logprobs_and_entropy,
)
from rlvr.models.completion_logprobs import compute_completion_logprobs, compute_completion_scores
from rlvr.testing import random_lora_b

GROUP = 3


def _batch(num_prompts=3, group=GROUP, prompt_lens=(5, 9, 2), completion_len=6, seed=0):
    """Prompt-major rows: left-padded prompts (pad id 0), completions with early ends."""
    generator = torch.Generator().manual_seed(seed)
    width = max(prompt_lens)
    rows, masks = [], []
    for g in range(num_prompts):
        prompt = torch.randint(3, 64, (prompt_lens[g],), generator=generator)
        for j in range(group):
            length = completion_len - (j % 3)  # ragged completions, right padded
            completion = torch.randint(3, 64, (completion_len,), generator=generator)
            ids = torch.cat([torch.zeros(width - prompt_lens[g], dtype=torch.long), prompt, completion])
            mask = torch.cat([torch.zeros(width - prompt_lens[g]), torch.ones(prompt_lens[g]),
                              (torch.arange(completion_len) < length).float()]).long()
            rows.append(ids)
            masks.append(mask)
    return torch.stack(rows), torch.stack(masks), width


def _lora(model):
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                             lora_dropout=0.0))
    random_lora_b(model, seed=0, std=0.2)  # seeded once: a seed from hash(name) changed with PYTHONHASHSEED
    return model.eval()


@pytest.mark.parametrize("group_size, pass_mask", [(1, False), (GROUP, False), (GROUP, True)])
def test_values_and_gradients_equal_plain_path(make_tiny_llama, group_size, pass_mask):
    model = _lora(make_tiny_llama(dtype=torch.float64))
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]

    plain = compute_per_token_logprobs(model, input_ids, attention_mask)
    fast, entropy = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=group_size,
                                                completion_mask=mask if pass_mask else None)
    assert fast.shape == plain.shape == mask.shape
    if pass_mask:  # only masked-in positions are scored
        assert torch.all(fast[mask == 0] == 0) and torch.all(fast[mask == 1] != 0)
    torch.testing.assert_close(fast * mask, plain * mask, rtol=0, atol=1e-12)
    assert torch.all(fast[:, : prompt_len - 1] == 0)  # prompt columns are not scored

    plain_grads = torch.autograd.grad((plain * mask * weights).sum(), params)
    fast_grads = torch.autograd.grad((fast * mask * weights).sum(), params)
    scale = max(g.abs().max() for g in plain_grads)
    assert scale > 1e-3  # the comparison is not between zeros
    for a, b in zip(plain_grads, fast_grads):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6 * float(scale))



def test_chunked_head_equals_single_chunk(make_tiny_llama):
    model = _lora(make_tiny_llama(dtype=torch.float64))
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    params = [p for p in model.parameters() if p.requires_grad]
    whole, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    chunked, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP,
                                             max_chunk_bytes=64 * 8 * 5)  # 5 rows per chunk: recomputed in backward
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)
    g_whole = torch.autograd.grad((whole * mask).sum(), params)
    g_chunked = torch.autograd.grad((chunked * mask).sum(), params)
    for a, b in zip(g_whole, g_chunked):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


def test_no_grad_and_entropy(make_tiny_llama):
    model = make_tiny_llama(dtype=torch.float64)
    input_ids, attention_mask, prompt_len = _batch()
    logprobs, entropy = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len,
                                                    group_size=GROUP, enable_grad=False)
    assert logprobs.grad_fn is None and not logprobs.requires_grad
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0)).logits[:, :-1]  # [N, L-1, V]
    expected = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)  # [N, L-1]
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    torch.testing.assert_close(entropy * mask, expected * mask, rtol=0, atol=1e-10)


def test_rows_of_a_group_must_share_the_prompt(make_tiny_llama):
    model = make_tiny_llama(dtype=torch.float64)
    input_ids, attention_mask, prompt_len = _batch()
    broken = input_ids.clone()
    broken[1, prompt_len - 1] += 1  # second row of group 0 has another prompt
    with pytest.raises(ValueError, match="must share the same prompt"):
        compute_completion_logprobs(model, broken, attention_mask, prompt_len, group_size=GROUP)
    with pytest.raises(ValueError, match="group_size=4 must divide"):
        compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=4)


def test_prompt_tokens_receive_gradient_through_the_shared_cache(make_tiny_llama):
    """The loss sits on completion tokens only, yet the prompt's embeddings must get gradient:
    completions attend to the prompt's keys and values, which are run once per group."""
    model = make_tiny_llama(dtype=torch.float64)
    input_ids, attention_mask, prompt_len = _batch()
    prompt_only = torch.ones(64, dtype=torch.bool)
    prompt_only[input_ids[:, prompt_len:].unique()] = False  # ids that never occur in a completion
    prompt_only &= torch.zeros(64, dtype=torch.bool).index_fill(0, input_ids[:, :prompt_len].unique(), True)
    prompt_only[0] = False  # the pad id
    assert prompt_only.sum() >= 3
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    embeddings = model.get_input_embeddings().weight
    fast, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    (grad_fast,) = torch.autograd.grad((fast * mask).sum(), embeddings)
    plain = compute_per_token_logprobs(model, input_ids, attention_mask)
    (grad_plain,) = torch.autograd.grad((plain * mask).sum(), embeddings)
    assert grad_fast[prompt_only].abs().amin(dim=1).max() > 0 and grad_fast[prompt_only].abs().sum() > 1e-3
    # Attention kernels keep fp32 internals (softmax statistics) even for fp64 models, so the two
    # orders of computation agree to fp32 precision, not fp64.
    torch.testing.assert_close(grad_fast[prompt_only], grad_plain[prompt_only], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("train_head", [False, True])
def test_temperature_entropy_and_gradients_for_frozen_and_trainable_heads(make_tiny_llama, train_head):
    """A frozen head (LoRA) takes its gradient in the forward pass, a trainable one is recomputed
    in backward; both must equal the plain path at temperature 0.7, entropy included."""
    model = _lora(make_tiny_llama(dtype=torch.float64))
    head = model.get_base_model().get_output_embeddings()
    head.weight.requires_grad_(train_head)
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    plain, plain_entropy = compute_per_token_logprobs_and_entropy(model, input_ids, attention_mask, temperature=0.7)
    fast, fast_entropy = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP,
                                                     temperature=0.7, completion_mask=mask,
                                                     max_chunk_bytes=64 * 8 * 7)  # 7 rows per chunk
    torch.testing.assert_close(fast * mask, plain * mask, rtol=0, atol=1e-12)
    torch.testing.assert_close(fast_entropy * mask, plain_entropy * mask, rtol=0, atol=1e-10)
    at_one, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    assert ((at_one - fast) * mask).abs().max() > 0.05  # the temperature matters here
    plain_grads = torch.autograd.grad((plain * mask * weights).sum(), params)
    fast_grads = torch.autograd.grad((fast * mask * weights).sum(), params)
    assert len(params) > (1 if train_head else 0)
    scale = max(g.abs().max() for g in plain_grads)
    for a, b in zip(plain_grads, fast_grads):  # float32 LoRA adapters: agreement to ~1e-7 of the scale
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6 * float(scale))


def _random_head(hidden: int = 32):
    from rlvr.models.value_model import ValueHead

    head = ValueHead(hidden, dtype=torch.float64)
    with torch.no_grad():
        head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(4))
        head.bias.fill_(0.25)
    return head


@pytest.mark.parametrize("group_size", [1, GROUP])
def test_values_from_the_shared_pass_equal_the_head_on_a_full_forward(make_tiny_llama, group_size):
    """One pass gives log-probs and values; the value at column t is the head on the hidden state at
    position t (the one that scores token t+1), with gradients into the shared LoRA weights."""
    model = _lora(make_tiny_llama(dtype=torch.float64))
    head = _random_head()
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]

    scores = compute_completion_scores(model, input_ids, attention_mask, prompt_len, value_head=head,
                                       group_size=group_size, completion_mask=mask)
    logprobs, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=group_size,
                                              completion_mask=mask)
    torch.testing.assert_close(scores.logprobs, logprobs, rtol=0, atol=1e-12)
    decoder = model.get_base_model().get_decoder()
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask,
                     position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state  # [N, L, H]
    expected = head(hidden[:, :-1]) * mask  # [N, L-1]
    assert scores.values.shape == mask.shape
    torch.testing.assert_close(scores.values, expected, rtol=0, atol=1e-10)
    assert torch.all(scores.values[mask == 0] == 0)
    off_by_one = head(hidden[:, 1:]) * mask  # the head on the scored token's own position
    assert ((off_by_one - expected) * mask).abs().max() > 0.1
    full_grads = torch.autograd.grad((expected * weights).sum(), params)
    pass_grads = torch.autograd.grad((scores.values * weights).sum(), params)
    scale = max(g.abs().max() for g in full_grads)
    assert scale > 1e-3  # the values do reach the LoRA weights
    for a, b in zip(full_grads, pass_grads):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6 * float(scale))


def test_values_alone_and_a_head_trained_alone(make_tiny_llama):
    model = _lora(make_tiny_llama(dtype=torch.float64))
    head = _random_head()
    input_ids, attention_mask, prompt_len = _batch()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    both = compute_completion_scores(model, input_ids, attention_mask, prompt_len, value_head=head, group_size=GROUP,
                                     completion_mask=mask)
    alone = compute_completion_scores(model, input_ids, attention_mask, prompt_len, value_head=head, group_size=GROUP,
                                      completion_mask=mask, with_logprobs=False, detach_value_input=True)
    assert alone.logprobs is None and alone.entropy is None
    torch.testing.assert_close(alone.values, both.values, rtol=0, atol=1e-12)
    lora = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(alone.values.sum(), [*lora, head.weight], allow_unused=True)
    assert all(g is None for g in grads[:-1])  # detached: nothing reaches the backbone
    assert grads[-1].abs().max() > 0
    without = compute_completion_scores(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    assert without.values is None
