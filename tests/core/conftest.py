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


def _policy_batch(seed: int = 0):
    """(input_ids [4, 7], attention_mask, completion mask [4, 6] float64, advantages [4]) for a 3-token prompt."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, TINY_VOCAB, (4, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    mask = torch.ones(4, 6, dtype=torch.float64)
    mask[:, :2] = 0  # prompt of 3 tokens
    mask[1, 4:] = 0  # a shorter completion
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    return input_ids, attention_mask, mask, advantages


def _pop_gradients(model) -> list[torch.Tensor]:
    """The model's gradients, cloned; the model's are cleared."""
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


@pytest.fixture
def policy_batch():
    """Factory: policy_batch(seed=0) -> (input_ids, attention_mask, completion mask, advantages)."""
    return _policy_batch


@pytest.fixture
def pop_gradients():
    """pop_gradients(model) -> the model's gradients (cloned), clearing them."""
    return _pop_gradients
