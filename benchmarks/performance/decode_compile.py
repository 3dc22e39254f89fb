"""Two levers for a decoding step bound by small GEMMs, measured against `decode_step` as it is.

At 1-64 rows a decoding step of the embedded SmolLM2-135M-Instruct is a few hundred small
matrix products (30 layers x 7 linears, then the LM head) with elementwise work between them.
Two ways to make such a step faster on a CPU, each measured here on the same weights:

  linears    ms of one pass over every layer linear and of the LM head against the number of
             rows, as `decode_step` multiplies (`Linear`: oneDNN-packed weights up to 12 rows, the head
             up to 32), as it did before packing ("unpacked": x W^T up to 8 rows, (W x^T)^T above; the head up to 32),
             as plain x W^T, and with MKL's packed GEMM (`mkl::_mkl_linear`, what torch.compile's
             freezing substitutes for an fp32 linear of a fixed row count; oneDNN's
             `mkldnn::_linear_pointwise`, which `decode_step` uses, is its choice for a dynamic
             row count or bf16);
  step       ms per decoding step at position 40-70 against the number of rows: `decode_step`,
             the same step unpacked, and the unpacked step with each layer's work around the
             attention (norms, projections, rotary, the residual adds and the SwiGLU MLP) in two
             `torch.compile`d functions (inductor; one graph per row count, shared by all 30
             layers); the attention over the cache and the LM head stay as they are. Each
             variant's logits against `decode_step`'s on the same cache: the largest difference
             and whether every row's argmax agrees;
  rollout    seconds per rollout through `decode_loop`, with the packed weights and with packing
             off (`packing_off`), A B B A: W1's (4 format_copy prompts x 4, up to 24 tokens) and the
             times-tables sweep's (4 products x 8, up to 48 tokens, stopping at </answer>), whose
             rows finish at different steps, so its last steps run on few rows.

Each part runs its variants in lockstep, one repeat each in turn, the order reversed every other
repeat (A B B A ...), and reports medians. Compiling the whole step (the cache's length changes
every step, so with dynamic shapes) did not finish its first call within 8 minutes on 2 cores;
it is not among the variants. Writes benchmarks/results/decode_compile.json.

    OMP_NUM_THREADS=2 python benchmarks/performance/decode_compile.py   # about 8 minutes on 2 idle cores at 67 GFLOPS
    python benchmarks/performance/decode_compile.py --row-counts 16 --skip-step --skip-rollout   # the linears alone
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(ROOT))

from rlvr.rollout.decode_step import (DecoderWeights, Linear, after_attention, before_attention,  # noqa: E402
                                      decode_step)

LINEAR_NAMES = ("q", "k", "v", "o", "gate", "up", "down")


# ------------------------------------------------------------------------------------ linears
def unpacked(weights: DecoderWeights) -> DecoderWeights:
    """A copy of `weights` whose linears and head multiply as before packing (no packed weights)."""
    def plain(linear: Linear) -> Linear:
        return dataclasses.replace(linear, packed=None, pack=False)

    layers = [dataclasses.replace(layer, **{name: plain(getattr(layer, name)) for name in LINEAR_NAMES})
              for layer in weights.layers]
    return dataclasses.replace(weights, layers=layers, head=plain(weights.head))


def linear_variants(weights: DecoderWeights, rows: int) -> dict[str, Callable[[torch.Tensor], list[torch.Tensor]]]:
    """Each variant: x [rows, H or I] per linear -> that linear's output, for every layer linear in turn.
    The packed variants pack every weight once here (outside the timing), for this row count."""
    linears = [getattr(layer, name) for layer in weights.layers for name in LINEAR_NAMES]
    plain = [getattr(layer, name) for layer in unpacked(weights).layers for name in LINEAR_NAMES]
    variants: dict[str, Callable] = {
        "decode_step": lambda xs: [linear(x) for linear, x in zip(linears, xs)],
        "unpacked": lambda xs: [linear(x) for linear, x in zip(plain, xs)],
        "x W^T": lambda xs: [F.linear(x, linear.weight, linear.bias) for linear, x in zip(linears, xs)],
    }
    if torch._C.has_mkl:
        mkl_packed = [torch.ops.mkl._mkl_reorder_linear_weight(linear.weight, rows) for linear in linears]
        variants["MKL packed"] = lambda xs: [torch.ops.mkl._mkl_linear(x, p, linear.weight, linear.bias, rows)
                                             for p, linear, x in zip(mkl_packed, linears, xs)]
    return variants


def linear_inputs(weights: DecoderWeights, rows: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    linears = [getattr(layer, name) for layer in weights.layers for name in LINEAR_NAMES]
    return [torch.randn(rows, linear.weight.shape[1], generator=generator, dtype=linear.weight.dtype)
            for linear in linears]


def lockstep_ms(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Milliseconds of each call, the variants called in turn, the order reversed every other round."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            started = time.perf_counter()
            variants[name]()
            times[name].append(1000 * (time.perf_counter() - started))
    return times


def linears_ms(weights: DecoderWeights, row_counts: list[int], repeats: int) -> dict[str, dict[int, float]]:
    """Median ms per variant and row count; "head" and "head unpacked" are the LM head alone."""
    results: dict[str, dict[int, float]] = {}
    plain_head = unpacked(weights).head
    for rows in row_counts:
        xs = linear_inputs(weights, rows)
        variants = linear_variants(weights, rows)
        reference = variants["x W^T"](xs)
        for name, run in variants.items():
            worst = max((a - b).abs().max().item() for a, b in zip(run(xs), reference))
            if worst > 1e-3:
                raise RuntimeError(f"{name} at {rows} rows differs from x W^T by {worst:.2e}")
        timed = {name: (lambda run=run: run(xs)) for name, run in variants.items()}
        head_input = torch.randn(rows, weights.head.weight.shape[1], generator=torch.Generator().manual_seed(rows))
        timed["head"] = lambda: weights.head(head_input)
        timed["head unpacked"] = lambda: plain_head(head_input)
        for name, values in lockstep_ms(timed, repeats).items():
            results.setdefault(name, {})[rows] = statistics.median(values[1:])
    return results


# ------------------------------------------------------------------------------------ step
def compiled_step() -> Callable:
    """`decode_step` (no `head_rows`) with each layer's work around its attention, `before_attention` and
    `after_attention`, compiled by inductor (one graph per row count, shared by all 30 layers)."""
    before = torch.compile(before_attention, dynamic=False)
    after = torch.compile(after_attention, dynamic=False)

    def step(weights: DecoderWeights, cache, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return decode_step(weights, cache, token_ids, positions, before=before, after=after)

    return step


def filled_cache(weights: DecoderWeights, rows: int, capacity: int, length: int, seed: int = 0):
    """A cache whose first `length` positions hold random keys and values, row 0 left-padded by 3."""
    generator = torch.Generator().manual_seed(seed)
    cache = weights.new_cache(rows, capacity)
    cache.buffer.copy_(torch.randn(cache.buffer.shape, generator=generator, dtype=cache.buffer.dtype))
    cache.real[:rows] = True
    cache.real[0, :3] = False
    cache.padded = True
    cache.length = length
    return cache


def copy_cache(weights: DecoderWeights, cache, capacity: int):
    twin = weights.new_cache(cache.rows, capacity)
    twin.buffer.copy_(cache.buffer)
    twin.real.copy_(cache.real)
    twin.padded, twin.length = cache.padded, cache.length
    return twin


def step_ms(weights: DecoderWeights, row_counts: list[int], steps: int, vocab: int) -> dict:
    plain = unpacked(weights)
    compiled = compiled_step()
    variants = {"decode_step": lambda w, *args: decode_step(weights, *args),
                "unpacked": lambda w, *args: decode_step(plain, *args),
                "compiled layers": lambda w, *args: compiled(plain, *args)}
    capacity = 40 + 2 * steps + 8
    results: dict = {"ms": {name: {} for name in variants}, "warm_up_s": {}, "max_logit_diff": {},
                     "argmax_equal": {}}
    for rows in row_counts:
        generator = torch.Generator().manual_seed(rows)
        token_ids = torch.randint(0, vocab, (rows,), generator=generator)
        caches = {name: filled_cache(weights, rows, capacity, 40) for name in variants}
        positions = {name: torch.full((rows,), 40) for name in variants}
        started = time.perf_counter()
        compiled(plain, caches["compiled layers"], token_ids, positions["compiled layers"])
        results["warm_up_s"][rows] = time.perf_counter() - started
        for name in ("decode_step", "unpacked"):
            variants[name](weights, caches[name], token_ids, positions[name])
        for name in variants:
            positions[name] += 1

        def advance(name: str) -> None:
            variants[name](weights, caches[name], token_ids, positions[name])
            positions[name] += 1

        times = lockstep_ms({name: (lambda name=name: advance(name)) for name in variants}, 2 * steps)
        for name, values in times.items():
            results["ms"][name][rows] = statistics.median(values)
        cache = caches["decode_step"]
        theirs = decode_step(weights, copy_cache(weights, cache, capacity), token_ids, positions["decode_step"])
        for name in ("unpacked", "compiled layers"):
            ours = variants[name](weights, copy_cache(weights, cache, capacity), token_ids, positions["decode_step"])
            results["max_logit_diff"].setdefault(name, {})[rows] = (ours - theirs).abs().max().item()
            results["argmax_equal"].setdefault(name, {})[rows] = bool((ours.argmax(-1) == theirs.argmax(-1)).all())
    return results


# ------------------------------------------------------------------------------------ rollout
@contextlib.contextmanager
def packing_off() -> Iterator[None]:
    """Inside: weights read for `decode_step` are not packed (it multiplies as before packing)."""
    import rlvr.rollout.decode_step as decode_step_module

    original = decode_step_module.packable
    decode_step_module.packable = lambda weight: False
    try:
        yield
    finally:
        decode_step_module.packable = original


def rollout_shapes() -> dict[str, tuple]:
    """name -> (task, group size, sampling settings): W1's rollout, and the times-tables sweep's as
    configs/integer_mul_2to12.yaml sets it (its task, group size and training sampling settings)."""
    from rlvr.config import load_config
    from rlvr.rollout import SamplingSettings
    from rlvr.tasks import build_task
    from rlvr.tasks.format_copy import FormatCopyTask

    config = load_config(ROOT / "configs/integer_mul_2to12.yaml")
    times_tables = build_task(config.task.name, reward_weights=config.task.reward_weights,
                              options=config.task.options, use_chat_template=config.task.use_chat_template)
    rollout = config.rollout
    name = f"times tables ({rollout.batch_size} x {rollout.group_size}, {rollout.max_new_tokens} tokens)"
    return {
        "W1 (4 x 4, 24 tokens)": (FormatCopyTask(), 4, SamplingSettings(max_new_tokens=24)),
        name: (times_tables, rollout.group_size, SamplingSettings.for_task(rollout, times_tables)),
    }


def rollout_seconds(loaded, rounds: int) -> dict:
    """Per shape and side ("packed", "unpacked"): seconds and generated tokens of each timed rollout."""
    from rlvr.models.merge import merged_adapter
    from rlvr.rollout import render_prompts
    from rlvr.rollout.decode_loop import decode_loop

    results: dict = {}
    for name, (task, group_size, settings) in rollout_shapes().items():
        sides = {"packed": contextlib.nullcontext, "unpacked": packing_off}
        record = {side: {"seconds": [], "tokens": []} for side in sides}
        for round_index in range(rounds + 1):  # the first round warms up
            prompts = render_prompts(loaded.tokenizer, task.examples("train", 4, round_index), True)
            for position, side in enumerate(["packed", "unpacked", "unpacked", "packed"]):
                torch.manual_seed(round_index * 4 + position)
                started = time.perf_counter()
                with sides[side](), merged_adapter(loaded.policy):
                    generation = decode_loop(loaded.policy, loaded.tokenizer, prompts, group_size, settings)
                if round_index > 0:
                    record[side]["seconds"].append(time.perf_counter() - started)
                    record[side]["tokens"].append(int(generation.completion_lengths.sum()))
        results[name] = record
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row-counts", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--repeats", type=int, default=11, help="passes over the linears per variant")
    parser.add_argument("--steps", type=int, default=15, help="timed decoding steps per variant and row count")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-step", action="store_true", help="no step part (no compiling)")
    parser.add_argument("--skip-rollout", action="store_true", help="no rollout part")
    parser.add_argument("--rollout-rounds", type=int, default=2)
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/decode_compile.json"))
    args = parser.parse_args()

    from benchmarks.comparisons.vs_trl import matmul_gflops
    from rlvr.models import LoraSettings, load_policy
    from rlvr.models.merge import merged_adapter
    from rlvr.utils import atomic_write_text

    torch.set_num_threads(args.threads)
    loaded = load_policy("smollm2-135m-instruct", lora=LoraSettings(rank=16, alpha=32))
    model = loaded.policy
    results: dict = {"threads": args.threads, "torch": torch.__version__, "matmul_gflops_before": matmul_gflops()}
    print(f"fp32 matmul {results['matmul_gflops_before']:.0f} GFLOPS, {args.threads} threads")
    with merged_adapter(model), torch.inference_mode():
        weights = DecoderWeights.of(model, 256)
        results["linears_ms"] = linears_ms(weights, args.row_counts, args.repeats)
        print("a pass over the 210 layer linears, and the LM head, ms (median):")
        for name, by_rows in results["linears_ms"].items():
            print(f"  {name:>14}: " + "  ".join(f"{rows} rows {ms:.1f}" for rows, ms in by_rows.items()))
        if not args.skip_step:
            results["step"] = step_ms(weights, args.row_counts, args.steps, model.config.vocab_size)
            print("a decoding step at positions 40-70, ms (median):")
            for name, by_rows in results["step"]["ms"].items():
                print(f"  {name:>15}: " + "  ".join(f"{rows} rows {ms:.1f}" for rows, ms in by_rows.items()))
            step = results["step"]
            print("  compiled layers, first call: " + "  ".join(
                f"{rows} rows {step['warm_up_s'][rows]:.1f} s" for rows in args.row_counts))
            for name, diffs in step["max_logit_diff"].items():
                print(f"  {name} against decode_step: max |logit diff| " + "  ".join(
                    f"{rows} rows {diffs[rows]:.1e}" + ("" if step["argmax_equal"][name][rows] else " (argmax differs)")
                    for rows in args.row_counts))
    if not args.skip_rollout:
        results["rollout"] = rollout_seconds(loaded, args.rollout_rounds)
        print("seconds per rollout (median of A B B A rounds; generated tokens):")
        for name, record in results["rollout"].items():
            print(f"  {name}: " + "  ".join(
                f"{side} {statistics.median(r['seconds']):.2f} s ({min(r['seconds']):.2f}-{max(r['seconds']):.2f}, "
                f"{statistics.median(r['tokens'])} tokens)" for side, r in record.items()))
    results["matmul_gflops_after"] = matmul_gflops()
    print(f"fp32 matmul {results['matmul_gflops_after']:.0f} GFLOPS after")
    atomic_write_text(Path(args.output), json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
