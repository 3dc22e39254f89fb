"""The report works in a real browser (headless Chromium): every figure is drawn by plotly with
its hover layer, zoom, hover and the x-axis switch respond, and a page whose plotly.js is
missing is caught; without plotly the PNGs decode and a corrupted one is caught. Without
Chromium the tests skip, except under CI where they fail."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess

import pytest

from rlvr.report import FIGURES, build_report
from rlvr.report.figures import X_LABELS
from rlvr.report.interactive import plotly_js
from tests.report_data import write_fake_run


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    message = "headless Chromium is not installed (apt-get install chromium); the report's browser test needs it"
    if os.environ.get("CI"):
        pytest.fail(message + " and CI is set")
    pytest.skip(message)


def page_state(chromium: str, page, profile, fragment: str = "") -> dict[str, str]:
    """The data-* attributes the report's inline script set on <html> after the page loaded."""
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
         "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri() + fragment],
        capture_output=True, text=True, timeout=180,
    )
    match = re.search(r"<html[^>]*>", result.stdout)
    state = dict(re.findall(r'data-([\w-]+)="([^"]*)"', match.group(0))) if match else {}
    assert "figures-total" in state, f"the report's figure check did not run; chromium said: {result.stderr[-2000:]}"
    return state


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    return root, [write_fake_run(root / "a", ["optim.lr=1e-3"]),
                  write_fake_run(root / "b", ["optim.lr=3e-4"], reward_offset=0.1)]


@pytest.mark.slow
def test_every_figure_is_interactive_and_a_page_without_plotly_js_is_caught(two_runs):
    chromium = find_chromium()
    root, runs = two_runs
    page = build_report(runs, root / "report.html")
    state = page_state(chromium, page, root / "profile", "#selftest")
    assert (state["figures-total"], state["plots-drawn"]) == (str(len(FIGURES)), str(len(FIGURES)))
    # The self-test zoomed the first figure (Plotly.relayout), hovered its first point, and clicked
    # the "x: seconds" button, which moved it to the wall-clock axis.
    assert state["selftest"] == "done", state
    assert state["zoom"] == "ok" and state["hover"] == "ok"
    assert state["x-title"] == X_LABELS["seconds"]

    # The same page without its inline plotly.js: nothing is drawn, and the check says so.
    html = page.read_text()
    library = f"<script>{plotly_js()}</script>"
    assert html.count(library) == 1
    stripped = root / "stripped.html"
    stripped.write_text(html.replace(library, ""))
    state = page_state(chromium, stripped, root / "profile", "#selftest")
    assert (state["figures-total"], state["plots-drawn"]) == (str(len(FIGURES)), "0")
    assert state["selftest"] == "skipped"


@pytest.mark.slow
def test_static_figures_load_and_a_broken_one_is_caught(two_runs):
    chromium = find_chromium()
    root, runs = two_runs
    page = build_report(runs, root / "static.html", interactive=False)
    state = page_state(chromium, page, root / "profile")
    assert (state["figures-total"], state["images-loaded"]) == (str(len(FIGURES)), str(len(FIGURES)))

    # Replace one figure's PNG with bytes that are not an image: one fewer must load.
    html = page.read_text()
    first = re.search(r"data:image/png;base64,([^']+)'", html)
    broken = html.replace(first.group(1), base64.b64encode(b"\x89PNG not really a png").decode(), 1)
    broken_page = root / "broken.html"
    broken_page.write_text(broken)
    state = page_state(chromium, broken_page, root / "profile")
    assert (state["figures-total"], state["images-loaded"]) == (str(len(FIGURES)), str(len(FIGURES) - 1))
