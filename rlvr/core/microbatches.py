"""Microbatches of a rollout batch without padding columns, formed by row count or by token budget.

Every row of a `RolloutBatch` is as wide as the batch: prompts left-padded to the longest prompt,
completions right-padded to the longest completion. A microbatch needs only its own rows' width,
so `trim_columns` cuts the columns that are padding in every one of its rows (prompt columns left
of its earliest real token, completion columns right of its longest row). The forward pass then
computes nothing for them, and the numbers of the kept columns are the same (causal attention and
positions taken from the attention mask do not see masked columns).

`plan_microbatches` forms the microbatches: consecutive runs of `rows` rows (the batch order), or,
with a token budget, units of `group_size` rows (whole groups, so a group's prompt is still run
once) sorted longest first and packed while rows x width stays within the budget (verl's dynamic
batch size, OpenRLHF's packing). A unit wider than the budget is a microbatch of its own.
`scatter_per_token` puts the microbatches' per-token results back into the batch's [N, L-1] layout.

Losses that divide by the batch's global sequence and token counts sum to the same full-batch loss
and gradient for any partition of the rows, so neither trimming nor packing changes an update
beyond float rounding; a loss that uses statistics of its microbatch (the top-entropy selection,
clip_cov, kl_cov) selects among the tokens of the microbatch it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from rlvr.core.batch import RolloutBatch

PER_TOKEN_FIELDS = ("completion_mask", "old_logprobs", "ref_logprobs", "old_values", "returns", "sampler_logprobs")


@dataclass(frozen=True)
class Microbatch:
    """Rows of a batch cut to their own columns: `batch` holds the batch's rows `rows` [b], and its
    column j is the batch's column `first_column + j` (per-token columns likewise)."""

    batch: RolloutBatch
    rows: torch.Tensor
    first_column: int


def real_column_span(attention_mask: torch.Tensor, prompt_len: int) -> tuple[int, int]:
    """Columns [first, end) of [n, L] rows that hold any real token: first <= P-1 (the last prompt
    column scores the first completion token) and end >= P+1 (at least one completion column)."""
    real = attention_mask != 0  # [n, L]
    prompt_cols = real[:, :prompt_len].any(0).nonzero()  # [p, 1]
    first = min(int(prompt_cols[0]) if prompt_cols.numel() else prompt_len - 1, prompt_len - 1)
    completion_cols = real[:, prompt_len:].any(0).nonzero()  # [c, 1]
    end = prompt_len + (int(completion_cols[-1]) + 1 if completion_cols.numel() else 1)
    return first, end


def cut_columns(batch: RolloutBatch, first: int, end: int) -> RolloutBatch:
    """Columns [first, end) of every token field, [first, end - 1) of every per-token field."""
    changes = dict(input_ids=batch.input_ids[:, first:end], attention_mask=batch.attention_mask[:, first:end],
                   prompt_len=batch.prompt_len - first)
    for name in PER_TOKEN_FIELDS:
        value = getattr(batch, name)
        if value is not None:
            changes[name] = value[:, first : end - 1]
    if batch.advantages is not None and batch.advantages.dim() == 2:
        changes["advantages"] = batch.advantages[:, first : end - 1]
    return batch.replace(**changes)


def trim_columns(batch: RolloutBatch) -> tuple[RolloutBatch, int]:
    """`batch` without the columns that are padding in every row, and the batch column its column 0 is."""
    first, end = real_column_span(batch.attention_mask, batch.prompt_len)
    return cut_columns(batch, first, end), first


def plan_microbatches(attention_mask: torch.Tensor, prompt_len: int, *, rows: int, group_size: int = 1,
                      token_budget: int | None = None) -> list[list[int]]:
    """Row indices of each microbatch, each list ascending (a group's rows stay contiguous).

    Without `token_budget`: runs of `rows` consecutive rows. With it: units of `group_size`
    consecutive rows, longest completion first (ties: earlier unit first), packed while (rows in
    the microbatch) x (its trimmed width) <= token_budget. attention_mask [N, L].
    """
    num_rows = attention_mask.shape[0]
    if token_budget is None:
        if rows < 1:
            raise ValueError(f"rows={rows} must be >= 1")
        return [list(range(start, min(start + rows, num_rows))) for start in range(0, num_rows, rows)]
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget} must be >= 1")
    if group_size < 1 or num_rows % group_size:
        raise ValueError(f"group_size={group_size} must divide the number of rows {num_rows}")
    spans = [real_column_span(attention_mask[start : start + group_size], prompt_len)
             for start in range(0, num_rows, group_size)]  # (first, end) per unit
    order = sorted(range(len(spans)), key=lambda unit: (-spans[unit][1], unit))
    plans, current, first, end = [], [], 0, 0
    for unit in order:
        unit_first, unit_end = spans[unit]
        if current:
            merged_first, merged_end = min(first, unit_first), max(end, unit_end)
            if (len(current) + 1) * group_size * (merged_end - merged_first) <= token_budget:
                current.append(unit)
                first, end = merged_first, merged_end
                continue
            plans.append(current)
        current, (first, end) = [unit], (unit_first, unit_end)
    if current:
        plans.append(current)
    return [[unit * group_size + offset for unit in sorted(plan) for offset in range(group_size)] for plan in plans]


def iter_microbatches(batch: RolloutBatch, *, rows: int, group_size: int = 1, token_budget: int | None = None,
                      device: torch.device | str | None = None) -> Iterator[Microbatch]:
    """The microbatches of `plan_microbatches`, each trimmed (`trim_columns`) and moved to `device`."""
    for row_list in plan_microbatches(batch.attention_mask, batch.prompt_len, rows=rows, group_size=group_size,
                                      token_budget=token_budget):
        index = torch.tensor(row_list, dtype=torch.long)  # [b]
        trimmed, first = trim_columns(batch.select(index))
        yield Microbatch(batch=trimmed if device is None else trimmed.to(device), rows=index, first_column=first)


def scatter_per_token(parts: list[tuple[Microbatch, torch.Tensor]], num_rows: int, width: int) -> torch.Tensor:
    """Per-token results [b, l-1] of microbatches back into the batch's layout [num_rows, width] (0 elsewhere).
    Every row must come from exactly one microbatch."""
    if not parts:
        raise ValueError("scatter_per_token: no microbatches")
    out = parts[0][1].new_zeros(num_rows, width)  # [N, L-1]
    seen = torch.zeros(num_rows, dtype=torch.long)
    for micro, values in parts:
        columns = values.shape[1]
        if values.shape[0] != micro.rows.numel() or micro.first_column + columns > width:
            raise ValueError(f"scatter_per_token: values {tuple(values.shape)} do not fit rows "
                             f"{micro.rows.numel()} at column {micro.first_column} of width {width}")
        out[micro.rows.to(out.device), micro.first_column : micro.first_column + columns] = values.to(out.device)
        seen[micro.rows] += 1
    if not bool((seen == 1).all()):
        raise ValueError("scatter_per_token: every row must come from exactly one microbatch")
    return out
