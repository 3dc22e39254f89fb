"""rlvr.core: the math of GRPO-family training as pure tensor functions.

Log-probs and masks, KL estimators, advantage estimators, policy losses, loss aggregation and
minibatching. No config objects, no I/O; named choices live in registries
(`ADVANTAGE_ESTIMATORS`, `POLICY_LOSSES`, `LOSS_AGGREGATIONS`, `KL_ESTIMATORS`).
"""

from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    compute_group_normalized_rewards,
    compute_rloo_advantages,
    get_advantage_estimator,
    maybe_normalize_advantages,
)
from rlvr.core.aggregation import LOSS_AGGREGATIONS, aggregate_loss
from rlvr.core.batch import RolloutBatch, iter_minibatches
from rlvr.core.completion_logprobs import compute_completion_logprobs
from rlvr.core.kl import KL_ESTIMATORS, approx_kl, kl_per_token
from rlvr.core.logprobs import (
    compute_entropy,
    compute_per_token_logprobs,
    compute_per_token_logprobs_and_entropy,
    get_response_log_probs,
    logprobs_from_logits,
    position_ids_from_attention_mask,
)
from rlvr.core.masks import (
    build_completion_mask,
    masked_mean,
    masked_mean_per_row,
    masked_normalize,
    tokenize_prompt_and_output,
)
from rlvr.core.policy_losses import (
    POLICY_LOSSES,
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    get_policy_loss,
)
from rlvr.core.train_steps import grpo_microbatch_train_step, sft_microbatch_train_step

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "RolloutBatch",
    "aggregate_loss",
    "approx_kl",
    "build_completion_mask",
    "compute_completion_logprobs",
    "compute_entropy",
    "compute_group_advantages",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_per_token_logprobs",
    "compute_per_token_logprobs_and_entropy",
    "compute_policy_gradient_loss",
    "compute_rloo_advantages",
    "get_advantage_estimator",
    "get_policy_loss",
    "get_response_log_probs",
    "grpo_microbatch_train_step",
    "iter_minibatches",
    "kl_per_token",
    "logprobs_from_logits",
    "masked_mean",
    "masked_mean_per_row",
    "masked_normalize",
    "maybe_normalize_advantages",
    "position_ids_from_attention_mask",
    "sft_microbatch_train_step",
    "tokenize_prompt_and_output",
]
