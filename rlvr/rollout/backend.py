"""The rollout backend contract: build from the loaded model, sync, generate, close.

A backend turns rendered prompts into prompt-major groups of completions (`Generation`). The
trainer talks to every engine through these four steps and nothing else:

    backend_class = ROLLOUT_BACKENDS.get(rollout.backend)
    backend_class.check_options(rollout.backend_options)   # at config load, before any model loads
    backend = backend_class.build(loaded, rollout)          # a LoadedModel and the config's rollout section
    with backend.sync():       # from here the engine samples the policy's weights as they are now
        generation = backend.generate(prompts, group_size, settings)
    backend.close()            # release what build took (an engine, its memory)

- `OPTIONS` names the keys `rollout.backend_options` may hold (key -> help); `check_options`
  refuses any other key with the list of valid ones, so a typo fails at config load. A backend
  that can sync only a LoRA adapter says why in `requires_lora`; the config then refuses
  `model.lora=false` at load with that reason. A backend whose `sampler_logprobs` are filled whenever
  it samples another policy than the trainer's sets `reports_sampler_logprobs`; a config that makes
  the trainer differ from the sampler (`model.base_product_dtype`) is refused with one that does not.
  `product_dtypes(options)` names the dtypes the backend multiplies in besides `model.dtype` (keyed by
  the config key that asks for each), so a run can be warned where this CPU multiplies them slowly.
- `sync()` is entered by the loop before every rollout (training rounds, evaluation, `rlvr
  check`); blocks may nest, and only the outermost one syncs. For the in-process backends (`decode_loop`, `hf_generate`,
  `InProcessBackend`) the engine is the training model itself, so there are no weights to push:
  the block only merges a LoRA adapter into the weights for speed (restored bit for bit on exit)
  or, under FSDP, gathers the sharded layers once. An engine of its own (`vllm`) copies the
  policy's current weights into itself when the block is entered; a server (`vllm_server`) is sent
  the current LoRA adapter.
- `generate_from_ids(prompt_ids, settings)` continues prompts given as token ids, one completion
  each, without tokenizing anything: the episode driver (`episodes.py`) samples each turn of every
  live episode with it, so the trained tokens are exactly the sampled ones.
- `generate` returns token ids and masks, the texts, lengths and truncation flags, and two
  per-token fields over the completion columns: `loss_mask` [N, C] (1 where the token is the
  policy's own and enters the loss) and `sampler_logprobs` [N, C] (the engine's log-probability
  of each sampled token, or None when it does not report them). The trainer never takes the
  sampler's log-probs for its own: they travel as a separate field (`RolloutBatch.sampler_logprobs`),
  the update logs how far they are from the trainer's (`rollout/logprob_abs_diff_*`,
  `rollout/mismatch_kl`) and, when present, corrects for the gap by importance sampling
  (`rollout.correction`, `rollout.tis_cap`, `rlvr.core.SAMPLER_CORRECTIONS`).

A new backend is one file: a `RolloutBackend` subclass registered with
`@ROLLOUT_BACKENDS.register(name)` that implements `build`, `synced` (what the outermost `sync()`
block does; `sync` itself counts the nesting) and `generate` (and `close` when build took
something), imported in `rlvr/rollout/__init__.py`.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Callable, ClassVar, ContextManager, Iterator, Mapping

from rlvr.models.merge import merged_adapter
from rlvr.registry import Registry, did_you_mean
from rlvr.rollout.generation import Generation, SamplingSettings, fill_token_id, left_pad_ids
from rlvr.rollout.turn_cache import TurnCache
from rlvr.rollout.weight_copies import WeightCopies

# name -> backend class; `cls.build(loaded, rollout)` sets one up.
ROLLOUT_BACKENDS: Registry[type] = Registry("rollout backend")


class RolloutBackend(abc.ABC):
    """Samples completions from a policy. Subclasses register in `ROLLOUT_BACKENDS`."""

    # rollout.backend_options keys this backend accepts -> what each does.
    OPTIONS: ClassVar[dict[str, str]] = {}
    # Non-empty: this backend syncs LoRA adapters only, and this says why; model.lora=false is then
    # refused at config load with it.
    requires_lora: ClassVar[str] = ""
    # True: `Generation.sampler_logprobs` is filled whenever the sampled policy is not exactly the trainer's
    # (another engine, another dtype, or a trainer whose base products run at a reduced precision,
    # `model.base_product_dtype`), so the update can measure and correct the gap; a config that makes the
    # trainer another policy than the sampler is refused with a backend that does not.
    reports_sampler_logprobs: ClassVar[bool] = False

    def __init__(self, policy, tokenizer, *, merge_lora: bool = True) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.merge_lora = merge_lora
        self._sync_depth = 0

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """A ValueError naming any key of `options` not in `OPTIONS`, with the valid keys."""
        unknown = [key for key in options if key not in cls.OPTIONS]
        if unknown:
            valid = ", ".join(sorted(cls.OPTIONS)) or "(none: this backend takes no options)"
            raise ValueError(f"unknown option {unknown[0]!r}{did_you_mean(unknown[0], cls.OPTIONS)} for rollout "
                             f"backend {cls.__name__}; valid options: {valid}")

    @classmethod
    def product_dtypes(cls, options: Mapping[str, Any]) -> dict[str, str]:
        """The dtypes other than the policy's own that this backend multiplies in on the trainer's device,
        keyed by the config key that asks for each (`rlvr.run.speed_check`); none by default."""
        return {}

    @classmethod
    def build(cls, loaded, rollout) -> "RolloutBackend":
        """Set-up from a `LoadedModel` and the config's rollout section (`RolloutConfig`)."""
        raise NotImplementedError(f"{cls.__name__} does not implement build(loaded, rollout)")

    @contextlib.contextmanager
    def sync(self) -> Iterator[None]:
        """A block in which `generate` samples from the policy's current weights.

        Blocks nest (the training loop holds one over all rounds of an iteration, and each round's
        `sample_and_score` opens another): only the outermost one calls `synced`.
        """
        if self._sync_depth:
            self._sync_depth += 1
            try:
                yield
            finally:
                self._sync_depth -= 1
            return
        with self.synced():
            self._sync_depth = 1
            try:
                yield
            finally:
                self._sync_depth = 0

    @property
    def in_sync(self) -> bool:
        """Whether a `sync()` block is open (generate is allowed)."""
        return self._sync_depth > 0

    def synced(self) -> ContextManager[None]:
        """Make the engine sample the policy's current weights (push them, or merge an adapter) for one
        outermost `sync()` block, and undo what needs undoing when it closes."""
        raise NotImplementedError(f"{type(self).__name__} does not implement synced()")

    @abc.abstractmethod
    def generate(self, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
        """`group_size` completions for each rendered prompt, prompt-major. Call inside `sync()`."""

    def generate_from_ids(self, prompt_ids: list[list[int]], settings: SamplingSettings) -> Generation:
        """One completion for each prompt given as token ids (no tokenizing), row i continuing prompt i.

        The episode driver's call: each live episode's conversation so far, exactly the tokens it
        holds, is continued by one turn. Call inside `sync()`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement generate_from_ids(prompt_ids, "
                                  "settings), which episodes (environment tasks) need")

    def close(self) -> None:
        """Release what set-up took (nothing for in-process backends)."""

    def __enter__(self) -> "RolloutBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InProcessBackend(RolloutBackend):
    """Samples with the training model itself through `sample_fn(model, tokenizer, prompts, G, settings, **options)`."""

    sample_fn: Callable[..., Generation]
    # `ids_fn(model, tokenizer, prompt_ids [B, P], prompt_mask [B, P], settings, **options)`: one
    # completion per left-padded token-id prompt (the episode driver's turns).
    ids_fn: Callable[..., Generation]

    def __init__(self, policy, tokenizer, *, merge_lora: bool = True, **options) -> None:
        super().__init__(policy, tokenizer, merge_lora=merge_lora)
        type(self).check_options(options)
        self.options = dict(options)
        # Set by a backend whose ids_fn continues an episode's turn from the previous turn's keys and
        # values (`rlvr/rollout/turn_cache.py`); emptied when the outermost sync block closes.
        self.turn_cache: TurnCache | None = None
        # Set by a backend whose sample functions take `weight_copies` (the copies its steps make of the
        # weights, reused by the block's later calls); emptied when the outermost sync block closes.
        self.weight_copies: WeightCopies | None = None

    @classmethod
    def build(cls, loaded, rollout) -> "InProcessBackend":
        return cls(loaded.policy, loaded.tokenizer, merge_lora=rollout.merge_lora, **rollout.backend_options)

    @contextlib.contextmanager
    def synced(self) -> Iterator[None]:
        """The engine is the policy: nothing to push. The adapter is merged (or FSDP layers gathered) for the
        block; keys and values held between turns, and copies made of the weights, are made from these weights,
        so they go with it."""
        try:
            with merged_adapter(self.policy, self.merge_lora):
                yield
        finally:
            if self.turn_cache is not None:
                self.turn_cache.clear()
            if self.weight_copies is not None:
                self.weight_copies.clear()

    def generate(self, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
        if not self.in_sync:
            raise RuntimeError(f"{type(self).__name__}.generate called outside `with backend.sync():`; "
                               "sync first, so the sampled policy is the current one")
        extra = {} if self.weight_copies is None else {"weight_copies": self.weight_copies}
        return type(self).sample_fn(self.policy, self.tokenizer, prompts, group_size, settings, **self.options, **extra)

    def generate_from_ids(self, prompt_ids: list[list[int]], settings: SamplingSettings) -> Generation:
        if not self.in_sync:
            raise RuntimeError(f"{type(self).__name__}.generate_from_ids called outside `with backend.sync():`; "
                               "sync first, so the sampled policy is the current one")
        ids, mask = left_pad_ids(prompt_ids, fill_token_id(self.tokenizer))  # [B, P] each
        extra = {} if self.turn_cache is None else {"turn_cache": self.turn_cache}
        if self.weight_copies is not None:
            extra["weight_copies"] = self.weight_copies
        return type(self).ids_fn(self.policy, self.tokenizer, ids, mask, settings, **self.options, **extra)
