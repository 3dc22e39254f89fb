"""Compare finished runs (a sweep's folder, or run folders) in one table and one figure.

For each run: the preset (`algorithm.name`) and seed from its saved config; step-0, best and final
greedy eval with Wilson 95% intervals; when eval accuracy first reached `--reach`; the main reward
component's rollout mean over the first and the last iterations; the share of groups without
reward contrast (no learning signal); the policy entropy over the first and the last iterations; DAPO's
extra sampled groups; iterations, wall seconds (from
the run's own start, model loading included) and the median seconds per iteration. The figure
draws held-out accuracy, the main component, the zero-contrast share and the entropy (trailing means
over `--smooth` iterations) against iterations (top row) and seconds (bottom row).

    python benchmarks/learning/sweep_summary.py runs/sweep-algorithms_arithmetic runs/sweep-grpo_seeds_arithmetic \
      --json benchmarks/results/algorithms_arithmetic.json --out docs/figures/algorithms_arithmetic.png

Prints a markdown table of runs, then one of presets: each preset's seeds pooled (final and best
held-out accuracy: mean, lowest, highest) and set against the seed spread of `--reference` (grpo by
default): "above" only when its lowest seed beats the reference's highest, "below" only when its
highest is under the reference's lowest, else "within". `--cap SECONDS` (or `--cap shortest`: the
shortest run's wall time) adds each run's held-out accuracy at that wall-clock cap, the last eval at
or before it, to both tables: the runs compared at the same time budget, not the same iterations. `--json` keeps
every number it was made from. `--also JSON` adds the rows of an earlier `--json` file (runs whose folders are
gone) to the table and the figure, before the new ones:

    python benchmarks/learning/sweep_summary.py runs/sweep-algorithms_arithmetic_more \
      --also benchmarks/results/algorithms_arithmetic.json \
      --json benchmarks/results/algorithms_arithmetic_more.json --out docs/figures/algorithms_arithmetic_all.png

`--plot-presets grpo,dapo` draws only those presets (each with all its seeds) in the figure; the tables keep
every run.

A study file (configs/studies/) gets its own tables and figures from `rlvr study NAME`, whose means and
seconds per iteration are this script's (rlvr/report/study_numbers.py); this script stays for comparing
any run folders, Wilson intervals and `--also` included.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.learning.bench_runs import accuracy_ci, first_best  # noqa: E402
from rlvr.observe.metric_names import (  # noqa: E402
    DYNAMIC_SAMPLING_SAMPLED_GROUPS,
    ELAPSED_S,
    ENTROPY,
    FRAC_NO_CONTRAST_GROUPS,
    ITERATION,
    REWARD_PREFIX,
    TIME_ITERATION,
)
from rlvr.report import load_runs  # noqa: E402
from rlvr.report.run_data import summarize  # noqa: E402
from rlvr.report.study_numbers import finite_mean as _mean  # noqa: E402  (the means `rlvr study` takes, NaN skipped)
from rlvr.report.study_numbers import median_iteration_seconds, moving_mean  # noqa: E402
from rlvr.utils import atomic_write_text  # noqa: E402


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def summarize_run(run, component: str, window: int, reach: float) -> dict:
    """One run's row: eval points with intervals, component and zero-contrast shares, timing."""
    evals = [{ITERATION: e.get(ITERATION), "seconds": e.get(ELAPSED_S), **accuracy_ci(e)} for e in run.evals]
    key = REWARD_PREFIX + component
    metrics = [{ITERATION: m.get(ITERATION), "seconds": m.get(ELAPSED_S), "component": m.get(key),
                "no_contrast": m.get(FRAC_NO_CONTRAST_GROUPS), "entropy": m.get(ENTROPY),
                "sampled_groups": m.get(DYNAMIC_SAMPLING_SAMPLED_GROUPS),
                "iteration_s": m.get(TIME_ITERATION)} for m in run.metrics]
    best = first_best(evals, key="accuracy") if evals else None
    sampled = [m["sampled_groups"] for m in metrics if m["sampled_groups"] is not None]
    reached = next((e for e in evals if e["accuracy"] >= reach), None)
    summary = summarize(run)  # iterations and wall time as `rlvr report` counts them
    return {
        "label": run.label, "algorithm": run.config.get("algorithm.name"), "seed": run.config.get("train.seed"),
        "step0": evals[0] if evals else None, "best": best, "final": evals[-1] if evals else None,
        "reach": reach, "reached": reached,
        "component_first": _mean([m["component"] for m in metrics[:window]]),
        "component_last": _mean([m["component"] for m in metrics[-window:]]),
        "no_contrast_mean": _mean([m["no_contrast"] for m in metrics]),
        "no_contrast_last": _mean([m["no_contrast"] for m in metrics[-window:]]),
        "entropy_first": _mean([m["entropy"] for m in metrics[:window]]),
        "entropy_last": _mean([m["entropy"] for m in metrics[-window:]]),
        "sampled_groups_total": sum(sampled) if sampled else None,
        "iterations": summary.iterations,
        "wall_s": math.nan if summary.wall_s is None else summary.wall_s,
        "median_iteration_s": _or_nan(median_iteration_seconds(run)),
        "evals": evals, "metrics": metrics,
    }


