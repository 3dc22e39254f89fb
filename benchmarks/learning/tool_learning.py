"""Does GRPO teach the embedded SmolLM2 an environment task: the calculator, or guess-the-number?

Zero-shot the model plays neither: it never calls the calculator (0 calls on the 100 held-out
products) and never writes a guess in tags, so there is nothing to reinforce. Each run is
therefore two stages, each a fresh process as a user would run it:

1. **SFT warm-up** (`rlvr sft <the task's SFT config>`) on right episodes replayed against the
   task itself: the task's `demonstration(example)` gives the assistant turns of a training
   example (the calculator: the call, then the answer; guess_number: binary search), and
   `rlvr.rollout.episodes.demonstration_pairs` renders them as the episode driver would, with the
   environment's own replies between them, one pair per turn. No example held out for the eval
   of the SFT run or of any GRPO seed is in it (checked). Its greedy evals before and after are
   the zero-shot and the warm-up's accuracy.
2. **GRPO** (`<the task's config> model.init_from=<the SFT run>`) for each seed, through
   `arithmetic_learning.run_side` (greedy evals on the held-out split as they land, Wilson
   intervals, best and final), with the episodes' turns, tool calls and errors read back.

    python benchmarks/learning/tool_learning.py --questions 8 --seeds 0 1 2
    python benchmarks/learning/tool_learning.py --task guess_number --questions 24 --seeds 0
    python benchmarks/learning/tool_learning.py --write-sft-data runs/calculator_sft.jsonl --questions 8   # data only
    python benchmarks/learning/tool_learning.py --replot

Runs go to `runs/bench-sft-<task>` and `runs/bench-arith-<config>-rlvr-s<seed>` (deleted first);
the summary to the task's JSON in `benchmarks/results/`, the curves to the task's figure in
`docs/` (`TASK_RUNS`). Numbers are for the machine it runs on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.comparisons.vs_trl import matmul_gflops  # noqa: E402
from benchmarks.learning.arithmetic_learning import print_table, run_name, run_side  # noqa: E402
from benchmarks.learning.bench_runs import accuracy_ci, read_jsonl, save_figure  # noqa: E402
from rlvr.observe.metric_names import UNIX_TIME, reward_component  # noqa: E402
from rlvr.run.sft_data import demonstration_rows, held_out_keys, kept_row, task_for_seed  # noqa: E402


@dataclass(frozen=True)
class TaskRun:
    sft_config: str
    rl_config: str
    json: str
    figure: str
    primary: str  # the reward component the rollout panel draws


TASK_RUNS = {
    "calculator_arithmetic": TaskRun("configs/calculator_sft.yaml", "configs/calculator_arithmetic.yaml",
                                     "benchmarks/results/tool_learning.json", "docs/figures/tool_learning.png",
                                     "answer"),
    "guess_number": TaskRun("configs/guess_number_sft.yaml", "configs/guess_number.yaml",
                            "benchmarks/results/guess_number_learning.json", "docs/figures/guess_number_learning.png",
                            "solved"),
}
# What each eval and each iteration also keeps of the episodes: turns, calls and failed calls per episode.
EPISODE_METRICS = ("episode/turns", "episode/tool_calls", "episode/tool_errors")


def sft_run_name(task_name: str) -> str:
    return f"bench-sft-{task_name}"


def write_sft_data(path: Path, task_run: TaskRun, questions: int, grpo_seeds=(0,), seed: int = 1) -> dict:
    """The SFT data file for `task_run`: `questions` examples, none held out for the SFT run or `grpo_seeds`."""
    from rlvr.config import load_config
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.utils import atomic_write_text

    config = load_config(REPO / task_run.sft_config)
    model_path, gguf_file = resolve_model_path(config.model.name)
    tokenizer = load_tokenizer(model_path, gguf_file=gguf_file)
    held_out = held_out_keys(config, {config.train.seed, *grpo_seeds})
    rows = demonstration_rows(task_for_seed(config, config.train.seed), tokenizer, questions, seed, held_out,
                              use_chat_template=config.task.use_chat_template)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(kept_row(row)) + "\n" for row in rows))
    print(f"wrote {len(rows)} pairs ({questions} examples, none of the {len(held_out)} held out) to {path}")
    return {"questions": questions, "pairs": len(rows), "held_out_excluded": len(held_out)}


def run_sft(runs_dir: Path, task_name: str, questions: int, grpo_seeds) -> dict:
    task_run = TASK_RUNS[task_name]
    name = sft_run_name(task_name)
    data_path = runs_dir / f"{name}-data.jsonl"
    data = write_sft_data(data_path, task_run, questions, grpo_seeds)
    shutil.rmtree(runs_dir / name, ignore_errors=True)
    command = [sys.executable, "-m", "rlvr", "sft", task_run.sft_config, f"sft.data_path={data_path}",
               f"train.output_dir={runs_dir}", f"train.run_name={name}", "train.progress=false"]
    print("$", " ".join(command), flush=True)
    started = time.time()
    subprocess.run(command, cwd=REPO, check=True)
    evals = read_jsonl(runs_dir / name / "eval.jsonl")
    metrics = read_jsonl(runs_dir / name / "metrics.jsonl")
    return {**data, "steps": len(metrics), "seconds": time.time() - started,
            "final_loss": metrics[-1]["loss"] if metrics else None,
            "evals": [{"seconds": e[UNIX_TIME] - started, **accuracy_ci(e), **episode_numbers(e, "eval/")}
                      for e in evals]}


def episode_numbers(record: dict, prefix: str = "") -> dict:
    """The EPISODE_METRICS of a metrics or eval record (eval records carry them as eval/episode/*)."""
    return {name: record[prefix + name] for name in EPISODE_METRICS if prefix + name in record}


def add_episode_numbers(result: dict, config: str, runs_dir: Path) -> dict:
    """`run_side`'s result with each eval's and each iteration's EPISODE_METRICS, read back from its run folder."""
    run_dir = runs_dir / run_name(config, "rlvr", result["seed"])
    evals, metrics = read_jsonl(run_dir / "eval.jsonl"), read_jsonl(run_dir / "metrics.jsonl")
    for kept, record in zip(result["evals"], evals):
        kept.update(episode_numbers(record, "eval/"))
    for kept, record in zip(result["metrics"], metrics):
        kept.update(episode_numbers(record))
    return result


def time_to_target(sft: dict, result: dict, target: float) -> float | None:
    """Seconds from the start of the warm-up to the first GRPO eval at or above `target`, or None."""
    reached = next((e for e in result["evals"] if e["accuracy"] >= target), None)
    return None if reached is None else sft["seconds"] + reached["seconds"]


def print_summary(sft: dict, results: list[dict], target: float) -> None:
    first, last = sft["evals"][0], sft["evals"][-1]
    print(f"\nSFT warm-up: {sft['questions']} examples ({sft['pairs']} pairs), {sft['steps']} steps, "
          f"{sft['seconds']:.0f} s with its two evals, final loss {sft['final_loss']:.4f}")
    for name, e in (("before (zero-shot)", first), ("after", last)):
        print(f"  {name:18s} accuracy {e['accuracy']:.3f} ({e['low']:.3f}-{e['high']:.3f}) of {e['n']}"
              + "".join(f", {k.split('/')[-1]} {e[k]:.2f}" for k in EPISODE_METRICS if k in e))
    print_table(results)
    for r in results:
        seconds = time_to_target(sft, r, target)
        reached = "never" if seconds is None else f"{seconds:.0f} s ({seconds / 60:.1f} min) after the warm-up began"
        print(f"seed {r['seed']}: held-out accuracy >= {target:.2f} {reached}")
        for e in r["evals"]:
            print(f"  it {e['iteration']:3d}  accuracy {e['accuracy']:.3f}"
                  + "".join(f"  {k.split('/')[-1]} {e[k]:.2f}" for k in EPISODE_METRICS if k in e))


def plot(sft: dict, results: list[dict], task_run: TaskRun, out: Path, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_eval, ax_reward, ax_turns) = plt.subplots(1, 3, figsize=(16, 4.5))
    styles = ["-", "--", ":", "-."]
    sft_points = [(e.get("seconds", sft["seconds"] if i else 0.0) / 60, e["accuracy"])
                  for i, e in enumerate(sft["evals"])]
    ax_eval.plot(*zip(*sft_points), "s-", color="gray", label="SFT warm-up")
    primary = reward_component(task_run.primary)
    for r in results:
        style, label = styles[r["seed"] % len(styles)], f"GRPO seed {r['seed']}"
        xs = [(sft["seconds"] + e["seconds"]) / 60 for e in r["evals"]]
        line, = ax_eval.plot(xs, [e["accuracy"] for e in r["evals"]], style, marker="o", label=label)
        ax_eval.fill_between(xs, [e["low"] for e in r["evals"]], [e["high"] for e in r["evals"]],
                             color=line.get_color(), alpha=0.08)
        ax_reward.plot([m["iteration"] for m in r["metrics"]], [m.get(primary) for m in r["metrics"]], style,
                       color=line.get_color(), label=label)
        iterations = [e["iteration"] for e in r["evals"]]
        for name, marker in (("episode/turns", "o"), ("episode/tool_calls", "^")):
            if any(name in e for e in r["evals"]):
                ax_turns.plot(iterations, [e.get(name) for e in r["evals"]], style, marker=marker,
                              color=line.get_color(), label=f"{name.split('/')[-1]}, seed {r['seed']}")
    ax_eval.axhline(target, color="black", lw=0.6, ls=":")
    n = next((e["n"] for e in sft["evals"]), "?")
    ax_eval.set(xlabel="minutes since the warm-up began", ylabel=f"greedy accuracy, {n} held-out (Wilson 95%)",
                title="held-out accuracy", ylim=(-0.02, 1.02))
    ax_reward.set(xlabel="GRPO iteration", ylabel=f"rollout {primary}", title="rollout reward (main component)",
                  ylim=(-0.02, 1.02))
    ax_turns.set(xlabel="GRPO iteration", ylabel="per held-out episode", title="turns and tool calls (greedy eval)")
    for ax in (ax_eval, ax_reward, ax_turns):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{Path(task_run.rl_config).name} from a {sft['steps']}-step SFT warm-up on {sft['questions']} "
                 "examples")
    save_figure(fig, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASK_RUNS), default="calculator_arithmetic")
    parser.add_argument("--write-sft-data", metavar="PATH", help="only write the SFT data to PATH and stop")
    parser.add_argument("--questions", type=int, default=8, help="training examples in the SFT data")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--target", type=float, default=0.6, help="the held-out accuracy whose time is reported")
    parser.add_argument("--skip-sft", action="store_true", help="reuse the SFT run and the SFT result in the JSON")
    parser.add_argument("--override", action="append", default=[], help="key=value passed to the GRPO runs")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot and table from the JSON")
    args = parser.parse_args()
    task_run = TASK_RUNS[args.task]
    if args.write_sft_data:
        write_sft_data(Path(args.write_sft_data), task_run, args.questions, args.seeds)
        return 0
    out_json = REPO / task_run.json
    if args.replot:
        saved = json.loads(out_json.read_text())
        sft, results = saved["sft"], saved["runs"]
    else:
        runs_dir = (REPO / args.runs_dir).resolve()
        gflops_before = matmul_gflops()  # the day's fp32 matmul rate, beside every second reported
        sft = (json.loads(out_json.read_text())["sft"] if args.skip_sft
               else run_sft(runs_dir, args.task, args.questions, args.seeds))
        overrides = [f"model.init_from={runs_dir / sft_run_name(args.task)}", *args.override]
        results = [add_episode_numbers(run_side("rlvr", task_run.rl_config, overrides, seed, runs_dir),
                                       task_run.rl_config, runs_dir) for seed in args.seeds]
        from rlvr.utils import atomic_write_text

        gflops = {"before": gflops_before, "after": matmul_gflops()}
        print(f"matmul GFLOPS before {gflops['before']:.0f}, after {gflops['after']:.0f}")
        out_json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_json, json.dumps({"argv": sys.argv[1:], "task": args.task, "sft": sft,
                                                "matmul_gflops": gflops, "runs": results}, indent=1) + "\n")
        print(f"wrote {out_json}")
    print_summary(sft, results, args.target)
    plot(sft, results, task_run, REPO / task_run.figure, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
