"""Rollout backends head to head: seconds and generated tokens per second per rollout.

Alternates the backends within one process on the embedded SmolLM2-135M-Instruct (LoRA merged,
as in training; `vllm` gets the merged weights pushed by its `sync`, which is timed too) and
prints the median and minimum seconds per rollout of each, the generated tokens per second of
the median rollout, and the mean completion length (the backends draw from the same
distribution; the tokens differ by RNG use). The default task's rollout is 4 prompts x 8
completions of at most 24 tokens:

    python benchmarks/performance/rollout_backends.py --repeats 6 --group-size 8
    python benchmarks/performance/rollout_backends.py --backends decode_loop vllm --group-size 8  # needs the vllm extra
    python benchmarks/performance/rollout_backends.py --backends decode_loop vllm_server --server-url http://127.0.0.1:8000
    python benchmarks/performance/rollout_backends.py --backends vllm vllm:lora_mode=adapter --adapter-scale 0.01

A backend is named as `rollout.backend`, optionally with `:key=value,...` backend options (the two
LoRA modes of `vllm` side by side above). `--adapter-scale` fills the adapter's B matrices with
noise of that size instead of PEFT's zeros, so a served adapter does real work. The sync (the
`sync()` block's entry: weights or adapter pushed) is timed apart from sampling as well.

`vllm_server` needs a server started on the embedded model's folder (rollout-backends guide); its
time includes writing the adapter and loading it into the server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backends", nargs="*", default=["hf_generate", "decode_loop"])
    parser.add_argument("--server-url", default="http://127.0.0.1:8000", help="the vllm_server backend's server")
    parser.add_argument("--adapter-scale", type=float, default=0.0, help="std of the adapter's B (PEFT starts at 0)")
    args = parser.parse_args()

    import torch

    from rlvr.config import load_config
    from rlvr.models import LoraSettings, load_policy
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
    from rlvr.tasks.format_copy import FormatCopyTask
    from rlvr.testing import random_lora_b

    from benchmarks.comparisons.vs_trl import matmul_gflops

    gflops_before = matmul_gflops()
    torch.set_num_threads(args.threads)
    loaded = load_policy("smollm2-135m-instruct", lora=LoraSettings(rank=16, alpha=32))
    if args.adapter_scale:
        random_lora_b(loaded.policy, seed=0, std=args.adapter_scale)
    task = FormatCopyTask()
    settings = SamplingSettings(max_new_tokens=args.max_new_tokens)
    backends = {}
    for name in args.backends:
        kind, _, extra = name.partition(":")
        options = {"vllm": ["rollout.backend_options.max_model_len=1024"],
                   "vllm_server": [f"rollout.backend_options.url={args.server_url}"]}.get(kind, [])
        options += [f"rollout.backend_options.{pair}" for pair in extra.split(",") if pair]
        rollout = load_config(None, [f"rollout.backend={kind}", *options]).rollout
        backends[name] = ROLLOUT_BACKENDS.get(kind).build(loaded, rollout)
    seconds = {name: [] for name in args.backends}
    sync_seconds = {name: [] for name in args.backends}
    lengths = {name: [] for name in args.backends}
    tokens = {name: [] for name in args.backends}
    for repeat in range(args.repeats + 1):
        prompts = render_prompts(loaded.tokenizer, task.examples("train", args.prompts, repeat), True)
        for name in args.backends if repeat % 2 == 0 else reversed(args.backends):
            torch.manual_seed(repeat)
            started = time.perf_counter()
            with backends[name].sync():  # the adapter merged or pushed, as in training
                synced = time.perf_counter()
                generation = backends[name].generate(prompts, args.group_size, settings)
            if repeat > 0:  # the first round warms up
                seconds[name].append(time.perf_counter() - started)
                sync_seconds[name].append(synced - started)
                lengths[name].append(float(generation.completion_lengths.float().mean()))
                tokens[name].append(int(generation.completion_lengths.sum()))
    print(f"{args.prompts} prompts x {args.group_size} completions, {args.max_new_tokens} new tokens, "
          f"{args.threads} threads, {args.repeats} rollouts each; fp32 matmul {gflops_before:.0f} GFLOPS before, "
          f"{matmul_gflops():.0f} after")
    print("| backend | median s | min s | max s | of which sync, median s | tokens/s | mean completion tokens |")
    print("|---|---|---|---|---|---|---|")
    for name in args.backends:
        rate = sum(tokens[name]) / sum(seconds[name])
        print(f"| {name} | {statistics.median(seconds[name]):.2f} | {min(seconds[name]):.2f} | "
              f"{max(seconds[name]):.2f} | {statistics.median(sync_seconds[name]):.2f} | {rate:.0f} | "
              f"{statistics.mean(lengths[name]):.1f} |")
    for backend in backends.values():
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
