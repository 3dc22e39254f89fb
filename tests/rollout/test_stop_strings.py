"""Stop strings: where a completion's text ends, which of its tokens count as generated, and which apply.

A stop string ends a completion and is kept; with several, the earliest one in the text counts,
and text a token carried past it is dropped (`cut_at_stop`). Tokens after the stop (EOS filler)
are not generated and stay out of the loss mask. The tiny tokenizer has one token per character,
so no token runs past a stop string there: `run_past` adds the token `xay`, which carries the
stop string `a` with text on both sides, and steers the model to emit it.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_policy
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, cut_at_stop
from rlvr.rollout.generation import completion_lengths_from_tokens


@pytest.mark.parametrize("text, stops, kept", [
    ("a </answer> extra", ("</answer>",), "a </answer>"),
    ("x\n\ny </answer> z", ("</answer>", "\n\n"), "x\n\n"),  # the earliest in the text, not in the tuple
    ("x </answer>\n\n", ("\n\n", "</answer>"), "x </answer>"),
    ("abab", ("b",), "ab"),  # its first occurrence
    ("xay", ("y", "a"), "xa"),
    ("no stop", ("</answer>",), "no stop"),
    ("ab", ("", "b"), "ab"),  # an empty stop string is ignored
])
def test_cut_at_stop_keeps_text_up_to_the_earliest_stop_string(text, stops, kept):
    assert cut_at_stop(text, stops) == kept


def test_completion_lengths_count_the_stop_string_but_not_the_filler_after_it(tiny_model_dir):
    tokenizer = load_policy(str(tiny_model_dir)).tokenizer
    eos = tokenizer.eos_token_id  # also the pad id, as in SmolLM2

    def ids(text: str, fill: int) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [eos] * fill

    completions = torch.tensor([
        ids("xa", 3),  # ended by the stop string `a`: the three EOS are filler
        ids("xb", 3),  # ended by a generated EOS: it counts
        ids("bbbbb", 0),  # ran to the budget
    ])  # [3, 5]
    lengths, truncated = completion_lengths_from_tokens(completions, {eos}, 5, tokenizer, ("a",))
    assert lengths.tolist() == [2, 3, 5]
    assert truncated.tolist() == [False, False, True]
    lengths, _ = completion_lengths_from_tokens(completions, {eos}, 5)  # without stop strings: EOS only
    assert lengths.tolist() == [3, 3, 5]


@pytest.fixture(scope="module")
def run_past(tiny_model_dir):
    """The tiny model and tokenizer plus a token `xay`, steered by a hook on the LM head: after a `b`
    the model says `b`, after anything else `xay`."""
    loaded = load_policy(str(tiny_model_dir))
    tokenizer, model = loaded.tokenizer, loaded.policy
    tokenizer.add_tokens(["xay"])
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    run_past_id, b_id = tokenizer.convert_tokens_to_ids("xay"), tokenizer.convert_tokens_to_ids("b")
    inputs = {}

    def remember_inputs(module, args, kwargs):
        inputs["ids"] = kwargs["input_ids"]

    def steer(module, args, logits):  # logits [B, T, V]
        wanted = torch.where(inputs["ids"] == b_id, b_id, run_past_id)  # [B, T]
        return logits + 100.0 * torch.nn.functional.one_hot(wanted, logits.shape[-1]).to(logits.dtype)

    model.register_forward_pre_hook(remember_inputs, with_kwargs=True)
    model.get_output_embeddings().register_forward_hook(steer)
    return model, tokenizer


@pytest.mark.parametrize("backend", ["hf_generate", "decode_loop"])
@pytest.mark.parametrize("stops", [("a",), ("y", "a")])
def test_a_token_running_past_the_stop_string_is_cut_and_nothing_after_it_is_generated(run_past, backend, stops):
    model, tokenizer = run_past
    sample = ROLLOUT_BACKENDS.get(backend).sample_fn
    settings = SamplingSettings(max_new_tokens=4, do_sample=False, stop_strings=stops, share_prompt_prefill=False)
    generation = sample(model, tokenizer, ["say 1", "bb"], 2, settings)
    # "say 1" -> the token `xay`: stopped by `a` (with `y` too: `a` is earlier in the text), text
    # cut after it; the text of that row does not end with a stop string. "bb" -> `bbbb`: truncated.
    assert generation.completion_texts == ["xa", "xa", "bbbb", "bbbb"]
    assert generation.completion_lengths.tolist() == [1, 1, 4, 4]
    assert generation.truncated.tolist() == [False, False, True, True]
    completion_mask = generation.attention_mask[:, generation.prompt_len:]  # [4, C]
    assert completion_mask.sum(1).tolist() == [1, 1, 4, 4]  # the filler after `xay` is not in the mask
