"""Does GRPO teach the embedded SmolLM2 to use the calculator on 3-digit x 2-digit products?

Zero-shot the model never calls the tool (0 calls on the 100 held-out products), so there is
nothing to reinforce. The run is therefore two stages, each a fresh process as a user would run it:

1. **SFT warm-up** (`rlvr sft configs/calculator_sft.yaml`) on right episodes replayed against the
   task itself: `CalculatorTask.demonstration` gives the call and the answer of a training
   question, `rlvr.rollout.episodes.demonstration_pairs` renders them as the episode driver would,
   with the calculator's own reply between them (two pairs per question; no eval question is in
   it). Its greedy evals before and after are the zero-shot and the warm-up's accuracy.
2. **GRPO** (`configs/calculator_arithmetic.yaml model.init_from=<the SFT run>`) for each seed,
   through `arithmetic_learning.run_side` (greedy evals on the 100 held-out products as they land,
   Wilson intervals, best and final).

    python benchmarks/tool_learning.py --questions 8 --seeds 0 1 2
    python benchmarks/tool_learning.py --write-sft-data runs/calculator_sft.jsonl --questions 8   # data only
    python benchmarks/tool_learning.py --replot

Runs go to `runs/bench-tool-sft` and `runs/bench-arith-calculator_arithmetic-rlvr-s<seed>` (deleted
first); the summary to `benchmarks/results/tool_learning.json`, the curves to
`docs/tool_learning.png`. Numbers are for the machine it runs on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__:  # imported as benchmarks.tool_learning
    from benchmarks.arithmetic_learning import plot, print_table, run_name, run_side
    from benchmarks.bench_runs import REPO, accuracy_ci, read_jsonl
else:  # run as a script: its folder is on sys.path
    from arithmetic_learning import plot, print_table, run_name, run_side
    from bench_runs import REPO, accuracy_ci, read_jsonl

SFT_CONFIG = "configs/calculator_sft.yaml"
RL_CONFIG = "configs/calculator_arithmetic.yaml"
SFT_RUN = "bench-tool-sft"
# What each eval and each iteration also keeps of the episodes: calls, failed calls and turns per episode.
TOOL_METRICS = ("episode/tool_calls", "episode/tool_errors", "episode/turns")


def sft_rows(task, tokenizer, count: int, seed: int, use_chat_template: bool = True) -> list[dict]:
    """`count` training questions' right episodes as SFT pairs (prompt, response, ground_truth), two a question."""
    from rlvr.rollout import render_prompts
    from rlvr.rollout.episodes import demonstration_pairs

    examples = task.examples("train", count, seed)
    prompts = render_prompts(tokenizer, examples, use_chat_template=use_chat_template)
    rows = []
    for example, prompt in zip(examples, prompts):
        pairs, verdict = demonstration_pairs(task, tokenizer, example, prompt, task.demonstration(example),
                                             use_chat_template=use_chat_template)
        if verdict.components[task.primary_component] != 1.0:
            raise ValueError(f"the demonstration of {example.metadata['question']!r} is not judged right: "
                             f"{verdict.detail}")
        rows += [{**pair, "ground_truth": example.ground_truth} for pair in pairs]
    return rows


def write_sft_data(path: Path, questions: int, seed: int = 1) -> Path:
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.tasks.calculator import CalculatorTask
    from rlvr.utils import atomic_write_text

    model_path, gguf_file = resolve_model_path("smollm2-135m-instruct")
    tokenizer = load_tokenizer(model_path, gguf_file=gguf_file)
    rows = sft_rows(CalculatorTask(seed=0), tokenizer, questions, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} pairs ({questions} questions) to {path}")
    return path


