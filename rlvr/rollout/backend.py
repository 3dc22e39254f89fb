"""The rollout backend interface: set up once, sync before sampling, generate, close.

A backend turns rendered prompts into prompt-major groups of completions (`Generation`). Its
life cycle is explicit, so the callers never merge adapters or copy weights themselves:

    backend = ROLLOUT_BACKENDS.get(name)(policy, tokenizer, merge_lora=True)   # set-up
    with backend.sync():                     # sample from the policy's weights as they are now
        generation = backend.generate(prompts, group_size, settings)
    backend.close()                          # release what set-up took

The built-in backends (`decode_loop`, `hf_generate`) sample with the training model itself
(`InProcessBackend`): set-up keeps a reference to it, `sync` merges the LoRA adapter into the
weights for the block (restored bit for bit on exit) or, under FSDP, gathers the sharded layers
once for the block, and `close` has nothing to release. A backend that samples in another
engine (vLLM, say) is one new file: set-up starts the engine on the model's weights, `sync`
copies the policy's current weights into it, `generate` calls it, `close` shuts it down.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Callable, ContextManager, Iterator

from rlvr.models.merge import merged_adapter
from rlvr.registry import Registry
from rlvr.rollout.base import Generation, SamplingSettings

# name -> backend class, called as cls(policy, tokenizer, merge_lora=...).
ROLLOUT_BACKENDS: Registry[type] = Registry("rollout backend")


class RolloutBackend(abc.ABC):
    """Samples completions from a policy. Subclasses register in `ROLLOUT_BACKENDS`."""

    def __init__(self, policy, tokenizer, *, merge_lora: bool = True) -> None:
        """Set-up: what the backend needs before its first `sync`."""
        self.policy = policy
        self.tokenizer = tokenizer
        self.merge_lora = merge_lora

    @abc.abstractmethod
    def sync(self) -> ContextManager[None]:
        """A block in which `generate` samples from the policy's current weights; nesting is allowed."""

    @abc.abstractmethod
    def generate(self, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
        """`group_size` completions for each rendered prompt, prompt-major. Call inside `sync()`."""

    def close(self) -> None:
        """Release what set-up took (nothing for in-process backends)."""

    def __enter__(self) -> "RolloutBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InProcessBackend(RolloutBackend):
    """Samples with the training model itself through `sample_fn(model, tokenizer, prompts, G, settings)`."""

    sample_fn: Callable[..., Generation]

    def __init__(self, policy, tokenizer, *, merge_lora: bool = True) -> None:
        super().__init__(policy, tokenizer, merge_lora=merge_lora)
        self._sync_depth = 0

    @contextlib.contextmanager
    def sync(self) -> Iterator[None]:
        """Adapter merged (or FSDP layers gathered) once for the outermost block; inner blocks reuse it."""
        if self._sync_depth:
            self._sync_depth += 1
            try:
                yield
            finally:
                self._sync_depth -= 1
            return
        with merged_adapter(self.policy, self.merge_lora):
            self._sync_depth = 1
            try:
                yield
            finally:
                self._sync_depth = 0

    def generate(self, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
        if not self._sync_depth:
            raise RuntimeError(f"{type(self).__name__}.generate called outside `with backend.sync():`; "
                               "sync first, so the sampled policy is the current one")
        return type(self).sample_fn(self.policy, self.tokenizer, prompts, group_size, settings)
