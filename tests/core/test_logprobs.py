"""Tests for per-token log-probs: alignment, precision, chunking, grad mode, temperature, padding."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core import (
    compute_entropy,
    compute_per_token_logprobs,
    compute_per_token_logprobs_and_entropy,
    logprobs_from_logits,
)
from rlvr.compat.cs336 import get_response_log_probs

VOCAB = 64


def _reference_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Naive loop: entry [b, t] = log_softmax(logits[b, t] in fp64)[input_ids[b, t+1]]."""
    batch, seq_len = input_ids.shape
    out = torch.empty(batch, seq_len - 1, dtype=torch.float64)
    for b in range(batch):
        for t in range(seq_len - 1):
            out[b, t] = torch.log_softmax(logits[b, t].double(), dim=-1)[input_ids[b, t + 1]]
    return out


def _random_ids(batch: int, seq_len: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq_len), generator=generator)


def test_off_by_one_detector(repeat_token_model):
    input_ids = torch.arange(8).unsqueeze(0)  # [1, 8]: tokens 0..7, each next token differs
    attention_mask = torch.ones_like(input_ids)
    logprobs = compute_per_token_logprobs(repeat_token_model, input_ids, attention_mask)  # [1, 7]
    # Correct: column t scores token t+1 with logits that bet +20 on token t:
    # log p = 0 - log(e^20 + 63) ~= -20.
    expected = -math.log(math.exp(20.0) + VOCAB - 1)
    assert logprobs.shape == (1, 7)
    assert torch.allclose(logprobs, torch.full_like(logprobs, expected), atol=1e-9)
    # The off-by-one alignment (logits at t scoring token t) would give ~0: clearly different.
    logits = repeat_token_model(input_ids).logits
    shifted = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, :-1, None]).squeeze(-1)
    assert shifted.abs().max() < 1e-6
    assert (logprobs - shifted).abs().min() > 19.0


def test_matches_handwritten_fp64_reference(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    input_ids = _random_ids(3, 9, seed=1)
    attention_mask = torch.ones_like(input_ids)
    logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)  # [3, 8]
    with torch.no_grad():
        logits = model(input_ids).logits  # [3, 9, V]
    expected = _reference_logprobs(logits, input_ids)
    assert logprobs.dtype == torch.float64
    assert torch.allclose(logprobs, expected, atol=1e-10, rtol=0)
    # Scoring the current token instead of the next one is far off on this model.
    wrong = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, :-1, None]).squeeze(-1)
    assert (wrong - expected).abs().max() > 0.5


def test_left_padding_scores_like_unpadded(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    tokens = _random_ids(1, 7, seed=2)  # [1, 7]
    pad = 3
    padded = torch.cat([torch.zeros(1, pad, dtype=torch.long), tokens], dim=1)  # [1, 10]
    padded_mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones_like(tokens)], dim=1)
    unpadded = compute_per_token_logprobs(model, tokens, torch.ones_like(tokens))  # [1, 6]
    left_padded = compute_per_token_logprobs(model, padded, padded_mask)  # [1, 9]
    # Column pad + t of the padded row scores the same token as column t of the unpadded row.
    assert torch.allclose(left_padded[:, pad:], unpadded, atol=1e-10, rtol=0)
    # Without position ids that skip the padding, positions shift and the numbers change.
    with torch.no_grad():
        logits = model(input_ids=padded, attention_mask=padded_mask, use_cache=False).logits
    shifted_positions = _reference_logprobs(logits, padded)[:, pad:]
    assert (shifted_positions - unpadded).abs().max() > 1e-8


def test_position_ids_skip_left_padding(repeat_token_model):
    input_ids = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    compute_per_token_logprobs(repeat_token_model, input_ids, attention_mask)
    call = repeat_token_model.calls[-1]
    # Worked out by hand: positions count real tokens, padding sits at 0.
    assert call["position_ids"].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert call["use_cache"] is False
    assert torch.equal(call["attention_mask"], attention_mask)


