"""Rollout backends head to head: seconds per W1 rollout (4 prompts x 4 completions, 24 new tokens).

Alternates the backends within one process on the embedded SmolLM2-135M-Instruct (LoRA merged,
as in training) and prints the median and minimum seconds per rollout of each, and the mean
completion length (the backends draw from the same distribution; the tokens differ by RNG use).

    python benchmarks/rollout_backends.py --repeats 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backends", nargs="*", default=["hf_generate", "decode_loop"])
    args = parser.parse_args()

    import torch

    from rlvr.models import LoraSettings, load_policy
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
    from rlvr.tasks.format_copy import FormatCopyTask

    torch.set_num_threads(args.threads)
    loaded = load_policy("smollm2-135m-instruct", lora=LoraSettings(rank=16, alpha=32))
    task = FormatCopyTask()
    settings = SamplingSettings(max_new_tokens=args.max_new_tokens)
    backends = {name: ROLLOUT_BACKENDS.get(name)(loaded.policy, loaded.tokenizer, merge_lora=True)
                for name in args.backends}
    seconds = {name: [] for name in args.backends}
    lengths = {name: [] for name in args.backends}
    for repeat in range(args.repeats + 1):
        prompts = render_prompts(loaded.tokenizer, task.examples("train", args.prompts, repeat), True)
        for name in args.backends if repeat % 2 == 0 else reversed(args.backends):
            torch.manual_seed(repeat)
            started = time.perf_counter()
            with backends[name].sync():  # the adapter merged, as in training
                generation = backends[name].generate(prompts, args.group_size, settings)
            if repeat > 0:  # the first round warms up
                seconds[name].append(time.perf_counter() - started)
                lengths[name].append(float(generation.completion_lengths.float().mean()))
    print(f"{args.prompts} prompts x {args.group_size} completions, {args.max_new_tokens} new tokens, "
          f"{args.threads} threads, {args.repeats} rollouts each")
    print("| backend | median s | min s | mean completion tokens |")
    print("|---|---|---|---|")
    for name in args.backends:
        print(f"| {name} | {statistics.median(seconds[name]):.2f} | {min(seconds[name]):.2f} | "
              f"{statistics.mean(lengths[name]):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
