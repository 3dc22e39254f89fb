"""benchmarks/comparisons/vllm_agreement.py's two measurements on a tiny model (needs vLLM: `pytest -m vllm`).

The greedy comparison must find a planted divergence (an engine that samples from other weights) and
the first-token TV distance must sit at the sampling-noise floor for the same weights and far above
it for other ones.
"""

from __future__ import annotations

import copy

import pytest
import torch

from benchmarks.comparisons.vllm_agreement import first_token_agreement, greedy_agreement
from rlvr.config import load_config
from rlvr.models import load_policy
from rlvr.rollout import ROLLOUT_BACKENDS
from rlvr.testing import build_tiny_model, build_tiny_tokenizer

pytestmark = pytest.mark.vllm

PROMPTS = ["say a 1", "b", "say cc 22", "q 9"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("head32") / "model"
    build_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    loaded = load_policy(str(folder))
    rollout = load_config(None, [f"model.name={folder}", "rollout.backend=vllm",
                                 "rollout.backend_options.max_model_len=128"]).rollout
    backend = ROLLOUT_BACKENDS.get("vllm").build(loaded, rollout)
    yield loaded, backend
    backend.close()


def test_same_weights_agree_and_other_weights_are_found(engine):
    loaded, backend = engine
    same = greedy_agreement(loaded.policy, loaded.tokenizer, backend, PROMPTS, 8)
    assert same["equal"] == len(PROMPTS) and same["diverged"] == []
    sampled = first_token_agreement(loaded.policy, loaded.tokenizer, backend, PROMPTS[0], 3000, 1.0, 8, 0)
    assert sampled["tokens_outside_top_k"] == 0.0
    assert sampled["tv_distance"] < 2.5 * sampled["tv_of_exact_samples_max"]
    # Against other weights (the engine keeps sampling from its own policy) both measurements see it.
    other = copy.deepcopy(loaded.policy)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(3.0)
    differs = greedy_agreement(other, loaded.tokenizer, backend, PROMPTS, 8)
    assert differs["equal"] < len(PROMPTS) and differs["diverged"][0]["position"] >= 0
    stale = first_token_agreement(other, loaded.tokenizer, backend, PROMPTS[0], 3000, 1.0, 8, 0)
    assert stale["tv_distance"] > 4 * stale["tv_of_exact_samples_max"]
