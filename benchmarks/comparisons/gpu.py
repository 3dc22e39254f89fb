"""rlvr and TRL on W1 and W2 on one CUDA machine, bf16, in one table (`benchmarks/comparisons/gpu.sh` runs it).

Each side is one `benchmarks/comparisons/vs_trl.py --side` process (the same workloads, reward, LoRA, batch and
optimizer), one after another: rlvr with `decode_loop` and with `vllm` (colocated, 0.3 of the GPU),
TRL's GRPOTrainer with `use_vllm=True, vllm_mode="colocate"` and with transformers' `generate`.
It says what it found (torch, the CUDA device, vllm and trl or "missing"), runs every side it can
and prints why it skipped each other one. Per side: median seconds per step after the warm-up
steps and their spread (min-max), the peak memory in use on the device while the side ran
(all of it: CUDA context, allocator, vLLM's KV cache), and generated tokens per second of
generation time (completion tokens of the step / its generation seconds, median over steps).

`--dry-run` (or RLVR_GPU_DRY_RUN=1) runs the same path on the CPU: the tiny test model, 1 step,
4 new tokens, float32, W2 on a small GSM8K-format file written here, and skips only what needs
CUDA; its processes run at once, as it measures nothing (the GPU run: one side at a time). A side
not started by `--budget-s` is skipped, so the whole run fits its time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
ROWS = 16  # 4 prompts x 4 completions per step (vs_trl.PROMPTS_PER_STEP * GROUP)

# side name -> (vs_trl --side, its flags, what it needs besides torch)
SIDES = {
    "rlvr decode_loop": ("rlvr", ["--backend", "decode_loop"], ()),
    "rlvr vllm": ("rlvr", ["--backend", "vllm"], ("vllm",)),
    "trl vllm colocate": ("trl", ["--trl-vllm"], ("trl", "vllm", "cuda")),
    "trl generate": ("trl", [], ("trl",)),
}
# workload -> (steps, warm-up steps) on the GPU; a dry run takes 1 step, no warm-up
STEPS = {"w1": (5, 2), "w2": (3, 1)}


def package_version(name: str) -> str | None:
    for distribution in (name, f"{name}-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def found() -> dict:
    """torch version, the CUDA device (or None) and the vllm / trl versions (None: missing)."""
    import torch

    device = None
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        device = f"{torch.cuda.get_device_name(0)} ({total / 2**30:.1f} GiB, {(total - free) / 2**30:.1f} in use)"
    return {"torch": torch.__version__, "cuda": device, "vllm": package_version("vllm"), "trl": package_version("trl")}


def write_dry_gsm8k(path: Path, count: int = 32) -> Path:
    """A GSM8K-format file (question, worked answer ending in `#### N`) of simple sums."""
    with path.open("w") as handle:
        for i in range(count):
            a, b = 3 + i, 7 * i + 1
            handle.write(json.dumps({"question": f"Tom has {a} apples and buys {b} more. How many now?",
                                     "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n")
    return path


def why_skipped(needs: tuple, env: dict, dry_run: bool) -> str | None:
    """Every unmet need of a side, or None when it can run."""
    unmet = [("CUDA" + (" (dry run on CPU)" if dry_run else "")) if need == "cuda" else f"{need} (missing)"
             for need in needs if env[need] is None]
    return "needs " + ", ".join(unmet) if unmet else None


def summarize(result: dict, warmup: int) -> dict:
    steps = result["step_seconds"][warmup:]
    rates = [ROWS * length / seconds for length, seconds in
             zip(result["completion_tokens"][warmup:], result["generation_seconds"][warmup:]) if length and seconds > 0]
    peak = result.get("peak_gpu_bytes")
    return {"median_s": statistics.median(steps), "min_s": min(steps), "max_s": max(steps), "steps": len(steps),
            "peak_gpu_gib": None if peak is None else peak / 2**30,
            "tokens_per_s": statistics.median(rates) if rates else None,
            "tokens_per_step": ROWS * statistics.median(length or 0 for length in result["completion_tokens"][warmup:])}


def table(rows: list[dict]) -> str:
    lines = ["| side | workload | s/step (median) | spread (min-max) | peak GPU memory (GiB) | generation tokens/s |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        peak = "n/a (cpu)" if row["peak_gpu_gib"] is None else f"{row['peak_gpu_gib']:.2f}"
        rate = "n/a" if row["tokens_per_s"] is None else f"{row['tokens_per_s']:.0f}"
        lines.append(f"| {row['side']} | {row['workload'].upper()} | {row['median_s']:.3f} | "
                     f"{row['min_s']:.3f}-{row['max_s']:.3f} ({row['steps']} steps) | {peak} | {rate} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", default=os.environ.get("RLVR_GPU_DRY_RUN") == "1",
                        help="the whole path on the CPU with the tiny model, 1 step (also RLVR_GPU_DRY_RUN=1)")
    parser.add_argument("--gsm8k-path", default=os.environ.get("GSM8K_PATH"),
                        help="W2's GSM8K jsonl (question, answer); default $GSM8K_PATH or data/gsm8k/train.jsonl")
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES), help="which sides to run")
    parser.add_argument("--workloads", nargs="+", choices=list(STEPS), default=list(STEPS))
    parser.add_argument("--budget-s", type=float, default=540, help="start no side after this many seconds")
    parser.add_argument("--jobs", type=int, default=0,
                        help="sides run at once (default: 1 on the GPU; a dry run: one per CPU core)")
    parser.add_argument("--json", help="also write the rows and skips here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    env = found()
    for name in ("torch", "cuda", "vllm", "trl"):
        print(f"found {name}: {env[name] or ('none' if name == 'cuda' else 'missing')}", flush=True)
    if env["cuda"] is None and not args.dry_run:
        print("error: no CUDA device; `--dry-run` (or RLVR_GPU_DRY_RUN=1) checks the whole path on the CPU",
              file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="rlvr-gpu-"))
    if args.dry_run:
        from rlvr.testing import build_tiny_model, build_tiny_tokenizer

        # The tests' tiny Llama with head_dim 32 (hidden 128, 4 heads), the smallest vLLM's CPU attention
        # takes; its rotary positions serve any length, and W2's r1_zero prompts are ~500 of its tokens.
        tiny, model = scratch / "tiny", build_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2)
        model.config.max_position_embeddings = 1024
        model.save_pretrained(tiny)
        build_tiny_tokenizer().save_pretrained(tiny)
        common = ["--model", str(tiny), "--device", "cpu", "--dtype", "float32",
                  "--max-new-tokens", "4"]
        gsm8k = str(write_dry_gsm8k(scratch / "gsm8k.jsonl"))
    else:
        common = ["--device", "cuda", "--dtype", "bfloat16"]
        default = REPO / "data" / "gsm8k" / "train.jsonl"
        gsm8k = args.gsm8k_path or (str(default) if default.is_file() else None)
    child_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}

    plan, skips = [], []  # plan: (side, workload, warm-up steps, command, result file), in table order
    for workload in args.workloads:
        steps, warmup = (1, 0) if args.dry_run else STEPS[workload]
        for side in args.sides:
            kind, flags, needs = SIDES[side]
            reason = why_skipped(needs, env, args.dry_run)
            if reason is None and workload == "w2" and not (gsm8k and Path(gsm8k).is_file()):
                reason = f"no GSM8K file (got {gsm8k!r}; pass --gsm8k-path TRAIN.jsonl or set GSM8K_PATH)"
            if reason is not None:
                skips.append({"side": side, "workload": workload, "reason": reason})
                print(f"skipped {side} {workload.upper()}: {reason}", flush=True)
                continue
            out = scratch / f"{kind}-{workload}-{len(plan)}.json"
            command = [sys.executable, str(BENCH / "vs_trl.py"), "--side", kind, "--out", str(out), "--workload",
                       workload, "--steps", str(steps), "--warmup", str(warmup), *common, *flags,
                       *(["--gsm8k-path", gsm8k] if workload == "w2" else [])]
            plan.append((side, workload, warmup, command, out))

    def run_side(side: str, workload: str, command: list[str]) -> str | None:
        """Run one side's process; None when it succeeded, else why it did not run or failed."""
        left = args.budget_s - (time.perf_counter() - started)
        if left <= 0:
            return f"time budget of {args.budget_s:.0f} s spent"
        print(f"running {side} {workload.upper()}: {' '.join(command[1:])}", flush=True)
        try:
            done = subprocess.run(command, cwd=REPO, env=child_env, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            return f"failed: still running after {left:.0f} s, the rest of the time budget"
        if done.returncode != 0:
            return f"failed: exit code {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
        return None

    # One side at a time on the GPU (each side's memory and time its own); the dry run's CPU-only
    # processes may overlap (`--jobs`), as it measures nothing.
    jobs = args.jobs or (min(len(plan), os.cpu_count() or 1) if args.dry_run else 1)
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        outcomes = list(pool.map(lambda entry: run_side(*entry[:2], entry[3]), plan))
    rows = []
    for (side, workload, warmup, _, out), outcome in zip(plan, outcomes):
        if outcome is None:
            rows.append({"side": side, "workload": workload, **summarize(json.loads(out.read_text()), warmup)})
            continue
        skips.append({"side": side, "workload": workload, "reason": outcome})
        status = "failed" if outcome.startswith("failed: ") else "skipped"
        print(f"{status} {side} {workload.upper()}: {outcome.removeprefix('failed: ')}", flush=True)

    print(f"\n{'dry run (CPU, tiny model, 1 step, 4 new tokens)' if args.dry_run else 'CUDA, bfloat16'}: "
          f"{ROWS} rows per step (4 prompts x 4), LoRA r=16; {time.perf_counter() - started:.0f} s in all\n")
    print(table(rows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"found": env, "dry_run": args.dry_run, "rows": rows,
                                               "skipped": skips}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
