"""How the training passes (update, reference, PPO values, the sampling copy's log-probs) split a batch.

Microbatches of `optim.minibatch_size` consecutive rows, or, with `optim.microbatch_tokens`, whole
groups packed longest first under that many padded tokens per microbatch; either way each
microbatch is cut to its own columns (`rlvr.core.microbatches`). A group's prompt is run once for
its G rows when every microbatch holds whole groups (`forward_group_size`).
"""

from __future__ import annotations

from typing import Iterator

import torch

from rlvr.core.microbatches import Microbatch, iter_microbatches


def forward_group_size(config, *, with_grad: bool = True) -> int:
    """Rows per shared prompt in a training pass: 1 for a pass with gradient under gradient checkpointing (which
    cannot share one prompt's cache across the group), G when microbatches hold whole groups, else 1."""
    group_size = config.rollout.group_size
    if with_grad and config.model.gradient_checkpointing:
        return 1
    if config.optim.microbatch_tokens is not None:
        return group_size
    return group_size if config.optim.minibatch_size % group_size == 0 else 1


def training_microbatches(batch, config, device: torch.device | str, *, group_size: int) -> Iterator[Microbatch]:
    """The microbatches of `batch` for a pass whose forward shares each prompt over `group_size` rows."""
    return iter_microbatches(batch, rows=config.optim.minibatch_size, group_size=group_size,
                             token_budget=config.optim.microbatch_tokens, device=device)
