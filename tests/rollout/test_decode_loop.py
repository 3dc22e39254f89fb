"""The `decode_loop` rollout backend against `hf_generate`, its own transformers-cache path, and the softmax.

Greedy decoding must give the same tokens, lengths, truncation flags and texts as Hugging Face
`generate` and as the model's forward on transformers' cache (`cache="dynamic"`), with rows
finishing at different steps (EOS, one- and two-character stop strings), for every architecture
the preallocated path covers and whatever the compaction policy (finished rows dropped at once,
kept until a quarter finished, never dropped). Sampling must draw from the filtered softmax:
first-token frequencies, and second-token frequencies after rows finished at the first token,
are compared with the model's probabilities.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models import LoraSettings, load_policy
from rlvr.models.merge import merged_adapter
from rlvr.rollout import SamplingSettings, decode_loop, hf_generate
from rlvr.rollout.decode_loop import draw_from_weights, filter_scores
from rlvr.rollout.decode_step import DecoderWeights
from rlvr.testing import TINY_VOCAB_SIZE, build_tiny_tokenizer, random_lora_b

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


# Tiny models of each architecture family, configured so the code path under test differs from Llama's.
ARCHITECTURES = {
    "llama_mha": ("LlamaConfig", {"num_key_value_heads": 4}),  # no grouped-query attention
    "qwen2": ("Qwen2Config", {}),  # biases on q, k, v
    "qwen3": ("Qwen3Config", {"head_dim": 16}),  # per-head RMSNorm of queries and keys
    "mistral": ("MistralConfig", {"sliding_window": 4096}),  # window longer than any rollout here
    "mistral_window": ("MistralConfig", {"sliding_window": 6}),  # window shorter: the dynamic path
}


@pytest.fixture(scope="module")
def architecture_dirs(tmp_path_factory):
    import transformers

    folders = {}
    for name, (config_class, extra) in ARCHITECTURES.items():
        config = getattr(transformers, config_class)(
            vocab_size=TINY_VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=extra.pop("num_key_value_heads", 2), intermediate_size=64,
            max_position_embeddings=256, initializer_range=0.2, rms_norm_eps=1e-5, tie_word_embeddings=True,
            eos_token_id=2, pad_token_id=2, bos_token_id=1, **extra)
        ARCHITECTURES[name][1].update(extra)  # keep the table intact for later parametrizations
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            model = getattr(transformers, config_class.replace("Config", "ForCausalLM"))(config)
            for module in model.modules():  # biases start at 0: random ones, so a step that drops one differs
                if isinstance(module, torch.nn.Linear) and module.bias is not None:
                    torch.nn.init.normal_(module.bias, std=0.5)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        build_tiny_tokenizer().save_pretrained(folder)
        folders[name] = folder
    return folders


def _stop_from(generation):
    """A one-character stop string that ends some rows early and not others."""
    for text in generation.completion_texts:
        for char in text[2:6]:
            hits = [char in t for t in generation.completion_texts]
            if any(hits) and not all(hits) and char.strip():
                return char
    raise AssertionError(f"no character separates the rows: {generation.completion_texts}")


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
@pytest.mark.parametrize("group_size", [1, 3])
def test_greedy_preallocated_equals_dynamic_cache_across_architectures(architecture_dirs, architecture, group_size):
    loaded = load_policy(str(architecture_dirs[architecture]))
    model, tokenizer = loaded.policy, loaded.tokenizer
    supported = DecoderWeights.of(model, 64) is not None
    assert supported == (architecture != "mistral_window"), DecoderWeights.unsupported_reason(model, 64)
    plain = SamplingSettings(max_new_tokens=12, do_sample=False)
    reference = decode_loop(model, tokenizer, PROMPTS, group_size, plain, cache="dynamic")
    stops = (_stop_from(reference),)
    settings = SamplingSettings(max_new_tokens=12, do_sample=False, stop_strings=stops)
    expected = decode_loop(model, tokenizer, PROMPTS, group_size, settings, cache="dynamic")
    assert len(set(expected.completion_lengths.tolist())) > 1 and bool(expected.truncated.any())
    for compact_fraction in (0.0, 0.25, 1.0):  # drop finished rows at once, at a quarter, never
        ours = decode_loop(model, tokenizer, PROMPTS, group_size, settings, compact_fraction=compact_fraction)
        _same(ours, expected)
    _same(decode_loop(model, tokenizer, PROMPTS, group_size, plain), reference)
    _same(decode_loop(model, tokenizer, PROMPTS[:1], group_size, settings),  # one prompt: no padding, no mask
          decode_loop(model, tokenizer, PROMPTS[:1], group_size, settings, cache="dynamic"))


def test_preallocated_with_merged_lora_and_fallback_without(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    random_lora_b(loaded.policy, seed=0, std=0.3)
    model, tokenizer = loaded.policy, loaded.tokenizer
    settings = SamplingSettings(max_new_tokens=10, do_sample=False, stop_strings=("0",))
    assert "unmerged adapter" in DecoderWeights.unsupported_reason(model, 64)
    with pytest.raises(ValueError, match="unmerged adapter"):
        decode_loop(model, tokenizer, PROMPTS, 2, settings, cache="preallocated")
    unmerged = decode_loop(model, tokenizer, PROMPTS, 2, settings)  # falls back to the dynamic cache
    with merged_adapter(model):
        assert DecoderWeights.of(model, 64) is not None
        merged = decode_loop(model, tokenizer, PROMPTS, 2, settings, cache="preallocated")
        merged_dynamic = decode_loop(model, tokenizer, PROMPTS, 2, settings, cache="dynamic")
    _same(merged, merged_dynamic)
    _same(merged, unmerged)
    with model.disable_adapter():
        assert DecoderWeights.of(model, 64) is not None  # adapter off: the base layers alone
        base = decode_loop(model, tokenizer, PROMPTS, 2, settings, cache="preallocated")
        _same(base, decode_loop(model, tokenizer, PROMPTS, 2, settings, cache="dynamic"))
    assert base.completion_texts != merged.completion_texts  # the adapter changes what is generated


def test_a_forward_hook_keeps_the_model_forward(tiny_model_dir):
    """A hook that edits logits must see every step: the layer-by-layer step would bypass it."""
    loaded = load_policy(str(tiny_model_dir))
    model, tokenizer = loaded.policy, loaded.tokenizer
    settings = SamplingSettings(max_new_tokens=6, do_sample=False)
    plain = decode_loop(model, tokenizer, PROMPTS, 1, settings)
    banned = plain.input_ids[0, plain.prompt_len + 1].item()  # the first row's second token

    def ban(module, args, logits):  # logits [B, T, V]
        logits[..., banned] = -1e9
        return logits

    handle = model.get_output_embeddings().register_forward_hook(ban)
    assert "forward hook on lm_head" in DecoderWeights.unsupported_reason(model, 64)
    hooked = decode_loop(model, tokenizer, PROMPTS, 1, settings)
    handle.remove()
    assert DecoderWeights.of(model, 64) is not None
    completion = hooked.input_ids[:, hooked.prompt_len:]  # [N, C]
    assert banned not in completion[hooked.attention_mask[:, hooked.prompt_len:].bool()].tolist()


def test_unknown_cache_is_an_error(loaded):
    with pytest.raises(ValueError, match="auto, preallocated, dynamic"):
        decode_loop(loaded.policy, loaded.tokenizer, PROMPTS, 1, SamplingSettings(max_new_tokens=2), cache="static")


def _conditional_probs(model, tokenizer, text, settings):
    encoded = tokenizer([text], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = model(**encoded).logits[0, -1].float()
    return torch.softmax(filter_scores(logits[None], settings), dim=-1)[0]


@pytest.mark.parametrize("compact_fraction", [0.0, 1.0])
def test_second_token_follows_the_model_after_rows_finish(eos_biased, compact_fraction):
    """Rows that drew EOS first finish; the others' second token must follow p(. | prompt, first token)."""
    model, tokenizer = eos_biased.policy, eos_biased.tokenizer
    settings = SamplingSettings(max_new_tokens=2, top_k=8)
    prompt = PROMPTS[1]
    first_probs = _conditional_probs(model, tokenizer, prompt, settings)
    eos = tokenizer.eos_token_id
    assert 0.5 < float(first_probs[eos]) < 0.9  # most rows finish after one token
    torch.manual_seed(1)
    generation = decode_loop(model, tokenizer, [prompt], 20000, settings, compact_fraction=compact_fraction)
    first = generation.input_ids[:, generation.prompt_len]
    second = generation.input_ids[:, generation.prompt_len + 1]
    assert generation.completion_lengths[first == eos].eq(1).all()
    counts = torch.bincount(first[first != eos], minlength=TINY_VOCAB_SIZE)
    distributions = []
    for token in counts.argsort(descending=True)[:2].tolist():  # the two most common first tokens
        rows = first == token
        expected = _conditional_probs(model, tokenizer, prompt + tokenizer.decode([token]), settings)
        observed = torch.bincount(second[rows], minlength=TINY_VOCAB_SIZE).float() / int(rows.sum())
        assert 0.5 * (observed - expected).abs().sum() < 0.08, (token, int(rows.sum()))
        distributions.append(expected)
    # Power: had a row been given another row's logits, it would draw from the other conditional.
    assert 0.5 * (distributions[0] - distributions[1]).abs().sum() > 0.3


