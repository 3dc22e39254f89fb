"""The update stage of an RL iteration: `ppo_epochs` passes over one rollout batch, each pass
`config.steps_per_epoch` (k) optimizer steps. A step takes the next `minibatch_size *
grad_accum_steps` rows in batch order (all of them when k = 1), accumulated over microbatches
(`rlvr.training.microbatching`: `grad_accum_steps` of `minibatch_size` rows, or packed by
`optim.microbatch_tokens`), each cut to its own rows' columns so padding is not computed.

With k = 1 the first epoch runs at the sampling policy: its detached log-probs are the old
log-probs (ratio exactly 1), and no separate old-log-prob forward pass is needed; they are kept
here for the later epochs, and the batch is left as it was given (a batch that already holds old
log-probs, from PPO's value stage, uses those). With k > 1 the policy moves after the first step
of the first epoch, so the old log-probs are computed once per rollout batch, before any step,
by a no-grad pass over the whole batch in the update's own microbatches (`batch_logprobs`), and
every step's ratio is against them. Microbatch losses use the global sequence / token counts of
their step's rows, so their sum is that step's loss for every aggregation mode. With a value model (PPO) the loss adds
`vf_coef` times the clipped value loss, aggregated the same way; during the value warm-up it is
the value loss alone (with a shared backbone only the head learns, so the policy stays put).
With `algorithm.entropy_top_fraction` < 1 only the highest-entropy share of each minibatch's
completion tokens carries the policy loss (the KL term stays on every token). Every metric the
loss returns is logged: its known ones under their names, any other as `policy_loss/<name>`.
When the rollout backend reported its own log-probs (`batch.sampler_logprobs`), the first epoch
logs their gap to the trainer's, and the policy loss of every token is weighted by the importance-sampling
correction `rollout.correction` (default tis_token: min(pi_old / pi_sampler, rollout.tis_cap); off with tis_cap=0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.core import (
    LOSS_OPTIONS,
    POLICY_LOSSES,
    RolloutBatch,
    aggregate_loss,
    draws_tokens_at_random,
    kl_per_token,
    loss_options,
    top_entropy_mask,
    sampler_gap,
    SAMPLER_CORRECTIONS,
    mismatch_ratio_out,
    value_loss,
)
from rlvr.observe.metric_names import (
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    CLIP_FRAC_TRUST_REGION,
    ENTROPY,
    ENTROPY_SELECTED_FRAC,
    GRAD_NORM,
    KL,
    LOSS,
    LR,
    POLICY_LOSS_PER_TOKEN,
    RATIO_FIRST_EPOCH_MAX_DEV,
    RATIO_MEAN,
    MISMATCH_KL,
    MISMATCH_RATIO_OUT_FRAC,
    SAMPLER_LOGPROB_ABS_DIFF_MAX,
    SAMPLER_LOGPROB_ABS_DIFF_MEAN,
    SURPRISAL,
    IS_CAPPED_FRAC,
    IS_DROPPED_FRAC,
    IS_WEIGHT_MEAN,
    VALUE_CLIP_FRAC,
    VALUE_LOSS_PER_TOKEN,
    policy_loss_metric,
)
from rlvr.models.value_model import ValueModel
from rlvr.parallel.distributed import SINGLE, reduce_metric_sums
from rlvr.parallel.fsdp import clip_grad_norm
from rlvr.observe.metrics import MetricSums
from rlvr.core.microbatches import scatter_per_token
from rlvr.training.gradient_buffers import GradientBuffers
from rlvr.training.microbatching import forward_group_size, training_microbatches
from rlvr.training.reference import batch_logprobs
from rlvr.training.values import score_minibatch, value_batch_metrics


@dataclass(frozen=True)
class UpdateResult:
    """What one update did: metric means over the batch and the optimizer step counts."""

    metrics: dict[str, float]  # policy loss, KL, entropy, clip fractions, ratio, loss, grad norm, lr, value/*
    optimizer_steps: int
    skipped_nonfinite_updates: int  # steps whose loss or gradient norm was not finite


def update_policy(policy, optimizer, scheduler, batch: RolloutBatch, config, trainable_params,
                  dist=SINGLE, value_model: ValueModel | None = None, value_warmup: bool = False) -> UpdateResult:
    """Run the epochs over `batch` (completions start at column `batch.prompt_len`).

    Data-parallel (`dist`): `batch` is this rank's share; the loss denominators are the global
    counts and gradients are summed over ranks, so the step is the one-process step on all shares
    (with FSDP, FSDP sums the sharded layers' gradients during backward and the rest are summed here).
    `value_model` (PPO): `batch` holds old_values and returns; `value_warmup` trains the value alone.
    """
    algo, rollout = config.algorithm, config.rollout
    if batch.advantages is None:
        raise ValueError("the batch has no advantages: run the advantage stage (with_advantages) first")
    if value_model is not None and (batch.old_values is None or batch.returns is None):
        raise ValueError("a value model needs the batch's old_values and returns "
                         "(with_old_values, then with_advantages)")
    if value_warmup and value_model is None:
        raise ValueError("value_warmup trains the value model alone, and there is no value model")
    steps = config.steps_per_epoch  # optimizer steps per pass over the batch
    if len(batch) % steps:
        raise ValueError(f"this rank's {len(batch)} rows cannot be cut into optim.steps_per_epoch = {steps} equal "
                         f"optimizer steps; make rollout.batch_size / world size * rollout.group_size a multiple of it")
    sums = MetricSums()
    optimizer_steps = skipped = 0
    first_step_ratio_dev = 0.0  # max |ratio - 1| in the first step, on-policy: 0 unless something is off
    sampler_gap_max = 0.0  # max |logp_sampler - logp_trainer| over the batch's tokens
    device = next(policy.parameters()).device
    generator = token_generator(algo)  # None unless the loss draws tokens at random
    if steps > 1 and batch.old_logprobs is None and not value_warmup:
        # The policy moves after the first step: every step's ratio is against the sampling policy's log-probs.
        batch = batch.replace(old_logprobs=batch_logprobs(policy, batch, config, as_update=True))  # [N, L-1]
    epoch_batch = batch  # k = 1, from the second epoch on: a copy that holds the first epoch's log-probs as old
    # Each step's loss denominators (its sequences and completion tokens over every rank), the same every epoch.
    step_counts = [dict(normalize_constant=rollout.max_new_tokens,
                        **_step_counts(_step_part(batch, step, steps), dist, device)) for step in range(steps)]
    # Dropout is off (see rlvr.models), so train mode is deterministic; it is what gradient
    # checkpointing needs, and checkpointing cannot share one prompt's cache across the group.
    policy.train(True)
    if value_model is not None:
        value_model.train(True)
    buffers = GradientBuffers(trainable_params)
    try:
        for epoch in range(algo.ppo_epochs):
            collected_old = []
            for step in range(steps):
                part, counts = _step_part(epoch_batch, step, steps), step_counts[step]
                buffers.allocate()  # before the first forward (see rlvr.training.gradient_buffers)
                step_loss = torch.zeros(())
                for micro in training_microbatches(part, config, device, group_size=forward_group_size(config)):
                    minibatch = micro.batch  # its rows, cut to their own columns
                    mask = minibatch.completion_mask  # [b, l-1]
                    scores = score_minibatch(policy, value_model, minibatch, config, with_logprobs=not value_warmup,
                                             with_entropy=epoch == 0 or needs_entropy_every_epoch(algo),
                                             detach_value_input=value_warmup)  # [b, L-1] each
                    loss = torch.zeros((), device=device)
                    if not value_warmup:
                        if part.old_logprobs is None:
                            minibatch_old = scores.logprobs.detach()  # first epoch: exactly the sampling policy
                            collected_old.append((micro, minibatch_old))
                        else:
                            minibatch_old = minibatch.old_logprobs
                        per_token, ratio_dev = _policy_terms(scores, minibatch_old, minibatch, algo, epoch, sums,
                                                             generator, rollout, on_policy=epoch == 0 and step == 0)
                        first_step_ratio_dev = max(first_step_ratio_dev, ratio_dev)
                        if epoch == 0 and minibatch.sampler_logprobs is not None:
                            sampler_gap_max = max(sampler_gap_max, _log_sampler_gap(minibatch_old, minibatch, sums))
                        loss = aggregate_loss(per_token, mask, algo.loss_aggregation, **counts)
                    if value_model is not None:
                        value_part, value_metrics = value_loss(scores.values, minibatch.old_values, minibatch.returns,
                                                               mask, algo.value_clip or None, algo.loss_aggregation,
                                                               **counts)
                        loss = loss + algo.vf_coef * value_part
                        sums.add_masked(VALUE_LOSS_PER_TOKEN, value_metrics["per_token_loss"], mask)
                        sums.add_masked(VALUE_CLIP_FRAC, value_metrics["clipped"], mask)
                    loss.backward()
                    step_loss = step_loss + loss.detach().cpu()
                buffers.drop_unreached()  # grad None where no backward reached, as the optimizer and ranks expect
                dist.sum_gradients(trainable_params)  # after this every rank holds the global gradient
                # the global norm, FSDP shards too
                grad_norm = clip_grad_norm(trainable_params, config.optim.max_grad_norm, dist)
                loss_value = dist.sum_scalar(float(step_loss)) if dist.enabled else float(step_loss)
                sums.add(LOSS, loss_value)
                if dist.all_true(math.isfinite(loss_value) and math.isfinite(float(grad_norm))):
                    optimizer.step()
                    scheduler.step()
                    optimizer_steps += 1
                    sums.add(GRAD_NORM, float(grad_norm))
                else:
                    skipped += 1
                optimizer.zero_grad(set_to_none=True)
            if epoch_batch.old_logprobs is None and collected_old:
                old = scatter_per_token(collected_old, len(batch), batch.completion_mask.shape[1])  # [N, L-1]
                epoch_batch = batch.replace(old_logprobs=old.to(batch.completion_mask.device))  # for later epochs
    finally:
        buffers.close()
    policy.train(False)
    if value_model is not None:
        value_model.train(False)
    if algo.kl_in_reward > 0 and algo.kl_coef == 0:  # the KL is in the reward only: log it at sampling time
        sums.add_masked(KL, kl_per_token(batch.old_logprobs, batch.ref_logprobs, estimator=algo.kl_estimator),
                        batch.completion_mask)
    reduce_metric_sums(dist, sums)
    if dist.enabled:
        first_step_ratio_dev = dist.max_scalar(first_step_ratio_dev)
        sampler_gap_max = dist.max_scalar(sampler_gap_max)
    metrics = sums.reduce()
    if batch.sampler_logprobs is not None and not value_warmup:
        metrics[SAMPLER_LOGPROB_ABS_DIFF_MAX] = sampler_gap_max
    metrics[LR] = scheduler.get_last_lr()[0]
    metrics[RATIO_FIRST_EPOCH_MAX_DEV] = first_step_ratio_dev
    if value_model is not None:
        metrics.update(value_batch_metrics(batch, dist))
    return UpdateResult(metrics=metrics, optimizer_steps=optimizer_steps, skipped_nonfinite_updates=skipped)


def _step_part(batch: RolloutBatch, step: int, steps: int) -> RolloutBatch:
    """The rows of optimizer step `step` of `steps` in one pass: the next len(batch) / steps rows in batch order."""
    if steps == 1:
        return batch
    rows = len(batch) // steps
    return batch.select(torch.arange(step * rows, (step + 1) * rows))


def _step_counts(part: RolloutBatch, dist, device) -> dict:
    """The loss denominators of one optimizer step: its sequences and completion tokens, over every rank."""
    num_sequences = len(part)
    num_tokens = part.completion_mask.sum()
    if dist.enabled:
        num_sequences = int(dist.sum_scalar(num_sequences))
        num_tokens = dist.all_reduce(num_tokens)
    return dict(num_sequences=num_sequences, num_tokens=num_tokens.to(device))


# Loss metrics with a name of their own; any other metric a loss returns is `policy_loss/<its key>`.
LOSS_METRIC_NAMES = {"ratio": RATIO_MEAN, "clipped_low": CLIP_FRAC_LOW, "clipped_high": CLIP_FRAC_HIGH}


def needs_entropy_every_epoch(algo) -> bool:
    """Whether later epochs need the entropies too (the bonus, or the top-entropy token selection)."""
    return algo.entropy_coef > 0 or algo.entropy_top_fraction < 1


def token_generator(algo) -> torch.Generator | None:
    """A CPU generator for a loss that selects tokens at random, seeded from torch's global RNG.

    The global RNG state is saved in every checkpoint, so a resumed run draws the same seeds; a
    loss that draws nothing leaves the global RNG untouched.
    """
    if not draws_tokens_at_random(POLICY_LOSSES.get(algo.policy_loss)):
        return None
    seed = int(torch.randint(0, 2**62, (1,)))
    return torch.Generator().manual_seed(seed)


def log_loss_metrics(sums: MetricSums, loss_metrics: dict[str, torch.Tensor], mask: torch.Tensor) -> None:
    """Every metric a loss returns: [b, T] tensors as token means over `mask`, scalars as they are."""
    for key, value in loss_metrics.items():
        name = LOSS_METRIC_NAMES.get(key, policy_loss_metric(key))
        if value.dim() == 0:
            sums.add(name, value)
        else:
            sums.add_masked(name, value, mask)


def _log_sampler_gap(trainer_logprobs: torch.Tensor, minibatch: RolloutBatch, sums: MetricSums) -> float:
    """Adds the mean |logp_sampler - logp_trainer| and the sampler KL to `sums`; returns the largest |gap|."""
    mask = minibatch.completion_mask  # [b, L-1]
    gap = sampler_gap(trainer_logprobs, minibatch.sampler_logprobs)  # [b, L-1] each
    sums.add_masked(SAMPLER_LOGPROB_ABS_DIFF_MEAN, gap.abs_diff, mask)
    sums.add_masked(MISMATCH_KL, gap.kl, mask)
    sums.add_masked(MISMATCH_RATIO_OUT_FRAC, mismatch_ratio_out(trainer_logprobs, minibatch.sampler_logprobs), mask)
    return float((gap.abs_diff * mask).max()) if mask.numel() else 0.0


def _policy_terms(scores, old_logprobs: torch.Tensor, minibatch: RolloutBatch, algo, epoch: int,
                  sums: MetricSums, generator: torch.Generator | None = None,
                  rollout=None, on_policy: bool | None = None) -> tuple[torch.Tensor, float]:
    """The per-token policy loss (weighted by `rollout.correction` when the sampler's log-probs are there and
    rollout.tis_cap > 0) plus the KL and entropy terms, [b, L-1], and max |ratio - 1| when `on_policy` (the first
    optimizer step; default: the first epoch); adds the policy metrics to `sums`. The once-per-row metrics
    (entropy, surprisal, KL, correction weights) are logged in the first epoch; the ratio's on every epoch."""
    on_policy = epoch == 0 if on_policy is None else on_policy
    mask = minibatch.completion_mask  # [b, L-1]
    ratio = torch.exp(scores.logprobs.detach() - old_logprobs)  # [b, L-1]
    outside = (ratio < 1 - algo.clip_low) | (ratio > 1 + algo.clip_high)  # [b, L-1], whichever branch the loss takes
    sums.add_masked(CLIP_FRAC_TRUST_REGION, outside.to(mask.dtype), mask)
    loss_fn = POLICY_LOSSES.get(algo.policy_loss)
    options = loss_options(loss_fn, {name: getattr(algo, name) for name in LOSS_OPTIONS})
    if generator is not None:
        options["generator"] = generator
    per_token, loss_metrics = loss_fn(
        scores.logprobs, old_logprobs, minibatch.advantages, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
        **options,
    )  # [b, L-1]
    if minibatch.sampler_logprobs is not None and rollout is not None and rollout.tis_cap > 0:
        correct = SAMPLER_CORRECTIONS.get(rollout.correction)
        weights = correct(old_logprobs, minibatch.sampler_logprobs, mask, rollout.tis_cap)  # [b, L-1], detached
        per_token = per_token * weights
        if epoch == 0:
            sums.add_masked(IS_WEIGHT_MEAN, weights, mask)
            sums.add_masked(IS_CAPPED_FRAC, (weights >= rollout.tis_cap).float(), mask)
            sums.add_masked(IS_DROPPED_FRAC, (weights == 0).float(), mask)
    if algo.entropy_top_fraction < 1:
        selected = top_entropy_mask(scores.entropy, mask, algo.entropy_top_fraction)  # [b, L-1] bool
        per_token = torch.where(selected, per_token, torch.zeros_like(per_token))  # [b, L-1]
        if epoch == 0:
            sums.add_masked(ENTROPY_SELECTED_FRAC, selected.float(), mask)
    sums.add_masked(POLICY_LOSS_PER_TOKEN, per_token, mask)
    # The KL to the reference: in the loss with kl_coef > 0; logged alone with log_kl (PPO's KL in the reward,
    # without a KL term, is logged from the sampling-time log-probs instead: update_policy's end).
    if algo.kl_coef > 0 or (algo.log_kl and algo.kl_in_reward == 0):
        kl = kl_per_token(scores.logprobs, minibatch.ref_logprobs, estimator=algo.kl_estimator)  # [b, L-1]
        if algo.kl_coef > 0:
            per_token = per_token + algo.kl_coef * kl
        if epoch == 0:
            sums.add_masked(KL, kl.detach(), mask)
    if algo.entropy_coef > 0:
        per_token = per_token - algo.entropy_coef * scores.entropy
    if epoch == 0:
        sums.add_masked(ENTROPY, scores.entropy, mask)
        sums.add_masked(SURPRISAL, -old_logprobs, mask)  # the sampling policy's, whatever step this is
    log_loss_metrics(sums, loss_metrics, mask)
    ratio_dev = 0.0
    if "ratio" in loss_metrics and on_policy:
        ratio_dev = float(((loss_metrics["ratio"].detach() - 1).abs() * mask).max())
    return per_token, ratio_dev
