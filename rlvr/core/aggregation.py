"""Loss aggregation: how a [B, T] per-token loss becomes one scalar.

The choice is an algorithm knob, not a detail, because it decides how much each token of a long
or short completion weighs in the gradient. Three named modes live in `LOSS_AGGREGATIONS`:

* `seq_mean_token_mean` (original GRPO, Shao et al. 2024; CS336 HW4): each sequence is averaged
  over its own tokens, then sequences are averaged. Every sequence weighs the same, so a token of
  a short completion weighs more than one of a long completion. With negative advantages this
  favours long wrong answers (the penalty per token is diluted), the length bias Dr. GRPO points out.
* `token_mean` (DAPO, Yu et al. 2025): every completion token in the batch weighs the same.
  Long completions contribute proportionally more; no per-sequence length bias.
* `seq_mean_token_sum_norm` (Dr. GRPO, Liu et al. 2025): the per-sequence token sum is divided by
  a constant (typically max_new_tokens), then sequences are averaged. The constant does not depend
  on the sample, so no length bias at all; the gradient scale shrinks with the constant.

`num_sequences` / `num_tokens` replace the batch's own denominators by global counts. With them,
the losses of microbatches (or data-parallel ranks) add up to the loss of the whole batch, even
when token counts are ragged; without them, token_mean over microbatches is a mean of means.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

from rlvr.core.masks import _masked_values, masked_mean_per_row
from rlvr.registry import Registry

Count = Union[int, float, torch.Tensor]
AggregationFn = Callable[..., torch.Tensor]

LOSS_AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")


def _check_shapes(per_token_loss: torch.Tensor, mask: torch.Tensor) -> None:
    if per_token_loss.dim() != 2 or mask.shape != per_token_loss.shape:
        raise ValueError(
            f"per_token_loss {tuple(per_token_loss.shape)} and mask {tuple(mask.shape)} must both be [B, T]"
        )


@LOSS_AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    normalize_constant: float | None = None,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
) -> torch.Tensor:
    """GRPO's: mean_i [ sum_t m_it l_it / sum_t m_it ], every sequence weighs the same. [B, T] -> scalar.

    The outer mean divides by num_sequences if given. Sequences with no tokens contribute 0 (and still
    count in the denominator).
    """
    per_sequence = masked_mean_per_row(per_token_loss, mask)  # [B]
    denominator = per_token_loss.shape[0] if num_sequences is None else num_sequences
    return per_sequence.sum() / denominator


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    normalize_constant: float | None = None,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
) -> torch.Tensor:
    """DAPO's: sum_it m_it l_it / sum_it m_it, every token weighs the same. [B, T] -> scalar.

    The denominator is num_tokens if given. A batch with no tokens gives 0.
    """
    values, weights = _masked_values(per_token_loss, mask)  # [B, T]
    if num_tokens is None:
        token_count = weights.sum()
        return values.sum() / token_count.clamp(min=torch.finfo(token_count.dtype).tiny)
    return values.sum() / num_tokens


@LOSS_AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    normalize_constant: float | None = None,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
) -> torch.Tensor:
    """Dr. GRPO's: mean_i [ sum_t m_it l_it / C ], C = normalize_constant, no length bias. [B, T] -> scalar.

    C does not depend on the sample (the RL update passes rollout.max_new_tokens).
    """
    if normalize_constant is None:
        raise ValueError(
            "seq_mean_token_sum_norm needs normalize_constant (Dr. GRPO uses max_new_tokens, the generation budget)"
        )
    values, _ = _masked_values(per_token_loss, mask)  # [B, T]
    per_sequence = values.sum(-1) / normalize_constant  # [B]
    denominator = per_token_loss.shape[0] if num_sequences is None else num_sequences
    return per_sequence.sum() / denominator


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    normalize_constant: float | None = None,
    *,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
) -> torch.Tensor:
    """Reduce per_token_loss [B, T] under mask [B, T] to a scalar with the named mode.

    Modes: see `LOSS_AGGREGATIONS` and this module's docstring for the length bias of each.
    `normalize_constant` is required by (and only used by) `seq_mean_token_sum_norm`.
    Pass `num_sequences` (seq modes) or `num_tokens` (token_mean) as the counts of the whole
    optimizer batch to make microbatch losses sum to the full-batch loss.
    """
    _check_shapes(per_token_loss, mask)
    aggregate = LOSS_AGGREGATIONS.get(mode)
    return aggregate(
        per_token_loss,
        mask,
        normalize_constant=normalize_constant,
        num_sequences=num_sequences,
        num_tokens=num_tokens,
    )
