"""Which rows just completed a stop string, without decoding every row's text at every step.

A stop string is looked for in the decoded text (the same text may come from different token
sequences: `</answer>` as one token, or `</`, `answer`, `>`), so the check itself decodes the
row's last few tokens. Most steps cannot complete one, though: when decoding is concatenation
of per-token pieces, a stop string that is in the text after token t but was not before must end
inside t's piece, so that piece contains the stop string's last character. `StopStringMatcher`
computes once per tokenizer which tokens' pieces contain one of those characters (or a
replacement character, the piece of a token that is part of a multi-byte character) and decodes
only the rows whose new token is one of them: the same answers as decoding every row.

The filter is off (every row decoded every step) where that reasoning may not hold: a slow
tokenizer, or one that cleans up spaces after decoding (`clean_up_tokenization_spaces`, which can
make "x 's" read "x's" one token late).
"""

from __future__ import annotations

import weakref
from typing import Optional, Sequence

import torch

REPLACEMENT_CHARACTER = "\ufffd"
_PIECES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> list of token pieces


def token_pieces(tokenizer) -> Optional[list[str]]:
    """The text each token adds after a one-letter anchor ("a"), for every id; None when decoding is not
    a concatenation we can rely on (see the module docstring). Cached per tokenizer."""
    if tokenizer in _PIECES:
        return _PIECES[tokenizer]
    pieces = None
    if getattr(tokenizer, "is_fast", False) and not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        anchor = tokenizer("a", add_special_tokens=False)["input_ids"]
        if tokenizer.decode(anchor, skip_special_tokens=True) == "a":
            texts = tokenizer.batch_decode([anchor + [i] for i in range(len(tokenizer))], skip_special_tokens=True)
            # A piece the anchor does not prefix is marked with a replacement character: always checked.
            pieces = [t[1:] if t.startswith("a") else REPLACEMENT_CHARACTER for t in texts]
    _PIECES[tokenizer] = pieces
    return pieces


class StopStringMatcher:
    """`finished(...)`: per live row, whether its newest token completed one of `stop_strings`."""

    def __init__(self, tokenizer, stop_strings: Sequence[str], vocab_size: int, device=None):
        self.tokenizer = tokenizer
        self.stops = tuple(s for s in stop_strings if s)
        # A stop string of k characters ends within the last k + 1 tokens (a token decodes to >= 1
        # character except for pieces of a multi-byte character, hence the slack).
        self.window = max((len(s) for s in self.stops), default=0) + 4
        self.candidates: Optional[torch.Tensor] = None  # [vocab_size] bool: tokens that may end a stop string
        pieces = token_pieces(tokenizer) if self.stops else None
        if pieces is not None:
            last_characters = {s[-1] for s in self.stops} | {REPLACEMENT_CHARACTER}
            flags = [any(c in piece for c in last_characters) for piece in pieces]
            flags += [True] * max(0, vocab_size - len(flags))  # ids the tokenizer does not know: always check
            self.candidates = torch.tensor(flags[: max(vocab_size, len(pieces))], dtype=torch.bool, device=device)

    def finished(self, tokens: torch.Tensor, rows: torch.Tensor, chosen: torch.Tensor, step: int,
                 ended: torch.Tensor) -> torch.Tensor:
        """tokens [N, C] (columns 0..step filled for `rows`), rows [A] their row ids, chosen [A] the tokens
        of this step, ended [A] bool (already finished by EOS). Returns [A] bool: ended or a stop string."""
        if not self.stops:
            return ended
        result = ended.clone()
        check = ~ended
        if self.candidates is not None:
            check &= self.candidates[chosen]
        start = max(0, step + 1 - self.window)
        for i in check.nonzero().flatten().tolist():
            tail = self.tokenizer.decode(tokens[int(rows[i]), start : step + 1].tolist(), skip_special_tokens=True)
            if any(stop in tail for stop in self.stops):
                result[i] = True
        return result
