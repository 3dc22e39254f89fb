"""MkDocs hook: the algorithm tables (presets, estimators, losses, aggregations), rendered from the registries.

A page holds a marker line `<!-- rlvr table: NAME -->` (NAME: presets, estimators, losses or aggregations);
this hook replaces it at every build with the table `rlvr.algorithm_tables` renders from the registries (each
name, the first line of its docstring, its traits, the presets that use it), so an estimator, loss or preset
registered later appears without an edit here. The README, which MkDocs does not build, holds its own copy of
the preset tables, checked by tests/cli/test_algorithm_tables.py and rewritten by
`python -m rlvr.algorithm_tables --write-readme`.
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER_START = "<!-- rlvr table: "
REPO = Path(__file__).resolve().parent.parent


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs event: fill the table markers of the page that has any."""
    if MARKER_START not in markdown:
        return markdown
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from rlvr.algorithm_tables import fill_markers

    return fill_markers(markdown)
