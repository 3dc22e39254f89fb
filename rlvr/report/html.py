"""Assemble the self-contained report page: summary and config tables, figures, samples.

Figures are interactive plotly figures with plotly.js written into the page, or, without plotly,
base64 PNG data URIs; nothing is fetched. Every text that comes from a run (labels, config
values, prompts, completions) goes through `html.escape`. A small inline script records on
<html> how many figures were drawn (plotly's SVG with its hover layer) or decoded (PNGs), and
with `#selftest` in the address it zooms, hovers and switches the x axis of the first figure;
the browser test reads these attributes back.
"""

from __future__ import annotations

import base64
import html
import json
import math
from datetime import datetime

from rlvr.report.figures import ITERATION_AXIS, FigureData, run_colors
from rlvr.report.health_warnings import WarningSpan
from rlvr.report.run_data import RunData, Summary, differing_config_keys, first_and_last_samples, summarize

PLOTLY_MISSING = ("plotly is not installed, so the figures below are static PNGs (pip install plotly, then run "
                  "rlvr report again for zoom, hover and the iteration / seconds switch).")

SAMPLES_SHOWN = 8  # completions per iteration and run in the samples section
PROMPT_SHOWN = 160  # characters of a prompt shown before it is folded

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1500px; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; }
.figures figure { margin: 0; border: 1px solid #eee; } .figures img { width: 600px; max-width: 100%; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
tr.prompt td { background: #eef3fa; } td pre { min-width: 260px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: 12px; background: #f8f8f8; padding: 4px; }
.muted { color: #777; font-size: 13px; } .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""  # noqa: E501 (the page's CSS, kept byte for byte)

FIGURE_CHECK = """
window.addEventListener('load', async function () {
  var root = document.documentElement;
  var all = function (selector, node) { return Array.prototype.slice.call((node || document).querySelectorAll(selector)); };
  root.setAttribute('data-figures-total', String(all('figure.report-figure').length));
  root.setAttribute('data-images-loaded', String(all('figure.report-figure img').filter(function (img) {
    return img.complete && img.naturalWidth > 0; }).length));
  var drawn = all('figure.report-figure .js-plotly-plot').filter(function (plot) {
    return plot.querySelector('.main-svg') && plot.querySelector('.hoverlayer'); });
  root.setAttribute('data-plots-drawn', String(drawn.length));
  if (location.hash !== '#selftest' || !drawn.length || typeof Plotly === 'undefined') {
    root.setAttribute('data-selftest', 'skipped');
    return;
  }
  try {
    var plot = drawn[0], before = plot._fullLayout.xaxis.range.slice();
    var half = [before[0], before[0] + (before[1] - before[0]) / 2];
    await Plotly.relayout(plot, {'xaxis.range': half});
    var after = plot._fullLayout.xaxis.range;
    root.setAttribute('data-zoom', Math.abs(after[1] - half[1]) < 1e-9 && Math.abs(before[1] - half[1]) > 1e-9 ? 'ok' : 'failed');
    Plotly.Fx.hover(plot, [{curveNumber: 0, pointNumber: 0}]);
    root.setAttribute('data-hover', all('.hoverlayer .hovertext', plot).length > 0 ? 'ok' : 'failed');
    all('.updatemenu-button', plot)[1].dispatchEvent(new MouseEvent('click', {bubbles: true}));
    await new Promise(function (resolve) { setTimeout(resolve, 300); });
    root.setAttribute('data-x-title', plot._fullLayout.xaxis.title.text);
    root.setAttribute('data-selftest', 'done');
  } catch (error) {
    root.setAttribute('data-selftest', 'error: ' + error);
  }
});
"""  # noqa: E501 (the page's script, kept byte for byte)


def fmt(value) -> str:
    """A table cell: numbers to 4 significant digits, None as a dash, the rest as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def esc(value) -> str:
    return html.escape(fmt(value), quote=True)


def _summary_table(runs: list[RunData], summaries: list[Summary]) -> str:
    rows = []
    for run, summary, swatch in zip(runs, summaries, run_colors(len(runs))):
        best_reward = f"{esc(summary.best_reward)} <span class=muted>(it. {esc(summary.best_reward_iteration)})</span>"
        best_eval = f"{esc(summary.best_eval)} <span class=muted>(it. {esc(summary.best_eval_iteration)})</span>"
        rows.append(
            f"<tr><td><span class=swatch style='background:{swatch}'></span>{esc(run.label)}</td>"
            f"<td class=num>{esc(summary.iterations)}</td><td class=num>{esc(summary.final_reward)}</td>"
            f"<td class=num>{best_reward}</td><td class=num>{esc(summary.final_eval)}</td>"
            f"<td class=num>{best_eval}</td><td class=num>{esc(summary.wall_s)}</td></tr>"
        )
    return ("<table><tr><th>run</th><th>iterations</th><th>final reward</th><th>best reward</th>"
            "<th>final eval accuracy</th><th>best eval accuracy</th><th>wall time (s)</th></tr>"
            + "".join(rows) + "</table>")


def _config_section(runs: list[RunData]) -> str:
    keys = differing_config_keys(runs)
    if len(runs) < 2:
        diff = "<p class=muted>One run: its full config is below.</p>"
    elif not keys:
        diff = "<p class=muted>The runs' saved configs are identical.</p>"
    else:
        header = "".join(f"<th>{esc(r.label)}</th>" for r in runs)
        body = "".join(
            f"<tr><td>{esc(k)}</td>" + "".join(f"<td>{esc(r.config.get(k))}</td>" for r in runs) + "</tr>" for k in keys
        )
        diff = f"<table><tr><th>config key</th>{header}</tr>{body}</table>"
    full = "".join(
        f"<details><summary>full config: {esc(r.label)}</summary><table>"
        + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in sorted(r.config.items()))
        + "</table></details>"
        for r in runs
    )
    return diff + full


def _figures_section(figures: list[tuple[FigureData, bytes]], x: str, interactive: bool) -> str:
    if not figures:
        return "<p class=muted>No metrics to plot yet.</p>"
    items = []
    if interactive:
        from rlvr.report.interactive import figure_html

        for data, _ in figures:
            items.append(f"<figure class=report-figure id='fig-{esc(data.name)}'>{figure_html(data, x)}</figure>")
        note = ("<p class=muted>Drag to zoom, double-click to reset, hover for values; the buttons above each "
                "figure switch the x axis between iterations and wall-clock seconds (an eval's bar reaches back "
                "to when it started).</p>")
        return note + "<div class=figures>" + "".join(items) + "</div>"
    for data, png in figures:
        encoded = base64.b64encode(png).decode("ascii")
        items.append(f"<figure class=report-figure id='fig-{esc(data.name)}'><img alt='{esc(data.title)}' "
                     f"src='data:image/png;base64,{encoded}'></figure>")
    return f"<p class=muted>{esc(PLOTLY_MISSING)}</p><div class=figures>" + "".join(items) + "</div>"


def _prompt_cell(prompt: str) -> str:
    """Long prompts (chat templates) show their end; the whole prompt unfolds on click."""
    if len(prompt) <= PROMPT_SHOWN:
        return f"<pre>{esc(prompt)}</pre>"
    return f"<details><summary><pre>…{esc(prompt[-PROMPT_SHOWN:])}</pre></summary><pre>{esc(prompt)}</pre></details>"


def _samples_column(iteration, samples: list[dict]) -> str:
    if iteration is None:
        return "<div><p class=muted>no samples logged</p></div>"
    rows, prompt = [], None
    for sample in samples[:SAMPLES_SHOWN]:
        if sample.get("prompt") != prompt:  # a group's completions share one prompt row
            prompt = sample.get("prompt")
            rows.append(f"<tr class=prompt><td colspan=3>{_prompt_cell(str(prompt or ''))}"
                        f"<span class=muted>ground truth: {esc(sample.get('ground_truth'))}</span></td></tr>")
        components = ", ".join(f"{esc(k)}={esc(v)}" for k, v in (sample.get("components") or {}).items())
        rows.append(
            f"<tr><td><pre>{esc(sample.get('completion', ''))}</pre></td><td class=num>{esc(sample.get('reward'))}</td>"
            f"<td>{components}<br><span class=muted>{esc(sample.get('status'))}, advantage "
            f"{esc(sample.get('advantage'))}</span></td></tr>"
        )
    shown = f"{min(len(samples), SAMPLES_SHOWN)} of {len(samples)}"
    return (f"<div><h3>iteration {esc(iteration)} <span class=muted>({shown})</span></h3><table>"
            "<tr><th>completion</th><th>reward</th><th>components</th></tr>" + "".join(rows) + "</table></div>")


def _samples_section(runs: list[RunData]) -> str:
    parts = []
    for run in runs:
        first, first_samples, last, last_samples = first_and_last_samples(run)
        parts.append(f"<h3>{esc(run.label)}</h3><div class=pair>{_samples_column(first, first_samples)}"
                     f"{_samples_column(last, last_samples)}</div>")
    return "".join(parts)


def _health_section(spans: list[WarningSpan]) -> str:
    if not spans:
        return "<p class=muted>No health warning fired.</p>"
    rows = "".join(
        f"<tr><td>{esc(s.run)}</td><td>{esc(s.name)}</td><td class=num>{esc(s.first)}</td><td class=num>{esc(s.last)}"
        f"</td><td>{esc(s.message)}</td><td>{esc(s.advice)}</td></tr>" for s in spans)
    return ("<table><tr><th>run</th><th>warning</th><th>from iteration</th><th>to iteration</th><th>message</th>"
            f"<th>try</th></tr>{rows}</table>")


def _checkpoint_notes(runs: list[RunData]) -> str:
    """A run folder without a checkpoint cannot be resumed, evaluated or exported: say it may be deleted."""
    from rlvr.observe.console import summarize_run

    bare = [run for run in runs if not summarize_run(run.path).checkpoints]
    return "".join(f"<p><b>{esc(run.label)}</b> holds no checkpoint: nothing to resume, evaluate or export; "
                   f"<code>{esc(str(run.path))}</code> may be deleted.</p>" for run in bare)


def render_html(runs: list[RunData], figures: list[tuple[FigureData, bytes]], x: str = ITERATION_AXIS,
                interactive: bool = True, spans: list[WarningSpan] = ()) -> str:
    """The whole page; `figures` are (data, PNG bytes); `interactive` draws them with plotly; `spans` the health
    warnings (report/health_warnings.py)."""
    summaries = [summarize(run) for run in runs]
    library = ""
    if interactive and figures:
        from rlvr.report.interactive import plotly_js

        library = f"<script>{plotly_js()}</script>"
    folders = "".join(f"<li>{esc(r.label)}: <code>{esc(str(r.path))}</code></li>" for r in runs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rlvr report: {esc(", ".join(r.label for r in runs))}</title>
<style>{STYLE}</style>{library}<script>{FIGURE_CHECK}</script></head>
<body>
<h1>rlvr run report</h1>
<p class=muted>{len(runs)} run(s), written {datetime.now():%Y-%m-%d %H:%M}</p><ul>{folders}</ul>
<h2>Summary</h2>{_summary_table(runs, summaries)}{_checkpoint_notes(runs)}
<h2>Health warnings</h2>{_health_section(list(spans))}
<h2>Config differences</h2>{_config_section(runs)}
<h2>Figures</h2>{_figures_section(figures, x, interactive)}
<h2>Completions: first and last logged iteration</h2>{_samples_section(runs)}
</body></html>
"""
