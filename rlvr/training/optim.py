"""The optimizer and its learning-rate schedule, shared by RL, SFT and expert iteration.

Each loop sizes the schedule by its own number of optimizer steps (RL: iterations x epochs;
SFT: epochs x steps per epoch; expert iteration: an upper bound over its rounds).
"""

from __future__ import annotations

import math

import torch


def make_optimizer(params, optim) -> torch.optim.Optimizer:
    """AdamW over `params` with the `optim` section's settings (an `OptimConfig`)."""
    return torch.optim.AdamW(
        params, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=optim.eps, weight_decay=optim.weight_decay,
    )


def make_scheduler(optimizer, optim, total_steps: int):
    """Linear warm-up over `optim.warmup_steps` optimizer steps, then constant / linear / cosine to `total_steps`."""
    warmup, schedule = optim.warmup_steps, optim.schedule

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
