"""An episode's next turn continues from the keys and values its previous turn left (`turn_cache.py`).

What must hold: the logits of a continued prefill equal a full prefill's; episodes sampled with the
cache are the episodes sampled without it (greedy and seeded sampling, both decoding caches); only
a strict prefix is reused (a conversation that does not extend a held row is prefilled whole);
and nothing held outlives the sync block whose weights computed it.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models.hf_cache import cache_of
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, sample_and_score
from rlvr.rollout.generation import left_pad_ids
from rlvr.rollout.decode_loop import decode_loop_from_ids, start_decoding
from rlvr.rollout.turn_cache import CachedRow, TurnCache, plan_prefill
from rlvr.tasks.task import Example
from rlvr.testing import build_tiny_model, build_tiny_tokenizer
from tests.rollout.test_episodes import CountdownEnv

TOKENIZER = build_tiny_tokenizer()


def model(dtype=torch.float32):
    return build_tiny_model(seed=3, dtype=dtype).eval()


def prefill_logits(net, prompts: list[list[int]]) -> torch.Tensor:
    """The last position's logits [B, V] of a plain full prefill of each prompt."""
    ids, mask = left_pad_ids(prompts, 0)
    with torch.no_grad():
        logits, _ = start_decoding(net, ids, mask, 1, None, ids.shape[1])
    return logits


def held_rows(net, prompts: list[list[int]]) -> list[CachedRow]:
    """Each prompt's keys and values from a full prefill, as a CachedRow."""
    rows = []
    for prompt in prompts:
        with torch.no_grad():
            out = net(input_ids=torch.tensor([prompt]), use_cache=True)
        layers = out.past_key_values.layers
        rows.append(CachedRow(tuple(prompt), [layer.keys[0] for layer in layers],
                              [layer.values[0] for layer in layers]))
    return rows


def test_a_continued_prefill_gives_the_full_prefills_logits_with_padding_on_both_sides():
    net = model(torch.float64)
    generator = torch.Generator().manual_seed(0)
    draw = lambda n: torch.randint(3, 60, (n,), generator=generator).tolist()  # noqa: E731
    held_a, held_b = draw(9), draw(4)
    prompts = [held_a + draw(2), held_b + draw(6), draw(5)]  # long held + short new, short + long, nothing held
    rows = held_rows(net, [held_a, held_b])
    plan = plan_prefill(prompts, [rows[0], rows[1], None], pad_id=0)
    assert plan.mask.shape == (3, 9 + 6) and plan.reused == 13 and plan.prefilled == 2 + 6 + 5
    ids, mask = left_pad_ids(prompts, 0)
    with torch.no_grad():
        continued, steps = start_decoding(net, ids, mask, 1, None, plan.mask.shape[1], plan=plan)
    full = prefill_logits(net, prompts)
    assert torch.allclose(continued, full, atol=1e-9, rtol=0)
    # Positions that skip the padding matter: counting the padding columns shifts rotary positions.
    wrong_positions = plan.mask.new_ones(plan.mask.shape)
    with torch.no_grad():
        shifted = net(input_ids=plan.new_ids, attention_mask=plan.mask,
                      position_ids=(wrong_positions.cumsum(-1) - 1)[:, 9:],
                      past_key_values=cache_of(plan.past_keys, plan.past_values), use_cache=True).logits[:, -1]
    assert (shifted - full).abs().max() > 1e-3
    # What the steps hand back for a row is its real positions only: the held ones, then the new.
    keys, _ = steps.held(0)
    assert keys[0].shape[1] == len(prompts[0])


def test_match_takes_the_longest_strict_prefix_only():
    cache = TurnCache()
    short, long = CachedRow((1, 2), [], []), CachedRow((1, 2, 3), [], [])
    cache.store([short, long, CachedRow((1, 9), [], [])])
    assert cache.match([1, 2, 3, 4]) is long
    assert cache.match([1, 2, 3]) is short  # a new token must remain to be fed
    assert cache.match([1, 3, 3, 4]) is None and cache.match([7]) is None


