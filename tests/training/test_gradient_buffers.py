"""Gradient buffers allocated before the first forward (`rlvr.training.gradient_buffers`): the same
gradients as autograd's own, `None` kept for parameters no backward reached (also when a reached one's
gradient is exactly 0), and in `update_policy` allocated before its first forward, accumulated into in
place, and the same optimizer step as without them."""

from __future__ import annotations

import torch

import rlvr.training.update as update_module
from rlvr.models import LoraSettings, load_policy, trainable_parameters
from rlvr.models.value_model import build_value_model
from rlvr.training.gradient_buffers import GradientBuffers
from rlvr.training.optim import make_scheduler
from tests.training.test_microbatching import _batch, _config


def _params():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(3, 4, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(4)]


def _backward(params, times=2):
    """Two backwards reaching params 0 and 1 (1 with an exactly zero gradient); 2 and 3 never."""
    for step in range(times):
        ((params[0] * (step + 1.5)).square().sum() + (params[1] * 0.0).sum()).backward()


def test_the_gradients_are_autograd_s_and_unreached_parameters_keep_none():
    plain, buffered = _params(), _params()
    _backward(plain)
    buffers = GradientBuffers(buffered)
    buffers.allocate()
    assert all(p.grad is not None and not p.grad.any() for p in buffered)  # zeros, before any backward
    _backward(buffered)
    buffers.drop_unreached()
    assert torch.equal(buffered[0].grad, plain[0].grad) and bool(plain[0].grad.abs().min() > 0)
    assert plain[1].grad is not None and not plain[1].grad.any()
    assert buffered[1].grad is not None and not buffered[1].grad.any()  # reached with 0: kept, as autograd keeps it
    assert [p.grad for p in plain[2:]] == [None, None] and [p.grad for p in buffered[2:]] == [None, None]
    # A second step starts counting afresh: param 0 is not reached this time.
    for p in buffered:
        p.grad = None
    buffers.allocate()
    (buffered[1] * 2).sum().backward()
    buffers.drop_unreached()
    assert buffered[0].grad is None and torch.equal(buffered[1].grad, torch.full((3, 4), 2.0, dtype=torch.float64))
    buffers.close()
    buffers.allocate()
    buffered[1].grad = None
    (buffered[1] * 2).sum().backward()
    buffers.drop_unreached()  # closed: no hook counts any more, so every gradient is dropped
    assert all(p.grad is None for p in buffered)


def test_update_allocates_before_its_first_forward_and_a_warmup_leaves_the_policy(tiny_model_dir, monkeypatch):
    """PPO's value warm-up reaches the value head only: with weight decay, a zero gradient left on the policy's
    adapter would decay its A matrices."""
    config = _config(tiny_model_dir, "ppo", **{"algorithm.ppo_epochs": 1})
    loaded = load_policy(str(tiny_model_dir), dtype="float64", lora=LoraSettings(rank=4, alpha=8))
    value_model = build_value_model("shared", loaded)
    batch = _batch()
    column = torch.arange(batch.completion_mask.shape[1], dtype=torch.float64) / 8  # [L-1]
    batch = batch.replace(advantages=(batch.advantages[:, None] + column) * batch.completion_mask)
    policy_params = trainable_parameters(loaded.policy)
    params = policy_params + value_model.parameters()
    at_first_forward = []
    score = update_module.score_minibatch

    def recording(*args, **kwargs):
        at_first_forward.append(all(p.grad is not None for p in params))
        return score(*args, **kwargs)

    monkeypatch.setattr(update_module, "score_minibatch", recording)
    before = [p.detach().clone() for p in policy_params]
    head_before = value_model.head.weight.detach().clone()
    assert any(bool(p.any()) for p in before)  # the A matrices are not 0: decay would move them
    optimizer = torch.optim.AdamW(params, lr=0.05, weight_decay=0.5)
    update_module.update_policy(loaded.policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config,
                                params, value_model=value_model, value_warmup=True)
    assert at_first_forward and at_first_forward[0]
    assert all(torch.equal(p, b) for p, b in zip(policy_params, before))
    assert not torch.equal(value_model.head.weight, head_before)
    assert all(p.grad is None for p in params)
    assert all(not p._post_accumulate_grad_hooks for p in params)  # the hooks are removed


def _grpo_update(model_dir, extra_params=(), monkeypatch=None, on_step=None):
    """One GRPO update of a fresh LoRA policy (B = 0, so every A's gradient is exactly 0) with AdamW and
    weight decay -> the trainable weights after it."""
    config = _config(model_dir, "grpo", **{"algorithm.ppo_epochs": 1})
    torch.manual_seed(0)
    loaded = load_policy(str(model_dir), dtype="float64", lora=LoraSettings(rank=4, alpha=8))
    batch = _batch().replace(old_values=None, returns=None)
    params = trainable_parameters(loaded.policy) + list(extra_params)
    optimizer = torch.optim.AdamW(params, lr=0.05, weight_decay=0.5)
    if on_step is not None:
        optimizer.register_step_pre_hook(lambda *args: on_step(params))
    update_module.update_policy(loaded.policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config,
                                params)
    return [p.detach().clone() for p in params]


def test_the_update_with_buffers_is_the_update_without(tiny_model_dir, monkeypatch):
    """A's gradients are exactly 0 at B = 0, yet reached: AdamW decays A as it would without buffers."""
    with_buffers = _grpo_update(tiny_model_dir)
    with monkeypatch.context() as patch:
        patch.setattr(GradientBuffers, "allocate", lambda self: None)
        without = _grpo_update(tiny_model_dir)
    assert len(with_buffers) == len(without) > 0
    assert all(torch.equal(a, b) for a, b in zip(with_buffers, without))
    torch.manual_seed(0)
    fresh = trainable_parameters(load_policy(str(tiny_model_dir), dtype="float64",
                                             lora=LoraSettings(rank=4, alpha=8)).policy)
    moved_a = [not torch.equal(a, f) for a, f in zip(with_buffers, fresh) if f.any()]  # the A matrices
    assert moved_a and all(moved_a)  # decayed: a zero gradient dropped as "unreached" would leave them


def test_a_parameter_outside_the_loss_is_not_stepped(tiny_model_dir):
    outside = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    after = _grpo_update(tiny_model_dir, extra_params=[outside])
    assert torch.equal(after[-1], torch.ones(3, dtype=torch.float64))  # no weight decay on a None gradient
    assert outside.grad is None


def test_the_backward_accumulates_into_the_buffers_made_before_the_first_forward(tiny_model_dir, monkeypatch):
    made = {}
    score = update_module.score_minibatch

    def recording(*args, **kwargs):
        if not made:
            made.update({id(p): p.grad for p in args[0].parameters() if p.requires_grad})
        return score(*args, **kwargs)

    monkeypatch.setattr(update_module, "score_minibatch", recording)
    at_step = []
    _grpo_update(tiny_model_dir, on_step=lambda params: at_step.extend((id(p), p.grad) for p in params))
    assert made and all(grad is not None for grad in made.values())
    assert at_step and all(grad is made[key] for key, grad in at_step)  # the same tensors, filled in place
    assert any(bool(grad.any()) for _, grad in at_step)  # and filled: the B matrices' gradients are not 0
