"""The mutation table of scripts/mutate.py stays applicable: every search text occurs exactly once.

A search text that no longer matches (code moved or reworded) makes `scripts/mutate.py` stop
before running anything; this catches it in the fast suite instead of in a 15-minute run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mutate_module():
    spec = importlib.util.spec_from_file_location("rlvr_mutate_script", REPO / "scripts" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


MUTATE = _mutate_module()


@pytest.mark.parametrize("mutation", MUTATE.MUTATIONS, ids=lambda m: m.name)
def test_every_search_text_occurs_exactly_once(mutation):
    original = (REPO / mutation.path).read_text()
    mutated = MUTATE._mutated_text(mutation, original)  # raises LookupError unless each text occurs once
    assert mutated != original


def test_a_stale_search_text_is_reported():
    stale = MUTATE.mutation("stale", "rlvr/core/kl.py", "text that is not there", ("no such line", "x"))
    with pytest.raises(LookupError, match="found 0 times"):
        MUTATE._mutated_text(stale, (REPO / stale.path).read_text())


def test_mutated_files_are_copied_into_the_sandbox():
    copied = MUTATE.COPIED
    for mutation in MUTATE.MUTATIONS:
        assert any(mutation.path == c or mutation.path.startswith(c + "/") for c in copied), mutation.path
