"""`StopStringMatcher` gives the same answers as decoding every row's last tokens at every step.

The tokenizer here is byte-level with multi-character tokens, so a stop string can be reached in
several tokenizations (`</answer>` whole, `</` + `answer` + `>`, or `...r>x` running past it) and a
two-byte character can be split over two tokens. Random token sequences are checked step by step
against the plain rule (decode the window, look for each stop string), up to each row's first hit.
"""

from __future__ import annotations

import random

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from rlvr.rollout.stop_strings import StopStringMatcher

BYTE_SPELLING = bytes_to_unicode()
MULTI_CHARACTER = ["</", "answer", "</answer>", "r>x", "wer", "an", "é"]
STOPS = ("</answer>", "é", "x\n")


def _spell(text: str) -> str:
    return "".join(BYTE_SPELLING[b] for b in text.encode("utf-8"))


def _byte_level_tokenizer(clean_up: bool = False) -> PreTrainedTokenizerFast:
    vocab = {BYTE_SPELLING[b]: b for b in range(256)}
    for token in MULTI_CHARACTER:
        vocab[_spell(token)] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<|end|>", special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|end|>", pad_token="<|end|>",
                                   clean_up_tokenization_spaces=clean_up)


def _plain_rule(tokenizer, row_tokens: list[int], window: int) -> bool:
    tail = tokenizer.decode(row_tokens[-window:], skip_special_tokens=True)
    return any(stop in tail for stop in STOPS)


def _sequences(tokenizer, rows: int, length: int, seed: int) -> torch.Tensor:
    pieces = ["<", "/", "a", "n", "s", "w", "e", "r", ">", "x", "\n", " "] + MULTI_CHARACTER
    ids = [tokenizer.convert_tokens_to_ids(_spell(p)) for p in pieces]
    ids += [0xC3, 0xA9, tokenizer.convert_tokens_to_ids("<|end|>")]  # "é" as two byte tokens; a special token
    rng = random.Random(seed)
    return torch.tensor([[rng.choice(ids) for _ in range(length)] for _ in range(rows)])


def _first_disagreement(matcher, tokenizer, tokens) -> str | None:
    rows, length = tokens.shape
    live = list(range(rows))
    hits = 0
    for step in range(length):
        if not live:
            break
        active = torch.tensor(live, dtype=torch.long)
        chosen = tokens[active, step]
        got = matcher.finished(tokens, active, chosen, step, torch.zeros(len(live), dtype=torch.bool)).tolist()
        for row, stopped in zip(live, got):
            if stopped != _plain_rule(tokenizer, tokens[row, : step + 1].tolist(), matcher.window):
                return f"row {row} step {step}: {tokenizer.decode(tokens[row, :step + 1])!r}"
        hits += sum(got)
        live = [row for row, stopped in zip(live, got) if not stopped]
    assert hits > 20, hits  # the sequences do reach stop strings, in many ways
    return None


def test_filtered_check_equals_decoding_every_row():
    tokenizer = _byte_level_tokenizer()
    matcher = StopStringMatcher(tokenizer, STOPS, len(tokenizer))
    assert matcher.candidates is not None
    candidates = {tokenizer.decode([i]) for i in matcher.candidates.nonzero().flatten().tolist()}
    assert {">", "r>x", "</answer>", "é", "\n"} <= candidates and not {"a", "</", "answer", "wer"} & candidates
    assert "<|end|>" not in candidates and "\ufffd" in candidates  # byte halves of "é" are checked
    tokens = _sequences(tokenizer, rows=64, length=40, seed=0)
    assert _first_disagreement(matcher, tokenizer, tokens) is None
    # Power: filtering on each stop string's first character instead of its last misses stops.
    first_characters = {s[0] for s in STOPS}
    matcher.candidates = torch.tensor([any(c in tokenizer.decode([i]) for c in first_characters)
                                       for i in range(len(tokenizer))])
    assert _first_disagreement(matcher, tokenizer, tokens) is not None


def test_no_filter_when_decoding_cleans_up_spaces():
    tokenizer = _byte_level_tokenizer(clean_up=True)
    matcher = StopStringMatcher(tokenizer, STOPS, len(tokenizer))
    assert matcher.candidates is None  # every row is decoded every step
    assert _first_disagreement(matcher, tokenizer, _sequences(tokenizer, rows=64, length=40, seed=1)) is None


def test_rows_already_ended_stay_ended_and_no_stops_is_a_no_op():
    tokenizer = _byte_level_tokenizer()
    tokens = _sequences(tokenizer, rows=4, length=3, seed=2)
    ended = torch.tensor([True, False, True, False])
    assert StopStringMatcher(tokenizer, (), len(tokenizer)).finished(tokens, torch.arange(4), tokens[:, 2], 2,
                                                                      ended) is ended
    result = StopStringMatcher(tokenizer, STOPS, len(tokenizer)).finished(tokens, torch.arange(4), tokens[:, 2], 2,
                                                                           ended)
    assert bool(result[0]) and bool(result[2])
