"""One RL iteration's stages, planned once from the config and run by every caller: `rlvr train` (rl.py, with
either rollout source of async_rollout.py), `rlvr check` and `rlvr check --mechanism`.

1. Sampling, at the weights that sample: B prompts x G completions sampled and judged (`collect_groups`), laid
   out as one batch (`rollout_batch`), with the extra inputs the estimator declares (`estimator_inputs`; ReMax:
   one greedy completion per prompt, scored): `sample_rollout`, which a `RolloutSource` runs where and when it
   likes (now, on-policy; in a background thread one step ahead) and hands over as a `Rollout`.
2. Preparation, at the trainer's weights: the stages `plan_iteration` keeps of `PREPARATION_STAGES` for the
   config, in order: reference log-probs (a KL term, PPO's KL penalty, or `log_kl`), PPO's old values, the
   advantages. `prepare` runs them, each timed under its metric (`timed`).
3. The update: `Learner.update` (`update_policy`).
A new rollout source (N steps off, a server that streams episodes) hands over `Rollout`s through the four calls
of `RolloutSource`; the plan, the preparation, the update and the checks stay as they are.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import torch

from rlvr.core import ADVANTAGE_ESTIMATORS, RolloutBatch
from rlvr.observe.metric_names import TIME_GENERATION, TIME_LOGPROBS, TIME_SCORING, TIME_VALUES
from rlvr.parallel.distributed import SINGLE, Dist
from rlvr.training.advantage_stage import with_advantages
from rlvr.training.collect import CollectedGroups, collect_groups, rollout_batch
from rlvr.training.estimator_inputs import EstimatorInputs, InputContext, estimator_inputs
from rlvr.training.reference import needs_reference_logprobs, with_reference_logprobs
from rlvr.training.update import UpdateResult, update_policy
from rlvr.training.values import with_old_values

if TYPE_CHECKING:
    from rlvr.models import LoadedModel
    from rlvr.models.value_model import ValueModel
    from rlvr.rollout import RolloutBackend, SamplingSettings


# ----------------------------------------------------------------------------- 1. sampling


@dataclass(frozen=True)
class Rollout:
    """One iteration's sampled, judged batch, and which policy version sampled it."""

    collected: CollectedGroups
    batch: RolloutBatch  # [N, L]; one step off-policy: sampler_logprobs [N, L-1] of the sampling weights
    inputs: EstimatorInputs  # the estimator's declared inputs (ReMax: the greedy rewards), from the same weights
    policy_version: int  # iterations finished by the weights that sampled it

    def __setstate__(self, state: dict) -> None:
        """A pending rollout checkpointed before inputs were declared held ReMax's `baselines` (or None)."""
        if "inputs" not in state:
            baselines = state.pop("baselines", None)
            state["inputs"] = EstimatorInputs({}) if baselines is None else EstimatorInputs(
                {"reward_baselines": baselines.rewards}, baselines.seconds)
        self.__dict__.update(state)

    def advantage_inputs(self) -> AdvantageInputs:
        """What the advantage stage reads besides the batch: the rewards (NaN where unscorable), the inputs."""
        return AdvantageInputs(self.collected.rewards, self.inputs.values)

    def timings(self) -> dict[str, float]:
        """The sampling's seconds under their metrics: generation (the estimator's inputs included: ReMax's
        greedy decode) and scoring."""
        generation = self.collected.generation_seconds
        if self.inputs.values:
            generation += self.inputs.seconds
        return {TIME_GENERATION: generation, TIME_SCORING: self.collected.scoring_seconds}


def sample_rollout(backend: RolloutBackend, task, tokenizer, settings: SamplingSettings, config, iteration: int,
                   policy_version: int, dist: Dist = SINGLE, collect=collect_groups) -> Rollout:
    """Stage 1: sample and judge B x G completions (`collect`), lay them out as a batch, and make the extra
    inputs the estimator declares (ReMax: score one greedy completion per prompt), all with `backend`."""
    collected = collect(backend, task, settings, config, iteration, dist)
    batch = rollout_batch(collected, tokenizer, task.name)  # [N, L] ids and masks
    inputs = estimator_inputs(config.algorithm.advantage_estimator,
                              InputContext(backend, task, settings, collected, batch, config))
    return Rollout(collected=collected, batch=batch, inputs=inputs, policy_version=policy_version)


class RolloutSource(Protocol):
    """Where each iteration's `Rollout` comes from; the loop calls these four, in this order, every iteration."""

    def take(self, iteration: int) -> Rollout:
        """The batch iteration `iteration` trains on."""

    def prefetch(self, iteration: int) -> None:
        """Called before the update of iteration - 1: a source that samples ahead may start on `iteration` now,
        at the weights as they are."""

    def wait(self) -> None:
        """Called after the update: what ran meanwhile is finished (its error raised here)."""

    def checkpoint_state(self) -> dict:
        """What a checkpoint must hold for an exact resume (a batch sampled ahead)."""


# ----------------------------------------------------------------------------- 2. preparation


@dataclass(frozen=True)
class AdvantageInputs:
    """What the advantage stage reads besides the batch."""

    rewards: torch.Tensor  # [N] float32, NaN where unscorable (the batch's own rewards hold 0 there)
    estimator_inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # each [N] (ReMax: reward_baselines)


