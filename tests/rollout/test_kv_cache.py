"""The preallocated KV cache and the layer-by-layer decoding step.

`decode_step` on a `PreallocatedKVCache` must give the logits of the model's own full forward
over the whole sequence (no cache at all), for left-padded rows of different lengths, after the
cache has been compacted, and with the LM head on a subset of rows. The cache's bookkeeping
(prompt rows repeated prompt-major, the padding mask, compaction by filling holes) is checked on values
written by hand.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_policy
from rlvr.rollout.decode_step import DecoderWeights, decode_step
from rlvr.rollout.kv_cache import PreallocatedKVCache


def _filled(rows=4, capacity=6, length=3):
    """A 1-layer cache whose entry (layer 0, k/v, row r, head 0, position t, 0) is 100 r + 10 k/v + t."""
    cache = PreallocatedKVCache(1, rows, 1, capacity, 2, torch.float32, torch.device("cpu"))
    zeros = torch.zeros(rows, 1, length, 2)
    cache.write_prompt([zeros], [zeros], torch.ones(rows, length, dtype=torch.long), 1)
    for row in range(rows):
        for kind in (0, 1):
            cache.buffer[0, kind, row, 0, :length, 0] = 100 * row + 10 * kind + torch.arange(length)
    return cache


def test_write_prompt_repeats_each_prompt_for_its_group_and_masks_padding():
    cache = PreallocatedKVCache(2, 6, 1, 5, 1, torch.float32, torch.device("cpu"))
    keys = [torch.tensor([[[[1.0], [2.0]]], [[[3.0], [4.0]]]]) * (layer + 1) for layer in range(2)]  # [B=2, 1, P=2, 1]
    values = [-k for k in keys]
    prompt_mask = torch.tensor([[1, 1], [0, 1]])  # prompt 1 is left-padded
    cache.write_prompt(keys, values, prompt_mask, repeats=3)
    assert cache.length == 2 and cache.padded
    # prompt-major: rows 0-2 are prompt 0, rows 3-5 prompt 1 (not 0, 1, 0, 1, ...)
    assert cache.buffer[1, 0, :, 0, :2, 0].tolist() == [[2, 4]] * 3 + [[6, 8]] * 3
    assert cache.buffer[0, 1, :, 0, :2, 0].tolist() == [[-1, -2]] * 3 + [[-3, -4]] * 3
    mask = cache.attention_mask()  # for the next position: [rows, 1, 1, 3]
    assert mask.shape == (6, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, True]] * 3 + [[False, True, True]] * 3
    unpadded = PreallocatedKVCache(2, 2, 1, 5, 1, torch.float32, torch.device("cpu"))
    unpadded.write_prompt(keys, values, torch.ones(2, 2, dtype=torch.long), repeats=1)
    assert unpadded.attention_mask() is None


def test_append_writes_one_position_and_returns_the_filled_part():
    cache = _filled(rows=2, capacity=4, length=3)
    keys, values = cache.append(0, torch.full((2, 1, 2), 7.0), torch.full((2, 1, 2), 8.0))
    assert keys.shape == (2, 1, 4, 2)
    assert keys[:, 0, :, 0].tolist() == [[0, 1, 2, 7], [100, 101, 102, 7]]
    assert values[1, 0, :, 0].tolist() == [110, 111, 112, 8]
    cache.advance()
    with pytest.raises(RuntimeError, match="full"):
        cache.append(0, torch.zeros(2, 1, 2), torch.zeros(2, 1, 2))


def test_compact_fills_holes_from_the_end_copying_only_moved_rows():
    cache = _filled(rows=4)
    cache.real[3, 0] = False  # row 3 has a padded position
    untouched = cache.buffer[0, :, 1].clone()
    cache.compact([3, 1])  # rows 0 and 2 finished: row 3 moves into slot 0, row 1 stays
    assert cache.rows == 2 and cache.padded
    assert cache.buffer[0, 0, :2, 0, :3, 0].tolist() == [[300, 301, 302], [100, 101, 102]]
    assert cache.buffer[0, 1, :2, 0, :3, 0].tolist() == [[310, 311, 312], [110, 111, 112]]
    assert torch.allclose(cache.buffer[0, :, 1], untouched, rtol=0, atol=0, equal_nan=True)  # unset memory may hold NaN
    assert cache.real[:2, :3].tolist() == [[False, True, True], [True] * 3]
    cache.compact([1])
    assert not cache.padded and cache.buffer[0, 0, 0, 0, :3, 0].tolist() == [100, 101, 102]
    for bad in ([1, 0], [2, 2], [0, 4]):  # a row overwritten before it is read, twice, out of range
        with pytest.raises(ValueError, match="compact"):
            _filled().compact(bad)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_policy(str(tiny_model_dir))


def test_decode_step_equals_the_full_forward(tiny):
    model, tokenizer = tiny.policy, tiny.tokenizer
    prompts = ["say a 1", "say bb 22 long", "c"]
    new_tokens = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [20, 21, 22, 23, 24]])  # [B, S]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    rows, prompt_len, steps = len(prompts), ids.shape[1], new_tokens.shape[1]
    # Independent reference: the model's forward over prompt + new tokens, no cache.
    full_ids = torch.cat([ids, new_tokens], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(new_tokens)], dim=1)
    with torch.no_grad():
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        expected = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits  # [B, L, V]

    weights = DecoderWeights.of(model, prompt_len + steps)
    cache = weights.new_cache(rows, prompt_len + steps)
    with torch.inference_mode():
        prefill = model(input_ids=ids, attention_mask=mask, position_ids=positions[:, :prompt_len], use_cache=True)
        layers = prefill.past_key_values.layers
        cache.write_prompt([layer.keys for layer in layers], [layer.values for layer in layers], mask, 1)
        next_position = positions[:, prompt_len]
        kept = torch.arange(rows)
        for step in range(steps):
            if step == 3:  # row 1 leaves: compact, and keep going with rows 0 and 2
                kept = torch.tensor([0, 2])
                cache.compact(kept.tolist())
                next_position = next_position[kept]
            head_rows = torch.tensor([1]) if step == 2 else None  # the LM head on one row only
            logits = decode_step(weights, cache, new_tokens[kept, step], next_position, head_rows)
            reference = expected[kept, prompt_len + step]
            if head_rows is not None:
                reference = reference[head_rows]
            assert logits.shape == reference.shape
            torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-4)
            next_position = next_position + 1
    # Power: a step that skips the rotary position (position 0 for every row) gives other logits.
    with torch.inference_mode():
        cache.length -= 1
        wrong = decode_step(weights, cache, new_tokens[kept, -1], torch.zeros_like(next_position))
    assert (wrong - expected[kept, -1]).abs().max() > 1e-2
