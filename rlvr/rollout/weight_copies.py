"""Copies made from a model's weights for decoding, made once and reused while the weights stay as they are.

`decode_loop` reads the policy's weights at every call (`DecoderWeights.of`), and its steps multiply
with copies made from them: oneDNN-packed weights for few-row products (`decode_step.pack_weight`)
and, when the steps run in another dtype than the model's, a copy in that dtype. Made afresh at
every call they cost a pass over the weights each time (about 0.5 s for SmolLM2's packing on 2
cores at 67 GFLOPS), and a rollout phase makes many calls: every chunk of an evaluation, every turn
of an episode, every round of dynamic sampling. A `WeightCopies` holds them for a block in which
the weights do not change: the in-process backends' outermost `sync()` block, which empties it when
it closes, as it does the turn cache (`rlvr/rollout/turn_cache.py`).

A copy is keyed on its kind and on what it was made from: the source tensor's storage address,
offset, shape, strides, dtype and version counter. The store keeps each source alive, so no other
tensor can take its address while the entry exists, and an in-place change made through the
parameter (or any tensor sharing its version counter, as `detach()` does) bumps the version, so a
changed weight misses and is copied again. A write through `.data`, which counts no version, is
not seen: inside a sync block the weights are fixed, and that is the block's contract.
"""

from __future__ import annotations

from typing import Callable, Optional, TypeVar

import torch

T = TypeVar("T")


def source_key(tensor: torch.Tensor) -> Optional[tuple]:
    """What identifies `tensor`'s contents while it is alive and unchanged, or None when it has no version
    counter (an inference tensor) and so cannot be keyed."""
    try:
        version = tensor._version
    except RuntimeError:  # inference tensors track no versions
        return None
    return (tensor.device.type, tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
            tensor.dtype, version)


class WeightCopies:
    """kind x source tensor -> a copy made from it (see the module docstring). `made` and `reused` count calls."""

    def __init__(self) -> None:
        self._copies: dict[tuple, tuple[torch.Tensor, object]] = {}  # key -> (source, kept alive; the copy)
        self.made = 0
        self.reused = 0

    def get(self, source: torch.Tensor, kind: str, make: Callable[[torch.Tensor], T]) -> T:
        """The copy of `kind` made from `source`: the one held when `source` is unchanged since, else `make(source)`
        (held for later calls; a source that cannot be keyed is copied every time)."""
        key = source_key(source)
        if key is None:
            self.made += 1
            return make(source)
        key = (kind, *key)
        held = self._copies.get(key)
        if held is not None:
            self.reused += 1
            return held[1]
        copy = make(source)
        self._copies[key] = (source, copy)
        self.made += 1
        return copy

    def clear(self) -> None:
        self._copies.clear()

    def __len__(self) -> int:
        return len(self._copies)


def copy_of(copies: Optional[WeightCopies], source: torch.Tensor, kind: str, make: Callable[[torch.Tensor], T]) -> T:
    """`copies.get(source, kind, make)`, or `make(source)` without a store."""
    return make(source) if copies is None else copies.get(source, kind, make)
