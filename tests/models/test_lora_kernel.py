"""The fused LoRA projection (`rlvr.models.lora_kernel`): the same output and gradients as the formula
computed independently and as PEFT's own forward, on one layer and through a whole model; PEFT's forward
wherever the layer is not plain LoRA (merged, disabled, dropout, DoRA, arguments)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as PeftLoraLinear

from rlvr.models import LoraSettings, load_policy
from rlvr.models.lora_kernel import LoraLinear, install_fused_lora, lora_linear, plain_adapter
from rlvr.models.merge import merged_adapter
from rlvr.testing import build_tiny_model, random_lora_b, save_tiny_model
from tests.core.test_completion_logprobs import _batch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _inputs(seed: int = 0, rows: int = 7, fan_in: int = 6, fan_out: int = 5, rank: int = 3):
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    return draw(rows, fan_in), draw(fan_out, fan_in), draw(fan_out), draw(rank, fan_in), draw(fan_out, rank)


def test_the_function_is_the_formula_and_its_gradients():
    x, weight, bias, lora_a, lora_b = _inputs()
    scaling = 2.5  # not 1, so a scaling left out of one path shows
    x, lora_a, lora_b = (t.requires_grad_(True) for t in (x, lora_a, lora_b))
    probe = torch.randn(7, 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    expected = x @ weight.T + bias + scaling * (x @ lora_a.T) @ lora_b.T  # [7, 5], by the formula
    got = LoraLinear.apply(x, weight, bias, lora_a, lora_b, scaling)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad((got * probe).sum(), (x, lora_a, lora_b))
    # Worked out by hand: with g = probe, dx = g W + s (g B) A, dA = s (g B)^T x, dB = s g^T (x A^T).
    g = probe
    by_hand = (g @ weight + scaling * (g @ lora_b) @ lora_a, scaling * (g @ lora_b).T @ x,
               scaling * g.T @ (x @ lora_a.T))
    for ours, theirs in zip(grads, by_hand):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    # Power: the scaling left out of B's gradient is off by a factor 2.5.
    assert (by_hand[2] / scaling - grads[2]).abs().max() > 0.1
    assert torch.autograd.gradcheck(lambda *t: LoraLinear.apply(t[0], weight, bias, t[1], t[2], scaling),
                                    (x.detach().requires_grad_(), lora_a.detach().requires_grad_(),
                                     lora_b.detach().requires_grad_()))


def test_an_input_that_needs_no_gradient_gets_none_and_the_adapter_still_learns():
    x, weight, _, lora_a, lora_b = _inputs(seed=1)
    lora_a.requires_grad_(True)
    lora_b.requires_grad_(True)
    out = lora_linear(x.view(1, 7, 6), weight, None, lora_a, lora_b, 0.5)  # [1, 7, 5]: any leading shape
    assert out.shape == (1, 7, 5)
    torch.testing.assert_close(out[0], F.linear(x, weight) + 0.5 * F.linear(F.linear(x, lora_a), lora_b))
    grad_a, grad_b = torch.autograd.grad(out.sum(), (lora_a, lora_b))
    assert grad_a.abs().sum() > 0 and grad_b.abs().sum() > 0


def _peft_pair(dropout: float = 0.0, use_dora: bool = False):
    """The same tiny float64 LoRA model twice; the second with the fused forward installed."""
    models = []
    for _ in range(2):
        torch.manual_seed(0)  # PEFT draws lora_A from the global generator
        model = get_peft_model(build_tiny_model(seed=3, dtype=torch.float64, vocab_size=64),
                               LoraConfig(r=4, lora_alpha=12, lora_dropout=dropout, target_modules=TARGETS,
                                          use_dora=use_dora))
        random_lora_b(model, seed=0, std=0.3)
        models.append(model.train())
    return models[0], models[1], install_fused_lora(models[1])


def _logprobs_and_grads(model, input_ids, attention_mask):
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]  # [B, L-1, V]
    logprobs = torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:, None])[..., 0]  # [B, L-1]
    params = [p for p in model.parameters() if p.requires_grad]
    loss = (logprobs * attention_mask[:, 1:]).sum()
    return logprobs.detach(), torch.autograd.grad(loss, params)


def test_a_fused_model_has_peft_logprobs_and_gradients():
    peft_model, fused_model, installed = _peft_pair()
    assert installed == 7 * 2  # every projection of both layers
    input_ids, attention_mask, _ = _batch()  # left-padded rows
    calls = []
    original = LoraLinear.apply
    LoraLinear.apply = lambda *args: calls.append(1) or original(*args)
    try:
        fused = _logprobs_and_grads(fused_model, input_ids, attention_mask)
    finally:
        LoraLinear.apply = original
    assert len(calls) == 14  # the fused path was taken in every projection
    reference = _logprobs_and_grads(peft_model, input_ids, attention_mask)
    torch.testing.assert_close(fused[0], reference[0], rtol=1e-10, atol=1e-10)
    assert len(fused[1]) == len(reference[1]) == 14 * 2
    for ours, theirs in zip(fused[1], reference[1]):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)
    # Power: the adapter's gradients are not 0 (B is random), so a wrong B or A path would show.
    assert min(float(g.abs().max()) for g in reference[1]) > 1e-4


def test_merged_disabled_and_non_plain_layers_take_peft_forward():
    peft_model, fused_model, _ = _peft_pair()
    input_ids, attention_mask, _ = _batch()
    layer = fused_model.base_model.model.model.layers[0].self_attn.q_proj
    x = torch.randn(2, 3, 32, dtype=torch.float64)
    assert plain_adapter(layer, x) == "default"
    assert plain_adapter(layer, x.float()) is None  # another dtype than the adapter's
    with torch.no_grad():
        with merged_adapter(fused_model), merged_adapter(peft_model):
            assert plain_adapter(layer, x) is None
            torch.testing.assert_close(fused_model(input_ids=input_ids, attention_mask=attention_mask).logits,
                                       peft_model(input_ids=input_ids, attention_mask=attention_mask).logits)
        with fused_model.disable_adapter(), peft_model.disable_adapter():
            assert plain_adapter(layer, x) is None
            off = fused_model(input_ids=input_ids, attention_mask=attention_mask).logits
            torch.testing.assert_close(off, peft_model(input_ids=input_ids, attention_mask=attention_mask).logits)
        on = fused_model(input_ids=input_ids, attention_mask=attention_mask).logits
        assert (on - off).abs().max() > 1e-3  # power: the adapter moves the logits
    for dropout, use_dora in ((0.1, False), (0.0, True)):
        _, other, _ = _peft_pair(dropout=dropout, use_dora=use_dora)
        other_layer = other.base_model.model.model.layers[0].self_attn.q_proj
        assert isinstance(other_layer, PeftLoraLinear) and plain_adapter(other_layer, x) is None


def test_under_autocast_the_layer_takes_peft_forward():
    """Autocast casts the products of a custom function's forward but not what it saves: PEFT's forward there."""
    peft_model, fused_model, _ = _peft_pair()
    peft_model, fused_model = peft_model.float(), fused_model.float()
    input_ids, attention_mask, _ = _batch()
    layer = fused_model.base_model.model.model.layers[0].self_attn.q_proj
    x = torch.randn(2, 3, 32)
    assert plain_adapter(layer, x) == "default"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain_adapter(layer, x) is None
        fused = fused_model(input_ids=input_ids, attention_mask=attention_mask).logits
        plain = peft_model(input_ids=input_ids, attention_mask=attention_mask).logits
    assert torch.equal(fused, plain)


def test_load_policy_installs_it_and_can_leave_it_off(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny")
    on = load_policy(folder, lora=LoraSettings(rank=4, alpha=8)).policy
    off = load_policy(folder, lora=LoraSettings(rank=4, alpha=8), fused_lora=False).policy
    lora_layers = [m for m in on.modules() if isinstance(m, PeftLoraLinear)]
    assert lora_layers and all("forward" in vars(m) for m in lora_layers)
    assert not any("forward" in vars(m) for m in off.modules() if isinstance(m, PeftLoraLinear))


def test_installing_draws_nothing_from_the_run_s_random_stream(tmp_path):
    """The install-time checks draw random inputs: a run must sample the same with the fused forwards on or off,
    so torch's generator is where it was (the next draw equals the one made without an install)."""
    folder = save_tiny_model(tmp_path / "tiny")
    draws = []
    for fused in (True, False):
        torch.manual_seed(11)
        load_policy(folder, lora=LoraSettings(rank=4, alpha=8), fused_lora=fused, memory_kernels=fused)
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1])


def test_an_sgd_step_moves_the_adapter_as_peft_does(tmp_path):
    """Loaded by load_policy in float32: the step through the fused forward equals PEFT's, same batch and seed."""
    folder = save_tiny_model(tmp_path / "tiny")
    input_ids, attention_mask, _ = _batch()
    after, moved = {}, {}
    for fused in (False, True):
        torch.manual_seed(0)  # PEFT draws lora_A from the global generator
        policy = load_policy(folder, lora=LoraSettings(rank=4, alpha=8), fused_lora=fused).policy
        random_lora_b(policy, seed=4, std=0.3)
        params = [p for p in policy.parameters() if p.requires_grad]
        before = [p.detach().clone() for p in params]
        policy.train()
        _, grads = _logprobs_and_grads(policy, input_ids, attention_mask)
        with torch.no_grad():
            for param, grad in zip(params, grads):
                param -= 0.1 * grad
        after[fused] = [p.detach().clone() for p in params]
        moved[fused] = max(float((p - b).abs().max()) for p, b in zip(after[fused], before))
    for ours, theirs in zip(after[True], after[False]):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert moved[True] > 1e-3  # power: the step is far larger than the tolerance
