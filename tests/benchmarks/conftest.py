"""Every test under this folder checks a script under benchmarks/ on a tiny input: marked `benchmark`.

The folders mirror benchmarks/ (learning, performance, comparisons)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.benchmark)
