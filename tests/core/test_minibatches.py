"""Tests for RolloutBatch and iter_minibatches: every field is sliced by the same permutation."""

from __future__ import annotations

import pytest
import torch

from rlvr.core import RolloutBatch, iter_minibatches

NUM_SAMPLES, SEQ_LEN = 10, 6


def _fingerprinted_batch() -> RolloutBatch:
    """Every field of sample i encodes i, in a different way per field."""
    index = torch.arange(NUM_SAMPLES)
    bits = (index[:, None] >> torch.arange(SEQ_LEN)) & 1  # [N, L] binary digits of i
    return RolloutBatch(
        input_ids=100 * index[:, None] + torch.arange(SEQ_LEN),
        attention_mask=bits.long(),
        prompt_len=2,
        completion_mask=bits[:, : SEQ_LEN - 1].float(),
        old_logprobs=-index[:, None].double() - torch.zeros(SEQ_LEN - 1, dtype=torch.float64),
        ref_logprobs=-2.0 * index[:, None].double() - torch.zeros(SEQ_LEN - 1, dtype=torch.float64),
        rewards=index.float() / 10,
        advantages=index.float() * 3,
        group_ids=index // 2,
        task_names=[f"task{i}" for i in range(NUM_SAMPLES)],
        completion_texts=[f"text{i}" for i in range(NUM_SAMPLES)],
        old_values=3.0 * index[:, None].double() + torch.zeros(SEQ_LEN - 1, dtype=torch.float64),
        returns=-4.0 * index[:, None].double() + torch.zeros(SEQ_LEN - 1, dtype=torch.float64),
    )


def _decode(minibatch: RolloutBatch) -> dict[str, list[int]]:
    """Recover the sample index from every field independently."""
    powers = 2 ** torch.arange(SEQ_LEN)
    return {
        "input_ids": (minibatch.input_ids[:, 0] // 100).tolist(),
        "attention_mask": (minibatch.attention_mask * powers).sum(-1).tolist(),
        "completion_mask": (minibatch.completion_mask * powers[:-1]).sum(-1).long().tolist(),
        "old_logprobs": (-minibatch.old_logprobs[:, 0]).long().tolist(),
        "ref_logprobs": (-minibatch.ref_logprobs[:, -1] / 2).long().tolist(),
        "rewards": (minibatch.rewards * 10).round().long().tolist(),
        "advantages": (minibatch.advantages / 3).round().long().tolist(),
        "task_names": [int(name[4:]) for name in minibatch.task_names],
        "completion_texts": [int(text[4:]) for text in minibatch.completion_texts],
        "old_values": (minibatch.old_values[:, 1] / 3).round().long().tolist(),
        "returns": (-minibatch.returns[:, -1] / 4).round().long().tolist(),
    }


def _order(minibatches: list[RolloutBatch], field: str) -> list[int]:
    return [i for mb in minibatches for i in _decode(mb)[field]]


def test_every_tensor_field_of_a_minibatch_describes_the_same_samples():
    generator = torch.Generator().manual_seed(0)
    for minibatch in iter_minibatches(_fingerprinted_batch(), 4, generator=generator):
        decoded = _decode(minibatch)
        reference = decoded["input_ids"]
        for field in ("attention_mask", "completion_mask", "old_logprobs", "ref_logprobs", "rewards", "advantages",
                      "old_values", "returns"):
            assert decoded[field] == reference, field
        assert (minibatch.group_ids == torch.tensor(reference) // 2).all()


def test_list_fields_follow_the_same_permutation():
    generator = torch.Generator().manual_seed(1)
    for minibatch in iter_minibatches(_fingerprinted_batch(), 3, generator=generator):
        decoded = _decode(minibatch)
        assert decoded["task_names"] == decoded["input_ids"] == decoded["completion_texts"]
        assert decoded["rewards"] == decoded["task_names"]


def test_minibatches_partition_the_batch():
    generator = torch.Generator().manual_seed(2)
    minibatches = list(iter_minibatches(_fingerprinted_batch(), 4, generator=generator))
    assert [len(mb) for mb in minibatches] == [4, 4, 2]  # the last partial minibatch is kept
    for field in ("input_ids", "rewards", "task_names"):
        assert sorted(_order(minibatches, field)) == list(range(NUM_SAMPLES))


def test_shuffle_permutes_every_field_and_is_reproducible():
    batch = _fingerprinted_batch()
    first = list(iter_minibatches(batch, 4, generator=torch.Generator().manual_seed(3)))
    again = list(iter_minibatches(batch, 4, generator=torch.Generator().manual_seed(3)))
    other = list(iter_minibatches(batch, 4, generator=torch.Generator().manual_seed(4)))
    order = _order(first, "input_ids")
    assert order != list(range(NUM_SAMPLES))
    for field in ("attention_mask", "old_logprobs", "advantages", "completion_texts"):
        assert _order(first, field) == order, field
        assert _order(again, field) == order, field
    assert _order(other, "input_ids") != order
    in_order = list(iter_minibatches(batch, 4, shuffle=False))
    for field in ("input_ids", "rewards", "old_logprobs"):
        assert _order(in_order, field) == list(range(NUM_SAMPLES))


def test_select_to_and_validation():
    batch = _fingerprinted_batch()
    picked = batch.select([7, 2])
    assert _decode(picked)["advantages"] == [7, 2] and picked.task_names == ["task7", "task2"]
    moved = batch.to("cpu")
    assert moved is not batch and torch.equal(moved.input_ids, batch.input_ids)
    without_optional = batch.replace(old_logprobs=None, ref_logprobs=None, task_names=None, completion_texts=None)
    assert without_optional.select([1]).old_logprobs is None and batch.old_logprobs is not None
    with pytest.raises(ValueError, match="minibatch_size"):
        next(iter_minibatches(batch, 0))
    assert [len(mb) for mb in iter_minibatches(batch, 64)] == [NUM_SAMPLES]
    with pytest.raises(ValueError, match="rewards"):
        batch.replace(rewards=batch.rewards[:3])
    with pytest.raises(ValueError, match="returns"):
        batch.replace(returns=batch.returns[:, :2])
    assert _decode(moved)["returns"] == list(range(NUM_SAMPLES))
    assert batch.replace(advantages=None).select([1]).advantages is None  # before the advantage stage


def test_prompt_len_travels_with_every_minibatch_and_is_checked():
    batch = _fingerprinted_batch().replace(prompt_len=4)
    assert {mb.prompt_len for mb in iter_minibatches(batch, 3, generator=torch.Generator().manual_seed(0))} == {4}
    assert batch.to("cpu").prompt_len == 4 and batch.select([0]).prompt_len == 4
    for bad in (0, SEQ_LEN + 1, 2.0, True):
        with pytest.raises(ValueError, match="prompt_len"):
            batch.replace(prompt_len=bad)


def test_per_token_advantages_are_sliced_like_the_log_probs():
    batch = _fingerprinted_batch()
    per_token = batch.old_logprobs * 5  # [N, L-1]: row i holds -5 i
    token_batch = batch.replace(advantages=per_token)
    picked = token_batch.select([3, 8])
    assert picked.advantages.shape == (2, SEQ_LEN - 1)
    assert picked.advantages[:, 0].tolist() == [-15.0, -40.0]
    with pytest.raises(ValueError, match="advantages"):
        batch.replace(advantages=per_token[:, :2])