@dataclass(frozen=True)
class Learner:
    """What preparation and the update run on: the policy with its reference (LoRA: the adapter disabled, else
    a frozen copy), PPO's value model, the optimizer over both."""

    loaded: LoadedModel
    value_model: ValueModel | None
    optimizer: torch.optim.Optimizer
    scheduler: object
    params: list  # the trainable parameters: the policy's, then the value model's
    config: object  # the run's Config
    dist: Dist = field(default_factory=lambda: SINGLE)  # one process unless launched data-parallel

    def update(self, batch: RolloutBatch, value_warmup: bool = False) -> UpdateResult:
        """Stage 3: `ppo_epochs` passes over the prepared batch, held on `rollout.storage_device` meanwhile
        (`update_policy`); `value_warmup` trains the value model alone."""
        return update_policy(self.loaded.policy, self.optimizer, self.scheduler,
                             batch.to(self.config.rollout.storage_device), self.config, self.params, dist=self.dist,
                             value_model=self.value_model, value_warmup=value_warmup)


StageFn = Callable[[RolloutBatch, AdvantageInputs, Learner], RolloutBatch]


@dataclass(frozen=True)
class Stage:
    """A preparation stage: `run` returns a copy of the batch with more filled in, when `needed` by the config's
    algorithm section; its seconds are logged under `seconds_metric` (None: not timed)."""

    name: str
    needed: Callable[[object], bool]
    run: StageFn
    seconds_metric: str | None = None


def reference_logprobs_stage(batch: RolloutBatch, scored: AdvantageInputs, learner: Learner) -> RolloutBatch:
    """ref_logprobs [N, L-1]: the reference policy's log-probs of the sampled tokens."""
    return with_reference_logprobs(learner.loaded, batch, learner.config)


def old_values_stage(batch: RolloutBatch, scored: AdvantageInputs, learner: Learner) -> RolloutBatch:
    """PPO: old_values [N, L-1], the value model's as it was when sampling (and old_logprobs [N, L-1] when the
    KL penalty is in the reward, which needs them before the advantages)."""
    return with_old_values(learner.loaded.policy, learner.value_model, batch, learner.config,
                           with_logprobs=learner.config.algorithm.kl_in_reward > 0)


def advantages_stage(batch: RolloutBatch, scored: AdvantageInputs, learner: Learner) -> RolloutBatch:
    """advantages [N] or [N, L-1]: each prompt's group against itself, or GAE against the old values (then also
    the returns); unscorable rows and groups without contrast get 0."""
    return with_advantages(batch, scored.rewards, learner.config.algorithm, learner.dist, **scored.estimator_inputs)


def _has_value_model(algo) -> bool:
    return algo.value_model != "none"


def _always(algo) -> bool:
    return True


# In the order they run: the old values may need the reference log-probs (KL in the reward), the advantages both.
PREPARATION_STAGES: tuple[Stage, ...] = (
    Stage("reference_logprobs", needs_reference_logprobs, reference_logprobs_stage, TIME_LOGPROBS),
    Stage("old_values", _has_value_model, old_values_stage, TIME_VALUES),
    Stage("advantages", _always, advantages_stage),
)


@dataclass(frozen=True)
class IterationPlan:
    """The stages one iteration runs for a config."""

    estimator_inputs: tuple[str, ...]  # made while sampling, at the sampling weights (ReMax: reward_baselines)
    preparation: tuple[Stage, ...]  # run by `prepare`, in order

    @property
    def names(self) -> tuple[str, ...]:
        """Every stage, in order: sampling, the estimator's inputs (when it declares any), preparation, update."""
        inputs = ("estimator_inputs",) if self.estimator_inputs else ()
        return ("sampling", *inputs, *(stage.name for stage in self.preparation), "update")

    @property
    def needs_reference(self) -> bool:
        """Whether the run must keep a reference policy (full fine-tuning: a frozen copy of the weights)."""
        return "reference_logprobs" in self.names

    @property
    def needs_value_model(self) -> bool:
        return "old_values" in self.names


def plan_iteration(config) -> IterationPlan:
    """The stages `config` needs: the estimator's declared inputs, and the preparation stages it needs."""
    algo = config.algorithm
    return IterationPlan(estimator_inputs=tuple(ADVANTAGE_ESTIMATORS.traits(algo.advantage_estimator).inputs),
                         preparation=tuple(stage for stage in PREPARATION_STAGES if stage.needed(algo)))


@contextlib.contextmanager
def timed(timings: dict[str, float] | None, metric: str | None) -> Iterator[None]:
    """Record the seconds the block takes in `timings[metric]` (nothing when either is None)."""
    started = time.perf_counter()
    yield
    if timings is not None and metric is not None:
        timings[metric] = time.perf_counter() - started


def prepare(batch: RolloutBatch, scored: AdvantageInputs, learner: Learner, plan: IterationPlan,
            timings: dict[str, float] | None = None) -> RolloutBatch:
    """Stage 2: run the plan's preparation stages on a sampled batch, in order; each timed stage's seconds go
    in `timings`. -> the batch the update takes (advantages, and what the config needs besides)."""
    for stage in plan.preparation:
        with timed(timings, stage.seconds_metric):
            batch = stage.run(batch, scored, learner)
    return batch
