"""The copies decoding makes of the weights (oneDNN-packed, cast to another dtype), held in a `WeightCopies`:
reused while the source is unchanged, made again after an in-place change or for another tensor, and held by
the decode_loop backend for one sync block only, so a block after an update samples the updated weights."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from rlvr.models import LoraSettings, load_policy
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, decode_loop
from rlvr.rollout.weight_copies import WeightCopies, copy_of
from rlvr.testing import build_tiny_model, build_tiny_tokenizer, random_lora_b

PROMPTS = ["say a 1", "say bb 22 long prompt here", "c"]
GREEDY = SamplingSettings(max_new_tokens=8, do_sample=False)


def test_a_copy_is_reused_while_its_source_is_unchanged_and_made_again_after_a_change():
    copies = WeightCopies()
    weight = torch.nn.Parameter(torch.ones(3, 2))
    source = weight.detach()  # as `DecoderWeights` reads it: shares the parameter's version counter
    first = copies.get(source, "double", lambda w: 2 * w)
    assert copies.get(weight.detach(), "double", lambda w: 2 * w) is first and (copies.made, copies.reused) == (1, 1)
    assert copies.get(source, "negated", lambda w: -w) is not first  # another kind: another copy
    with torch.no_grad():
        weight.add_(1)  # an optimizer step: in place, through the parameter
    # Power: a store that ignored the version would hand back the stale 2 x ones.
    assert torch.equal(copies.get(weight.detach(), "double", lambda w: 2 * w), torch.full((3, 2), 4.0))
    other = torch.ones(3, 2)  # same shape and values, another tensor
    assert copies.get(other, "double", lambda w: 2 * w) is not first
    assert (copies.made, copies.reused, len(copies)) == (4, 1, 4)
    copies.clear()
    assert len(copies) == 0 and copies.get(source, "negated", lambda w: -w) is not None and copies.made == 5


def test_a_held_source_stays_alive_so_its_address_cannot_be_taken_by_another_tensor():
    copies = WeightCopies()
    source = torch.randn(64, 64)
    alive = weakref.ref(source)
    copies.get(source, "copy", torch.clone)
    del source
    gc.collect()
    assert alive() is not None  # freed, its storage could be reused by a new tensor with the same key
    copies.clear()
    gc.collect()
    assert alive() is None


def test_a_source_without_a_version_counter_is_copied_every_time():
    copies = WeightCopies()
    with torch.inference_mode():
        source = torch.randn(4, 4)  # an inference tensor: in-place changes are not counted
    assert copies.get(source, "copy", torch.clone) is not copies.get(source, "copy", torch.clone)
    assert (copies.made, copies.reused, len(copies)) == (2, 0, 0)
    assert torch.equal(copy_of(None, source, "copy", lambda w: w + 1), source + 1)


@pytest.mark.parametrize("dtype", ["model", "bfloat16"])
def test_decode_loop_reuses_the_copies_and_samples_a_changed_weight(dtype):
    model, tokenizer = build_tiny_model(seed=5).eval(), build_tiny_tokenizer()
    copies = WeightCopies()
    first = decode_loop(model, tokenizer, PROMPTS, 2, GREEDY, dtype=dtype, weight_copies=copies)
    made = copies.made
    assert made > 0 and len(copies) == made  # packed (fp32) or cast (bf16) copies, all held
    again = decode_loop(model, tokenizer, PROMPTS, 2, GREEDY, dtype=dtype, weight_copies=copies)
    assert copies.made == made and copies.reused >= made
    assert again.completion_texts == first.completion_texts
    assert first.completion_texts == decode_loop(model, tokenizer, PROMPTS, 2, GREEDY, dtype=dtype).completion_texts
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head.mul_(-1)  # every row's argmax moves
    changed = decode_loop(model, tokenizer, PROMPTS, 2, GREEDY, dtype=dtype, weight_copies=copies)
    fresh = decode_loop(model, tokenizer, PROMPTS, 2, GREEDY, dtype=dtype)
    assert copies.made > made
    assert changed.completion_texts == fresh.completion_texts
    assert changed.completion_texts != first.completion_texts  # power: the stale head would repeat `first`


def test_the_backend_holds_the_copies_for_one_sync_block(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    random_lora_b(loaded.policy, seed=1, std=0.5)
    backend = ROLLOUT_BACKENDS.get("decode_loop")(loaded.policy, loaded.tokenizer)
    with backend.sync():
        first = backend.generate(PROMPTS, 2, GREEDY)
        made = backend.weight_copies.made
        assert made > 0
        assert backend.generate(PROMPTS, 2, GREEDY).completion_texts == first.completion_texts
        assert backend.weight_copies.made == made  # the second call packs nothing
    assert len(backend.weight_copies) == 0  # emptied with the block: nothing held during the update
    random_lora_b(loaded.policy, seed=2, std=2.0)  # an update of the adapter
    with backend.sync():
        after = backend.generate(PROMPTS, 2, GREEDY)
        assert backend.weight_copies.made == 2 * made  # emptied by the last block: packed again
    with backend.sync():
        assert backend.generate(PROMPTS, 2, GREEDY).completion_texts == after.completion_texts
    assert after.completion_texts != first.completion_texts  # power: the update changes what is sampled