def _two_level_draws(weights, wrong: bool = False):
    if not wrong:
        return draw_from_weights(weights)
    # A plausible slip: the offset into the chosen block not measured from the block's start.
    rows, vocab = weights.shape
    block_cdf = weights.view(rows, -1, 8).sum(-1, dtype=torch.float64).cumsum(-1)
    point = torch.rand(rows, 1, dtype=torch.float64) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, point, right=True)
    inside = weights.view(rows, -1, 8).gather(1, block[:, :, None].expand(rows, 1, 8)).squeeze(1).double().cumsum(-1)
    token = torch.searchsorted(inside, torch.minimum(point, inside[:, -1:] * (1 - 1e-12)), right=True)
    return (block * 8 + token).squeeze(-1)


@pytest.mark.parametrize("vocab", [400, 4104])  # blocks of 8; padded to blocks of 1024
def test_draw_from_weights_matches_the_weights(vocab):
    support = torch.tensor([0, 7, 8, 9, 15, 16, 200, 255, 256, 391, vocab - 2, vocab - 1])
    weights = torch.zeros(vocab)
    weights[support] = torch.tensor([3.0, 1, 5, 0.5, 2, 2, 4, 1, 1, 6, 2, 3])
    expected = weights / weights.sum()
    rows = 4000
    torch.manual_seed(0)
    draws = draw_from_weights(weights.expand(rows, vocab).contiguous())
    assert bool((weights[draws] > 0).all())  # zero-weight tokens are never drawn
    observed = torch.bincount(draws, minlength=vocab).float() / rows
    assert 0.5 * (observed - expected).abs().sum() < 0.05
    if vocab == 400:
        wrong = torch.bincount(_two_level_draws(weights.expand(rows, vocab).contiguous(), wrong=True),
                               minlength=vocab).float() / rows
        assert 0.5 * (wrong - expected).abs().sum() > 0.2
