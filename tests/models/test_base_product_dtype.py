"""`model.base_product_dtype`: the fused LoRA projections' frozen base products from a bf16 copy of the
weights, with the input rounded to bf16 and nothing else changed (adapter, gradients of the adapter, the
rest of the model); the copy follows a swapped weight; sampling with the merged adapter is the model's own
fp32 policy, and `decode_loop` then reports the log-probs it sampled with; the reference (adapter
disabled) multiplies at the same precision as the policy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

from rlvr.models import LoraSettings, load_policy
from rlvr.models.lora_kernel import (
    LoraLinear,
    base_product_dtype,
    base_product_weight,
    install_fused_lora,
    set_base_product_dtype,
)
from rlvr.models.merge import merged_adapter
from rlvr.rollout.generation import SamplingSettings
from rlvr.rollout.decode_loop import decode_loop
from rlvr.testing import build_tiny_model, random_lora_b

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _layer_inputs(rows: int = 7, fan_in: int = 64, fan_out: int = 5, rank: int = 3):
    generator = torch.Generator().manual_seed(0)

    def draw(*shape, scale=1.0):
        return torch.randn(*shape, generator=generator) * scale

    return (draw(rows, fan_in), draw(fan_out, fan_in, scale=0.3), draw(fan_out), draw(rank, fan_in, scale=0.1),
            draw(fan_out, rank, scale=0.1), draw(rows, fan_out))


def test_the_base_product_rounds_its_input_and_weight_and_nothing_else():
    x, weight, bias, lora_a, lora_b, probe = _layer_inputs()
    scaling = 2.0
    x, lora_a, lora_b = (t.requires_grad_(True) for t in (x, lora_a, lora_b))
    got = LoraLinear.apply(x, weight.bfloat16(), bias, lora_a, lora_b, scaling)  # [7, 5]
    assert got.dtype == torch.float32
    x_low, w_low = x.detach().bfloat16(), weight.bfloat16()
    expected = F.linear(x_low, w_low).float() + bias + scaling * (x.detach() @ lora_a.detach().T) @ lora_b.detach().T
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    # Power: the fp32 product differs from the rounded one by far more than the tolerance.
    exact = x.detach() @ weight.T + bias + scaling * (x.detach() @ lora_a.detach().T) @ lora_b.detach().T
    assert (exact - got).abs().max() > 1e-3
    grad_x, grad_a, grad_b = torch.autograd.grad((got * probe).sum(), (x, lora_a, lora_b))
    g = probe
    torch.testing.assert_close(grad_x,
                               (g.bfloat16() @ w_low).float() + scaling * (g @ lora_b.detach()) @ lora_a.detach(),
                               rtol=1e-6, atol=1e-6)
    # The adapter's gradients do not involve W: exactly the fp32 formulas, from the fp32 input.
    torch.testing.assert_close(grad_a, scaling * (g @ lora_b.detach()).T @ x.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad_b, scaling * g.T @ (x.detach() @ lora_a.detach().T), rtol=1e-6, atol=1e-6)


def _fused_model(seed: int = 0):
    torch.manual_seed(seed)  # PEFT draws lora_A from the global generator
    model = get_peft_model(build_tiny_model(seed=3, dtype=torch.float32, vocab_size=64),
                           LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS))
    random_lora_b(model, seed=0, std=0.3)
    assert install_fused_lora(model) == 7 * model.config.num_hidden_layers
    return model.eval()


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits  # [B, L, V]


def test_a_model_s_output_moves_by_the_rounding_and_comes_back_when_set_to_none():
    model = _fused_model()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    exact = _logits(model, ids)
    assert set_base_product_dtype(model, torch.bfloat16) == 7 * model.config.num_hidden_layers
    assert base_product_dtype(model) == torch.bfloat16
    reduced = _logits(model, ids)
    assert 1e-5 < (reduced - exact).abs().max() < 0.1  # rounding, not another model
    torch.testing.assert_close(_logits(model, ids), reduced, rtol=0, atol=0)  # deterministic
    set_base_product_dtype(model, None)
    assert base_product_dtype(model) is None
    torch.testing.assert_close(_logits(model, ids), exact, rtol=0, atol=0)


def test_the_copy_follows_a_swapped_weight():
    model = _fused_model()
    set_base_product_dtype(model, torch.bfloat16)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    original = layer.base_layer.weight.data
    first = base_product_weight(layer)
    assert first.dtype == torch.bfloat16 and torch.equal(first, original.bfloat16())
    assert base_product_weight(layer) is first  # kept, not cast again
    layer.base_layer.weight.data = original * 2  # what a merge for sampling does: another tensor
    assert torch.equal(base_product_weight(layer), (original * 2).bfloat16())
    layer.base_layer.weight.data = original
    assert torch.equal(base_product_weight(layer), original.bfloat16())


def test_the_reference_multiplies_at_the_policy_s_precision():
    """With the adapter disabled the reduced model is its base at the same precision: the same logits as the
    reduced model whose adapter adds nothing (B = 0), so policy and reference differ by the adapter alone."""
    model, zero_b = _fused_model(), _fused_model()
    with torch.no_grad():
        for name, param in zero_b.named_parameters():
            if "lora_B" in name:
                param.zero_()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(2))
    exact_reference = None
    with model.disable_adapter():
        exact_reference = _logits(model, ids)
    for m in (model, zero_b):
        set_base_product_dtype(m, torch.bfloat16)
    with model.disable_adapter():
        reference = _logits(model, ids)
    torch.testing.assert_close(reference, _logits(zero_b, ids), rtol=0, atol=1e-6)
    assert (reference - exact_reference).abs().max() > 1e-5  # premise: the precision shows


def test_merged_sampling_is_the_model_s_own_policy_and_reports_its_log_probs(tiny_model_dir):
    """Sampling merges the adapter (PEFT's fp32 forward), so the tokens are those of the model without the
    option at the same seed; since the trainer's products are rounded, `decode_loop` reports its log-probs."""
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, do_sample=True)
    lora = LoraSettings(rank=4, alpha=8, dropout=0.0)
    results = []
    for dtype in ("model", "bfloat16"):
        torch.manual_seed(0)  # PEFT draws lora_A from the global generator
        loaded = load_policy(str(tiny_model_dir), lora=lora, base_product_dtype=dtype)
        random_lora_b(loaded.policy, seed=0, std=0.3)
        loaded.tokenizer.padding_side = "left"
        torch.manual_seed(5)
        with merged_adapter(loaded.policy):
            results.append(decode_loop(loaded.policy, loaded.tokenizer, ["ab", "abc d"], 2, settings))
    plain, reduced = results
    assert plain.sampler_logprobs is None and reduced.sampler_logprobs is not None
    assert torch.equal(plain.input_ids, reduced.input_ids)
    assert (reduced.sampler_logprobs[reduced.loss_mask.bool()] < 0).all()


