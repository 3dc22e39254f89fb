"""Microbatches cut to their own columns, packed by token budget, and scattered back.

The batch: 3 groups of 2 rows, prompts left-padded to 4 columns (group 0 has 2 real prompt tokens,
group 1 four, group 2 three), completions right-padded to 6 columns (lengths 1 2 | 6 3 | 2 4).
Every per-token field encodes (row, column) so a shifted or transposed cut shows.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.core import RolloutBatch, build_completion_mask
from rlvr.core.microbatches import (
    Microbatch,
    iter_microbatches,
    plan_microbatches,
    real_column_span,
    scatter_per_token,
    trim_columns,
)

PROMPT_LEN, WIDTH, GROUP = 4, 6, 2
PROMPT_TOKENS = [2, 2, 4, 4, 3, 3]
COMPLETION_LENGTHS = [1, 2, 6, 3, 2, 4]


def _batch() -> RolloutBatch:
    rows = len(PROMPT_TOKENS)
    attention = torch.zeros(rows, PROMPT_LEN + WIDTH, dtype=torch.long)
    for row, (prompt, completion) in enumerate(zip(PROMPT_TOKENS, COMPLETION_LENGTHS)):
        attention[row, PROMPT_LEN - prompt : PROMPT_LEN + completion] = 1
    input_ids = (torch.arange(rows)[:, None] * 100 + torch.arange(PROMPT_LEN + WIDTH) + 1) * attention
    completion_mask = build_completion_mask(input_ids, attention, PROMPT_LEN).double()  # [6, 9]
    code = torch.arange(rows)[:, None] * 1000.0 + torch.arange(PROMPT_LEN + WIDTH - 1)  # (row, column)
    return RolloutBatch(
        input_ids=input_ids, attention_mask=attention, prompt_len=PROMPT_LEN, completion_mask=completion_mask,
        old_logprobs=-code.double(), ref_logprobs=-2 * code.double(), rewards=torch.arange(rows).double(),
        advantages=code.double() + 0.5, group_ids=torch.arange(rows) // GROUP,
        sampler_logprobs=-3 * code.double(),
    )


def test_real_column_span_keeps_the_last_prompt_column_and_one_completion_column():
    batch = _batch()
    assert real_column_span(batch.attention_mask, PROMPT_LEN) == (0, PROMPT_LEN + 6)
    assert real_column_span(batch.attention_mask[:2], PROMPT_LEN) == (2, PROMPT_LEN + 2)  # group 0
    assert real_column_span(batch.attention_mask[4:], PROMPT_LEN) == (1, PROMPT_LEN + 4)  # group 2
    no_completion = batch.attention_mask[:1].clone()
    no_completion[:, PROMPT_LEN:] = 0
    assert real_column_span(no_completion, PROMPT_LEN) == (2, PROMPT_LEN + 1)


def test_trim_columns_cuts_every_field_at_the_same_tokens():
    batch = _batch().select([0, 1])  # group 0: columns 2..5 of the prompt and completion columns 4..5
    trimmed, first = trim_columns(batch)
    assert first == 2 and trimmed.prompt_len == 2
    assert trimmed.input_ids.shape == (2, 4) and trimmed.completion_mask.shape == (2, 3)
    assert torch.equal(trimmed.input_ids, batch.input_ids[:, 2:6])
    # Per-token column j of the cut is column first + j of the batch (it scores token first + j + 1).
    for name in ("completion_mask", "old_logprobs", "ref_logprobs", "sampler_logprobs", "advantages"):
        assert torch.equal(getattr(trimmed, name), getattr(batch, name)[:, 2:5]), name
    assert trimmed.completion_mask.sum() == batch.completion_mask.sum() == 3  # no completion token lost
    # The scored tokens are the same ones: the first completion token is scored at column P' - 1.
    assert trimmed.old_logprobs[0, trimmed.prompt_len - 1] == batch.old_logprobs[0, PROMPT_LEN - 1]
    assert torch.equal(trimmed.advantages[trimmed.completion_mask.bool()],
                       batch.advantages[batch.completion_mask.bool()])


def test_per_sequence_advantages_are_kept_whole():
    batch = _batch().select([0, 1])
    batch = batch.replace(advantages=torch.tensor([1.0, -1.0]))
    trimmed, _ = trim_columns(batch)
    assert torch.equal(trimmed.advantages, torch.tensor([1.0, -1.0]))


def test_plan_without_a_budget_is_runs_of_consecutive_rows():
    batch = _batch()
    assert plan_microbatches(batch.attention_mask, PROMPT_LEN, rows=4) == [[0, 1, 2, 3], [4, 5]]
    assert plan_microbatches(batch.attention_mask, PROMPT_LEN, rows=2) == [[0, 1], [2, 3], [4, 5]]


def test_plan_with_a_budget_packs_whole_groups_longest_first():
    batch = _batch()
    # Group widths (rows x columns): group 1: 2 x (0..10) = 20, group 2: 2 x (1..8) = 14, group 0: 2 x (2..6) = 8.
    # Longest first: group 1, then group 2 (with group 1: 4 x 10 = 40), then group 0 (6 x 10 = 60).
    attention = batch.attention_mask
    assert plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=2, token_budget=20) == [[2, 3], [4, 5], [0, 1]]
    # Group 2 with group 0: 4 x (1..8) = 28.
    assert plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=2, token_budget=28) == [[2, 3], [0, 1, 4, 5]]
    assert plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=2, token_budget=40) == [[2, 3, 4, 5], [0, 1]]
    assert plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=2, token_budget=60) == [[0, 1, 2, 3, 4, 5]]
    # A group wider than the budget is a microbatch of its own.
    assert plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=2, token_budget=1) == [[2, 3], [4, 5], [0, 1]]
    # Rows as units, by end column: row 2 (10), 5 (8), 3 (7), then 1 and 4 tie at 6 (row 1 first), 0 (5);
    # rows 1 and 4 fit together: 2 x (1..6) = 10.
    plan = plan_microbatches(attention, PROMPT_LEN, rows=99, group_size=1, token_budget=10)
    assert plan == [[2], [5], [3], [1, 4], [0]]


def test_plan_rejects_bad_arguments():
    attention = _batch().attention_mask
    with pytest.raises(ValueError, match="group_size=4 must divide"):
        plan_microbatches(attention, PROMPT_LEN, rows=2, group_size=4, token_budget=100)
    with pytest.raises(ValueError, match="token_budget=0"):
        plan_microbatches(attention, PROMPT_LEN, rows=2, token_budget=0)
    with pytest.raises(ValueError, match="rows=0"):
        plan_microbatches(attention, PROMPT_LEN, rows=0)


@pytest.mark.parametrize("budget", [None, 20, 28])
def test_scatter_puts_each_microbatch_back_at_its_rows_and_columns(budget):
    batch = _batch()
    micros = list(iter_microbatches(batch, rows=2, group_size=2, token_budget=budget))
    assert sorted(row for m in micros for row in m.rows.tolist()) == list(range(6))
    parts = [(m, m.batch.old_logprobs * m.batch.completion_mask) for m in micros]
    back = scatter_per_token(parts, len(batch), batch.completion_mask.shape[1])
    assert torch.equal(back, batch.old_logprobs * batch.completion_mask)
    assert torch.equal(scatter_per_token([(m, m.batch.completion_mask) for m in micros], 6, 9), batch.completion_mask)
    widths = sorted(m.batch.input_ids.shape[1] for m in micros)
    assert widths[0] < PROMPT_LEN + WIDTH  # some microbatch really is narrower than the batch


def test_scatter_refuses_missing_or_repeated_rows_and_overflow():
    batch = _batch()
    micros = list(iter_microbatches(batch, rows=2))
    parts = [(m, m.batch.completion_mask) for m in micros]
    with pytest.raises(ValueError, match="exactly one microbatch"):
        scatter_per_token(parts[:2], 6, 9)
    with pytest.raises(ValueError, match="exactly one microbatch"):
        scatter_per_token(parts + parts[:1], 6, 9)
    wide = Microbatch(batch=micros[0].batch, rows=micros[0].rows, first_column=8)
    with pytest.raises(ValueError, match="do not fit"):
        scatter_per_token([(wide, micros[0].batch.completion_mask)], 6, 9)
    with pytest.raises(ValueError, match="no microbatches"):
        scatter_per_token([], 6, 9)
