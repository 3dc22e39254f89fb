"""CS336 assignment 5 (Spring 2025, "alignment and reasoning RL") functions, with the course's semantics.

Names, signatures and return values are the assignment's, so its adapters can call them
directly. Where the course's definition differs from the safe variant the training loop uses,
this module follows the course:

* `masked_mean` is sum(tensor * mask) / sum(mask): NaN where the mask is empty (the loop's
  `rlvr.core.masked_mean` gives 0 there), and a NaN or inf under the mask propagates.
* `masked_normalize` is sum(tensor * mask) / normalize_constant, garbage under the mask included.
* `grpo_microbatch_train_step` averages each row with this `masked_mean`, so a row without
  response tokens makes the loss NaN, as in the course.

Everything else delegates to `rlvr.core` (the same math the loop runs): the clipped surrogate,
REINFORCE, the log-prob kernel and entropy. The training loop and SFT never call this module: they
score completions through `rlvr.models.completion_logprobs`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from rlvr.core.logprobs import DEFAULT_MAX_CHUNK_BYTES, _logprobs_and_entropy, compute_entropy
from rlvr.core.policy_losses import Metrics, grpo_clip_loss, grpo_no_clip_loss, reinforce_per_token

__all__ = [
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "get_response_log_probs",
    "grpo_microbatch_train_step",
    "masked_mean",
    "masked_normalize",
    "sft_microbatch_train_step",
    "tokenize_prompt_and_output",
]

LOSS_TYPES = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip")


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(tensor * mask, dim) / sum(mask, dim), exactly: NaN where the mask sums to 0."""
    masked = tensor * mask
    if dim is None:
        return masked.sum() / mask.sum()
    return masked.sum(dim) / mask.sum(dim)


def masked_normalize(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                     normalize_constant: float = 1.0) -> torch.Tensor:
    """sum(tensor * mask, dim) / normalize_constant (dim=None sums everything)."""
    masked = tensor * mask
    return (masked.sum() if dim is None else masked.sum(dim)) / normalize_constant


