"""Tests for completion masks, masked reductions, and CS336 prompt/output tokenization."""

from __future__ import annotations

import pytest
import torch

from rlvr.core import (
    build_completion_mask,
    masked_mean,
    masked_mean_per_row,
    masked_normalize,
    prompt_completion_rows,
)
from rlvr.compat.cs336 import tokenize_prompt_and_output

PAD = EOS = 2  # pad id equals EOS id, as with many chat models


def _rollout_layout():
    """Prompt width P = 4, completion width 5, L = 9. Rows:

    0: prompt of 2 real tokens (2 left pads), full 5-token completion;
    1: prompt of 4 tokens, completion of 2 tokens ending in EOS, then right padding (pad == EOS);
    2: prompt of 3 tokens, empty completion (all 5 completion slots padding);
    3: prompt of 4 tokens, 1 completion token.
    """
    prompt_len = 4
    prompt_lengths = [2, 4, 3, 4]
    completion_lengths = [5, 2, 0, 1]
    input_ids = torch.tensor(
        [
            [PAD, PAD, 11, 12, 21, 22, 23, 24, 25],
            [11, 12, 13, 14, 21, EOS, PAD, PAD, PAD],
            [PAD, 11, 12, 13, PAD, PAD, PAD, PAD, PAD],
            [11, 12, 13, 14, EOS, PAD, PAD, PAD, PAD],
        ]
    )
    attention_mask = torch.tensor(
        [
            [0, 0, 1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 0, 0, 0],
            [0, 1, 1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0, 0, 0],
        ]
    )
    return input_ids, attention_mask, prompt_len, prompt_lengths, completion_lengths


def test_completion_mask_cell_by_cell():
    input_ids, attention_mask, prompt_len, _, completion_lengths = _rollout_layout()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    assert mask.shape == (4, 8) and mask.dtype == torch.float32
    # Independent rule from the known completion lengths alone: completion token k (0-based) of
    # a row is token P + k, scored at column P + k - 1.
    expected = torch.zeros(4, 8)
    for row, length in enumerate(completion_lengths):
        for k in range(length):
            expected[row, prompt_len + k - 1] = 1.0
    assert torch.equal(mask, expected)
    # The same matrix written out by hand.
    assert mask.tolist() == [
        [0, 0, 0, 1, 1, 1, 1, 1],
        [0, 0, 0, 1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0, 0],
    ]
    # A mask that kept the prompt tokens or was aligned with the inputs would differ.
    keeps_prompt = attention_mask[:, 1:].float()
    input_aligned = attention_mask[:, :-1].float() * (torch.arange(8) >= prompt_len)
    assert not torch.equal(mask, keeps_prompt) and not torch.equal(mask, input_aligned)


def test_first_completion_token_is_column_prompt_len_minus_one():
    input_ids, attention_mask, prompt_len, _, completion_lengths = _rollout_layout()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    for row, length in enumerate(completion_lengths):
        assert mask[row, prompt_len - 2] == 0  # scores the last prompt token: never trained on
        assert mask[row, prompt_len - 1] == (1.0 if length > 0 else 0.0)  # first completion token
        assert mask[row].sum() == length


def test_pad_equal_to_eos_uses_attention_mask():
    input_ids, attention_mask, prompt_len, _, _ = _rollout_layout()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    # Row 1 generated EOS (token 5, column 4): it is a real completion token and is trained on,
    # although it has the pad id. The pads after it are not.
    assert mask[1, 4] == 1 and mask[1, 5:].sum() == 0
    # A rule based on token ids (id != pad) would drop the generated EOS.
    id_based = (input_ids[:, 1:] != PAD).float() * (torch.arange(1, 9) >= prompt_len)
    assert id_based[1, 4] == 0


def test_completion_mask_rejects_bad_prompt_len():
    input_ids, attention_mask, *_ = _rollout_layout()
    with pytest.raises(ValueError, match="prompt_len"):
        build_completion_mask(input_ids, attention_mask, 0)
    with pytest.raises(ValueError, match="prompt_len"):
        build_completion_mask(input_ids, attention_mask, 10)


