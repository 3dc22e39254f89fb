"""The reference stage of an RL iteration: log-probs of the sampled completions under the reference policy.

Needed only for the KL term (`algorithm.kl_coef > 0`) or PPO's KL penalty in the reward
(`algorithm.kl_in_reward > 0`). With LoRA the reference is the policy
with its adapter disabled (no second copy); with full fine-tuning, a frozen copy of the initial
weights (`rlvr.models.reference_context`). Run in minibatches of `optim.minibatch_size` rows,
each group's prompt once when minibatches hold whole groups, as in the update.
"""

from __future__ import annotations

import torch

from rlvr.core import RolloutBatch, iter_minibatches
from rlvr.models import LoadedModel, compute_completion_logprobs, reference_context


def needs_reference_logprobs(algo) -> bool:
    """Whether an iteration needs the reference pass: a KL term in the loss or a KL penalty in the reward."""
    return algo.kl_coef > 0 or algo.kl_in_reward > 0


def scoring_group_size(group_size: int, minibatch_size: int) -> int:
    """Rows per shared prompt in a minibatch: G when minibatches hold whole groups, else 1."""
    return group_size if minibatch_size % group_size == 0 else 1


def batch_logprobs(model, batch: RolloutBatch, *, minibatch_size: int, group_size: int,
                   temperature: float) -> torch.Tensor:
    """log pi of every completion token of `batch` under `model` (the reference, or the sampling copy of
    one step off-policy), without gradient. -> [N, L-1], 0 outside the completion mask."""
    shared = scoring_group_size(group_size, minibatch_size)
    device = next(model.parameters()).device
    parts = []
    for minibatch in iter_minibatches(batch, minibatch_size, shuffle=False, device=device):
        logprobs, _ = compute_completion_logprobs(
            model, minibatch.input_ids, minibatch.attention_mask, minibatch.prompt_len,
            group_size=shared, enable_grad=False, temperature=temperature, with_entropy=False,
            completion_mask=minibatch.completion_mask,
        )  # [b, L-1]
        parts.append(logprobs.to(batch.completion_mask.device))
    return torch.cat(parts)  # [N, L-1]


def with_reference_logprobs(loaded: LoadedModel, batch: RolloutBatch, config) -> RolloutBatch:
    """A copy of `batch` holding the reference log-probs (the config's minibatch size and temperature)."""
    with reference_context(loaded) as reference:
        ref_logprobs = batch_logprobs(reference, batch, minibatch_size=config.optim.minibatch_size,
                                          group_size=config.rollout.group_size,
                                          temperature=config.rollout.temperature)  # [N, L-1]
    return batch.replace(ref_logprobs=ref_logprobs)
