"""The update stage alone on a W2-shaped batch: seconds per update against its LoRA-aware FLOP bound.

The batch: 4 prompts x 4 completions (W2 of `benchmarks/comparisons/vs_trl.py`: SmolLM2-135M-Instruct fp32,
LoRA r=16 alpha 32 on all 7 projections, GRPO, one epoch, 2 threads), prompts of --prompt-tokens
tokens (W2's r1_zero GSM8K prompts average 161) left-padded by up to --prompt-spread, completions
of lengths drawn once from `random.Random(0)`: --truncated-share of them at the 512-token budget,
the rest uniform in [--shortest, 511] (mean about 390; W2's measured 397). Token ids are random: the
cost of a forward and backward does not depend on them.

Splits (`--splits`, each one update_policy call per repeat, in A B B A order over the repeats):
  whole      microbatches of --rows rows at the batch's full width (the update before trimming)
  trimmed    microbatches of --rows rows, each cut to its own columns (the default now)
  tokens:N   optim.microbatch_tokens=N: whole groups packed longest first under N padded tokens
Each split runs with every LoRA forward of --lora-forward: `fused` (`rlvr.models.lora_kernel`, the
default now), `peft` (PEFT's own: base, A and B products, then the scaling and the add) and `fused_bf16`
(fused, the frozen base products in bfloat16: `model.base_product_dtype=bfloat16`).

Prints per split the median seconds and spread, the padded tokens it computed, and the bound
4 N_body (P + C) + 4 N_head C per row (frozen weights need no weight gradient; the LM head only at
completion tokens) at the matmul rate measured in the same run.

    python benchmarks/performance/update_speed.py --repeats 4
    python benchmarks/performance/update_speed.py --splits trimmed --lora-forward fused peft --repeats 4
    python benchmarks/performance/update_speed.py --profile trimmed      # torch.profiler's top operators of one update
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.comparisons.vs_trl import (GROUP, MODEL, PROMPTS_PER_STEP, THREADS, matmul_gflops,  # noqa: E402
                                           matmul_parameters)


def completion_lengths(rows: int, budget: int, truncated_share: float, shortest: int) -> list[int]:
    rng = random.Random(0)
    return [budget if rng.random() < truncated_share else rng.randint(shortest, budget - 1) for _ in range(rows)]


def make_batch(prompt_tokens: int, prompt_spread: int, lengths: list[int], vocab: int):
    import torch

    from rlvr.core import RolloutBatch, build_completion_mask

    rows, width = len(lengths), max(lengths)
    generator = torch.Generator().manual_seed(0)
    prompt_width = prompt_tokens + prompt_spread
    input_ids = torch.randint(100, vocab, (rows, prompt_width + width), generator=generator)
    attention = torch.zeros_like(input_ids)
    for group in range(rows // GROUP):
        real = prompt_tokens + (group * prompt_spread) // max(rows // GROUP - 1, 1)
        prompt = torch.randint(100, vocab, (real,), generator=generator)
        for row in range(group * GROUP, (group + 1) * GROUP):
            input_ids[row, prompt_width - real : prompt_width] = prompt
            attention[row, prompt_width - real : prompt_width + lengths[row]] = 1
    input_ids = input_ids * attention
    mask = build_completion_mask(input_ids, attention, prompt_width).float()
    advantages = torch.randn(rows, generator=generator)
    return RolloutBatch(input_ids=input_ids, attention_mask=attention, prompt_len=prompt_width,
                        completion_mask=mask, old_logprobs=None, ref_logprobs=None, rewards=advantages,
                        advantages=advantages, group_ids=torch.arange(rows) // GROUP)


def whole_width(batch, config, device, *, group_size):
    import torch

    from rlvr.core.microbatches import Microbatch, plan_microbatches

    for rows in plan_microbatches(batch.attention_mask, batch.prompt_len, rows=config.optim.minibatch_size):
        index = torch.tensor(rows)
        yield Microbatch(batch=batch.select(index).to(device), rows=index, first_column=0)


def config_for(split: str, rows: int, max_new: int):
    from rlvr.config import load_config

    overrides = {"model.name": MODEL, "model.lora": "true", "model.lora_rank": 16, "model.lora_alpha": 32,
                 "model.lora_dropout": 0.0, "model.num_threads": THREADS, "algorithm.name": "grpo",
                 "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1, "rollout.batch_size": PROMPTS_PER_STEP,
                 "rollout.group_size": GROUP, "rollout.max_new_tokens": max_new, "optim.lr": 2e-4,
                 "optim.minibatch_size": rows, "optim.grad_accum_steps": PROMPTS_PER_STEP * GROUP // rows}
    if split.startswith("tokens:"):
        overrides["optim.microbatch_tokens"] = int(split.split(":", 1)[1])
    return load_config(None, [f"{key}={value}" for key, value in overrides.items()])


def computed_tokens(batch, config, split: str) -> int:
    from rlvr.training.microbatching import forward_group_size, training_microbatches

    splitter = whole_width if split == "whole" else training_microbatches
    return sum(m.batch.input_ids.numel() for m in splitter(batch, config, "cpu", group_size=forward_group_size(config)))


@contextlib.contextmanager
def lora_forward(policy, name: str):
    """Inside: `policy`'s LoRA projections run `name`'s forward ("fused" as loaded, "peft": PEFT's own,
    "fused_bf16": fused with the frozen base products in bfloat16, `model.base_product_dtype`)."""
    import torch

    from rlvr.models.lora_kernel import set_base_product_dtype

    if name not in LORA_FORWARDS:
        raise ValueError(f"unknown LoRA forward {name!r}; choices: {', '.join(LORA_FORWARDS)}")
    fused = {module: vars(module).pop("forward") for module in policy.modules()
             if name == "peft" and "forward" in vars(module) and hasattr(module, "lora_A")}
    if name == "fused_bf16":
        set_base_product_dtype(policy, torch.bfloat16)
    try:
        yield
    finally:
        for module, forward in fused.items():
            module.forward = forward
        if name == "fused_bf16":
            set_base_product_dtype(policy, None)


LORA_FORWARDS = ("fused", "peft", "fused_bf16")


def flop_bound(prompt_tokens: float, lengths: list[int]) -> float:
    """The update's part of `vs_trl.flop_bounds`' LoRA bound, for these completion lengths."""
    body, head = matmul_parameters()
    completion = sum(lengths)
    return 4 * body * (len(lengths) * prompt_tokens + completion) + 4 * head * completion


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splits", nargs="+", default=["whole", "trimmed", "tokens:2700"])
    parser.add_argument("--rows", type=int, default=GROUP, help="rows per microbatch (W2: one group of 4)")
    parser.add_argument("--repeats", type=int, default=4, help="updates per split (A B B A order)")
    parser.add_argument("--prompt-tokens", type=int, default=161)
    parser.add_argument("--prompt-spread", type=int, default=20, help="the longest prompt minus the shortest")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--truncated-share", type=float, default=0.4)
    parser.add_argument("--shortest", type=int, default=100)
    parser.add_argument("--lora-forward", nargs="+", default=["fused"], choices=LORA_FORWARDS,
                        help="LoRA forwards to run each split with")
    parser.add_argument("--profile", help="profile one update of this split instead")
    args = parser.parse_args()

    import torch

    import rlvr.training.update as update_module
    from rlvr.models import LoraSettings, load_policy, trainable_parameters
    from rlvr.training.microbatching import training_microbatches
    from rlvr.training.optim import make_scheduler

    torch.set_num_threads(THREADS)
    lengths = completion_lengths(PROMPTS_PER_STEP * GROUP, args.max_new_tokens, args.truncated_share, args.shortest)
    loaded = load_policy(MODEL, lora=LoraSettings(rank=16, alpha=32, dropout=0.0))
    batch = make_batch(args.prompt_tokens, args.prompt_spread, lengths, loaded.policy.config.vocab_size)
    params = trainable_parameters(loaded.policy)
    optimizer = torch.optim.AdamW(params, lr=0.0)  # lr 0: every repeat updates the same weights

    def one_update(side: str) -> float:
        split, _, forward = side.partition("/")
        config = config_for(split, args.rows, args.max_new_tokens)
        update_module.training_microbatches = whole_width if split == "whole" else training_microbatches
        scheduler = make_scheduler(optimizer, config.optim, 10)
        with lora_forward(loaded.policy, forward or "fused"):
            started = time.perf_counter()
            update_module.update_policy(loaded.policy, optimizer, scheduler, batch, config, params)
            return time.perf_counter() - started

    if args.profile:
        one_update(args.profile)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            one_update(args.profile)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        return 0

    gflops = matmul_gflops()
    sides = [split if args.lora_forward == ["fused"] else f"{split}/{forward}"
             for split in args.splits for forward in args.lora_forward]
    one_update(sides[0])  # warm-up
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for repeat in range(args.repeats):
        order = sides if repeat % 4 in (0, 3) else list(reversed(sides))
        for side in order:
            seconds[side].append(one_update(side))
            print(f"repeat {repeat + 1} {side}: {seconds[side][-1]:.2f} s", flush=True)
    bound = flop_bound(args.prompt_tokens + args.prompt_spread / 2, lengths) / (gflops * 1e9)
    print(f"\nmatmul {gflops:.0f} GFLOPS; completion tokens mean {statistics.mean(lengths):.0f}, "
          f"{sum(length == args.max_new_tokens for length in lengths)} of {len(lengths)} at the budget; "
          f"LoRA-aware FLOP bound {bound:.2f} s")
    print(f"{'split':<20}{'median s':>10}{'min-max':>16}{'tokens':>9}{'x bound':>9}")
    for side, values in seconds.items():
        median = statistics.median(values)
        split = side.partition("/")[0]
        tokens = computed_tokens(batch, config_for(split, args.rows, args.max_new_tokens), split)
        print(f"{side:<20}{median:>10.2f}{min(values):>8.2f}-{max(values):<7.2f}{tokens:>9}{median / bound:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