def test_masked_reductions_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0, float("nan")], [4.0, float("inf"), -1e30, 0.0], [7.0, 8.0, 9.0, 10.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    # Row means: (1+2+3)/3 = 2, 4/1 = 4, empty row -> 0 (not NaN).
    assert masked_mean_per_row(values, mask).tolist() == [2.0, 4.0, 0.0]
    assert masked_mean(values, mask, dim=-1).tolist() == [2.0, 4.0, 0.0]
    # Over everything: (1+2+3+4)/4 = 2.5; garbage under the mask changes nothing.
    assert masked_mean(values, mask).item() == 2.5
    # Column means: (1+4)/2, 2/1, 3/1, empty column -> 0.
    assert masked_mean(values, mask, dim=0).tolist() == [2.5, 2.0, 3.0, 0.0]
    # Normalize: sums / constant: (6, 4, 0) / 2; total 10 / 4.
    assert masked_normalize(values, mask, dim=-1, normalize_constant=2.0).tolist() == [3.0, 2.0, 0.0]
    assert masked_normalize(values, mask, normalize_constant=4.0).item() == 2.5
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0
    # A plain tensor * mask would turn the garbage into NaN.
    assert torch.isnan((values * mask).sum())


def test_masked_mean_gradient_ignores_masked_positions():
    values = torch.tensor([[1.0, 2.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    masked_mean(values, mask).backward()
    assert values.grad.tolist() == [[0.5, 0.5, 0.0]]


def _word_tokenizer():
    """A whitespace word-level tokenizer that adds <bos> when special tokens are requested."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<bos>", "<unk>", "what", "is", "two", "plus", "two?", "four", "it", "hi"]
    vocab = {word: index for index, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>")


def test_tokenize_prompt_and_output_by_hand():
    tokenizer = _word_tokenizer()
    assert tokenizer.encode("hi") == [1, 10]  # the tokenizer does add <bos> by default
    out = tokenize_prompt_and_output(["what is two plus two?", "hi"], ["four", "it is four"], tokenizer)
    # Row 0: prompt [3 4 5 6 7] + output [8]       -> [3 4 5 6 7 8], length 6 (the max)
    # Row 1: prompt [10]        + output [9 4 8]   -> [10 9 4 8 0 0] (right-padded with <pad> = 0)
    assert out["input_ids"].tolist() == [[3, 4, 5, 6, 7], [10, 9, 4, 8, 0]]
    assert out["labels"].tolist() == [[4, 5, 6, 7, 8], [9, 4, 8, 0, 0]]
    # Labels that are output tokens: row 0 only the last (8); row 1 the first three (9, 4, 8).
    assert out["response_mask"].tolist() == [[False, False, False, False, True], [True, True, True, False, False]]


def test_losses_under_the_mask_ignore_prompt_and_padding_columns():
    from rlvr.core import aggregate_loss

    input_ids, attention_mask, prompt_len, _, completion_lengths = _rollout_layout()
    mask = build_completion_mask(input_ids, attention_mask, prompt_len)
    generator = torch.Generator().manual_seed(0)
    per_token = torch.randn(4, 8, generator=generator, dtype=torch.float64)
    # Completion columns: P - 1 .. P - 2 + length. Everything else gets garbage.
    garbage = torch.full_like(per_token, 1e6)
    for row, length in enumerate(completion_lengths):
        columns = slice(prompt_len - 1, prompt_len - 1 + length)
        garbage[row, columns] = per_token[row, columns]
    by_hand = sum(per_token[row, prompt_len - 1 : prompt_len - 1 + n].sum() for row, n in enumerate(completion_lengths))
    loss = aggregate_loss(garbage, mask, "token_mean")
    assert loss.item() == pytest.approx(by_hand.item() / sum(completion_lengths), abs=1e-9)


def test_prompt_completion_rows_left_pad_prompts_and_right_pad_completions():
    rows = [[5, 6], [7], []]  # the third prompt is empty
    completions = [[8, 9, 10], [11], [12, 13]]
    input_ids, attention_mask, prompt_len, mask = prompt_completion_rows(rows, completions, fill_id=PAD)
    # P = 2 (the empty prompt takes its completion's first token, which nothing before it can score).
    assert prompt_len == 2
    assert input_ids.tolist() == [[5, 6, 8, 9, 10], [PAD, 7, 11, PAD, PAD], [PAD, 12, 13, PAD, PAD]]
    assert attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0]]
    # Column t scores token t+1: completion tokens sit at columns >= P, so they are scored at >= P-1.
    assert mask.tolist() == [[0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]]
    assert mask.dtype == torch.float32
    with pytest.raises(ValueError, match="3 prompts but 2 completions"):
        prompt_completion_rows(rows, completions[:2], fill_id=PAD)
    with pytest.raises(ValueError, match="a prompt token and a completion token"):
        prompt_completion_rows([[1]], [[]], fill_id=PAD)