def test_chunked_equals_unchunked(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    input_ids = _random_ids(2, 8, seed=3)
    attention_mask = torch.ones_like(input_ids)
    whole = compute_per_token_logprobs(model, input_ids, attention_mask)
    # 1 byte per chunk forces one row per chunk; 3 rows of fp64 (3 * 64 * 8 bytes) leaves a ragged tail.
    for max_chunk_bytes in (1, 3 * VOCAB * 8):
        chunked, entropy = compute_per_token_logprobs_and_entropy(
            model, input_ids, attention_mask, max_chunk_bytes=max_chunk_bytes
        )
        assert torch.allclose(chunked, whole, atol=1e-12, rtol=0)
        _, whole_entropy = compute_per_token_logprobs_and_entropy(model, input_ids, attention_mask)
        assert torch.allclose(entropy, whole_entropy, atol=1e-12, rtol=0)


def test_enable_grad_false_builds_no_graph(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    input_ids = _random_ids(2, 6, seed=4)
    attention_mask = torch.ones_like(input_ids)
    with_grad = compute_per_token_logprobs(model, input_ids, attention_mask)
    without = compute_per_token_logprobs(model, input_ids, attention_mask, enable_grad=False)
    assert with_grad.requires_grad and with_grad.grad_fn is not None
    assert not without.requires_grad and without.grad_fn is None
    assert torch.allclose(without, with_grad.detach(), atol=1e-12, rtol=0)


def test_temperature_divides_logits(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    input_ids = _random_ids(2, 6, seed=5)
    attention_mask = torch.ones_like(input_ids)
    hot = compute_per_token_logprobs(model, input_ids, attention_mask, temperature=0.7)
    with torch.no_grad():
        logits = model(input_ids).logits
    expected = _reference_logprobs(logits / 0.7, input_ids)
    assert torch.allclose(hot, expected, atol=1e-10, rtol=0)
    plain = _reference_logprobs(logits, input_ids)
    assert (hot - plain).abs().max() > 0.1


def test_bf16_model_logprobs_are_upcast_before_softmax(make_tiny_llama):
    model = make_tiny_llama(torch.bfloat16)
    input_ids = _random_ids(2, 8, seed=6)
    attention_mask = torch.ones_like(input_ids)
    logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)
    with torch.no_grad():
        logits = model(input_ids).logits  # bf16 [2, 8, V]
    assert logits.dtype == torch.bfloat16
    expected = _reference_logprobs(logits, input_ids)  # softmax of the bf16 logits in fp64
    assert logprobs.dtype == torch.float32
    assert torch.allclose(logprobs.double(), expected, atol=1e-5, rtol=0)
    # A version that takes the log-softmax in bf16 is visibly less accurate.
    no_upcast = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    assert no_upcast.dtype == torch.bfloat16
    assert (no_upcast.double() - expected).abs().max() > 1e-3


def test_logprobs_from_logits_precision_by_dtype():
    generator = torch.Generator().manual_seed(7)
    logits64 = 8.0 * torch.randn(4, 5, VOCAB, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, VOCAB, (4, 5), generator=generator)
    half = logits64.to(torch.bfloat16)
    exact = torch.log_softmax(half.double(), -1).gather(-1, targets[..., None]).squeeze(-1)
    out = logprobs_from_logits(half, targets, max_chunk_bytes=VOCAB * 4 * 3)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), exact, atol=1e-4, rtol=0)
    no_upcast = torch.log_softmax(half, -1).gather(-1, targets[..., None]).squeeze(-1)
    assert (no_upcast.double() - exact).abs().max() > 1e-2
    # fp64 stays fp64 (promote_types, not a blind .float()).
    out64 = logprobs_from_logits(logits64, targets)
    assert out64.dtype == torch.float64
    assert torch.allclose(out64, torch.log_softmax(logits64, -1).gather(-1, targets[..., None]).squeeze(-1))


def test_entropy_from_the_same_chunks(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    input_ids = _random_ids(2, 6, seed=8)
    attention_mask = torch.ones_like(input_ids)
    logprobs, entropy = compute_per_token_logprobs_and_entropy(model, input_ids, attention_mask)
    with torch.no_grad():
        logits = model(input_ids).logits[:, :-1]  # [2, 5, V]
    probs = torch.softmax(logits, -1)
    expected = -(probs * probs.log()).sum(-1)  # naive -sum p log p
    assert torch.allclose(entropy, expected, atol=1e-10, rtol=0)
    assert not entropy.requires_grad
    assert logprobs.requires_grad
    assert torch.allclose(logprobs, compute_per_token_logprobs(model, input_ids, attention_mask), atol=1e-12)


def test_compute_entropy_closed_forms():
    uniform = torch.zeros(3, 10)
    assert torch.allclose(compute_entropy(uniform), torch.full((3,), math.log(10)), atol=1e-6)
    # Two equal huge logits, the rest -inf: entropy log 2, no overflow and no NaN.
    logits = torch.tensor([[1e4, 1e4, -float("inf"), -float("inf")]])
    assert torch.allclose(compute_entropy(logits), torch.tensor([math.log(2)]), atol=1e-6)
    # One dominant logit: entropy ~0.
    peaked = torch.tensor([[50.0, 0.0, 0.0]])
    assert compute_entropy(peaked).item() == pytest.approx(0.0, abs=1e-18)
    # Matches -sum p log p on ordinary logits.
    generator = torch.Generator().manual_seed(9)
    random_logits = torch.randn(4, 7, generator=generator, dtype=torch.float64)
    probs = torch.softmax(random_logits, -1)
    assert torch.allclose(compute_entropy(random_logits), -(probs * probs.log()).sum(-1), atol=1e-12)


def test_get_response_log_probs(make_tiny_llama):
    model = make_tiny_llama(torch.float64)
    full = _random_ids(2, 7, seed=10)
    input_ids, labels = full[:, :-1], full[:, 1:]
    result = get_response_log_probs(model, input_ids, labels, return_token_entropy=True)
    with torch.no_grad():
        logits = model(input_ids).logits  # [2, 6, V]
    expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
    assert result["log_probs"].shape == (2, 6)
    assert torch.allclose(result["log_probs"], expected, atol=1e-10)
    assert torch.allclose(result["token_entropy"], compute_entropy(logits), atol=1e-10)
    assert "token_entropy" not in get_response_log_probs(model, input_ids, labels)


def test_rejects_bad_arguments(repeat_token_model):
    input_ids = torch.arange(4).unsqueeze(0)
    with pytest.raises(ValueError, match="temperature"):
        compute_per_token_logprobs(repeat_token_model, input_ids, torch.ones_like(input_ids), temperature=0.0)
    with pytest.raises(ValueError, match="attention_mask"):
        compute_per_token_logprobs(repeat_token_model, input_ids, torch.ones(1, 3, dtype=torch.long))
