"""The `decode_loop` rollout backend against `hf_generate` and against the model's own softmax.

Greedy decoding must give the same tokens, lengths, truncation flags and texts as Hugging Face
`generate`, with rows finishing at different steps (EOS, one- and two-character stop strings),
which exercises dropping finished rows from the KV cache. Sampling must draw from the filtered
softmax: first-token frequencies over many rows are compared with the model's probabilities.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_policy
from rlvr.rollout import SamplingSettings, decode_loop, hf_generate
from rlvr.rollout.decode_loop import filter_scores

PROMPTS = ["say a 1", "say bb 22 long prompt here", "c"]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_policy(str(tiny_model_dir))


@pytest.fixture(scope="module")
def eos_biased(tiny_model_dir):
    """The tiny model with the EOS output row set to 1.5x the row of '0': EOS wins where '0' led."""
    model = load_policy(str(tiny_model_dir))
    tokenizer = model.tokenizer
    head = model.policy.get_output_embeddings().weight
    with torch.no_grad():
        head[tokenizer.eos_token_id] = 1.5 * head[tokenizer.convert_tokens_to_ids("0")]
    return model


def _same(a, b):
    assert a.completion_lengths.tolist() == b.completion_lengths.tolist()
    assert a.truncated.tolist() == b.truncated.tolist()
    assert a.completion_texts == b.completion_texts
    width = int(a.completion_lengths.max()) + a.prompt_len
    assert torch.equal((a.input_ids * a.attention_mask)[:, :width], (b.input_ids * b.attention_mask)[:, :width])
    assert torch.equal(a.attention_mask[:, :width], b.attention_mask[:, :width])


@pytest.mark.parametrize("group_size", [1, 3])
@pytest.mark.parametrize("stops", [(), ("0",), ("u0",)])
def test_greedy_equals_hf_generate_with_rows_finishing_early(loaded, group_size, stops):
    settings = SamplingSettings(max_new_tokens=12, do_sample=False, stop_strings=stops)
    ours = decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, group_size, settings)
    reference = hf_generate(loaded.policy, loaded.tokenizer, PROMPTS, group_size, settings)
    _same(ours, reference)
    if stops:  # rows stop at different steps, and one runs to the budget
        assert len(set(ours.completion_lengths.tolist())) > 1 and bool(ours.truncated.any())
        assert all(t.endswith(stops) for t, cut in zip(ours.completion_texts, ours.truncated.tolist()) if not cut)


def test_greedy_equals_hf_generate_with_eos(eos_biased):
    settings = SamplingSettings(max_new_tokens=12, do_sample=False)
    ours = decode_loop(eos_biased.policy, eos_biased.tokenizer, PROMPTS, 2, settings)
    reference = hf_generate(eos_biased.policy, eos_biased.tokenizer, PROMPTS, 2, settings)
    _same(ours, reference)
    assert sorted(set(ours.completion_lengths.tolist()))[0] < 12 and bool(ours.truncated.any())
    eos = eos_biased.tokenizer.eos_token_id
    for row, length in enumerate(ours.completion_lengths.tolist()):
        if not ours.truncated[row]:
            assert ours.input_ids[row, ours.prompt_len + length - 1] == eos  # EOS counted, last in the mask


def test_min_new_tokens_suppresses_eos(eos_biased):
    settings = SamplingSettings(max_new_tokens=12, do_sample=False, min_new_tokens=6)
    ours = decode_loop(eos_biased.policy, eos_biased.tokenizer, PROMPTS, 1, settings)
    plain = decode_loop(eos_biased.policy, eos_biased.tokenizer, PROMPTS, 1,
                        SamplingSettings(max_new_tokens=12, do_sample=False))
    assert min(plain.completion_lengths.tolist()) < 6  # without the minimum some row ends earlier
    assert min(ours.completion_lengths.tolist()) >= 6


def _first_token_probs(loaded, prompt, settings):
    encoded = loaded.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = loaded.policy(**encoded).logits[0, -1].float()
    return torch.softmax(filter_scores(logits[None], settings), dim=-1)[0]


@pytest.mark.parametrize("options", [{}, {"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.5}, {"min_p": 0.2}])
def test_sampling_draws_from_the_filtered_softmax(loaded, options):
    settings = SamplingSettings(max_new_tokens=1, **options)
    expected = _first_token_probs(loaded, PROMPTS[0], settings)
    torch.manual_seed(0)
    draws = 6000
    generation = decode_loop(loaded.policy, loaded.tokenizer, [PROMPTS[0]], draws, settings)
    first = generation.input_ids[:, generation.prompt_len]
    counts = torch.bincount(first, minlength=expected.numel()).float() / draws
    total_variation = 0.5 * (counts - expected).abs().sum()
    assert total_variation < 0.05, float(total_variation)
    assert bool((counts[expected == 0] == 0).all())  # filtered tokens are never drawn
    # The check has power: the unfiltered, untempered softmax is far from the filtered one.
    if options:
        plain = _first_token_probs(loaded, PROMPTS[0], SamplingSettings(max_new_tokens=1))
        assert 0.5 * (counts - plain).abs().sum() > 0.1


def test_filter_scores_top_p_keeps_the_smallest_set_reaching_p():
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_scores(scores, SamplingSettings(max_new_tokens=1, top_p=0.7)))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(filter_scores(scores, SamplingSettings(max_new_tokens=1, top_p=0.5)))
    assert kept.tolist() == [[True, False, False, False]]
    kept = torch.isfinite(filter_scores(scores, SamplingSettings(max_new_tokens=1, min_p=0.5)))
    assert kept.tolist() == [[True, True, False, False]]
