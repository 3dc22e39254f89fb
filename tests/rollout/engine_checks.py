"""Checks both vLLM backends' tests run on a backend that samples elsewhere (an engine, a server).

Each compares the backend with `decode_loop` on the same policy: greedy completions of text prompts
(token for token, the stop layout included, and the sampler's log-probs against the trainer's), and
completions of prompts given as token ids. Not a test module: the vLLM test files call these.
"""

from __future__ import annotations

import torch

from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import SamplingSettings, decode_loop
from rlvr.rollout.generation import Generation, left_pad_ids
from rlvr.rollout.decode_loop import decode_loop_from_ids
from rlvr.testing import build_tiny_model, build_tiny_tokenizer

PROMPTS = ["say a 1", "b", "say cc 22"]
ID_PROMPTS = [[33, 15, 39], [4, 17, 40, 41, 42], [20]]


def save_head32_model(folder):
    """rlvr's tiny model and tokenizer saved in `folder`, 128 wide with 4 heads: vLLM's CPU attention takes
    head sizes that are multiples of 32 (the default tiny model's are 8). -> folder"""
    build_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return folder


def assert_greedy_like_decode_loop(loaded, backend, settings: SamplingSettings, group_size: int = 2) -> Generation:
    """`backend`'s greedy completions of PROMPTS equal decode_loop's and carry the trainer's log-probs (to 1e-4)."""
    with backend.sync():
        generation = backend.generate(PROMPTS, group_size, settings)
    expected = decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, group_size, settings)
    assert generation.completion_texts == expected.completion_texts
    assert torch.equal(generation.input_ids, expected.input_ids)
    assert torch.equal(generation.attention_mask, expected.attention_mask)
    assert torch.equal(generation.completion_lengths, expected.completion_lengths)
    assert torch.equal(generation.truncated, expected.truncated)
    assert torch.equal(generation.loss_mask, expected.loss_mask)
    assert not bool(expected.truncated.all())  # a stop string or EOS ended some rows: the stop layout is compared
    with torch.no_grad():
        logprobs, _ = compute_completion_logprobs(loaded.policy, generation.input_ids, generation.attention_mask,
                                                  generation.prompt_len, enable_grad=False, with_entropy=False)
    trainer = logprobs[:, generation.prompt_len - 1:] * generation.loss_mask  # [N, C]
    assert (generation.sampler_logprobs - trainer).abs().max() < 1e-4
    assert float(generation.sampler_logprobs.abs().sum()) > 1.0  # real log-probs, not zeros
    return generation


def assert_ids_like_decode_loop(loaded, backend) -> None:
    """`backend.generate_from_ids` continues token-id prompts (nothing re-tokenized) as decode_loop does."""
    settings = SamplingSettings(max_new_tokens=6, do_sample=False, stop_strings=("b",))
    with backend.sync():
        generation = backend.generate_from_ids(ID_PROMPTS, settings)
    ids, mask = left_pad_ids(ID_PROMPTS, loaded.tokenizer.pad_token_id)
    expected = decode_loop_from_ids(loaded.policy, loaded.tokenizer, ids, mask, settings)
    assert torch.equal(generation.input_ids, expected.input_ids)
    assert torch.equal(generation.completion_lengths, expected.completion_lengths)
