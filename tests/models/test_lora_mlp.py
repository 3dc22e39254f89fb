"""The SwiGLU MLP with a fused LoRA down projection (`rlvr.models.lora_mlp`): the formula's output and
gradients, one [tokens, intermediate] activation less kept for backward, the same log-probs and
gradients as PEFT's model through a whole policy, and the separate functions wherever the down
projection is not plain LoRA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

import rlvr.models.lora_mlp as lora_mlp
from rlvr.models import LoraSettings, load_policy
from rlvr.models.kernels import apply_memory_kernels
from rlvr.models.lora_kernel import install_fused_lora, set_base_product_dtype
from rlvr.models.lora_mlp import SiluMulLoraLinear, install_fused_lora_mlp
from rlvr.models.merge import merged_adapter
from rlvr.testing import build_tiny_model, random_lora_b, save_tiny_model
from tests.core.test_completion_logprobs import _batch
from tests.models.test_lora_kernel import TARGETS, _logprobs_and_grads


def test_the_function_is_the_formula_and_its_gradients():
    generator = torch.Generator().manual_seed(0)

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).requires_grad_(True)

    gate, up = draw(7, 6, scale=3.0), draw(7, 6)  # |gate| ~ 3: silu's derivative far from sigmoid's
    weight, bias = draw(5, 6).detach(), draw(5).detach()
    lora_a, lora_b = draw(2, 6), draw(5, 2)
    scaling = 2.5
    probe = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    hidden = gate * torch.sigmoid(gate) * up  # silu written out, not F.silu
    expected = hidden @ weight.T + bias + scaling * (hidden @ lora_a.T) @ lora_b.T  # [7, 5]
    got = SiluMulLoraLinear.apply(gate, up, weight, bias, lora_a, lora_b, scaling)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    wrt = (gate, up, lora_a, lora_b)
    ours = torch.autograd.grad((got * probe).sum(), wrt)
    theirs = torch.autograd.grad((expected * probe).sum(), wrt)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
    # Power: A's gradient against silu(gate) alone (up left out of the recomputed h) is far off.
    wrong_a = scaling * (probe @ lora_b.detach()).T @ F.silu(gate.detach())
    assert (wrong_a - theirs[2]).abs().max() > 0.1
    assert torch.autograd.gradcheck(
        lambda g, u, a, b: SiluMulLoraLinear.apply(g, u, weight, bias, a, b, scaling),
        tuple(t[:3].detach().requires_grad_() if t.shape[0] == 7 else t.detach().requires_grad_() for t in wrt),
    )


def _models(fused_mlp: bool = True, memory_kernels: bool = True):
    """A tiny float64 LoRA model on every projection: PEFT's own, and one with every fused kernel."""
    models = []
    for fused in (False, True):
        model = build_tiny_model(seed=3, dtype=torch.float64, vocab_size=64)
        if fused and memory_kernels:
            apply_memory_kernels(model)
        torch.manual_seed(0)  # PEFT draws lora_A from the global generator
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0, target_modules=TARGETS))
        random_lora_b(model, seed=0, std=0.3)
        if fused:
            install_fused_lora(model)
            models.append((model.train(), install_fused_lora_mlp(model) if fused_mlp else 0))
        else:
            models.append(model.train())
    return models[0], *models[1]


def _count_fused_calls(monkeypatch) -> list:
    """From now on each `SiluMulLoraLinear.apply` call appends to the returned list."""
    calls = []
    original = SiluMulLoraLinear.apply
    monkeypatch.setattr(SiluMulLoraLinear, "apply", lambda *args: calls.append(1) or original(*args))
    return calls


def test_a_model_with_it_has_peft_logprobs_and_gradients(monkeypatch):
    peft_model, fused_model, installed = _models()
    assert installed == 2  # both layers' MLPs
    input_ids, attention_mask, _ = _batch()
    calls = _count_fused_calls(monkeypatch)
    fused = _logprobs_and_grads(fused_model, input_ids, attention_mask)
    monkeypatch.undo()
    assert len(calls) == 2  # taken in each layer
    reference = _logprobs_and_grads(peft_model, input_ids, attention_mask)
    torch.testing.assert_close(fused[0], reference[0], rtol=1e-10, atol=1e-10)
    assert len(fused[1]) == len(reference[1]) == 14 * 2
    for ours, theirs in zip(fused[1], reference[1]):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)
    assert min(float(g.abs().max()) for g in reference[1]) > 1e-4  # power: every adapter gradient is live


