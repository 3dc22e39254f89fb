"""Gradient buffers allocated before an optimizer step's first forward, not in its first backward.

Autograd creates a parameter's `.grad` when the first backward reaches it, while that backward
still holds the activations. For a LoRA policy those are a few hundred small tensors (SmolLM2:
210 of 36-98 KiB), each below the allocator's mmap threshold and so placed in the heap between
the activations; when the activations are freed they stay, splitting the free space into pieces
that the next microbatch's (differently shaped) activations do not fit, and the heap grows
instead. Allocated as zeros before the first forward they lie together, and accumulating a
gradient into a zero buffer gives the same numbers as assigning it.

A parameter that no backward of the step reached keeps `grad is None`, as without the buffers
(the optimizer skips it, and `Dist.sum_gradients` reads `None` as "not reached"): a hook after
each gradient accumulation records which were reached, and `drop_unreached` clears the others.
FSDP-sharded parameters (DTensors) are left to FSDP.
"""

from __future__ import annotations

import torch


class GradientBuffers:
    """`allocate()` before a step's first forward, `drop_unreached()` after its last backward; `close()` at the end."""

    def __init__(self, params):
        from rlvr.parallel.sharding import is_dtensor

        self.params = [p for p in params if p.requires_grad and not is_dtensor(p)]
        self._reached: set[int] = set()
        self._handles = [p.register_post_accumulate_grad_hook(self._mark) for p in self.params]

    def _mark(self, param: torch.Tensor) -> None:
        self._reached.add(id(param))

    def allocate(self) -> None:
        """Give every parameter without a gradient a zero one; from now on count which a backward reaches."""
        self._reached.clear()
        for param in self.params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)

    def drop_unreached(self) -> None:
        """Set `grad = None` on the parameters no backward reached since `allocate()`."""
        for param in self.params:
            if id(param) not in self._reached:
                param.grad = None

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
