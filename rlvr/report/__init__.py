"""`rlvr report`: one self-contained HTML page comparing run folders, plus the PNG figures.

`build_report(run_dirs, output)` reads metrics.jsonl, eval.jsonl, samples.jsonl and config.yaml
of each run (run_data.py), selects the figures that have data (figures.py), marks on them where health
warnings started (health_warnings.py), draws each one as an
interactive plotly figure (interactive.py; PNGs when plotly is missing) and as a PNG (png.py),
and writes the page (html.py) and the PNGs beside it, every file atomically.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.report.figures import FIGURES, ITERATION_AXIS, X_AXES, select_figures
from rlvr.report.health_warnings import add_warning_markers, warning_spans
from rlvr.report.html import render_html
from rlvr.report.interactive import plotly_available
from rlvr.report.png import render_png
from rlvr.report.run_data import RunData, load_runs
from rlvr.utils import atomic_write_bytes, atomic_write_text

__all__ = ["FIGURES", "X_AXES", "RunData", "build_report", "default_output", "figures_dir", "load_runs"]


def default_output(run_dirs: list[str | Path]) -> Path:
    """RUN_DIR/report.html for one run, ./report.html for several."""
    return Path(run_dirs[0]) / "report.html" if len(run_dirs) == 1 else Path("report.html")


def figures_dir(output: Path) -> Path:
    """The PNGs go beside the page: report.html -> report_figures/."""
    return output.with_name(f"{output.stem}_figures")


def build_report(run_dirs: list[str | Path], output: str | Path | None = None, x: str = ITERATION_AXIS,
                 interactive: bool | None = None) -> Path:
    """Write the report page and its figures; returns the page's path.

    `x` is the axis shown first ("iteration" or "seconds"; the page switches between them, the
    PNGs use it). `interactive` None: plotly figures when plotly is installed, else PNGs.
    """
    output = Path(output) if output is not None else default_output(run_dirs)
    if output.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report output {str(output)!r} must end in .html")
    if x not in X_AXES:
        raise ValueError(f"report x axis {x!r} is not one of {', '.join(X_AXES)}")
    interactive = plotly_available() if interactive is None else interactive
    runs = load_runs(list(run_dirs))
    spans = [span for run in runs for span in warning_spans(run)]
    figures = select_figures(runs)
    add_warning_markers(figures, spans, several_runs=len(runs) > 1)
    rendered = [(data, render_png(data, x)) for data in figures]
    folder = figures_dir(output)
    for data, png in rendered:
        atomic_write_bytes(folder / f"{data.name}.png", png)
    drawn = {data.name for data, _ in rendered}
    for spec in FIGURES:  # a figure from an earlier report that now has no data
        if spec.name not in drawn and (folder / f"{spec.name}.png").exists():
            (folder / f"{spec.name}.png").unlink()
    page = render_html(runs, rendered, x=x, interactive=interactive, spans=spans)
    atomic_write_text(output, page)
    return output
