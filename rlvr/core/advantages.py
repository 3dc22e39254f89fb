"""Advantage estimators: one scalar per sampled completion from its reward and its group's, or
one per completion token from per-token rewards and a learned value (GAE, for PPO).

A group is the set of completions sampled for the same prompt. Groups are given either by
`group_size` (contiguous, prompt-major: rows [g*G, (g+1)*G) belong to prompt g) or by arbitrary
integer `group_ids` in any order. Every estimator in `ADVANTAGE_ESTIMATORS` has the signature
`fn(rewards [N], group_size=None, group_ids=None, **options) -> advantages [N]`.

More outcome estimators (REINFORCE++, ReMax, OPO, pass@k, GPG) are in `outcome_advantages.py`.
The token-level estimator `gae` takes rewards [N, T] with `completion_mask` and `values` [N, T]
and returns [N, T] (`rlvr.core.value.gae_advantages`); it ignores groups.

What each estimator needs or guarantees (a group baseline, a learned value, centred groups, extra
inputs such as ReMax's `reward_baselines`) is declared where it is registered, as `EstimatorTraits`
(`rlvr.core.traits`), and read back with `ADVANTAGE_ESTIMATORS.traits(name)`.

Groups without reward contrast (a single member, or all rewards equal;
`rlvr.core.groups.no_contrast`, the definition dynamic sampling and the statistics use too) carry
no learning signal; their advantages are exactly 0, never NaN or a huge number from dividing by a zero std.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from rlvr.core.groups import NO_CONTRAST_EPS, no_contrast
from rlvr.core.traits import EstimatorTraits
from rlvr.core.value import gae_advantages, masked_whiten
from rlvr.registry import Registry

AdvantageFn = Callable[..., torch.Tensor]

ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator", traits=EstimatorTraits())


def _check_rewards(rewards: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """As a 1-D float tensor; non-finite entries raise ValueError naming their indices."""
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    bad = (~torch.isfinite(rewards)).nonzero().flatten()
    if bad.numel() > 0:
        raise ValueError(f"rewards must be finite; non-finite values at indices {bad.tolist()}")
    return rewards


def _group_index(
    num_samples: int,
    group_size: int | None,
    group_ids: torch.Tensor | Sequence[int] | None,
    device: torch.device,
) -> tuple[torch.Tensor, int]:
    """(group index in [0, num_groups) for every sample [N], num_groups)."""
    if (group_size is None) == (group_ids is None):
        raise ValueError("pass exactly one of group_size (contiguous groups) or group_ids (any order)")
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        if num_samples % group_size != 0:
            raise ValueError(
                f"group_size {group_size} does not divide the number of rewards {num_samples}; "
                "pass group_ids for groups of unequal size"
            )
        # Prompt-major layout: sample i belongs to prompt i // group_size.
        return torch.arange(num_samples, device=device) // group_size, num_samples // group_size  # [N]
    ids = torch.as_tensor(group_ids, device=device)
    if ids.shape != (num_samples,):
        raise ValueError(f"group_ids must have shape ({num_samples},), got {tuple(ids.shape)}")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be integers, got dtype {ids.dtype}")
    unique_ids, index = torch.unique(ids, return_inverse=True)  # index [N]
    return index, unique_ids.numel()


def _group_statistics(rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> dict[str, torch.Tensor]:
    """Per-group count, sum, mean, sum of squared deviations, highest and lowest reward, all [num_groups]."""
    zeros = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)  # [G]
    counts = zeros.index_add(0, index, torch.ones_like(rewards))  # [G]
    sums = zeros.index_add(0, index, rewards)  # [G]
    means = sums / counts.clamp(min=1)  # [G]
    squared_deviations = zeros.index_add(0, index, (rewards - means[index]).square())  # [G]
    highest = zeros.scatter_reduce(0, index, rewards, reduce="amax", include_self=False)  # [G]
    lowest = zeros.scatter_reduce(0, index, rewards, reduce="amin", include_self=False)  # [G]
    return {
        "counts": counts,
        "sums": sums,
        "means": means,
        "squared_deviations": squared_deviations,
        "highest": highest,
        "lowest": lowest,
    }


def _no_contrast_of(stats: dict[str, torch.Tensor], eps: float) -> torch.Tensor:
    """Groups without signal (`no_contrast`): one member, or max - min within eps of the reward scale."""
    return no_contrast(stats["counts"], stats["highest"], stats["lowest"], eps)  # [G]


def compute_group_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_size: int | None = None,
    group_ids: torch.Tensor | Sequence[int] | None = None,
    *,
    scale: str = "std",
    std: str = "population",
    eps: float = NO_CONTRAST_EPS,
) -> torch.Tensor:
    """Group-relative advantages. rewards [N] -> advantages [N].

    scale="std" (GRPO, Shao et al. 2024): A_i = (r_i - mean_g) / (std_g + eps), with the
    population std (divide by n, the default) or the sample std (divide by n - 1).
    scale="none" (Dr. GRPO, Liu et al. 2025): A_i = r_i - mean_g; dividing by std up-weights
    prompts that are nearly always right or wrong, which Dr. GRPO calls a difficulty bias.
    Groups of one and groups whose rewards are all equal (within eps) give exactly 0.
    """
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    if std not in ("population", "sample"):
        raise ValueError(f"std must be 'population' or 'sample', got {std!r}")
    rewards = _check_rewards(rewards)
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    centred = rewards - stats["means"][index]  # [N]
    if scale == "std":
        degrees_of_freedom = stats["counts"] if std == "population" else stats["counts"] - 1  # [G]
        group_std = (stats["squared_deviations"] / degrees_of_freedom.clamp(min=1)).sqrt()  # [G]
        advantages = centred / (group_std[index] + eps)  # [N]
    else:
        advantages = centred  # [N]
    return torch.where(_no_contrast_of(stats, eps)[index], torch.zeros_like(advantages), advantages)


def compute_rloo_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_size: int | None = None,
    group_ids: torch.Tensor | Sequence[int] | None = None,
    *,
    eps: float = NO_CONTRAST_EPS,
) -> torch.Tensor:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024). rewards [N] -> [N].

    A_i = r_i - mean of the other n_g - 1 rewards of its group = n_g / (n_g - 1) * (r_i - mean_g).
    The baseline excludes r_i, so it is independent of sample i and the estimate stays unbiased.
    Groups of one (no other sample) and groups with all rewards equal give 0.
    """
    rewards = _check_rewards(rewards)
    index, num_groups = _group_index(rewards.shape[0], group_size, group_ids, rewards.device)  # [N]
    stats = _group_statistics(rewards, index, num_groups)
    others = (stats["counts"][index] - 1).clamp(min=1)  # [N]
    baseline = (stats["sums"][index] - rewards) / others  # [N]: mean of the group without sample i
    advantages = rewards - baseline  # [N]
    return torch.where(_no_contrast_of(stats, eps)[index], torch.zeros_like(advantages), advantages)