def test_load_policy_refuses_it_without_a_fused_adapter(tiny_model_dir):
    with pytest.raises(ValueError, match="full fine-tuning"):
        load_policy(str(tiny_model_dir), base_product_dtype="bfloat16")
    with pytest.raises(ValueError, match="fused_lora=false"):
        load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8, dropout=0.0), fused_lora=False,
                    base_product_dtype="bfloat16")


def test_training_with_bf16_base_products_logs_the_sampler_gap_and_keeps_its_ratio_at_one(tiny_model_dir, tmp_path):
    """One epoch: the first (only) epoch's ratio is exactly 1 (old log-probs are the trainer's own forward);
    the fp32 sampler's log-probs are reported, so the gap to the rounded trainer is logged and weighed out."""
    from rlvr.config import load_config
    from rlvr.training.rl import train
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "model.base_product_dtype": "bfloat16", "algorithm.ppo_epochs": 1, "train.iterations": 2,
        "train.eval_size": 0, "algorithm.kl_coef": 0.0})))
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(records) == 2
    for record in records:
        assert 1e-6 < record["rollout/logprob_abs_diff_mean"] < 0.05
        assert record["rollout/is_weight_mean"] == pytest.approx(1.0, abs=0.05)
        assert record["ratio/first_epoch_max_dev"] < 1e-6


