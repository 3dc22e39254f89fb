"""The value stage of a PPO iteration, and the forward pass the update runs on each minibatch.

`with_old_values`: the value model's values for every completion token of the rollout batch, at
the weights that sampled it (GAE needs them before the advantages, so this is a pass of its own),
plus the sampling policy's log-probs when the KL penalty is in the reward (with a shared backbone
both come from the same pass). Run in the update's microbatches (`rlvr.training.microbatching`), each
group's prompt once.
`score_minibatch`: what the update needs of one minibatch: with a shared backbone log-probs and
values from one decoder pass, with a separate value model one pass of each, without one the
log-probs alone. `value_batch_metrics`: the sampling-time values against their returns, over
every rank's tokens.
"""

from __future__ import annotations

import torch

from rlvr.core import RolloutBatch, explained_variance_from_sums, explained_variance_sums
from rlvr.core.microbatches import scatter_per_token
from rlvr.observe.metric_names import EXPLAINED_VARIANCE, RETURN_MEAN, VALUE_MEAN
from rlvr.models.completion_logprobs import CompletionScores, compute_completion_logprobs, compute_completion_scores
from rlvr.models.value_model import ValueModel
from rlvr.parallel.distributed import SINGLE, Dist
from rlvr.training.microbatching import forward_group_size, training_microbatches


def score_minibatch(policy, value_model: ValueModel | None, minibatch: RolloutBatch, config, *,
                    with_logprobs: bool = True, with_entropy: bool = True, detach_value_input: bool = False,
                    enable_grad: bool = True) -> CompletionScores:
    """Log-probs, entropies (when asked) and values (with a value model) of `minibatch`, [b, L-1] each.

    `detach_value_input` (value warm-up with a shared backbone) trains the head alone.
    """
    common = dict(group_size=forward_group_size(config), enable_grad=enable_grad,
                  temperature=config.rollout.temperature, completion_mask=minibatch.completion_mask)
    args = (minibatch.input_ids, minibatch.attention_mask, minibatch.prompt_len)
    if value_model is None:
        logprobs, entropy = compute_completion_logprobs(policy, *args, with_entropy=with_entropy, **common)
        return CompletionScores(logprobs=logprobs, entropy=entropy, values=None)
    if value_model.separate is None:  # shared backbone: one decoder pass for both heads
        return compute_completion_scores(policy, *args, value_head=value_model.head, with_logprobs=with_logprobs,
                                         with_entropy=with_entropy, detach_value_input=detach_value_input, **common)
    values = compute_completion_scores(value_model.backbone(policy), *args, value_head=value_model.head,
                                       with_logprobs=False, **common).values  # [b, L-1]
    if not with_logprobs:
        return CompletionScores(logprobs=None, entropy=None, values=values)
    logprobs, entropy = compute_completion_logprobs(policy, *args, with_entropy=with_entropy, **common)
    return CompletionScores(logprobs=logprobs, entropy=entropy, values=values)


def with_old_values(policy, value_model: ValueModel, batch: RolloutBatch, config, *,
                    with_logprobs: bool) -> RolloutBatch:
    """A copy of `batch` holding old_values [N, L-1] (and old_logprobs [N, L-1] when `with_logprobs`)."""
    device = next(policy.parameters()).device
    values, logprobs = [], []
    for micro in training_microbatches(batch, config, device, group_size=forward_group_size(config)):
        scores = score_minibatch(policy, value_model, micro.batch, config, with_logprobs=with_logprobs,
                                 with_entropy=False, enable_grad=False)
        values.append((micro, scores.values))
        if with_logprobs:
            logprobs.append((micro, scores.logprobs))
    num_rows, width = batch.completion_mask.shape
    old_values = scatter_per_token(values, num_rows, width).to(batch.completion_mask.device)  # [N, L-1]
    old_logprobs = batch.old_logprobs
    if with_logprobs:
        old_logprobs = scatter_per_token(logprobs, num_rows, width).to(batch.completion_mask.device)
    return batch.replace(old_values=old_values, old_logprobs=old_logprobs)


def value_batch_metrics(batch: RolloutBatch, dist: Dist = SINGLE) -> dict[str, float]:
    """Mean old value, mean return and the explained variance of the old values, over every rank's tokens."""
    mask = batch.completion_mask
    sums = explained_variance_sums(batch.old_values, batch.returns, mask)  # [5]
    value_sum = torch.where(mask != 0, batch.old_values, torch.zeros_like(batch.old_values)).sum().double()
    totals = torch.cat([sums, value_sum[None]])  # [6]
    if dist.enabled:
        totals = dist.all_reduce(totals)
    count = float(totals[0])
    return {
        VALUE_MEAN: float(totals[5]) / count if count else float("nan"),
        RETURN_MEAN: float(totals[1]) / count if count else float("nan"),
        EXPLAINED_VARIANCE: float(explained_variance_from_sums(totals[:5])),
    }
