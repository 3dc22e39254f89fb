"""Where each iteration's rollout batch comes from, the two rollout sources (`rlvr.training.iteration.RolloutSource`):
sampled now (`rollout.async_steps=0`), or one policy version earlier, while the previous iteration trained
(`rollout.async_steps=1`, one-step off-policy). Either runs the iteration's sampling stage (`sample_rollout`:
sample, judge, lay out, the estimator's inputs) and hands over a `Rollout`; the preparation stages and the
update run on it in the loop's thread, the same for both (`rlvr.training.iteration`).

Versions count finished iterations: v_k is the policy after k updates, and iteration k updates v_k into
v_{k+1}. On-policy, iteration k trains on a batch v_k sampled. One step off-policy, the batch of iteration
k+1 is sampled by v_k *before* iteration k's update, in a background thread while that update runs, so
iteration k >= 1 trains on v_{k-1}'s samples (`rollout/policy_lag` 1); a fresh run's first batch is
sampled by v_0 at once (lag 0). The last iteration samples one batch more, kept in the last checkpoint
with every other pending batch, so a resume (also one that extends train.iterations) continues exactly.

The stale weights must not move while they sample, and the optimizer steps the live policy meanwhile.
An in-process backend (decode_loop, hf_generate) therefore samples with a `SamplerCopy`: a copy of
the policy that shares its frozen weights (read only) and owns its trainable ones, refreshed from the
policy before each update (LoRA: only the adapter is copied; full fine-tuning: all weights, twice the
memory). Sampling before the step on the live model instead would leave only the forward and backward
passes to overlap, with one module shared by two threads (the adapter merge swaps its weights, the
reference pass disables its adapter). The copy also scores its samples with the trainer's own code
(`policy_logprobs`), so `batch.sampler_logprobs` are the stale policy's log-probs and the update weighs the
lag out with `rollout.correction` (old log-probs are the current policy's: the first epoch's ratio stays
1, the lag is in pi_old / pi_sampler). A backend that reports its own log-probs keeps them: decode_loop
with another `dtype` than the policy's samples from the stale weights in that dtype, and only its own
log-probs say what it sampled from (lag and precision together). An engine of its own (vllm) takes the
weights when `sync()` opens, here in the main thread before the update, and reports its own log-probs.

The thread runs only when nothing else draws from torch's global RNG meanwhile (a loss that draws tokens
at random samples first, then updates), so a run is reproducible either way; one process only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading

import torch

from rlvr.core import POLICY_LOSSES, RolloutBatch, draws_tokens_at_random
from rlvr.models.merge import merges_in_place
from rlvr.rollout import InProcessBackend, SamplingSettings
from rlvr.training.collect import collect_groups
from rlvr.training.iteration import Rollout, sample_rollout  # Rollout: also where older checkpoints' pickles find it
from rlvr.training.reference import batch_logprobs

# The key of the loop counters (`state`, saved in trainer_state.pt) that holds the pending rollout.
PENDING_ROLLOUT = "pending_rollout"


def policy_logprobs(model, batch: RolloutBatch, config) -> torch.Tensor:
    """log pi of every completion token of `batch` under `model`, each group's prompt shared as the update's
    forward shares it (`forward_group_size`), so unchanged weights give the update's own numbers. -> [N, L-1]."""
    return batch_logprobs(model, batch, config, as_update=True)


class SamplerCopy:
    """A copy of the policy for sampling: frozen weights shared (each wrapped in a parameter of its own, so the
    copy's adapter merge swaps its own tensors), trainable weights owned, refreshed by `refresh`."""

    def __init__(self, policy) -> None:
        memo = {id(param): torch.nn.Parameter(param.data, requires_grad=False)
                for param in policy.parameters() if not param.requires_grad}
        self.model = copy.deepcopy(policy, memo)
        self.model.train(False)
        owned = dict(self.model.named_parameters())
        self._pairs = [(owned[name], param) for name, param in policy.named_parameters() if param.requires_grad]
        for param in self.model.parameters():
            param.requires_grad_(False)

    def refresh(self) -> None:
        """Copy the policy's trainable weights in (call while nothing steps the optimizer)."""
        with torch.no_grad():
            for own, live in self._pairs:
                own.copy_(live)


class OnPolicyRollouts:
    """`rollout.async_steps=0`: each iteration samples its batch at the current weights when it takes it."""

    def __init__(self, session, settings: SamplingSettings, config, dist, collect=collect_groups) -> None:
        self.session, self.settings, self.config, self.dist, self.collect = session, settings, config, dist, collect

    def take(self, iteration: int) -> Rollout:
        session = self.session
        return sample_rollout(session.backend, session.task, session.tokenizer, self.settings, self.config,
                              iteration, iteration, self.dist, self.collect)

    def prefetch(self, iteration: int) -> None:
        """Nothing: the batch of `iteration` is sampled when it is taken."""

    def wait(self) -> None:
        """Nothing runs in the background."""

    def checkpoint_state(self) -> dict:
        return {}


