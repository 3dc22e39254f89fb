"""The report renders in a real browser: headless Chromium loads every embedded figure, and a
corrupted figure is caught. Without Chromium the test skips, except under CI where it fails."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess

import pytest

from rlvr.report import FIGURES, build_report
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


def loaded_images(chromium: str, page, profile) -> tuple[int, int]:
    """(images on the page, images that decoded) as recorded by the report's inline script."""
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=180,
    )
    match = re.search(r'data-images-total="(\d+)" data-images-loaded="(\d+)"', result.stdout)
    assert match, f"the report's image check did not run; chromium said: {result.stderr[-2000:]}"
    return int(match.group(1)), int(match.group(2))


@pytest.mark.slow
def test_every_figure_loads_in_headless_chromium_and_a_broken_one_is_caught(tmp_path):
    chromium = find_chromium()
    runs = [write_fake_run(tmp_path / "a", ["optim.lr=1e-3"]),
            write_fake_run(tmp_path / "b", ["optim.lr=3e-4"], reward_offset=0.1)]
    page = build_report(runs, tmp_path / "report.html")
    assert loaded_images(chromium, page, tmp_path / "profile") == (len(FIGURES), len(FIGURES))

    # Replace one figure's PNG with bytes that are not an image: one fewer must load.
    html = page.read_text()
    first = re.search(r"data:image/png;base64,([^']+)'", html)
    broken = html.replace(first.group(1), base64.b64encode(b"\x89PNG not really a png").decode(), 1)
    broken_page = tmp_path / "broken.html"
    broken_page.write_text(broken)
    assert loaded_images(chromium, broken_page, tmp_path / "profile") == (len(FIGURES), len(FIGURES) - 1)
