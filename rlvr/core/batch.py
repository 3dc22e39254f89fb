"""The rollout batch handed from generation to the optimizer, and its minibatch iterator.

A `RolloutBatch` holds N sampled sequences (prompt + completion) with everything the loss needs.
All per-sample fields are sliced together by one index, so a minibatch never mixes the
log-probs of one sample with the advantages of another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch


def _take_tensor(tensor: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    return None if tensor is None else tensor[index.to(tensor.device)]


def _take_list(values: list[str] | None, positions: list[int]) -> list[str] | None:
    return None if values is None else [values[i] for i in positions]


def _move(tensor: torch.Tensor | None, device: torch.device | str) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device)


@dataclass
class RolloutBatch:
    """N sampled sequences, prompt left-padded to width `prompt_len`, completion right-padded after it.

    input_ids [N, L] long, attention_mask [N, L] long, prompt_len P (completions start at column
    P), completion_mask [N, L-1] float (column t refers to token t+1, see `build_completion_mask`),
    old_logprobs / ref_logprobs [N, L-1] or None, rewards [N] float, advantages [N] (one per
    sequence) or [N, L-1] (per token, laid out like the log-probs) float, or None until the
    advantage stage has run, group_ids [N] long (which prompt each sample answers), task_names /
    completion_texts: optional lists of N strings, for logging; PPO only: old_values (the value
    model's values at sampling time) and returns (their GAE targets), [N, L-1] or None;
    sampler_logprobs [N, L-1] or None: the rollout engine's own log-probs of the sampled tokens, kept
    apart from old_logprobs (the trainer's) because another engine's numbers differ from them.
    Batches are not changed in place: `replace` makes a new one.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_len: int
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    rewards: torch.Tensor
    advantages: torch.Tensor | None
    group_ids: torch.Tensor
    task_names: list[str] | None = None
    completion_texts: list[str] | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    sampler_logprobs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [N, L], got {tuple(self.input_ids.shape)}")
        num_samples, seq_len = self.input_ids.shape
        if (isinstance(self.prompt_len, bool) or not isinstance(self.prompt_len, int)
                or not 1 <= self.prompt_len <= seq_len):
            raise ValueError(f"prompt_len must be an int in [1, L={seq_len}], got {self.prompt_len!r}")
        expected = {
            "attention_mask": (num_samples, seq_len),
            "completion_mask": (num_samples, seq_len - 1),
            "old_logprobs": (num_samples, seq_len - 1),
            "ref_logprobs": (num_samples, seq_len - 1),
            "rewards": (num_samples,),
            "group_ids": (num_samples,),
            "old_values": (num_samples, seq_len - 1),
            "returns": (num_samples, seq_len - 1),
            "sampler_logprobs": (num_samples, seq_len - 1),
        }
        for name, shape in expected.items():
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
        per_token = (num_samples, seq_len - 1)
        if self.advantages is not None and tuple(self.advantages.shape) not in ((num_samples,), per_token):
            raise ValueError(f"advantages must have shape ({num_samples},) or ({num_samples}, {seq_len - 1}), "
                             f"got {tuple(self.advantages.shape)}")
        for name in ("task_names", "completion_texts"):
            value = getattr(self, name)
            if value is not None and len(value) != num_samples:
                raise ValueError(f"{name} has {len(value)} entries for {num_samples} samples")

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def replace(self, **changes) -> RolloutBatch:
        """A new batch with `changes` applied (validated like a fresh one); this one is left as it is."""
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> RolloutBatch:
        """A new batch with every tensor on `device` (lists are copied)."""
        return RolloutBatch(
            input_ids=_move(self.input_ids, device),
            attention_mask=_move(self.attention_mask, device),
            prompt_len=self.prompt_len,
            completion_mask=_move(self.completion_mask, device),
            old_logprobs=_move(self.old_logprobs, device),
            ref_logprobs=_move(self.ref_logprobs, device),
            rewards=_move(self.rewards, device),
            advantages=_move(self.advantages, device),
            group_ids=_move(self.group_ids, device),
            task_names=None if self.task_names is None else list(self.task_names),
            completion_texts=None if self.completion_texts is None else list(self.completion_texts),
            old_values=_move(self.old_values, device),
            returns=_move(self.returns, device),
            sampler_logprobs=_move(self.sampler_logprobs, device),
        )

    def select(self, indices: torch.Tensor | Sequence[int]) -> RolloutBatch:
        """The samples at `indices` (in that order), every field sliced by the same index."""
        index = torch.as_tensor(indices, dtype=torch.long).reshape(-1)  # [n]
        positions = index.tolist()
        return RolloutBatch(
            input_ids=_take_tensor(self.input_ids, index),
            attention_mask=_take_tensor(self.attention_mask, index),
            prompt_len=self.prompt_len,
            completion_mask=_take_tensor(self.completion_mask, index),
            old_logprobs=_take_tensor(self.old_logprobs, index),
            ref_logprobs=_take_tensor(self.ref_logprobs, index),
            rewards=_take_tensor(self.rewards, index),
            advantages=_take_tensor(self.advantages, index),
            group_ids=_take_tensor(self.group_ids, index),
            task_names=_take_list(self.task_names, positions),
            completion_texts=_take_list(self.completion_texts, positions),
            old_values=_take_tensor(self.old_values, index),
            returns=_take_tensor(self.returns, index),
            sampler_logprobs=_take_tensor(self.sampler_logprobs, index),
        )


def iter_minibatches(
    batch: RolloutBatch,
    minibatch_size: int,
    shuffle: bool = True,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Iterator[RolloutBatch]:
    """Split `batch` into minibatches of `minibatch_size` samples (the last one may be smaller).

    One permutation (from `generator`, so a seeded generator reproduces it) orders every field.
    Each minibatch is moved to `device` when given.
    """
    if isinstance(minibatch_size, bool) or not isinstance(minibatch_size, int) or minibatch_size < 1:
        raise ValueError(f"minibatch_size must be a positive int, got {minibatch_size!r}")
    num_samples = len(batch)
    if shuffle:
        order = torch.randperm(num_samples, generator=generator)  # [N]
    else:
        order = torch.arange(num_samples)  # [N]
    for start in range(0, num_samples, minibatch_size):
        index = order[start : start + minibatch_size]  # [n]
        minibatch = batch.select(index)
        yield minibatch if device is None else minibatch.to(device)
