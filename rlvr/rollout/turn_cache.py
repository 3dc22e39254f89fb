"""Keys and values kept between an episode's turns, so a turn prefills only what is new.

The episode driver calls the backend once a turn with each live episode's whole conversation so
far. Without this, `decode_loop` prefills all of it every turn: a 7-turn episode prefills its
prompt 7 times. With it, the rows of one call leave their keys and values behind (`CachedRow`:
the token ids whose keys and values they are, and those, real positions only), and the next call
prefills only each row's new tokens (the last sampled token, which was never fed, and the
environment's reply) on top of them.

Reuse is by content: a held row is used for a new row whose ids it is a strict prefix of, so a
mismatch (a turn cut to the episode's budget, another episode's conversation) falls back to a
full prefill, never to wrong keys. Keys and values depend on the weights, so the cache lives for
one outermost `backend.sync()` block and is emptied when the block closes (the weights change
after it). Each call replaces what is held: memory is one call's rows.

`plan_prefill` lays a batch out for one forward: each row is
    [pad][its held positions][pad][its new tokens]
with the held keys and values right-aligned in a past of width W (the longest held row) and the
new tokens left-padded to S (the longest new part); the attention mask marks both paddings and
positions count real tokens only, so the forward sees what a full prefill of the row would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CachedRow:
    """Keys and values of `ids`, in order: per layer [kv_heads, len(ids), head_dim]."""

    ids: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


@dataclass
class PrefillPlan:
    """One batch's prefill on top of held rows (B rows; W held, S new positions)."""

    past_keys: list[torch.Tensor]  # per layer [B, kv_heads, W, head_dim]
    past_values: list[torch.Tensor]  # per layer [B, kv_heads, W, head_dim]
    new_ids: torch.Tensor  # [B, S] left-padded
    mask: torch.Tensor  # [B, W + S] 1 = real position
    reused: int  # positions taken from held rows
    prefilled: int  # positions the forward computes


class TurnCache:
    """The previous call's rows; `match` finds the held row a new prompt continues."""

    def __init__(self) -> None:
        self.rows: list[CachedRow] = []
        self.reused_tokens = 0  # positions not prefilled again since the last clear
        self.prefilled_tokens = 0  # positions prefilled since the last clear

    def match(self, prompt: list[int]) -> CachedRow | None:
        """The longest held row whose ids are a strict prefix of `prompt` (a new token must remain)."""
        best = None
        for row in self.rows:
            size = len(row.ids)
            if size < len(prompt) and (best is None or size > len(best.ids)) and tuple(prompt[:size]) == row.ids:
                best = row
        return best

    def plan(self, prompts: list[list[int]], pad_id: int) -> PrefillPlan | None:
        """The prefill of `prompts` (each row's real ids) on the rows they continue, None when they continue
        none (a plain prefill); counts the positions reused and prefilled either way."""
        held = [self.match(prompt) for prompt in prompts]
        plan = plan_prefill(prompts, held, pad_id) if any(row is not None for row in held) else None
        reused = plan.reused if plan is not None else 0
        self.reused_tokens += reused
        self.prefilled_tokens += sum(len(prompt) for prompt in prompts) - reused
        return plan

    def store(self, rows: list[CachedRow]) -> None:
        self.rows = rows

    def clear(self) -> None:
        self.rows = []


def plan_prefill(prompts: list[list[int]], held: list[CachedRow | None], pad_id: int) -> PrefillPlan:
    """The layout above for `prompts` (each row's real ids), `held[i]` the row prompt i continues or None."""
    reference = next(row for row in held if row is not None)
    layers = len(reference.keys)
    heads, head_dim = reference.keys[0].shape[0], reference.keys[0].shape[2]
    dtype, device = reference.keys[0].dtype, reference.keys[0].device
    rows = len(prompts)
    kept = [len(row.ids) if row is not None else 0 for row in held]  # [B]
    width = max(kept)
    new_width = max(len(prompt) - size for prompt, size in zip(prompts, kept))
    past_keys = [torch.zeros(rows, heads, width, head_dim, dtype=dtype, device=device) for _ in range(layers)]
    past_values = [torch.zeros_like(keys) for keys in past_keys]
    new_ids = torch.full((rows, new_width), pad_id, dtype=torch.long)  # [B, S]
    mask = torch.zeros(rows, width + new_width, dtype=torch.long)  # [B, W + S]
    for index, (prompt, row, size) in enumerate(zip(prompts, held, kept)):
        if row is not None:
            for layer in range(layers):
                past_keys[layer][index, :, width - size:] = row.keys[layer]
                past_values[layer][index, :, width - size:] = row.values[layer]
            mask[index, width - size:width] = 1
        new = prompt[size:]
        new_ids[index, new_width - len(new):] = torch.tensor(new, dtype=torch.long)
        mask[index, width + new_width - len(new):] = 1
    reused = sum(kept)
    return PrefillPlan(past_keys, past_values, new_ids, mask, reused=reused,
                       prefilled=sum(len(prompt) for prompt in prompts) - reused)