# Keys an earlier version of this script wrote, under the names it writes now.
LEGACY_KEYS = {"zero_variance_mean": "no_contrast_mean", "zero_variance_last": "no_contrast_last",
               "zero_variance": "no_contrast"}


def _renamed(record: dict) -> dict:
    return {LEGACY_KEYS.get(key, key): value for key, value in record.items()}


def saved_rows(path: Path) -> list[dict]:
    """The rows of an earlier `--json` file, with legacy key names renamed (in each row and its metrics)."""
    try:
        rows = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"--also {path}: not a sweep_summary.py --json file ({error})") from None
    return [{**_renamed(row), "metrics": [_renamed(m) for m in row.get("metrics", [])]} for row in rows]


def at_cap(row: dict, cap: float) -> dict | None:
    """The run's last eval at or before `cap` seconds from its start, or None when it has none that early."""
    return next((e for e in reversed(row["evals"]) if e["seconds"] is not None and e["seconds"] <= cap), None)


def resolve_cap(cap: str | None, rows: list[dict]) -> float | None:
    """`--cap`: None, a number of seconds, or "shortest" (the shortest wall time among `rows`)."""
    if cap is None:
        return None
    if cap == "shortest":
        return min(r["wall_s"] for r in rows)
    try:
        seconds = float(cap)
    except ValueError:
        raise SystemExit(f"--cap {cap!r}: give seconds (a number above 0) or 'shortest'") from None
    if not seconds > 0:
        raise SystemExit(f"--cap {cap!r}: give seconds (a number above 0) or 'shortest'")
    return seconds