def tokenize_prompt_and_output(
    prompt_strs: Sequence[str], output_strs: Sequence[str], tokenizer: Any
) -> dict[str, torch.Tensor]:
    """Tokenize prompts and outputs separately and concatenate them.

    Each row is prompt ids + output ids (no special tokens added), right-padded with
    `tokenizer.pad_token_id` to the longest row, length M. Returns
    input_ids [B, M-1] (the row without its last token), labels [B, M-1] (without its first token)
    and response_mask [B, M-1] bool, True where the label is an output token.
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"{len(prompt_strs)} prompts but {len(output_strs)} outputs")
    if tokenizer.pad_token_id is None:
        raise ValueError("tokenizer has no pad_token_id; set one (for example to the EOS id)")
    prompt_ids = [tokenizer.encode(text, add_special_tokens=False) for text in prompt_strs]
    output_ids = [tokenizer.encode(text, add_special_tokens=False) for text in output_strs]
    row_lengths = [len(p) + len(o) for p, o in zip(prompt_ids, output_ids)]
    max_len = max(row_lengths, default=0)
    if max_len < 2:
        raise ValueError("every batch needs at least one row of 2 or more tokens")
    full_ids = torch.full((len(prompt_ids), max_len), tokenizer.pad_token_id, dtype=torch.long)  # [B, M]
    is_output = torch.zeros((len(prompt_ids), max_len), dtype=torch.bool)  # [B, M]
    for row, (prompt, output) in enumerate(zip(prompt_ids, output_ids)):
        full_ids[row, : len(prompt) + len(output)] = torch.tensor(prompt + output, dtype=torch.long)
        is_output[row, len(prompt) : len(prompt) + len(output)] = True
    return {
        "input_ids": full_ids[:, :-1],  # [B, M-1]
        "labels": full_ids[:, 1:],  # [B, M-1]
        "response_mask": is_output[:, 1:],  # [B, M-1]
    }


def get_response_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
) -> dict[str, torch.Tensor]:
    """Log-probs of `labels` under `model(input_ids)`, unmasked.

    input_ids [B, L], labels [B, L] (already shifted, see `tokenize_prompt_and_output`) ->
    {"log_probs": [B, L], "token_entropy": [B, L] (only if requested)}.
    """
    logits = model(input_ids).logits  # [B, L, V]
    logprobs, _ = _logprobs_and_entropy(logits, labels, 1.0, DEFAULT_MAX_CHUNK_BYTES, with_entropy=False)
    result = {"log_probs": logprobs}  # [B, L]
    if return_token_entropy:
        result["token_entropy"] = compute_entropy(logits)  # [B, L]
    return result


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Group normalization. -> (advantages [N], raw_rewards [N], metadata).

    reward_fn(response, ground_truth) returns {"reward", "format_reward", "answer_reward"}.
    Rewards are viewed as [N / group_size, group_size]; A = (r - mean) / (std + eps) with torch's
    default sample std (n - 1), or A = r - mean when normalize_by_std is False. As specified there,
    group_size 1 with normalize_by_std gives NaN (the sample std of one value), and a group of
    equal rewards gives 0 / eps = 0 only up to float noise (the loop's estimators give exact 0).
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(f"{len(rollout_responses)} responses but {len(repeated_ground_truths)} ground truths")
    if not rollout_responses:
        raise ValueError("no rollout responses to score")
    if group_size < 1 or len(rollout_responses) % group_size != 0:
        raise ValueError(f"group_size {group_size} does not divide the number of responses {len(rollout_responses)}")
    scores = [reward_fn(response, truth) for response, truth in zip(rollout_responses, repeated_ground_truths)]
    raw_rewards = torch.tensor([float(score["reward"]) for score in scores], dtype=torch.float32)  # [N]
    grouped = raw_rewards.view(-1, group_size)  # [N / G, G], prompt-major
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [N / G, G]
    if normalize_by_std:
        grouped_advantages = centred / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    else:
        grouped_advantages = centred
    advantages = grouped_advantages.reshape(-1)  # [N]
    metadata = {
        "reward_mean": raw_rewards.mean().item(),
        "reward_std": raw_rewards.std().item() if raw_rewards.numel() > 1 else 0.0,
        "reward_max": raw_rewards.max().item(),
        "reward_min": raw_rewards.min().item(),
        "format_reward_mean": sum(float(s.get("format_reward", 0.0)) for s in scores) / len(scores),
        "answer_reward_mean": sum(float(s.get("answer_reward", 0.0)) for s in scores) / len(scores),
        "frac_groups_zero_std": (grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean().item(),
    }
    return advantages, raw_rewards, metadata


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor
) -> torch.Tensor:
    """-A * log pi per token. raw_rewards_or_advantages [B, 1] (or [B]), policy_log_probs [B, T] -> [B, T]."""
    return reinforce_per_token(raw_rewards_or_advantages, policy_log_probs)


def compute_grpo_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    cliprange: float,
    cliprange_high: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """-min(rho A, clip(rho, 1 - eps, 1 + eps) A) per token. -> (loss [B, T], metadata).

    metadata: the detached `ratio` and float flags `clipped_low`, `clipped_high`, `clipped`.
    `cliprange_high` (not in the course) gives DAPO's asymmetric clip-higher.
    """
    return grpo_clip_loss(policy_log_probs, old_log_probs, advantages, None, clip_low=cliprange,
                          clip_high=cliprange_high)


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Dispatch on `loss_type`. policy_log_probs [B, T] -> (loss [B, T], metadata).

    no_baseline: -raw_rewards * logp; reinforce_with_baseline: -advantages * logp;
    grpo_clip: `compute_grpo_clip_loss`; grpo_no_clip: -rho * advantages.
    """

    def need(name: str, value: object) -> None:
        if value is None:
            raise ValueError(f"loss_type {loss_type!r} needs {name}")

    if loss_type == "no_baseline":
        need("raw_rewards", raw_rewards)
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        need("advantages", advantages)
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        need("advantages", advantages)
        need("old_log_probs", old_log_probs)
        need("cliprange", cliprange)
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    if loss_type == "grpo_no_clip":
        need("advantages", advantages)
        need("old_log_probs", old_log_probs)
        return grpo_no_clip_loss(policy_log_probs, old_log_probs, advantages, None)
    raise ValueError(f"unknown loss_type {loss_type!r}; valid choices: {', '.join(LOSS_TYPES)}")


def _backward_scaled(batch_loss: torch.Tensor, gradient_accumulation_steps: int) -> torch.Tensor:
    """batch_loss / steps, backpropagated: over that many equal microbatches, the mean loss's gradient."""
    if isinstance(gradient_accumulation_steps, bool) or gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps!r}")
    loss = batch_loss / gradient_accumulation_steps
    loss.backward()
    return loss


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Policy-gradient loss of one microbatch, backpropagated. -> (scaled loss, metadata).

    loss = mean_i [ masked_mean over row i's response tokens of the per-token loss ]
           / gradient_accumulation_steps
    (this module's `masked_mean`: a row without response tokens gives NaN). policy_log_probs
    [B, T], response_mask [B, T]; the rest as in `compute_policy_gradient_loss`. metadata adds
    the unscaled `policy_loss`.
    """
    per_token_loss, metadata = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )  # [B, T]
    batch_loss = masked_mean(per_token_loss, response_mask, dim=-1).mean()  # mean over rows of [B]
    loss = _backward_scaled(batch_loss, gradient_accumulation_steps)
    return loss, {**metadata, "policy_loss": batch_loss.detach()}


def sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """Negative log-likelihood of one microbatch's response tokens, backpropagated.

    loss = -mean_i [ sum_t m_it logp_it / normalize_constant ] / gradient_accumulation_steps
    policy_log_probs [B, T], response_mask [B, T] -> (scaled loss, metadata).
    """
    per_sequence = masked_normalize(policy_log_probs, response_mask, dim=-1,
                                    normalize_constant=normalize_constant)  # [B]
    batch_loss = -per_sequence.mean()
    loss = _backward_scaled(batch_loss, gradient_accumulation_steps)
    metadata = {"nll": batch_loss.detach(), "num_response_tokens": response_mask.sum().detach()}
    return loss, metadata
