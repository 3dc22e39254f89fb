"""The policy update over one rollout batch: `ppo_epochs` optimizer steps, each accumulated
over `grad_accum_steps` microbatches that together cover the whole batch.

Because every epoch is exactly one optimizer step, the first epoch runs at the sampling
policy: its detached log-probs are the old log-probs (ratio exactly 1), and no separate
old-log-prob forward pass is needed. Microbatch losses use the global sequence / token counts
of the batch, so their sum is the full-batch loss for every aggregation mode.
"""

from __future__ import annotations

import math
import time

import torch

from rlvr.core import (
    POLICY_LOSSES,
    aggregate_loss,
    iter_minibatches,
    kl_per_token,
)
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.train.distributed import SINGLE, reduce_metric_sums
from rlvr.train.fsdp import clip_grad_norm
from rlvr.train.metrics import MetricSums


def scoring_group_size(config, minibatch_size: int) -> int:
    """Rows per shared prompt in a minibatch: G when minibatches hold whole groups, else 1."""
    group = config.rollout.group_size
    return group if minibatch_size % group == 0 else 1


def update_policy(policy, optimizer, scheduler, batch, prompt_len: int, config, trainable_params,
                  dist=SINGLE) -> tuple[dict, dict]:
    """Run the epochs over `batch` (completions start at column `prompt_len`); returns (metrics, counters).

    Data-parallel (`dist`): `batch` is this rank's share; the loss denominators are the global
    counts and gradients are summed over ranks, so the step is the one-process step on all shares
    (with FSDP, FSDP sums the sharded layers' gradients during backward and the rest are summed here).
    """
    algo, optim, rollout = config.algorithm, config.optim, config.rollout
    loss_fn = POLICY_LOSSES.get(algo.policy_loss)
    num_sequences = len(batch)
    num_tokens = batch.completion_mask.sum()
    if dist.enabled:
        num_sequences = int(dist.sum_scalar(num_sequences))
        num_tokens = dist.all_reduce(num_tokens)
    sums = MetricSums()
    counters = {"optimizer_steps": 0, "skipped_nonfinite_updates": 0}
    first_epoch_ratio_dev = 0.0  # max |ratio - 1| in the on-policy epoch: 0 unless something is off
    old_logprobs = batch.old_logprobs
    device = next(policy.parameters()).device
    num_tokens = num_tokens.to(device)
    # Dropout is off (see rlvr.models), so train mode is deterministic; it is what gradient
    # checkpointing needs, and checkpointing cannot share one prompt's cache across the group.
    policy.train(True)
    group_size = 1 if config.model.gradient_checkpointing else scoring_group_size(config, optim.minibatch_size)
    for epoch in range(algo.ppo_epochs):
        collected_old = []
        epoch_loss = torch.zeros(())
        for minibatch in iter_minibatches(batch, optim.minibatch_size, shuffle=False, device=device):
            mask = minibatch.completion_mask  # [b, L-1]
            logprobs, entropy = compute_completion_logprobs(
                policy, minibatch.input_ids, minibatch.attention_mask, prompt_len,
                group_size=group_size, temperature=rollout.temperature, with_entropy=epoch == 0,
                completion_mask=mask,
            )  # [b, L-1] each, 0 outside the completion mask
            if old_logprobs is None:
                minibatch_old = logprobs.detach()  # first epoch: exactly the sampling policy
                collected_old.append(minibatch_old.to(batch.completion_mask.device))
            else:
                minibatch_old = minibatch.old_logprobs
            per_token, loss_metrics = loss_fn(
                logprobs, minibatch_old, minibatch.advantages, mask,
                clip_low=algo.clip_low, clip_high=algo.clip_high,
            )  # [b, L-1]
            sums.add_masked("policy_loss_per_token", per_token, mask)
            if algo.kl_coef > 0:
                kl = kl_per_token(logprobs, minibatch.ref_logprobs, estimator=algo.kl_estimator)  # [b, L-1]
                per_token = per_token + algo.kl_coef * kl
                if epoch == 0:
                    sums.add_masked("kl", kl, mask)
            if algo.entropy_coef > 0:
                per_token = per_token - algo.entropy_coef * entropy
            loss = aggregate_loss(
                per_token, mask, algo.loss_aggregation, normalize_constant=rollout.max_new_tokens,
                num_sequences=num_sequences, num_tokens=num_tokens,
            )
            loss.backward()
            epoch_loss = epoch_loss + loss.detach().cpu()
            if epoch == 0:
                sums.add_masked("entropy", entropy, mask)
            for flag in ("clipped_low", "clipped_high"):
                if flag in loss_metrics:
                    sums.add_masked(f"clip_frac/{flag.split('_')[1]}", loss_metrics[flag], mask)
            if "ratio" in loss_metrics:
                sums.add_masked("ratio/mean", loss_metrics["ratio"], mask)
                if epoch == 0:
                    deviation = ((loss_metrics["ratio"].detach() - 1).abs() * mask).max()
                    first_epoch_ratio_dev = max(first_epoch_ratio_dev, float(deviation))
        if old_logprobs is None:
            old_logprobs = torch.cat(collected_old)  # [N, L-1], reused by later epochs
            batch.old_logprobs = old_logprobs
        dist.sum_gradients(trainable_params)  # after this every rank holds the global gradient
        grad_norm = clip_grad_norm(trainable_params, optim.max_grad_norm, dist)  # global norm, FSDP shards too
        loss_value = dist.sum_scalar(float(epoch_loss)) if dist.enabled else float(epoch_loss)
        sums.add("loss", loss_value)
        if dist.all_true(math.isfinite(loss_value) and math.isfinite(float(grad_norm))):
            optimizer.step()
            scheduler.step()
            counters["optimizer_steps"] += 1
            sums.add("grad_norm", float(grad_norm))
        else:
            counters["skipped_nonfinite_updates"] += 1
        optimizer.zero_grad(set_to_none=True)
    policy.train(False)
    reduce_metric_sums(dist, sums)
    if dist.enabled:
        first_epoch_ratio_dev = dist.max_scalar(first_epoch_ratio_dev)
    metrics = sums.reduce()
    metrics["lr"] = scheduler.get_last_lr()[0]
    metrics["ratio/first_epoch_max_dev"] = first_epoch_ratio_dev
    return metrics, counters
