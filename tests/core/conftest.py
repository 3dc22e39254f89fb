"""Shared fixtures for the rlvr.core tests: tiny randomly initialised causal LMs and toy models.

The Llama model is small enough to build in milliseconds, but its logits depend on every input
token and on the positions (initializer_range=0.5 makes that dependence strong), so wrong
alignment, masking or position handling changes the numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

TINY_VOCAB = 64


def _make_tiny_llama(dtype: torch.dtype = torch.float64, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.5,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


class RepeatTokenModel(torch.nn.Module):
    """Toy causal LM whose logits at position t put +20 on the id of token t, 0 elsewhere.

    It bets that the next token repeats the current one. On input_ids 0..L-1 every next token
    differs, so correctly aligned log-probs are about -20, while scoring token t with the logits
    at t (the off-by-one bug) gives about 0. Keyword arguments are recorded for inspection.
    """

    def __init__(self, vocab_size: int = TINY_VOCAB):
        super().__init__()
        self.vocab_size = vocab_size
        self.calls: list[dict] = []

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None):
        self.calls.append({"attention_mask": attention_mask, "position_ids": position_ids, "use_cache": use_cache})
        logits = 20.0 * torch.nn.functional.one_hot(input_ids, self.vocab_size).to(torch.float64)  # [B, L, V]
        return SimpleNamespace(logits=logits)


@pytest.fixture
def make_tiny_llama():
    """Factory: make_tiny_llama(dtype=torch.float64, seed=0) -> a fresh LlamaForCausalLM in eval mode."""
    return _make_tiny_llama


@pytest.fixture
def repeat_token_model():
    return RepeatTokenModel()