# Registered estimators share one call: fn(rewards, group_size=None, group_ids=None, **options),
# with options drawn from COMMON_OPTIONS and the extra inputs registered estimators declare
# (`EstimatorTraits.inputs`, e.g. ReMax's `reward_baselines`), so a training loop passes the same keywords
# whatever estimator is configured. An option that means nothing to an estimator is accepted and ignored.
# The group estimators are sequence-level: rewards [N] -> advantages [N]. A token-level one (GAE)
# takes per-token rewards [N, T] with `completion_mask` [N, T] (and `values`, `gamma`, `lam`) and
# returns [N, T]; the training loop and the losses accept either shape.
COMMON_OPTIONS = ("std", "eps", "completion_mask", "values", "gamma", "lam")


def estimator_options() -> tuple[str, ...]:
    """The keywords a registered estimator accepts: COMMON_OPTIONS, then every declared input (sorted)."""
    inputs = {name for estimator in ADVANTAGE_ESTIMATORS for name in ADVANTAGE_ESTIMATORS.traits(estimator).inputs}
    return COMMON_OPTIONS + tuple(sorted(inputs - set(COMMON_OPTIONS)))


def _check_options(name: str, options: dict[str, Any]) -> None:
    valid = estimator_options()
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(f"advantage estimator {name!r} got unknown options {unknown}; valid: {list(valid)}")


