"""A study's summary as markdown: its runs, each metric per condition, each threshold per condition and per run,
and the ratios between conditions. Every number comes from `StudySummary` (written whole as summary.json)."""

from __future__ import annotations

from rlvr.report.study_numbers import ConditionNumbers, Crossing, RatioNumbers, RunNumbers, Spread, StudySummary


def _number(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _spread(value: Spread, digits: int = 3) -> str:
    if value.mean is None:
        return "-"
    if value.count == 1:
        return _number(value.mean, digits)
    return f"{_number(value.mean, digits)} ({_number(value.low, digits)}-{_number(value.high, digits)})"


def _crossing(crossing: Crossing) -> list[str]:
    if not crossing.reached:
        return ["not reached", "-", "-"]
    return [str(crossing.iteration), _number(crossing.completions, 0), _number(crossing.seconds, 0)]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def runs_table(runs: list[RunNumbers]) -> list[str]:
    rows = [[r.name, r.condition, str(r.seed),
             f"{r.iterations or 0} / {r.planned_iterations}" + ("" if r.finished else " (unfinished)"),
             _number(r.completions, 0), _number(r.seconds, 0), _number(r.median_iteration_s, 2)] for r in runs]
    return _table(["run", "condition", "seed", "iterations", "completions", "seconds", "s / it"], rows)


def metric_table(metric: str, conditions: list[ConditionNumbers], last: int) -> list[str]:
    rows = []
    for c in conditions:
        parts = c.metrics[metric]
        rows.append([c.label, str(parts["final"].count), _spread(parts["final"]), _spread(parts["last_mean"]),
                     _spread(parts["max"]), _spread(parts["mean"])])
    return _table(["condition", "runs", "final", f"mean of the last {last} it", "max", "mean"], rows)


def threshold_tables(index: int, summary: StudySummary) -> list[str]:
    rows = []
    for c in summary.conditions:
        pool = c.thresholds[index]
        rows.append([c.label, f"{pool.reached} / {pool.runs}", _spread(pool.iteration, 1),
                     _spread(pool.completions, 0), _spread(pool.seconds, 0)])
    lines = _table(["condition", "reached", "at iteration", "completions", "seconds"], rows)
    lines += ["", *_table(["run", "condition", "seed", "at iteration", "completions", "seconds"],
                          [[r.name, r.condition, str(r.seed), *_crossing(r.crossings[index])] for r in summary.runs])]
    return lines


def ratio_table(ratios: list[RatioNumbers]) -> list[str]:
    rows = []
    for ratio in ratios:
        pair = f"{ratio.numerator} / {ratio.denominator}"
        for part in ratio.thresholds:
            a, a_runs, b, b_runs = part.reached
            rows.append([pair, part.threshold, f"{a}/{a_runs} and {b}/{b_runs}", _number(part.iteration, 2),
                         _number(part.completions, 2), _number(part.seconds, 2)])
        rows.append([pair, "median seconds per iteration", "-", "-", "-", _number(ratio.median_iteration_s, 2)])
    return _table(["A / B", "threshold", "reached (A and B)", "iterations", "completions", "seconds"], rows)


def summary_markdown(summary: StudySummary) -> str:
    """The whole summary page (summary.md)."""
    lines = [f"# {summary.title}", "",
             f"Study file `{summary.study_file}`, runs in `{summary.output}`"
             + (f", results page `{summary.page}`" if summary.page else "") + ".",
             f"Grid: {'; '.join(summary.grid)}. Conditions by {', '.join(summary.group_by) or '(none)'}; "
             "the other grid keys (the seeds) are pooled: mean (lowest-highest) over the runs.", "",
             f"{len(summary.runs)} of {summary.planned} runs summarised."]
    if summary.missing:
        lines.append(f"Missing ({len(summary.missing)}): {', '.join(summary.missing)}.")
    if summary.unfinished:
        lines.append(f"Unfinished ({len(summary.unfinished)}): {', '.join(summary.unfinished)}.")
    lines += ["", "## Runs", "", *runs_table(summary.runs)]
    lines += ["", "## Metrics", "", f"Each run's final value, mean over its last {summary.last} iterations, maximum "
              "and mean; eval metrics from eval.jsonl (step 0 included)."]
    for metric in summary.metrics:
        lines += ["", f"### {metric}", ""]
        if not any(r.metrics.get(metric) for r in summary.runs):
            lines.append(f"No run logged {metric}.")
        else:
            lines += metric_table(metric, summary.conditions, summary.last)
    if summary.thresholds:
        lines += ["", "## Thresholds", "", "The first iteration where the metric reached the value, the completions "
                  "generated up to and including it (dynamic sampling: every sampled group) and the run's seconds by "
                  "then. Means are over the runs that reached it; the others are counted, not averaged."]
        for index, label in enumerate(summary.thresholds):
            lines += ["", f"### {label}", "", *threshold_tables(index, summary)]
    if summary.ratios:
        lines += ["", "## Ratios", "", "A / B of the means over the runs that reached each threshold (below 1: A "
                  "needs fewer); `-` where A or B has no run that reached it.", "", *ratio_table(summary.ratios)]
    if summary.figures:
        lines += ["", "## Figures", "", *[f"- `{path}`" for path in summary.figures]]
    return "\n".join(lines) + "\n"
