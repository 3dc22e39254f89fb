"""Completion masks, masked reductions, and token lists laid out as prompt / completion rows.

Masks follow the log-prob alignment of `rlvr.core.logprobs`: column t of a [B, L-1] mask refers to
token t+1. Padding is read from the attention mask, never from token ids (pad may equal EOS).
Masked reductions use `torch.where`, so masked positions may hold anything (inf, NaN) harmlessly.
"""

from __future__ import annotations

from typing import Sequence

import torch


def build_completion_mask(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int
) -> torch.Tensor:
    """1.0 at column t when token t+1 is a real (non-padding) completion token. -> float [B, L-1].

    Layout: prompts left-padded to width `prompt_len`, completions right-padded after them, so
    token t+1 is a completion token iff t+1 >= prompt_len and attention_mask[:, t+1] == 1. The
    first completion token sits at column prompt_len - 1. A row whose completion is empty is all 0.
    """
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must both be [B, L]"
        )
    seq_len = input_ids.shape[1]
    if not 1 <= prompt_len <= seq_len:
        raise ValueError(f"prompt_len must be in [1, {seq_len}], got {prompt_len}")
    target_is_real = attention_mask[:, 1:] != 0  # [B, L-1]: token t+1 is not padding
    target_position = torch.arange(1, seq_len, device=input_ids.device)  # [L-1]: index of token t+1
    target_is_completion = target_position >= prompt_len  # [L-1]
    return (target_is_real & target_is_completion).float()  # [B, L-1]


def _masked_values(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tensor * mask with masked positions exactly 0, mask in the tensor's dtype)."""
    weights = mask.to(torch.promote_types(tensor.dtype, torch.float32))  # [...]
    zero = torch.zeros((), dtype=weights.dtype, device=tensor.device)
    return torch.where(weights != 0, tensor * weights, zero), weights


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(tensor * mask, dim) / sum(mask, dim), the safe variant the training loop uses.

    dim=None averages over every element. Where the mask sums to 0 the result is 0, not NaN, and
    values under the mask (NaN, inf) never reach the result. CS336's definition, NaN for an empty
    mask, is `rlvr.compat.cs336.masked_mean`.
    """
    values, weights = _masked_values(tensor, mask)
    if dim is None:
        total, count = values.sum(), weights.sum()
    else:
        total, count = values.sum(dim), weights.sum(dim)
    safe_count = torch.where(count != 0, count, torch.ones_like(count))
    return torch.where(count != 0, total / safe_count, torch.zeros_like(total))


def masked_mean_per_row(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over the last dimension. [B, T] -> [B]; rows with an all-zero mask give 0."""
    return masked_mean(tensor, mask, dim=-1)  # [B]


def masked_normalize(
    tensor: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    normalize_constant: float = 1.0,
) -> torch.Tensor:
    """sum(tensor * mask, dim) / normalize_constant (dim=None sums everything); garbage under the mask is ignored."""
    values, _ = _masked_values(tensor, mask)
    total = values.sum() if dim is None else values.sum(dim)
    return total / normalize_constant


def prompt_completion_rows(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], fill_id: int
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Token lists in the rollout layout: each prompt left-padded to width P, its completion right-padded after.

    -> (input_ids [N, P+C] long, attention_mask [N, P+C] long, P, completion_mask [N, P+C-1] float), the
    layout `build_completion_mask` and the completion log-prob path read: completion token k of row i sits
    at column P+k and is scored at column P+k-1. A row with an empty prompt has nothing to score its first
    completion token from, so that token is taken as the prompt (and not scored).
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    prompts, completions = [], []
    for prompt, completion in zip(prompt_ids, completion_ids):
        prompt, completion = list(prompt), list(completion)
        if not prompt and completion:
            prompt, completion = completion[:1], completion[1:]
        prompts.append(prompt)
        completions.append(completion)
    width_prompt = max((len(p) for p in prompts), default=0)
    width_completion = max((len(c) for c in completions), default=0)
    if width_prompt < 1 or width_completion < 1:
        raise ValueError("every batch needs a prompt token and a completion token to score")
    num_rows, width = len(prompts), width_prompt + width_completion
    input_ids = torch.full((num_rows, width), fill_id, dtype=torch.long)  # [N, P+C]
    attention_mask = torch.zeros((num_rows, width), dtype=torch.long)  # [N, P+C]
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        start, end = width_prompt - len(prompt), width_prompt + len(completion)
        input_ids[row, start:end] = torch.tensor(prompt + completion, dtype=torch.long)
        attention_mask[row, start:end] = 1
    completion_mask = build_completion_mask(input_ids, attention_mask, width_prompt)  # [N, P+C-1]
    return input_ids, attention_mask, width_prompt, completion_mask


QUANTILE_MAX_ELEMENTS = 2**24  # torch.quantile refuses larger inputs; above it the same value comes from a sort


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """The highest-entropy share of the masked tokens (Wang et al. 2025, arXiv 2506.01939). [B, T] -> bool [B, T].

    As TRL's `top_entropy_quantile`: the threshold is the (1 - fraction) quantile (linear
    interpolation) of the masked tokens' entropies, and a masked token is kept when its entropy is
    >= the threshold, so ties at the threshold are all kept. fraction=1 keeps every masked token;
    an all-zero mask keeps none. The entropy is read detached.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if entropy.shape != mask.shape:
        raise ValueError(f"entropy {tuple(entropy.shape)} and mask {tuple(mask.shape)} differ in shape")
    valid = mask != 0  # [B, T]
    if fraction >= 1.0 or not bool(valid.any()):
        return valid
    values = entropy.detach()[valid]  # [n]
    if values.numel() <= QUANTILE_MAX_ELEMENTS:
        threshold = torch.quantile(values, 1.0 - fraction)
    else:
        ordered = values.sort().values  # [n]
        position = (1.0 - fraction) * (ordered.numel() - 1)
        below = int(position)
        above = min(below + 1, ordered.numel() - 1)
        threshold = torch.lerp(ordered[below], ordered[above], position - below)
    return valid & (entropy.detach() >= threshold)  # [B, T]
