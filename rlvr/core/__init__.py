"""rlvr.core: the math of GRPO-family training as pure tensor functions.

Log-probs and masks, KL estimators, the no-contrast rule for groups, advantage estimators,
policy losses, loss aggregation, minibatching, the sampler/trainer gap and its TIS correction, and
PPO's value side (GAE, whitening, value loss). No config objects, no I/O, no library plumbing; named
choices live in registries (`ADVANTAGE_ESTIMATORS`, `POLICY_LOSSES`, `LOSS_AGGREGATIONS`,
`KL_ESTIMATORS`). CS336's versions of some of these, with that course's edge cases, are in
`rlvr.compat.cs336`.
"""

from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    compute_rloo_advantages,
    maybe_normalize_advantages,
)
import rlvr.core.outcome_advantages  # noqa: F401  (registers more estimators)
from rlvr.core.aggregation import LOSS_AGGREGATIONS, aggregate_loss
from rlvr.core.batch import RolloutBatch, iter_minibatches
from rlvr.core.groups import (
    DYNAMIC_SAMPLING_FILTERS,
    NO_CONTRAST_EPS,
    no_contrast,
    no_contrast_groups,
    no_contrast_rows,
)
from rlvr.core.head_logprobs import head_logprobs
from rlvr.core.kl import KL_ESTIMATORS, approx_kl, kl_per_token
from rlvr.core.logprobs import (
    compute_entropy,
    compute_per_token_logprobs,
    compute_per_token_logprobs_and_entropy,
    logprobs_from_logits,
    position_ids_from_attention_mask,
)
from rlvr.core.masks import (
    build_completion_mask,
    masked_mean,
    masked_mean_per_row,
    masked_normalize,
    prompt_completion_rows,
    top_entropy_mask,
)
from rlvr.core.policy_losses import (
    LOSS_OPTIONS,
    POLICY_LOSSES,
    draws_tokens_at_random,
    grpo_clip_loss,
    loss_options,
    reinforce_per_token,
)
import rlvr.core.covariance_losses  # noqa: F401,E402  (registers clip_cov, kl_cov)
import rlvr.core.surrogate_losses  # noqa: F401,E402  (registers cispo, sapo, geo_mean, dual_clip, gpg)
from rlvr.core.traits import EstimatorTraits, LossTraits
from rlvr.core.sampler_correction import (MISMATCH_BAND, SAMPLER_CORRECTIONS, SamplerGap, mismatch_ratio_out,
                                          sampler_gap, tis_weights)
from rlvr.core.value import (
    explained_variance,
    explained_variance_from_sums,
    explained_variance_sums,
    gae_advantages,
    masked_whiten,
    per_token_rewards,
    terminal_token_rewards,
    value_loss,
)

__all__ = [
    "LOSS_OPTIONS",
    "draws_tokens_at_random",
    "loss_options",
    "top_entropy_mask",
    "ADVANTAGE_ESTIMATORS",
    "EstimatorTraits",
    "LossTraits",
    "NO_CONTRAST_EPS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "RolloutBatch",
    "SamplerGap",
    "sampler_gap",
    "SAMPLER_CORRECTIONS",
    "MISMATCH_BAND",
    "mismatch_ratio_out",
    "tis_weights",
    "aggregate_loss",
    "approx_kl",
    "build_completion_mask",
    "compute_entropy",
    "compute_group_advantages",
    "compute_per_token_logprobs",
    "compute_per_token_logprobs_and_entropy",
    "compute_rloo_advantages",
    "no_contrast_groups",
    "DYNAMIC_SAMPLING_FILTERS",
    "no_contrast_rows",
    "explained_variance",
    "explained_variance_from_sums",
    "explained_variance_sums",
    "gae_advantages",
    "grpo_clip_loss",
    "head_logprobs",
    "iter_minibatches",
    "kl_per_token",
    "logprobs_from_logits",
    "masked_mean",
    "masked_mean_per_row",
    "masked_normalize",
    "prompt_completion_rows",
    "masked_whiten",
    "maybe_normalize_advantages",
    "no_contrast",
    "per_token_rewards",
    "position_ids_from_attention_mask",
    "reinforce_per_token",
    "terminal_token_rewards",
    "value_loss",
]
