"""`rlvr report`: one self-contained HTML page comparing run folders, plus the PNG figures.

`build_report(run_dirs, output)` reads metrics.jsonl, eval.jsonl, samples.jsonl and config.yaml
of each run (runs.py), draws the figures that have data (figures.py) and writes the page
(html.py) and the figures beside it, every file atomically.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.report.figures import FIGURES, render_figures
from rlvr.report.html import render_html
from rlvr.report.runs import RunData, load_runs
from rlvr.utils import atomic_write_bytes, atomic_write_text

__all__ = ["FIGURES", "RunData", "build_report", "default_output", "figures_dir", "load_runs"]


def default_output(run_dirs: list[str | Path]) -> Path:
    """RUN_DIR/report.html for one run, ./report.html for several."""
    return Path(run_dirs[0]) / "report.html" if len(run_dirs) == 1 else Path("report.html")


def figures_dir(output: Path) -> Path:
    """The PNGs go beside the page: report.html -> report_figures/."""
    return output.with_name(f"{output.stem}_figures")


def build_report(run_dirs: list[str | Path], output: str | Path | None = None) -> Path:
    """Write the report page and its figures; returns the page's path."""
    output = Path(output) if output is not None else default_output(run_dirs)
    if output.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report output {str(output)!r} must end in .html")
    runs = load_runs(list(run_dirs))
    rendered = render_figures(runs)
    folder = figures_dir(output)
    for spec, png in rendered:
        atomic_write_bytes(folder / f"{spec.name}.png", png)
    drawn = {spec.name for spec, _ in rendered}
    for spec in FIGURES:  # a figure from an earlier report that now has no data
        if spec.name not in drawn and (folder / f"{spec.name}.png").exists():
            (folder / f"{spec.name}.png").unlink()
    page = render_html(runs, [(spec.name, spec.title, png) for spec, png in rendered])
    atomic_write_text(output, page)
    return output
