"""What an advantage estimator or a policy loss needs or guarantees, declared where it is registered.

`ADVANTAGE_ESTIMATORS.register(name, traits=EstimatorTraits(...))` and
`POLICY_LOSSES.register(name, traits=LossTraits(...))` attach them; the config checks, the training
loop, `rlvr check` and the reports read them back with `REGISTRY.traits(name)` or
`REGISTRY.names_where(lambda traits: ...)` instead of keeping sets of names of their own. An entry
registered without traits gets the defaults below: it needs nothing beyond the common call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EstimatorTraits:
    """An advantage estimator's needs and guarantees (`rlvr.core.advantages.ADVANTAGE_ESTIMATORS`)."""

    # The baseline comes from the other members of the group: a group of one gives every completion
    # advantage 0, so the config refuses rollout.group_size < 2.
    group_baseline: bool = False
    # The baseline is a learned value: per-token rewards [N, T], and the config needs a value model
    # (algorithm.value_model shared or separate), which no other estimator uses.
    value_baseline: bool = False
    # The advantages of each group sum to 0 (before algorithm.advantage_clip): `rlvr check` verifies it.
    centring: bool = False
    # Extra per-row inputs beyond the rewards, each passed to the estimator as the keyword of that name
    # ([N], prompt-major) and made for every rollout batch by the input provider registered under the
    # same name (`rlvr.training.estimator_inputs.ESTIMATOR_INPUTS`; ReMax's `reward_baselines`). A row
    # where an input is not finite is unscorable: its advantage is 0.
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LossTraits:
    """A policy loss's properties that a config check asks about (`rlvr.core.policy_losses.POLICY_LOSSES`)."""

    # Every token of a row carries the same sequence-level value (GSPO, GMPO): selecting tokens
    # (algorithm.entropy_top_fraction < 1) would only rescale a sequence, so the config refuses it.
    sequence_level: bool = False