def _intermediate_activations(model, input_ids, attention_mask) -> int:
    """How many [B, L, intermediate] tensors (distinct storages) autograd keeps for backward."""
    intermediate = model.get_base_model().config.intermediate_size
    kept = set()

    def pack(tensor):
        if (tensor.dim() >= 2 and tensor.shape[-1] == intermediate
                and tensor.numel() >= input_ids.numel() * intermediate):
            kept.add(tensor.untyped_storage().data_ptr())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=input_ids, attention_mask=attention_mask)
    return len(kept)


def test_it_keeps_two_intermediate_activations_per_layer_instead_of_three():
    input_ids, attention_mask, _ = _batch()
    _, separate, _ = _models(fused_mlp=False)
    _, fused, _ = _models()
    assert _intermediate_activations(separate, input_ids, attention_mask) == 3 * 2  # gate, up, h per layer
    assert _intermediate_activations(fused, input_ids, attention_mask) == 2 * 2  # gate, up


def test_merged_and_disabled_adapters_take_the_separate_functions(monkeypatch):
    peft_model, fused_model, _ = _models()
    input_ids, attention_mask, _ = _batch()
    calls = _count_fused_calls(monkeypatch)
    with torch.no_grad():
        with merged_adapter(fused_model), merged_adapter(peft_model):
            torch.testing.assert_close(fused_model(input_ids=input_ids, attention_mask=attention_mask).logits,
                                       peft_model(input_ids=input_ids, attention_mask=attention_mask).logits)
        with fused_model.disable_adapter(), peft_model.disable_adapter():
            torch.testing.assert_close(fused_model(input_ids=input_ids, attention_mask=attention_mask).logits,
                                       peft_model(input_ids=input_ids, attention_mask=attention_mask).logits)
    assert calls == []


def test_with_the_adapter_disabled_the_model_is_the_base_model():
    """The reference policy (adapter disabled) is the model without the adapter: the fused MLP must not add it."""
    _, fused_model, _ = _models()
    base = build_tiny_model(seed=3, dtype=torch.float64, vocab_size=64)
    input_ids, attention_mask, _ = _batch()
    with torch.no_grad():
        with fused_model.disable_adapter():
            off = fused_model(input_ids=input_ids, attention_mask=attention_mask).logits
        on = fused_model(input_ids=input_ids, attention_mask=attention_mask).logits
        expected = base(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(off, expected, rtol=1e-10, atol=1e-10)
    assert (on - expected).abs().max() > 1e-3  # power: the adapter moves the logits


def test_with_reduced_base_products_it_equals_the_separate_functions():
    input_ids, attention_mask, _ = _batch()
    results = []
    for fused_mlp in (False, True):
        _, model, _ = _models(fused_mlp=fused_mlp)
        assert set_base_product_dtype(model, torch.float32) == 14
        results.append(_logprobs_and_grads(model, input_ids, attention_mask))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-12)  # the same products
    for ours, theirs in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)
    _, reference, _ = _models(fused_mlp=False)
    full = _logprobs_and_grads(reference, input_ids, attention_mask)[0]
    assert (full - results[1][0]).abs().max() > 1e-9  # power: float32 base products do change the numbers


def test_nothing_is_installed_without_the_fused_pieces_or_when_the_check_fails(monkeypatch):
    assert _models(memory_kernels=False)[2] == 0  # MLPs without the fused SwiGLU forward
    plain_lora = build_tiny_model(seed=3, dtype=torch.float64)
    assert apply_memory_kernels(plain_lora)  # the fused SwiGLU forward, but PEFT's LoRA forward below
    plain_lora = get_peft_model(plain_lora, LoraConfig(r=4, lora_alpha=12, target_modules=TARGETS))
    assert install_fused_lora_mlp(plain_lora) == 0
    original = lora_mlp._swiglu_lora_forward
    monkeypatch.setattr(lora_mlp, "_swiglu_lora_forward", lambda self, x: original(self, x) * 1.001)
    _, model, installed = _models()
    assert installed == 0
    assert not any(getattr(vars(layer.mlp).get("forward"), "__func__", None) is original
                   for layer in model.get_base_model().model.layers)


@pytest.mark.parametrize("memory_kernels", [True, False])
def test_load_policy_installs_it_with_the_memory_kernels(tmp_path, memory_kernels):
    folder = save_tiny_model(tmp_path / "tiny")
    policy = load_policy(folder, lora=LoraSettings(rank=4, alpha=8, target_modules=tuple(TARGETS)),
                         memory_kernels=memory_kernels).policy
    forwards = [getattr(vars(layer.mlp).get("forward"), "__func__", None)
                for layer in policy.get_base_model().model.layers]
    expected = lora_mlp._swiglu_lora_forward if memory_kernels else None
    assert len(forwards) > 1 and all(forward is expected for forward in forwards)
