"""Memory kernels (`rlvr.models.kernels`) and the LM head's checkpointing: less kept, same numbers.

Each memory claim is checked by counting what autograd keeps for backward (saved-tensor hooks),
next to the plain model, and each kernel's values and gradients are compared with the plain
model's in float64 (LoRA on, left-padded prompts, shared-prefix groups).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn

from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.models.kernels import (
    GQA_ATTENTION,
    WEIGHT_MAJOR_ABOVE_ROWS,
    SiluMul,
    apply_memory_kernels,
    install_fused_mlp,
    silu_mul,
    weight_major_linears,
)
from rlvr.testing import build_tiny_model, random_lora_b
from tests.core.test_completion_logprobs import GROUP, _batch


def _saved_shapes(fn):
    """Run fn() and return the shapes of every tensor autograd keeps for backward."""
    shapes = []

    def pack(tensor):
        shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = fn()
    return result, shapes


def _pair(seed=0):
    """Two identical tiny GQA models (4 query heads, 2 key/value heads), kernels on the second."""
    plain = build_tiny_model(seed=seed, dtype=torch.float64, vocab_size=64)
    fused = build_tiny_model(seed=seed, dtype=torch.float64, vocab_size=64)
    installed = apply_memory_kernels(fused)
    return plain, fused, installed


def _lora(model):
    torch.manual_seed(0)  # PEFT draws lora_A from the global generator
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj",
                                                             "down_proj"]))
    random_lora_b(model, seed=0, std=0.2)
    return model.train()


def test_silu_mul_values_and_gradients_equal_autograd():
    generator = torch.Generator().manual_seed(0)
    gate = (torch.randn(5, 7, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    up = torch.randn(5, 7, generator=generator, dtype=torch.float64).requires_grad_()
    weights = torch.randn(5, 7, generator=generator, dtype=torch.float64)
    expected = F.silu(gate) * up
    got = SiluMul.apply(gate, up)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15)
    expected_grads = torch.autograd.grad((expected * weights).sum(), (gate, up))
    got_grads = torch.autograd.grad((got * weights).sum(), (gate, up))
    for a, b in zip(got_grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    # The derivative sigmoid(x) alone (a plausible slip) is far off at |x| ~ 3.
    slip = weights * up * torch.sigmoid(gate)
    assert (slip - expected_grads[0]).abs().max() > 0.1  # vs the 1e-12 tolerance above
    assert torch.autograd.gradcheck(SiluMul.apply, (gate[:2, :3].detach().requires_grad_(),
                                                    up[:2, :3].detach().requires_grad_()))


def test_silu_mul_keeps_two_activations_instead_of_three():
    gate = torch.randn(4, 6, requires_grad=True)
    up = torch.randn(4, 6, requires_grad=True)
    _, plain = _saved_shapes(lambda: F.silu(gate) * up)
    _, fused = _saved_shapes(lambda: silu_mul(gate, up))
    assert plain.count((4, 6)) == 3  # silu's input, silu's output, up
    assert fused.count((4, 6)) == 2  # gate and up only
    with torch.no_grad():  # no autograd: the plain expression, nothing kept
        torch.testing.assert_close(silu_mul(gate, up), F.silu(gate) * up)


def test_kernels_are_installed_and_can_be_left_off(tmp_path):
    plain, fused, installed = _pair()
    assert installed == [GQA_ATTENTION, "fused_swiglu"]
    assert fused.config._attn_implementation == GQA_ATTENTION
    assert plain.config._attn_implementation == "sdpa"
    assert all("forward" in vars(layer.mlp) for layer in fused.model.layers)
    assert not any("forward" in vars(layer.mlp) for layer in plain.model.layers)

    from rlvr.models import load_policy
    from rlvr.testing import save_tiny_model

    folder = save_tiny_model(tmp_path / "tiny")
    off = load_policy(folder, lora=None, memory_kernels=False).policy
    on = load_policy(folder, lora=None).policy
    assert off.config._attn_implementation == "sdpa"
    assert on.config._attn_implementation == GQA_ATTENTION


@pytest.mark.parametrize("group_size", [1, GROUP])
def test_kernels_give_the_same_logprobs_and_gradients(group_size):
    plain, fused, _ = _pair()
    plain, fused = _lora(plain), _lora(fused)
    input_ids, attention_mask, prompt_len = _batch()
    mask = attention_mask[:, 1:].to(torch.float64)
    mask[:, : prompt_len - 1] = 0
    results = []
    for model in (plain, fused):
        logprobs, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=group_size)
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad((logprobs * mask).sum(), params)
        results.append((logprobs, grads))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-10, atol=1e-10)
    assert len(results[0][1]) == len(results[1][1]) > 0
    for a, b in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_gqa_attention_keeps_key_value_heads_not_copies():
    plain, fused, _ = _pair()
    input_ids, attention_mask, _ = _batch()
    seq = input_ids.shape[1]
    results = {}
    for name, model in (("plain", plain), ("fused", fused)):
        model.requires_grad_(True)
        results[name] = _saved_shapes(lambda: model(input_ids=input_ids, attention_mask=attention_mask).logits)
    # Keys/values as kept for backward: [B, heads, L, head_dim]; head_dim = 32 / 4 = 8.
    repeated = (input_ids.shape[0], 4, seq, 8)
    grouped = (input_ids.shape[0], 2, seq, 8)
    assert results["plain"][1].count(repeated) == 4 * 2  # query, output and copied key, value per layer
    assert grouped not in results["plain"][1]
    assert results["fused"][1].count(grouped) == 2 * 2  # key, value per layer, not copied
    assert results["fused"][1].count(repeated) == 2 * 2  # query and output only
    torch.testing.assert_close(results["fused"][0], results["plain"][0], rtol=1e-10, atol=1e-10)


def test_gqa_attention_keeps_one_mask_for_all_layers():
    """Given transformers' boolean mask, scaled_dot_product_attention makes an additive float copy in every
    layer and autograd keeps each; `sdpa_gqa` builds the additive mask once per forward."""
    plain, fused, _ = _pair()
    input_ids, attention_mask, _ = _batch()
    rows, seq = input_ids.shape
    kept = {}
    for name, model in (("plain", plain), ("fused", fused)):
        model.requires_grad_(True)
        storages = set()

        def pack(tensor):
            if tuple(tensor.shape) == (rows, 1, seq, seq):  # [B, 1, queries, keys]: a mask
                assert tensor.dtype == torch.float64  # additive, in the model's dtype
                storages.add(tensor.untyped_storage().data_ptr())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            kept[name] = (model(input_ids=input_ids, attention_mask=attention_mask).logits, len(storages))
    layers = plain.config.num_hidden_layers
    assert layers > 1 and kept["plain"][1] == layers  # a float copy per layer
    assert kept["fused"][1] == 1
    torch.testing.assert_close(kept["fused"][0], kept["plain"][0], rtol=0, atol=1e-12)


def test_the_additive_mask_is_zero_where_attended_and_minus_infinity_elsewhere():
    from transformers.masking_utils import sdpa_mask

    from rlvr.models.kernels import additive_sdpa_mask

    padding = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])  # left padding on the first row
    kwargs = dict(batch_size=2, q_length=4, kv_length=4, attention_mask=padding.bool(), allow_is_causal_skip=False)
    boolean = sdpa_mask(**kwargs)  # [2, 1, 4, 4]
    additive = additive_sdpa_mask(**kwargs, dtype=torch.bfloat16)
    assert additive.dtype == torch.bfloat16 and additive.shape == boolean.shape
    assert torch.equal(additive == 0, boolean) and bool(torch.isneginf(additive[~boolean]).all())
    assert not bool(boolean[0, 0, 1, 0]) and bool(boolean[1, 0, 1, 0])  # padding blocked, causal past attended
    assert additive_sdpa_mask(batch_size=2, q_length=4, kv_length=4, attention_mask=None) is None  # causal skip


def test_greedy_generation_is_unchanged():
    plain, fused, _ = _pair(seed=3)
    input_ids, attention_mask, _ = _batch()
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        a = plain.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        b = fused.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    assert torch.equal(a, b)


def test_an_mlp_with_another_forward_is_left_alone():
    class LlamaMLP(nn.Module):  # the expected name, a different computation
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 4)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) + self.up_proj(x))

    model = nn.Sequential(LlamaMLP(), LlamaMLP())
    assert install_fused_mlp(model) == 0
    assert not any("forward" in vars(module) for module in model)


def test_the_install_check_leaves_the_generator_where_it_was():
    """install_fused_mlp checks the first MLP on a random input: the draw must not shift what the run samples next."""
    model = build_tiny_model(seed=0, vocab_size=96, hidden_size=40)
    torch.manual_seed(5)
    assert install_fused_mlp(model) > 0
    after_install = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after_install, torch.rand(3))


def test_lm_head_logits_are_not_kept_for_backward():
    model = _lora(build_tiny_model(seed=0, dtype=torch.float64, vocab_size=96, hidden_size=40))
    input_ids, attention_mask, prompt_len = _batch()
    (logprobs, _), shapes = _saved_shapes(
        lambda: compute_completion_logprobs(model, input_ids, attention_mask, prompt_len, group_size=GROUP)
    )
    vocab = model.get_base_model().config.vocab_size
    assert not [shape for shape in shapes if shape and shape[-1] == vocab]  # recomputed per chunk in backward
    logprobs.sum().backward()  # and backward still works


def test_weight_major_linears_give_the_linear_product_and_are_undone():
    layer = nn.Linear(24, 40)
    model = nn.Sequential(layer)
    with torch.no_grad():
        for rows in (1, WEIGHT_MAJOR_ABOVE_ROWS, WEIGHT_MAJOR_ABOVE_ROWS + 1, 33):  # both sides of the switch
            x = torch.randn(2, rows, 24, dtype=torch.float32)
            expected = x @ layer.weight.t() + layer.bias  # [2, rows, 40]
            with weight_major_linears(model) as switched:
                got = model(x)
                assert switched == 1 and "forward" in vars(layer)
            assert got.shape == expected.shape and got.is_contiguous()
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            assert "forward" not in vars(layer)
