"""The code base passes the ruff linter, run as part of the default suite (`./run test`, `python -m pytest`).

The rules are pyproject.toml's `[tool.ruff]`: pycodestyle errors and warnings and pyflakes (E, F, W), lines
of at most 120 characters, assigned lambdas allowed (E731). ruff comes with the `test` extra; without it
the check fails (it does not skip), so a set-up that lost the linter cannot pass unlinted code. The same
run on a deliberately sloppy file, under the repository's config, shows the check can fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "pyproject.toml"
LINE_LENGTH = 120


def ruff_check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m ruff check ARGS` in this interpreter's environment; no cache written."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_code_base_passes_ruff():
    done = ruff_check(".", cwd=REPO)
    if "No module named ruff" in done.stderr:
        raise AssertionError("ruff is not installed: pip install 'rlvr[test]' (or the ruff pin in pyproject.toml)")
    assert done.returncode == 0, ("ruff check . found problems (fix them; `python -m ruff check --fix .` makes "
                                  f"the safe fixes):\n{done.stdout}{done.stderr}")


def test_the_same_check_fails_on_an_unused_import_and_a_long_line(tmp_path):
    long_line = "LONG = '" + "x" * (LINE_LENGTH + 10 - len("LONG = ''")) + "'"
    full_width = "WIDE = '" + "y" * (LINE_LENGTH - len("WIDE = ''")) + "'"
    assert len(long_line) == LINE_LENGTH + 10 and len(full_width) == LINE_LENGTH
    tidy = tmp_path / "tidy.py"
    # A line of exactly 120 characters (ruff's default limit, 88, would flag it) and an assigned lambda (E731,
    # ignored here): the repository's config must be the one applied.
    tidy.write_text(f'"""A tidy module."""\n\n{full_width}\nsquare = lambda x: x * x\n')
    sloppy = tmp_path / "sloppy.py"
    sloppy.write_text(f'"""A sloppy module."""\n\nimport os\n\n{long_line}\n')

    clean = ruff_check("--config", str(CONFIG), str(tidy), cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    found = ruff_check("--config", str(CONFIG), str(sloppy), cwd=tmp_path)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "sloppy.py:3:8: F401" in found.stdout  # `os` imported but unused
    assert f"sloppy.py:5:{LINE_LENGTH + 1}: E501" in found.stdout  # 130 > 120