def test_new_base_weights_written_in_place_are_copied_again():
    """A base weight overwritten in place (a load into the same tensor) bumps its version: the copy follows."""
    model = _fused_model()
    set_base_product_dtype(model, torch.bfloat16)
    layer = model.base_model.model.model.layers[1].mlp.down_proj
    first = base_product_weight(layer)
    with torch.no_grad():
        layer.base_layer.weight.mul_(-3.0)
    again = base_product_weight(layer)
    assert again is not first and torch.equal(again, layer.base_layer.weight.bfloat16())


def test_the_whole_model_is_peft_s_forward_on_a_bf16_base_layer(monkeypatch):
    """Independently: PEFT's own forward on base layers that multiply in bf16 by plain autograd (input cast
    to bf16, product, cast back) gives the fused reduced model's logits and every adapter gradient."""
    fused, reference = _fused_model(), _fused_model()
    set_base_product_dtype(fused, torch.bfloat16)
    for module in reference.modules():
        if "forward" in vars(module) and hasattr(module, "lora_A"):
            del module.forward  # PEFT's own forward again
            base = module.base_layer
            base.forward = (lambda b: lambda x: F.linear(x.bfloat16(), b.weight.bfloat16()).float()
                            + (0 if b.bias is None else b.bias))(base)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(4))
    grads = []
    for model in (fused, reference):
        logits = model(input_ids=ids).logits  # [2, 9, V]
        params = [p for p in model.parameters() if p.requires_grad]
        grads.append((logits.detach(), torch.autograd.grad(torch.log_softmax(logits, -1)[..., 7].sum(), params)))
    (ours, our_grads), (theirs, their_grads) = grads
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    # The gradients pass through a bf16 rounding in every layer on their way down: where the fp32 sums
    # upstream differ in the last bit (autograd adds q, k and v's input gradients in its own order, and fp32
    # products block by the thread count), one rounding can flip, which shows as up to bf16's resolution
    # (2^-8 relative) in the lower layers. The exact per-layer formula is
    # test_the_base_product_rounds_its_input_and_weight_and_nothing_else.
    for mine, other in zip(our_grads, their_grads):
        torch.testing.assert_close(mine, other, rtol=1e-4, atol=2e-3 * other.abs().max().item() + 1e-5)
    # Power: the same model in fp32 products differs from both by far more than the tolerance.
    set_base_product_dtype(fused, None)
    assert (fused(input_ids=ids).logits.detach() - theirs).abs().max() > 1e-3


def test_the_kl_to_the_reference_starts_at_zero(tiny_model_dir, tmp_path):
    """PEFT starts B at 0, so at the first update the policy is its reference: with the reference at the same
    precision the KL term is exactly 0 there (an fp32 reference would show the rounding as KL)."""
    from rlvr.config import load_config
    from rlvr.training.rl import train
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "model.base_product_dtype": "bfloat16", "algorithm.ppo_epochs": 1, "train.iterations": 1,
        "train.eval_size": 0, "algorithm.kl_coef": 0.04})))
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["kl"] == 0.0


def test_several_epochs_are_refused_and_one_is_taken():
    from rlvr.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="needs algorithm.ppo_epochs=1"):
        load_config(None, ["model.base_product_dtype=bfloat16", "algorithm.name=dapo"])
    config = load_config(None, ["model.base_product_dtype=bfloat16", "algorithm.name=rloo"])  # one epoch
    assert config.model.base_product_dtype == "bfloat16" and config.algorithm.ppo_epochs == 1