def run_sft(runs_dir: Path, questions: int, overrides: list[str]) -> dict:
    data = write_sft_data(runs_dir / f"{SFT_RUN}-data.jsonl", questions)
    shutil.rmtree(runs_dir / SFT_RUN, ignore_errors=True)
    command = [sys.executable, "-m", "rlvr", "sft", SFT_CONFIG, f"sft.data_path={data}",
               f"train.output_dir={runs_dir}", f"train.run_name={SFT_RUN}", "train.progress=false", *overrides]
    print("$", " ".join(command), flush=True)
    started = time.time()
    subprocess.run(command, cwd=REPO, check=True)
    evals = read_jsonl(runs_dir / SFT_RUN / "eval.jsonl")
    metrics = read_jsonl(runs_dir / SFT_RUN / "metrics.jsonl")
    return {"questions": questions, "pairs": 2 * questions, "steps": len(metrics), "seconds": time.time() - started,
            "final_loss": metrics[-1]["loss"] if metrics else None,
            "evals": [{**accuracy_ci(e), **episode_numbers(e, "eval/")} for e in evals]}


def episode_numbers(record: dict, prefix: str = "") -> dict:
    """The TOOL_METRICS of a metrics or eval record (eval records carry them as eval/episode/*)."""
    return {name: record[prefix + name] for name in TOOL_METRICS if prefix + name in record}


def add_episode_numbers(result: dict, runs_dir: Path) -> dict:
    """`run_side`'s result with each eval's and each iteration's TOOL_METRICS, read back from its run folder."""
    run_dir = runs_dir / run_name(RL_CONFIG, "rlvr", result["seed"])
    evals, metrics = read_jsonl(run_dir / "eval.jsonl"), read_jsonl(run_dir / "metrics.jsonl")
    for kept, record in zip(result["evals"], evals):
        kept.update(episode_numbers(record, "eval/"))
    for kept, record in zip(result["metrics"], metrics):
        kept.update(episode_numbers(record))
    return result


def print_sft(sft: dict) -> None:
    first, last = sft["evals"][0], sft["evals"][-1]
    print(f"\nSFT warm-up: {sft['questions']} questions ({sft['pairs']} pairs), {sft['steps']} steps, "
          f"{sft['seconds']:.0f} s, final loss {sft['final_loss']:.4f}")
    for name, e in (("before (zero-shot)", first), ("after", last)):
        print(f"  {name:18s} accuracy {e['accuracy']:.3f} ({e['low']:.3f}-{e['high']:.3f}) of {e['n']}"
              + "".join(f", {k.split('/')[-1]} {e[k]:.2f}" for k in TOOL_METRICS if k in e))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-sft-data", metavar="PATH", help="only write the SFT data to PATH and stop")
    parser.add_argument("--questions", type=int, default=8, help="training questions in the SFT data (2 pairs each)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--skip-sft", action="store_true", help="reuse runs/bench-tool-sft and the SFT result in --json")
    parser.add_argument("--override", action="append", default=[], help="key=value passed to the GRPO runs")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--json", default="benchmarks/results/tool_learning.json")
    parser.add_argument("--out", default="docs/tool_learning.png")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot and table from --json")
    args = parser.parse_args()
    if args.write_sft_data:
        write_sft_data(Path(args.write_sft_data), args.questions)
        return 0
    out_json = REPO / args.json
    if args.replot:
        saved = json.loads(out_json.read_text())
        sft, results = saved["sft"], saved["runs"]
    else:
        runs_dir = (REPO / args.runs_dir).resolve()
        sft = json.loads(out_json.read_text())["sft"] if args.skip_sft else run_sft(runs_dir, args.questions, [])
        print_sft(sft)
        overrides = [f"model.init_from={runs_dir / SFT_RUN}", *args.override]
        results = [add_episode_numbers(run_side("rlvr", RL_CONFIG, overrides, seed, runs_dir), runs_dir)
                   for seed in args.seeds]
        from rlvr.utils import atomic_write_text

        out_json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_json, json.dumps({"argv": sys.argv[1:], "sft": sft, "runs": results}, indent=1) + "\n")
        print(f"wrote {out_json}")
    print_sft(sft)
    print_table(results)
    plot(results, REPO / args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