def _std_and_eps(options: dict[str, Any]) -> dict[str, Any]:
    """The options the group z-score reads (the rest mean nothing to it)."""
    return {key: options[key] for key in ("std", "eps") if key in options}


@ADVANTAGE_ESTIMATORS.register("grpo", traits=EstimatorTraits(group_baseline=True, centring=True))
def grpo_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """GRPO (Shao et al. 2024): (r - mean_g) / (std_g + eps), the group z-score. [N] -> [N].

    Options: std ("population" | "sample"), eps.
    """
    _check_options("grpo", options)
    return compute_group_advantages(rewards, group_size, group_ids, scale="std", **_std_and_eps(options))


@ADVANTAGE_ESTIMATORS.register("mean_centered", traits=EstimatorTraits(group_baseline=True, centring=True))
def mean_centered_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """r - mean_g, no std division (Dr. GRPO's and GR-REINFORCE's advantage). [N] -> [N].

    Options: eps (the zero-spread tolerance); std is ignored.
    """
    _check_options("mean_centered", options)
    return compute_group_advantages(rewards, group_size, group_ids, scale="none", **_std_and_eps(options))


@ADVANTAGE_ESTIMATORS.register("rloo", traits=EstimatorTraits(group_baseline=True, centring=True))
def rloo_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024): r_i - mean of the other members of its group. [N] -> [N].

    Options: eps; std is ignored.
    """
    _check_options("rloo", options)
    return compute_rloo_advantages(rewards, group_size, group_ids, eps=options.get("eps", NO_CONTRAST_EPS))


@ADVANTAGE_ESTIMATORS.register("no_baseline")
def no_baseline_advantages(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """The raw reward as the advantage (plain REINFORCE, Williams 1992). Groups and options are ignored."""
    _check_options("no_baseline", options)
    return _check_rewards(rewards).clone()


ADVANTAGE_ESTIMATORS.rename("none", "no_baseline")
ADVANTAGE_ESTIMATORS.rename("dr_grpo", "mean_centered")  # the estimator says what it does; the preset keeps the name


@ADVANTAGE_ESTIMATORS.register("gae", traits=EstimatorTraits(value_baseline=True))
def gae_estimator(
    rewards: torch.Tensor, group_size: int | None = None, group_ids: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """GAE (Schulman et al. 2016) on per-token rewards against a learned value (PPO). [N, T] -> [N, T].

    Options: completion_mask, values [N, T], gamma, lam (required); groups, std and eps are ignored.
    The returns: `rlvr.core.value.gae_advantages`.
    """
    _check_options("gae", options)
    missing = [name for name in ("completion_mask", "values", "gamma", "lam") if options.get(name) is None]
    if missing:
        raise ValueError(f"the gae estimator needs per-token rewards [N, T] and the options {missing} "
                         "(a value model: algorithm.value_model shared or separate)")
    advantages, _ = gae_advantages(rewards, options["values"], options["completion_mask"], options["gamma"],
                                   options["lam"])
    return advantages  # [N, T]


def maybe_normalize_advantages(advantages: torch.Tensor, enabled: bool, eps: float = 1e-8) -> torch.Tensor:
    """Batch-level z-score (population std) when enabled. [N] -> [N]; a constant batch gives zeros.

    `rlvr.core.value.masked_whiten` with every entry kept.
    """
    if not enabled or advantages.numel() == 0:
        return advantages
    return masked_whiten(advantages, torch.ones_like(advantages), eps=eps)  # [N]
