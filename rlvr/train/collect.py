"""One rollout batch: sample G completions for B prompts, score them, compute advantages.

Returns a `RolloutBatch` whose old log-probs are left empty (the first update epoch is exactly
on-policy, so they are the detached log-probs of that epoch) and whose reference log-probs are
computed only when the KL coefficient is above 0.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from rlvr.core import (
    RolloutBatch,
    build_completion_mask,
    get_advantage_estimator,
    maybe_normalize_advantages,
)
from rlvr.core.completion_logprobs import compute_completion_logprobs
from rlvr.models.merge import merged_adapter
from rlvr.models.sharding import unsharded
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
from rlvr.tasks.judging import judge
from rlvr.train.distributed import SINGLE, check_divisible, normalize_advantages_global


@dataclass
class Scored:
    """Everything about one round of sampled groups, before it becomes a RolloutBatch."""

    examples: list
    prompts: list[str]
    input_ids: list[torch.Tensor] = field(default_factory=list)  # per group: [G, L_g]
    attention_mask: list[torch.Tensor] = field(default_factory=list)
    prompt_len: list[int] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)
    verdicts: list[list] = field(default_factory=list)
    lengths: list[torch.Tensor] = field(default_factory=list)
    truncated: list[torch.Tensor] = field(default_factory=list)


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to L_max - buffer, then linear down to -factor at L_max."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_new_tokens - buffer
    over = (lengths.float() - start).clamp(min=0)  # [N]
    return -factor * (over / buffer).clamp(max=1.0)


def _pad_left_right(tensors: list[torch.Tensor], prompt_lens: list[int], fill: int) -> tuple[torch.Tensor, int]:
    """Stack per-round [G, P_r + C_r] tensors into one [N, P + C] with prompts aligned at column P."""
    width_prompt = max(prompt_lens)
    width_completion = max(t.shape[1] - p for t, p in zip(tensors, prompt_lens))
    rows = []
    for tensor, p in zip(tensors, prompt_lens):
        left = width_prompt - p
        right = width_completion - (tensor.shape[1] - p)
        rows.append(torch.nn.functional.pad(tensor, (left, right), value=fill))
    return torch.cat(rows, dim=0), width_prompt


def sample_round(policy, tokenizer, task, examples, config, timings: dict) -> Scored:
    rollout = config.rollout
    generate = ROLLOUT_BACKENDS.get(rollout.backend)
    settings = SamplingSettings(
        max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
        top_k=rollout.top_k, min_p=rollout.min_p,
        stop_strings=tuple(rollout.stop_strings) or tuple(getattr(task, "stop_strings", ())),
        share_prompt_prefill=rollout.share_prompt_prefill,
    )
    prompts = render_prompts(tokenizer, examples, config.task.use_chat_template)
    started = time.perf_counter()
    with merged_adapter(policy, rollout.merge_lora):
        generation = generate(policy, tokenizer, prompts, rollout.group_size, settings)
    timings["generation"] = timings.get("generation", 0.0) + time.perf_counter() - started
    started = time.perf_counter()
    group = rollout.group_size
    scored = Scored(examples=list(examples), prompts=prompts)
    for g, example in enumerate(examples):
        rows = slice(g * group, (g + 1) * group)
        texts = generation.completion_texts[rows]
        scored.input_ids.append(generation.input_ids[rows])
        scored.attention_mask.append(generation.attention_mask[rows])
        scored.prompt_len.append(generation.prompt_len)
        scored.texts.append(texts)
        scored.verdicts.append([judge(task, text, example) for text in texts])
        scored.lengths.append(generation.completion_lengths[rows])
        scored.truncated.append(generation.truncated[rows])
    timings["scoring"] = timings.get("scoring", 0.0) + time.perf_counter() - started
    return scored


def _group_totals(verdicts: list, lengths: torch.Tensor, algo, max_new_tokens: int) -> torch.Tensor:
    totals = torch.tensor([v.total for v in verdicts], dtype=torch.float32)  # [G]
    return totals + overlong_penalty(lengths, max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)


def collect_rollout_batch(policy, tokenizer, task, config, iteration: int, reference_ctx=None, dist=SINGLE):
    """Sample, score and (with DAPO dynamic sampling) filter until B groups are kept.

    Data-parallel (`dist`): each rank samples its contiguous share of each round's B prompts and
    keeps B / world_size groups; rounds go on until B groups are kept over all ranks, and the
    stats are computed on every rank's groups. Returns (batch, prompt_len, stats, timings,
    samples): this rank's batch, plain floats for metrics.jsonl, and all ranks' samples.
    """
    rollout, algo = config.rollout, config.algorithm
    quota = check_divisible(dist, rollout.batch_size)  # groups this rank keeps
    timings: dict[str, float] = {}
    kept_groups: list[tuple[Scored, int]] = []
    degenerate_pool: list[tuple[Scored, int]] = []
    rounds = 0
    sampled_groups = 0
    max_rounds = algo.dynamic_sampling_max_rounds if algo.dynamic_sampling else 1

    def kept_everywhere() -> int:  # a collective: every rank runs the same number of rounds
        return int(dist.sum_scalar(len(kept_groups))) if dist.enabled else len(kept_groups)

    # FSDP: the layers are gathered once for all rounds, so ranks that sample more rounds or more
    # decoding steps than others need no collectives (a no-op for an unsharded model).
    with unsharded(policy):
        while kept_everywhere() < rollout.batch_size and rounds < max_rounds:
            seed = (config.train.seed * 1_000_003 + iteration) * 101 + rounds
            rounds += 1
            if len(kept_groups) >= quota:
                continue  # this rank is full; the others still sample
            examples = dist.shard(task.examples("train", rollout.batch_size, seed))
            scored = sample_round(policy, tokenizer, task, examples, config, timings)
            for g in range(len(examples)):
                sampled_groups += 1
                totals = _group_totals(scored.verdicts[g], scored.lengths[g], algo, rollout.max_new_tokens)
                finite = totals[torch.isfinite(totals)]
                degenerate = finite.numel() < 2 or bool((finite.max() - finite.min()).abs() < 1e-6)
                if algo.dynamic_sampling and degenerate:
                    degenerate_pool.append((scored, g))
                elif len(kept_groups) < quota:
                    kept_groups.append((scored, g))
    filled = 0
    while len(kept_groups) < quota:  # dynamic sampling ran out of rounds
        kept_groups.append(degenerate_pool.pop(0))
        filled += 1

    # Assemble the batch in prompt-major order.
    fill_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, prompt_len = _pad_left_right([s.input_ids[g] for s, g in kept_groups],
                                            [s.prompt_len[g] for s, g in kept_groups], fill_id)
    attention_mask, _ = _pad_left_right([s.attention_mask[g] for s, g in kept_groups],
                                        [s.prompt_len[g] for s, g in kept_groups], 0)
    verdicts = [v for s, g in kept_groups for v in s.verdicts[g]]
    lengths = torch.cat([s.lengths[g] for s, g in kept_groups])  # [N]
    truncated = torch.cat([s.truncated[g] for s, g in kept_groups])  # [N]
    texts = [t for s, g in kept_groups for t in s.texts[g]]
    group = rollout.group_size
    num_rows = len(verdicts)
    rewards = torch.cat([_group_totals(s.verdicts[g], s.lengths[g], algo, rollout.max_new_tokens)
                         for s, g in kept_groups])  # [N]

    # Unscorable completions (no judgeable component) get a singleton group: advantage exactly 0.
    group_ids = torch.arange(num_rows) // group  # [N]
    scorable = torch.isfinite(rewards)  # [N]
    unscorable_rows = (~scorable).nonzero().flatten()
    group_ids[unscorable_rows] = num_rows + torch.arange(unscorable_rows.numel())
    safe_rewards = torch.where(scorable, rewards, torch.zeros_like(rewards))
    estimator = get_advantage_estimator(algo.advantage_estimator)
    advantages = estimator(safe_rewards, group_ids=group_ids, std=algo.std)  # [N]
    advantages = torch.where(scorable, advantages, torch.zeros_like(advantages))
    if dist.enabled:
        advantages = normalize_advantages_global(dist, advantages, algo.normalize_advantages)
    else:
        advantages = maybe_normalize_advantages(advantages, algo.normalize_advantages)
    if algo.advantage_clip > 0:
        advantages = advantages.clamp(-algo.advantage_clip, algo.advantage_clip)

    completion_mask = build_completion_mask(input_ids, attention_mask, prompt_len)  # [N, L-1]
    ref_logprobs = None
    if algo.kl_coef > 0:
        started = time.perf_counter()
        step = config.optim.minibatch_size
        group_size = group if step % group == 0 else 1
        with reference_ctx() as reference_model:
            ref_logprobs = torch.cat([
                compute_completion_logprobs(reference_model, input_ids[i : i + step], attention_mask[i : i + step],
                                            prompt_len, group_size=group_size, enable_grad=False,
                                            temperature=rollout.temperature, with_entropy=False,
                                            completion_mask=completion_mask[i : i + step])[0]
                for i in range(0, num_rows, step)
            ])  # [N, L-1], 0 on prompt columns
        timings["logprobs"] = timings.get("logprobs", 0.0) + time.perf_counter() - started

    batch = RolloutBatch(
        input_ids=input_ids, attention_mask=attention_mask, completion_mask=completion_mask,
        old_logprobs=None, ref_logprobs=ref_logprobs, rewards=safe_rewards, advantages=advantages,
        group_ids=torch.arange(num_rows) // group, task_names=[task.name] * num_rows, completion_texts=texts,
    )
    samples = [
        {"prompt": s.prompts[g], "ground_truth": s.examples[g].ground_truth, "completion": s.texts[g][j],
         "components": s.verdicts[g][j].components, "reward": s.verdicts[g][j].total,
         "status": s.verdicts[g][j].status, "advantage": float(advantages[i * group + j])}
        for i, (s, g) in enumerate(kept_groups) for j in range(group)
    ]
    if dist.enabled:  # stats over every rank's groups, in rank order (the one-process order)
        shares = dist.gather((verdicts, rewards, advantages, lengths, truncated, sampled_groups, filled, samples))
        verdicts = [v for share in shares for v in share[0]]
        rewards, advantages, lengths, truncated = (torch.cat([share[k] for share in shares]) for k in range(1, 5))
        sampled_groups, filled = sum(share[5] for share in shares), sum(share[6] for share in shares)
        samples = [record for share in shares for record in share[7]]
    stats = _rollout_stats(kept_groups, verdicts, rewards, advantages, lengths, truncated, group,
                           sampled_groups, filled, rounds, algo.dynamic_sampling)
    return batch, prompt_len, stats, timings, samples


def _rollout_stats(kept_groups, verdicts, rewards, advantages, lengths, truncated, group,
                   sampled_groups, filled, rounds, dynamic_sampling) -> dict:
    finite = rewards[torch.isfinite(rewards)]
    grouped = rewards.view(-1, group)  # [B, G]
    zero_var = 0
    for row in grouped:
        row = row[torch.isfinite(row)]
        zero_var += int(row.numel() < 2 or float(row.max() - row.min()) < 1e-6)
    stats = {
        "reward/mean": float(finite.mean()) if finite.numel() else math.nan,
        "reward/std": float(finite.std(unbiased=False)) if finite.numel() else math.nan,
        "reward/max": float(finite.max()) if finite.numel() else math.nan,
        "frac_zero_variance_groups": zero_var / grouped.shape[0],
        "frac_nonzero_advantages": float((advantages.abs() > 1e-8).float().mean()),
        "advantage/abs_mean": float(advantages.abs().mean()),
        "unscorable": int((~torch.isfinite(rewards)).sum()),
        "truncated_frac": float(truncated.float().mean()),
        "completion_len/mean": float(lengths.float().mean()),
        "completion_len/max": int(lengths.max()),
        "correct_frac": sum(v.correct for v in verdicts) / len(verdicts),
        "num_sequences": len(verdicts),
        "generated_tokens": int(lengths.sum()),
    }
    for name in verdicts[0].components:
        values = torch.tensor([v.components[name] for v in verdicts], dtype=torch.float32)
        values = values[torch.isfinite(values)]
        stats[f"reward/{name}"] = float(values.mean()) if values.numel() else math.nan
    statuses = [v.status for v in verdicts]
    for status in ("unjudgeable", "timeout", "error"):
        stats[f"status/{status}"] = statuses.count(status)
    if dynamic_sampling:
        stats["dynamic_sampling/rounds"] = rounds
        stats["dynamic_sampling/sampled_groups"] = sampled_groups
        stats["dynamic_sampling/filled_degenerate"] = filled
    return stats
