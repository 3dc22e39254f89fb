"""The reference stage of an RL iteration: log-probs of the sampled completions under the reference policy.

Needed only for the KL term (`algorithm.kl_coef > 0`), PPO's KL penalty in the reward
(`algorithm.kl_in_reward > 0`) or the KL diagnostic alone (`algorithm.log_kl`). With LoRA the reference is the policy
with its adapter disabled (no second copy); with full fine-tuning, a frozen copy of the initial
weights (`rlvr.models.reference_context`). Run in the update's microbatches
(`rlvr.training.microbatching`), each group's prompt once when microbatches hold whole groups.
"""

from __future__ import annotations

import torch

from rlvr.core import RolloutBatch
from rlvr.core.microbatches import scatter_per_token
from rlvr.models import LoadedModel, compute_completion_logprobs, reference_context
from rlvr.training.microbatching import forward_group_size, training_microbatches


def needs_reference_logprobs(algo) -> bool:
    """Whether an iteration needs the reference pass: a KL term in the loss, a KL penalty in the reward, or
    the KL logged as a diagnostic (`log_kl`)."""
    return algo.kl_coef > 0 or algo.kl_in_reward > 0 or algo.log_kl


def batch_logprobs(model, batch: RolloutBatch, config, *, as_update: bool = False) -> torch.Tensor:
    """log pi of every completion token of `batch` under `model` (the reference, or the sampling copy of
    one step off-policy), without gradient, at `rollout.temperature`, in the training passes'
    microbatches. `as_update`: prompts shared exactly as the update's forward shares them (so unchanged
    weights give the update's own numbers); otherwise whenever microbatches hold whole groups.
    -> [N, L-1], 0 outside the completion mask."""
    shared = forward_group_size(config, with_grad=as_update)
    device = next(model.parameters()).device
    parts = []
    for micro in training_microbatches(batch, config, device, group_size=shared):
        minibatch = micro.batch
        logprobs, _ = compute_completion_logprobs(
            model, minibatch.input_ids, minibatch.attention_mask, minibatch.prompt_len,
            group_size=shared, enable_grad=False, temperature=config.rollout.temperature, with_entropy=False,
            completion_mask=minibatch.completion_mask,
        )  # [b, l-1]
        parts.append((micro, logprobs))
    return scatter_per_token(parts, len(batch), batch.completion_mask.shape[1]).to(batch.completion_mask.device)


def with_reference_logprobs(loaded: LoadedModel, batch: RolloutBatch, config) -> RolloutBatch:
    """A copy of `batch` holding the reference log-probs (the config's microbatches and temperature)."""
    with reference_context(loaded) as reference:
        ref_logprobs = batch_logprobs(reference, batch, config)  # [N, L-1]
    return batch.replace(ref_logprobs=ref_logprobs)