def markdown_table(rows: list[dict], component: str, window: int, reach: float, cap: float | None = None) -> str:
    def point(p, with_iteration=True):
        if p is None:
            return "-"
        text = f"{p['accuracy']:.3f} ({p['low']:.3f}-{p['high']:.3f})"
        return f"{text}, it {p[ITERATION]}" if with_iteration else text

    def first_reach(p):
        return "-" if p is None else f"it {p[ITERATION]}, {p['seconds']:.0f} s"

    capped = "" if cap is None else f" eval at {cap:.0f} s |"
    lines = [f"| run | seed | step 0 | best eval (95% CI) | final eval (95% CI) | eval >= {reach:g} first | "
             f"{component}: first {window} -> last {window} it | zero-contrast groups: all / last {window} | "
             f"entropy: first {window} -> last {window} it | groups sampled | wall s | s / it |{capped}",
             "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("" if cap is None else "---|")]
    for r in rows:
        sampled = "-" if r["sampled_groups_total"] is None else str(r["sampled_groups_total"])
        first, last = r.get("entropy_first", math.nan), r.get("entropy_last", math.nan)  # absent in older files
        entropy = "-" if not (math.isfinite(first) and math.isfinite(last)) else f"{first:.2f} -> {last:.2f}"
        lines.append(f"| {r['algorithm'] or r['label']} | {r['seed']} | {point(r['step0'], False)} | "
                     f"{point(r['best'])} | {point(r['final'], False)} | {first_reach(r['reached'])} | "
                     f"{r['component_first']:.3f} -> {r['component_last']:.3f} | "
                     f"{r['no_contrast_mean']:.2f} / {r['no_contrast_last']:.2f} | {entropy} | {sampled} | "
                     f"{r['wall_s']:.0f} | {r['median_iteration_s']:.1f} |"
                     + ("" if cap is None else f" {point(at_cap(r, cap))} |"))
    return "\n".join(lines)


def preset_rows(rows: list[dict], reference: str, cap: float | None = None) -> list[dict]:
    """Each preset's runs pooled: final and best accuracy (mean, lowest, highest over its seeds), with `cap`
    the mean accuracy at that many seconds, the median seconds per iteration, and where its seeds sit against
    the reference preset's, best mean first."""
    by_preset: dict[str, list[dict]] = {}
    for r in rows:
        if r["final"] is not None:
            by_preset.setdefault(r["algorithm"] or r["label"], []).append(r)
    pooled = []
    for name, runs in by_preset.items():
        finals = [r["final"]["accuracy"] for r in runs]
        bests = [r["best"]["accuracy"] for r in runs]
        pooled.append({"algorithm": name, "seeds": sorted(r["seed"] for r in runs),
                       "final_mean": statistics.fmean(finals), "final_low": min(finals), "final_high": max(finals),
                       "best_mean": statistics.fmean(bests),
                       "median_iteration_s": statistics.median([r["median_iteration_s"] for r in runs])})
        if cap is not None:
            capped = [found["accuracy"] for found in (at_cap(r, cap) for r in runs) if found is not None]
            pooled[-1]["cap_mean"] = statistics.fmean(capped) if capped else math.nan
    ref = next((p for p in pooled if p["algorithm"] == reference), None)
    for p in pooled:
        if ref is None or p is ref:
            p["against_reference"] = "-"
        elif p["final_low"] > ref["final_high"]:
            p["against_reference"] = f"above by {p['final_low'] - ref['final_high']:.3f}"
        elif p["final_high"] < ref["final_low"]:
            p["against_reference"] = f"below by {ref['final_low'] - p['final_high']:.3f}"
        else:
            p["against_reference"] = "within"
    return sorted(pooled, key=lambda p: -p["final_mean"])


def preset_table(pooled: list[dict], reference: str, cap: float | None = None) -> str:
    capped = "" if cap is None else f" at {cap:.0f} s: mean |"
    lines = [f"| preset | seeds | final: mean (lowest-highest) | best: mean | s / it "
             f"| final against {reference}'s seeds |" + capped,
             "|---|---|---|---|---|---|" + ("" if cap is None else "---|")]
    for p in pooled:
        spread = f"{p['final_mean']:.3f} ({p['final_low']:.3f}-{p['final_high']:.3f})"
        lines.append(f"| {p['algorithm']} | {','.join(str(s) for s in p['seeds'])} | {spread} | "
                     f"{p['best_mean']:.3f} | {p['median_iteration_s']:.1f} | {p['against_reference']} |"
                     + ("" if cap is None else f" {p['cap_mean']:.3f} |"))
    return "\n".join(lines)


def plot(rows: list[dict], component: str, out: Path, smooth: int) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(20, 8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 4)
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    if len(algorithms) <= 10:
        colors = {a: f"C{i}" for i, a in enumerate(algorithms)}
    else:  # the default cycle repeats after 10: two presets would share a colour
        from matplotlib import colormaps
        colors = {a: colormaps["tab20"](i % 20) for i, a in enumerate(algorithms)}
    styles = ["-", "--", ":", "-."]
    for r in rows:
        seeds = sorted({x["seed"] for x in rows if x["algorithm"] == r["algorithm"]})
        style = styles[seeds.index(r["seed"]) % len(styles)]
        label = f"{r['algorithm']} seed {r['seed']}" if len(seeds) > 1 else r["algorithm"]
        color = colors[r["algorithm"]]
        for row, x in enumerate((ITERATION, "seconds")):
            ax_eval, ax_component, ax_zero, ax_entropy = axes[row]
            xs = [e[x] for e in r["evals"]]
            ax_eval.plot(xs, [e["accuracy"] for e in r["evals"]], style, marker="o", ms=3, color=color, label=label)
            ax_eval.fill_between(xs, [e["low"] for e in r["evals"]], [e["high"] for e in r["evals"]], color=color,
                                 alpha=0.05)
            mx = [m[x] for m in r["metrics"]]
            ax_component.plot(mx, moving_mean([m["component"] for m in r["metrics"]], smooth), style, color=color, lw=1)
            ax_zero.plot(mx, moving_mean([m["no_contrast"] for m in r["metrics"]], smooth), style, color=color, lw=1)
            ax_entropy.plot(mx, moving_mean([m.get("entropy") for m in r["metrics"]], smooth), style, color=color, lw=1)
    n = next((e["n"] for r in rows for e in r["evals"]), "?")
    for row, xlabel in enumerate(("iteration", "seconds since the run started")):
        ax_eval, ax_component, ax_zero, ax_entropy = axes[row]
        ax_eval.set(xlabel=xlabel, ylabel=f"greedy accuracy, {n} held out", ylim=(-0.02, 1.02))
        ax_component.set(xlabel=xlabel, ylabel=f"rollout reward/{component} (mean)", ylim=(-0.02, 1.02))
        ax_zero.set(xlabel=xlabel, ylabel="share of groups without contrast", ylim=(-0.02, 1.02))
        ax_entropy.set(xlabel=xlabel, ylabel="policy entropy per token (nats)", ylim=(0, None))
        for ax in axes[row]:
            ax.grid(alpha=0.3)
    axes[0][0].set_title("held-out accuracy (Wilson 95% bands)")
    axes[0][1].set_title(f"rollout reward/{component} ({smooth}-iteration mean)")
    axes[0][2].set_title(f"groups without contrast ({smooth}-iteration mean)")
    axes[0][3].set_title(f"entropy ({smooth}-iteration mean)")
    # Outside the axes, beside them: with a few dozen runs a legend inside would cover the curves.
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right upper", fontsize=8, ncols=1 + len(labels) // 40)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    print(f"wrote {out}")


def only_presets(rows: list[dict], presets: str | None) -> list[dict]:
    """The rows whose preset is in the comma-separated `presets` (all rows when None); an unknown name is an error
    that lists the presets the rows hold."""
    if presets is None:
        return rows
    wanted = [name.strip() for name in presets.split(",") if name.strip()]
    present = list(dict.fromkeys(r["algorithm"] for r in rows))
    unknown = [name for name in wanted if name not in present]
    if unknown or not wanted:
        raise SystemExit(f"--plot-presets: {', '.join(unknown) or 'no preset named'} not among the runs' presets "
                         f"({', '.join(present)})")
    return [r for r in rows if r["algorithm"] in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders, or folders of runs (a sweep's output)")
    parser.add_argument("--component", default="answer", help="the main reward component (default: answer)")
    parser.add_argument("--window", type=int, default=10, help="iterations averaged at the start and the end")
    parser.add_argument("--reach", type=float, default=0.6, help="the table says when eval accuracy first reached this")
    parser.add_argument("--smooth", type=int, default=5, help="trailing mean over this many iterations in the figure")
    parser.add_argument("--reference", default="grpo", help="the preset whose seed spread the others are set against")
    parser.add_argument("--json", help="write every number here")
    parser.add_argument("--out", help="write the figure here (PNG)")
    parser.add_argument("--cap", help="also compare at this wall-clock cap: seconds, or 'shortest' (the shortest "
                        "run's wall time)")
    parser.add_argument("--also", action="append", default=[], metavar="JSON",
                        help="add the rows of an earlier --json file (repeatable); --json then holds only the new runs")
    parser.add_argument("--plot-presets", metavar="NAMES",
                        help="the figure draws only these presets (comma-separated); the tables keep every run")
    args = parser.parse_args()
    earlier = [row for path in args.also for row in saved_rows(Path(path))]
    rows = [summarize_run(run, args.component, args.window, args.reach) for run in load_runs(args.runs)]
    cap = resolve_cap(args.cap, earlier + rows)
    plotted = only_presets(earlier + rows, args.plot_presets)
    print(markdown_table(earlier + rows, args.component, args.window, args.reach, cap))
    print()
    print(preset_table(preset_rows(earlier + rows, args.reference, cap), args.reference, cap))
    if args.json:
        path = REPO / args.json
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"argv": sys.argv[1:], "runs": rows}, indent=1) + "\n")
        print(f"wrote {path}")
    if args.out:
        plot(plotted, args.component, REPO / args.out, args.smooth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
