"""Does `rlvr train` make the embedded SmolLM2 learn format_copy, and how fast?

Runs `rlvr train` as a user would (a fresh process per run, model loading included) for each
config given, then prints, per run: seconds from the command's start to rollout reward >= 1.25
and to greedy eval exact match >= 0.9, the per-iteration time split, and writes a PNG of the
reward and eval curves.

    python benchmarks/learning/format_copy_learning.py                       # grpo (the default) and gr_reinforce
    python benchmarks/learning/format_copy_learning.py --configs configs/format_copy_rloo.yaml --out docs/rloo.png
    python benchmarks/learning/format_copy_learning.py --configs configs/format_copy_grpo.yaml \
        configs/format_copy_ppo.yaml --out docs/figures/format_copy_ppo_vs_grpo.png \
        --json benchmarks/results/format_copy_ppo_vs_grpo.json
    python benchmarks/learning/format_copy_learning.py --configs configs/format_copy_grpo.yaml --num-processes 2 \
        --override model.num_threads=1 --compare benchmarks/results/format_copy_learning.json \
        --out docs/figures/format_copy_data_parallel.png --json benchmarks/results/format_copy_data_parallel.json \
        --x-axis iteration

The runs go to `runs/bench-<config name>` (deleted first). Numbers are for the machine it runs on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.learning.bench_runs import save_figure, train_in_fresh_process  # noqa: E402

DEFAULT_CONFIGS = [None, "configs/format_copy_reinforce.yaml"]  # None: `rlvr train` with no config
REWARD_TARGET, EVAL_TARGET = 1.25, 0.9


def run_one(config: str | None, overrides: list[str], runs_dir: Path, num_processes: int = 1) -> dict:
    name = "bench-" + (Path(config).stem if config else "default")
    launch = []
    if num_processes > 1:
        name += f"-{num_processes}proc"
        launch = ["--num-processes", str(num_processes)]
    run_dir = runs_dir / name
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, "-m", "rlvr", "train", *launch, *([config] if config else []),
               f"train.output_dir={runs_dir}", f"train.run_name={name}", "train.progress=false", *overrides]
    run = train_in_fresh_process(command, run_dir, label=name)
    started, total, metrics, evals = run["started"], run["total_s"], run["metrics"], run["evals"]

    def since_start(record):
        return record["time/unix"] - started

    reward_hit = next((since_start(m) for m in metrics if m["reward/mean"] >= REWARD_TARGET), None)
    eval_hit = next((since_start(e) for e in evals if (e["eval/accuracy"] or 0) >= EVAL_TARGET), None)
    split = {key: statistics.median(m[key] for m in metrics if key in m)
             for key in ("time/generation", "time/scoring", "time/logprobs", "time/values", "time/update",
                         "time/iteration")
             if any(key in m for m in metrics)}
    return {
        "name": name, "config": config or "(defaults)", "total_s": total, "metrics": metrics, "evals": evals,
        "reward_target_s": reward_hit, "eval_target_s": eval_hit, "median_split_s": split,
        "started": started, "num_processes": num_processes,
    }


def plot(results: list[dict], out: Path, x_axis: str = "seconds") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_reward, ax_eval) = plt.subplots(1, 2, figsize=(11, 4))
    def x(record, result):
        return record["iteration"] if x_axis == "iteration" else record["time/unix"] - result["started"]

    for result in results:
        xs = [x(m, result) for m in result["metrics"]]
        ax_reward.plot(xs, [m["reward/mean"] for m in result["metrics"]], marker="o", label=result["name"])
        ex = [x(e, result) for e in result["evals"]]
        ax_eval.plot(ex, [e["eval/accuracy"] for e in result["evals"]], marker="s", label=result["name"])
    ax_reward.axhline(REWARD_TARGET, color="grey", linestyle=":")
    ax_eval.axhline(EVAL_TARGET, color="grey", linestyle=":")
    xlabel = "iteration" if x_axis == "iteration" else "seconds since `rlvr train` started"
    ax_reward.set(xlabel=xlabel, ylabel="mean rollout reward (max 1.3)", title="format_copy: rollout reward")
    ax_eval.set(xlabel=xlabel, ylabel="greedy exact match",
                title="format_copy: held-out eval", ylim=(-0.02, 1.02))
    for ax in (ax_reward, ax_eval):
        ax.grid(alpha=0.3)
        ax.legend()
    save_figure(fig, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="*", default=None, help="config files ('default' = no config)")
    parser.add_argument("--override", action="append", default=[], help="key=value passed to every run")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--num-processes", type=int, default=1, help="data-parallel processes per run")
    parser.add_argument("--compare", default=None, help="a results JSON whose runs are plotted alongside")
    parser.add_argument("--x-axis", choices=("seconds", "iteration"), default="seconds")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot from --json (and --compare)")
    parser.add_argument("--out", default="docs/figures/format_copy_learning.png")
    parser.add_argument("--json", default="benchmarks/results/format_copy_learning.json")
    args = parser.parse_args()
    configs = DEFAULT_CONFIGS if args.configs is None else [None if c == "default" else c for c in args.configs]
    compared = json.loads((REPO / args.compare).read_text()) if args.compare else []
    if args.replot:
        results = json.loads((REPO / args.json).read_text())
        plot([r for r in compared if r["config"] in {r["config"] for r in results}] + results, REPO / args.out,
             args.x_axis)
        return 0
    results = [run_one(c, args.override, (REPO / args.runs_dir).resolve(), args.num_processes) for c in configs]
    print(f"\n{'run':28s} {'reward>=1.25 at':>16s} {'eval>=0.9 at':>13s} {'final reward':>13s} "
          f"{'final eval':>11s} {'s/iter':>7s} {'gen':>5s} {'logp':>5s} {'val':>5s} {'upd':>5s} {'expl.var':>8s}")
    for r in results:
        last_m, last_e = r["metrics"][-1], r["evals"][-1] if r["evals"] else {}
        fmt = lambda v: f"{v:.0f} s" if v is not None else "never"  # noqa: E731
        split = r["median_split_s"]
        print(f"{r['name']:28s} {fmt(r['reward_target_s']):>16s} {fmt(r['eval_target_s']):>13s} "
              f"{last_m['reward/mean']:13.3f} {last_e.get('eval/accuracy', float('nan')):11.3f} "
              f"{split.get('time/iteration', 0):7.1f} {split.get('time/generation', 0):5.1f} "
              f"{split.get('time/logprobs', 0):5.1f} {split.get('time/values', 0):5.1f} "
              f"{split.get('time/update', 0):5.1f} {last_m.get('value/explained_variance', float('nan')):8.3f}")
    plot([r for r in compared if r["config"] in {r["config"] for r in results}] + results, REPO / args.out,
         args.x_axis)
    out_json = REPO / args.json
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps([{k: v for k, v in r.items()} for r in results], indent=1))
    print(f"wrote {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
