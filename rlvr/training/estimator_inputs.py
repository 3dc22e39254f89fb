"""The extra per-row inputs an advantage estimator declares (`EstimatorTraits.inputs`), made by providers.

An input provider is registered in `ESTIMATOR_INPUTS` under the input's name: a function of what the
loop has once a rollout batch is sampled and judged (`InputContext`: the rollout backend, the task,
the sampling settings, the kept groups, the batch) that returns one value per row, [N] prompt-major
(NaN where it could not be made: that row gets advantage 0). `estimator_inputs` calls the providers
of the configured estimator's inputs in the iteration's sampling stage (`rlvr.training.iteration`, run by
`rlvr train`'s rollout sources and `rlvr check`), at the weights that sampled, and the advantage stage
receives what it returns, so an estimator that needs a new input is its own file: the
estimator registered with `inputs=(name,)` and the provider registered under `name`.

The first provider is ReMax's `reward_baselines`: the reward of one greedy completion per kept prompt
(`rlvr.training.collect.greedy_baselines`), repeated over its group.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from rlvr.core import ADVANTAGE_ESTIMATORS, RolloutBatch
from rlvr.registry import Registry

if TYPE_CHECKING:  # the rollout side imports transformers; the reports read the traits without it
    from rlvr.rollout import RolloutBackend, SamplingSettings
    from rlvr.tasks.task import Task
    from rlvr.training.collect import CollectedGroups


@dataclass(frozen=True)
class InputContext:
    """What a provider may read, once the batch is sampled and judged (before its advantages)."""

    backend: RolloutBackend  # the one that sampled the batch, at the same weights
    task: Task
    settings: SamplingSettings  # the rollout's own
    collected: CollectedGroups  # the kept groups, prompt-major
    batch: RolloutBatch  # [N, L] ids, masks and rewards; no advantages yet
    config: object  # the run's Config


@dataclass(frozen=True)
class InputTraits:
    """What making an input costs, for the readers that count it."""

    completions_per_prompt: int = 0  # extra completions it decodes per kept prompt (the study's sample counts)
    needs: str = ""  # what it needs, in words, for `rlvr check --mechanism`'s refusal (it samples nothing)


InputProvider = Callable[[InputContext], torch.Tensor]  # -> [N]

ESTIMATOR_INPUTS: Registry[InputProvider] = Registry("estimator input", traits=InputTraits())


@dataclass(frozen=True)
class EstimatorInputs:
    """The inputs of one rollout batch, by name (each [N]), and the seconds it took to make them."""

    values: dict[str, torch.Tensor]
    seconds: float = 0.0


@ESTIMATOR_INPUTS.register("reward_baselines", traits=InputTraits(
    completions_per_prompt=1, needs="a greedy completion per prompt as its baseline"))
def greedy_reward_baselines(context: InputContext) -> torch.Tensor:
    """ReMax's baseline: the reward of one greedy completion per kept prompt, scored as the group's are. -> [N]"""
    from rlvr.training.collect import greedy_baselines

    return greedy_baselines(context.backend, context.task, context.settings, context.collected,
                            context.config).rewards  # [N], NaN where it could not be judged


def input_needs(name: str) -> str:
    """What making the input `name` needs, in words: its provider's `needs`, else "the input 'name'"."""
    return (ESTIMATOR_INPUTS.traits(name).needs if name in ESTIMATOR_INPUTS else "") or f"the input {name!r}"


def input_completions_per_prompt(estimator: str) -> int:
    """The extra completions per kept prompt that making `estimator`'s inputs decodes (0 for an unknown name)."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        return 0
    return sum(ESTIMATOR_INPUTS.traits(name).completions_per_prompt
               for name in ADVANTAGE_ESTIMATORS.traits(estimator).inputs if name in ESTIMATOR_INPUTS)


def estimator_inputs(estimator: str, context: InputContext) -> EstimatorInputs:
    """Every input `estimator` declares, each from its provider, timed together."""
    started = time.perf_counter()
    values = {}
    for name in ADVANTAGE_ESTIMATORS.traits(estimator).inputs:
        value = ESTIMATOR_INPUTS.get(name)(context)  # [N]
        if tuple(value.shape) != (len(context.batch),):
            raise ValueError(f"estimator input {name!r} must be [N] = ({len(context.batch)},), one value per row; "
                             f"its provider gave {tuple(value.shape)}")
        values[name] = value
    return EstimatorInputs(values=values, seconds=time.perf_counter() - started)