class OneStepOffRollouts:
    """`rollout.async_steps=1`: `prefetch(k + 1)` samples at v_k while iteration k trains, `take(k + 1)` hands
    the batch over."""

    def __init__(self, session, settings: SamplingSettings, config, dist, pending: Rollout | None = None,
                 collect=collect_groups) -> None:
        if dist.enabled:
            raise ValueError("rollout.async_steps=1 samples in a background thread of one process; it does not run "
                             "data-parallel (launched with several ranks): use rollout.async_steps=0 there")
        self.session, self.settings, self.config, self.dist, self.collect = session, settings, config, dist, collect
        backend = session.backend
        self.copy = None
        if isinstance(backend, InProcessBackend):  # the engine is the policy: sample with a copy of it
            self.copy = SamplerCopy(session.policy)
            self.backend = type(backend)(self.copy.model, copy.deepcopy(session.tokenizer),
                                         merge_lora=backend.merge_lora and not merges_in_place(self.copy.model),
                                         **backend.options)
        else:  # an engine of its own takes the weights when sync() opens
            self.backend = backend
        # A loss drawing tokens from torch's global RNG would race the sampler for it: sample first, then update.
        self.overlap = not draws_tokens_at_random(POLICY_LOSSES.get(config.algorithm.policy_loss))
        self.pending = pending
        self._thread: threading.Thread | None = None
        self._result: Rollout | None = None
        self._error: BaseException | None = None
        self._weights_taken = contextlib.ExitStack()

    def take(self, iteration: int) -> Rollout:
        """The batch of `iteration`: the one sampled during the previous iteration (or saved with the checkpoint),
        else (a fresh run's first iteration) one sampled now by the current weights, v_iteration."""
        if self.pending is None:
            self._start(iteration, version=iteration)
            self.wait()
        rollout, self.pending = self.pending, None
        return rollout

    def prefetch(self, iteration: int) -> None:
        """Start sampling the batch of `iteration` with the current weights, v_{iteration-1}; call before the
        update of iteration - 1 changes them."""
        self._start(iteration, version=iteration - 1)

    def _start(self, iteration: int, version: int) -> None:
        """Fix the current weights (version `version`) for sampling and sample the batch of `iteration` with
        them: in a thread when `overlap`, else here."""
        if self.copy is not None:
            self.copy.refresh()
        else:
            self._weights_taken.enter_context(self.backend.sync())  # the engine copies the weights now
        if self.overlap:
            self._thread = threading.Thread(target=self._sample, args=(iteration, version), daemon=True,
                                            name="rlvr-rollout")
            self._thread.start()
        else:
            self._sample(iteration, version)

    def _sample(self, iteration: int, version: int) -> None:
        try:
            rollout = sample_rollout(self.backend, self.session.task, self.backend.tokenizer, self.settings,
                                     self.config, iteration, version, self.dist, self.collect)
            if rollout.batch.sampler_logprobs is not None:
                pass  # the backend reported what it sampled from: the stale weights, in its own precision
            elif self.copy is not None:  # the stale weights score their own samples
                rollout = _with_sampler_logprobs(rollout, policy_logprobs(self.copy.model, rollout.batch, self.config))
            else:
                raise RuntimeError(f"rollout.async_steps=1 needs the sampling weights' log-probs, and the rollout "
                                   f"backend {type(self.backend).__name__} reports none (Generation.sampler_logprobs)")
            self._result = rollout
        except BaseException as exc:  # re-raised in the main thread by wait()
            self._error = exc

    def wait(self) -> None:
        """Wait for the batch being sampled; it becomes the pending one. The sampler's error is raised here."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._weights_taken.close()
        error, self._error = self._error, None
        if error is not None:
            raise error
        if self._result is not None:
            self.pending, self._result = self._result, None

    def checkpoint_state(self) -> dict:
        """What a checkpoint must hold for an exact resume: the batch sampled for the next iteration."""
        return {PENDING_ROLLOUT: self.pending}


def _with_sampler_logprobs(rollout: Rollout, logprobs: torch.Tensor) -> Rollout:
    return dataclasses.replace(rollout, batch=rollout.batch.replace(sampler_logprobs=logprobs))


def rollout_schedule(session, settings: SamplingSettings, config, dist, state: dict, collect=collect_groups):
    """The rollout source `rollout.async_steps` asks for, sampling with `collect` (the loop's `collect_groups`);
    a pending batch saved in `state` (on resume) is taken out of it and trained on first."""
    pending = state.pop(PENDING_ROLLOUT, None)
    if config.rollout.async_steps == 0:
        return OnPolicyRollouts(session, settings, config, dist, collect)
    return OneStepOffRollouts(session, settings, config, dist, pending, collect)