@pytest.mark.parametrize("kind", ["preallocated", "dynamic"])
def test_a_second_call_reuses_the_first_calls_rows_and_samples_what_a_full_prefill_samples(kind):
    net = model()
    settings = SamplingSettings(max_new_tokens=5, temperature=1.0, do_sample=True)
    first = [[5, 6, 7, 8, 9], [10, 11, 12]]
    ids, mask = left_pad_ids(first, 0)
    cache = TurnCache()
    torch.manual_seed(0)
    turn1 = decode_loop_from_ids(net, TOKENIZER, ids, mask, settings, cache=kind, turn_cache=cache)
    assert len(cache.rows) == 2 and cache.reused_tokens == 0
    assert all(row.keys[0].shape[1] == len(row.ids) for row in cache.rows)
    # The next turn: each conversation so far plus a reply; in the first row an earlier token differs,
    # so it extends no held row and is prefilled whole.
    completions = [turn1.input_ids[i, turn1.prompt_len:turn1.prompt_len + int(turn1.completion_lengths[i])].tolist()
                   for i in range(2)]
    held_ids = [list(row.ids) for row in cache.rows]
    second = [first[0][:-1] + [first[0][-1] + 1] + completions[0] + [20, 21],
              first[1] + completions[1] + [22, 23, 24],
              next(ids for ids in held_ids if ids[:len(first[1])] == first[1])]  # exactly a held row: no new token
    assert len(second[2]) == len(first[1]) + len(completions[1]) - 1
    ids2, mask2 = left_pad_ids(second, 0)
    torch.manual_seed(1)
    with_cache = decode_loop_from_ids(net, TOKENIZER, ids2, mask2, settings, cache=kind, turn_cache=cache)
    torch.manual_seed(1)
    without = decode_loop_from_ids(net, TOKENIZER, ids2, mask2, settings, cache=kind)
    assert torch.equal(with_cache.input_ids, without.input_ids)
    assert with_cache.completion_texts == without.completion_texts
    # Row 1 reused its prompt and its fed tokens (all but its last sampled one); rows 0 and 2 nothing.
    assert cache.reused_tokens == len(first[1]) + len(completions[1]) - 1
    assert cache.prefilled_tokens == sum(map(len, first)) + len(second[0]) + 1 + 3 + len(second[2])
    assert len(cache.rows) == 3  # replaced by this call's rows


def test_the_held_rows_go_when_the_sync_block_closes():
    backend = ROLLOUT_BACKENDS.get("decode_loop")(model(), TOKENIZER)
    settings = SamplingSettings(max_new_tokens=3, do_sample=False)
    with backend.sync():
        backend.generate_from_ids([[5, 6, 7], [8, 9]], settings)
        assert len(backend.turn_cache.rows) == 2
        with backend.sync():  # a nested block is the same weights: the rows stay
            pass
        assert len(backend.turn_cache.rows) == 2
    assert backend.turn_cache.rows == []  # computed with weights the next update changes


def expected_prefill(scored) -> tuple[int, int]:
    """From the episodes alone: the tokens every turn's call holds in all (prompt and conversation so
    far), and how many of those a turn after the first finds held (all but its new tokens: the last
    token the previous turn sampled, which was never fed, and the environment's reply)."""
    generation = scored.generation
    total = reusable = 0
    for row in range(generation.input_ids.shape[0]):
        prompt = int(generation.attention_mask[row, :generation.prompt_len].sum())
        mask = generation.loss_mask[row].tolist()[:int(generation.attention_mask[row, generation.prompt_len:].sum())]
        starts = [i for i, m in enumerate(mask) if m == 1 and (i == 0 or mask[i - 1] == 0)]  # each turn's first token
        for turn, start in enumerate(starts):
            total += prompt + start
            if turn:
                reply = start - max(i for i in range(start) if mask[i] == 1) - 1
                reusable += prompt + start - 1 - reply
    return total, reusable


@pytest.mark.parametrize("kind", ["preallocated", "dynamic"])
def test_episodes_with_the_turn_cache_are_the_episodes_without_it(kind):
    net = model()
    env = CountdownEnv(max_turns=4)
    examples = [Example(prompt="say", ground_truth=None, metadata={"turns": 4}),
                Example(prompt="go on", ground_truth=None, metadata={"turns": 3})]
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, do_sample=True, max_episode_tokens=200,
                                stop_strings=tuple("aeiou"))
    scored = {}
    for continued in (True, False):
        backend = ROLLOUT_BACKENDS.get("decode_loop")(net, TOKENIZER, cache=kind, continue_turns=continued)
        torch.manual_seed(4)
        scored[continued] = sample_and_score(backend, env, examples, group_size=3, settings=settings,
                                             use_chat_template=True)
        if continued:
            cache = backend.turn_cache
            total, reusable = expected_prefill(scored[True])
            assert cache.reused_tokens == reusable > 0
            assert cache.reused_tokens + cache.prefilled_tokens == total
            assert cache.rows == []  # emptied when the sync block closed: the next weights differ
        else:
            assert backend.turn_cache is None
    turns = [len(record.episode.turns) for record in scored[True].episodes]  # assistant and env turns
    assert max(turns) >= 5  # several assistant turns, each continued
    assert torch.equal(scored[True].generation.input_ids, scored[False].generation.input_ids)
    assert torch.equal(scored[True].generation.loss_mask, scored[False].generation.loss_mask)


def test_continue_turns_must_be_a_boolean():
    with pytest.raises(ValueError, match="continue_turns='yes' must be true or false"):
        ROLLOUT_BACKENDS.get("decode_loop")(model(), TOKENIZER, continue_turns="yes")
