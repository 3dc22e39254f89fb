"""Milliseconds per decoding step on the embedded SmolLM2-135M-Instruct, beside the weight-streaming floor.

A decoding step with R rows reads every weight once (538 MB in fp32) plus the rows' cached keys
and values, so memory bandwidth sets a floor: weight bytes / bandwidth, the bandwidth measured in
the same run by copying a 512 MiB tensor (counted as read + write, as STREAM does). Measured:

  positions  ms per step (the step and the sampling of its logits, temperature 1) at each
             position 1..N, for the preallocated cache and for the model's forward on
             transformers' DynamicCache; with --step-dtype, also for the preallocated steps on a
             copy of the weights in that dtype (`decode_loop`'s option `dtype`), against the
             floor of those weights' bytes;
  rows       ms per step against the number of rows, at short positions;
  linears    ms of a pass over every layer linear and of the LM head, as x W^T and as (W x^T)^T,
             against the number of rows (the choice `decode_step` makes by row count);
  compaction seconds for 16 rows finishing at evenly spread steps, for each compaction policy;
  rollout    seconds per W1 rollout (4 prompts x 4 completions, 24 tokens, LoRA merged) through
             `decode_loop` with each cache.
The configurations compared in each part run in lockstep, one step each in turn, the order
reversed every other step (A B B A ...): on a shared machine a change in load hits them alike.

Writes benchmarks/results/decode_speed.json and docs/figures/decode_speed.png, prints the targets: at
16 rows, ms per step within 2x the weight floor, and flat (last 100 positions <= 1.2x first 100).

    OMP_NUM_THREADS=2 python benchmarks/performance/decode_speed.py            # about 10 minutes on 2 idle cores
    python benchmarks/performance/decode_speed.py --positions 100 --skip-dynamic --skip-rollout --step-dtype bfloat16 \
      --row-counts 16 --compaction-steps 0 --output bf16.json --figure bf16.png   # fp32 and bf16 steps, 16 rows
    python benchmarks/performance/decode_speed.py --positions 256 --skip-dynamic --skip-rollout   # quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(ROOT))


def copy_bandwidth(mebibytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second moved by a large tensor copy, counting each byte read and written (best of repeats)."""
    source = torch.ones(mebibytes * 2**20 // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.numel() * 4 / best


def weight_bytes(model) -> int:
    """Bytes of the weights a decoding step reads: every parameter once (a tied head counts once), LoRA
    factors left out (sampling runs with the adapter merged)."""
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "lora_" not in n)


def kv_bytes_per_position(model) -> int:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    itemsize = next(model.parameters()).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * itemsize


class Run:
    """One configuration decoding `rows` rows of one prompt, advanced one step at a time."""

    def __init__(self, model, tokenizer, rows: int, steps: int, cache: str, compact_fraction: float = 0.0,
                 finish_at: list[int] | None = None, prompt: str = "Hi", step_dtype: torch.dtype | None = None):
        from rlvr.rollout import SamplingSettings
        from rlvr.rollout.decode_loop import start_decoding
        from rlvr.rollout.decode_step import DecoderWeights

        self.settings = SamplingSettings(max_new_tokens=steps)
        encoded = tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
        capacity = encoded["input_ids"].shape[1] + steps
        weights = DecoderWeights.of(model, capacity) if cache == "preallocated" else None
        if step_dtype is not None:  # the steps on a copy of the weights in that dtype, as decode_loop's option dtype
            weights = weights.cast(step_dtype)
        self.logits, self.decoder = start_decoding(model, encoded["input_ids"], encoded["attention_mask"], rows,
                                                   weights, capacity, compact_fraction)
        self.finish_at = finish_at  # per row: the step after which it finishes (None: none finish)
        self.live = list(range(rows))
        self.step_index = 0
        self.times: list[float] = []

    def step(self) -> None:
        """Sample from the last logits, finish the rows due, run the next step; times all of it."""
        from rlvr.rollout.decode_loop import sample_tokens

        started = time.perf_counter()
        chosen = sample_tokens(self.logits.float(), self.settings)
        self.step_index += 1
        if self.finish_at is not None:
            done = torch.tensor([self.finish_at[row] == self.step_index for row in self.live])
            if bool(done.any()):
                self.decoder.finish(done)
                self.live = [row for row, d in zip(self.live, done.tolist()) if not d]
                chosen = chosen[~done]
        if self.live:
            self.logits = self.decoder.step(chosen)
        self.times.append(time.perf_counter() - started)


def lockstep(runs: dict[str, "Run"], steps: int) -> None:
    """Advance every run `steps` steps, one step each in turn, the order reversed every other round
    (A B B A ...), so that a change in the machine's load falls on every run alike."""
    names = list(runs)
    for step in range(steps):
        for name in names if step % 2 == 0 else reversed(names):
            if runs[name].live:
                runs[name].step()


def linear_orientation_ms(weights, row_counts: list[int], repeats: int = 5) -> dict[str, dict[str, list[float]]]:
    """Median ms of one pass over every layer linear, and of the LM head, for x W^T and for (W x^T)^T at
    each row count; the two orientations alternate (A B B A ...). weights: a `DecoderWeights`."""
    import torch.nn.functional as F

    layer_weights = [lin.weight for layer in weights.layers
                     for lin in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)]
    head = weights.head.weight
    orientations = {
        "x W^T": (lambda x, w: F.linear(x, w), lambda x, w: F.linear(x, w)),
        "(W x^T)^T": (lambda x, w: torch.mm(w, x.t()), lambda x, w: torch.mm(w, x.t()).t().contiguous()),
    }
    results: dict[str, dict[str, list[float]]] = {name: {"layers": [], "head": []} for name in orientations}
    for rows in row_counts:
        inputs = {size: torch.randn(rows, size) for size in {w.shape[1] for w in layer_weights}}
        samples: dict[str, dict[str, list[float]]] = {name: {"layers": [], "head": []} for name in orientations}
        for repeat in range(repeats):
            for name in orientations if repeat % 2 == 0 else reversed(list(orientations)):
                layer_fn, head_fn = orientations[name]
                started = time.perf_counter()
                for weight in layer_weights:
                    layer_fn(inputs[weight.shape[1]], weight)
                middle = time.perf_counter()
                head_fn(inputs[head.shape[1]], head)
                samples[name]["layers"].append(middle - started)
                samples[name]["head"].append(time.perf_counter() - middle)
        for name in orientations:
            for part in ("layers", "head"):
                results[name][part].append(_median_ms(samples[name][part][1:]))
    return results


def rollout_seconds(loaded, rounds: int) -> dict[str, list[float]]:
    """W1's rollout through `decode_loop`, dynamic and preallocated caches in A B B A order."""
    from rlvr.models.merge import merged_adapter
    from rlvr.rollout import SamplingSettings, render_prompts
    from rlvr.rollout.decode_loop import decode_loop
    from rlvr.tasks.format_copy import FormatCopyTask

    settings = SamplingSettings(max_new_tokens=24)
    task = FormatCopyTask()
    seconds: dict[str, list[float]] = {"dynamic": [], "preallocated": []}
    for round_index in range(rounds + 1):
        prompts = render_prompts(loaded.tokenizer, task.examples("train", 4, round_index), True)
        order = ["dynamic", "preallocated", "preallocated", "dynamic"]
        for position, cache in enumerate(order):
            torch.manual_seed(round_index * 4 + position)
            started = time.perf_counter()
            with merged_adapter(loaded.policy):
                decode_loop(loaded.policy, loaded.tokenizer, prompts, 4, settings, cache=cache)
            if round_index > 0:  # the first round warms up
                seconds[cache].append(time.perf_counter() - started)
    return seconds


def _median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_position, by_rows) = plt.subplots(1, 2, figsize=(11, 4))
    floor_ms = results["weight_floor_ms"]
    for cache, times in results["positions"].items():
        by_position.plot(range(1, len(times) + 1), [1000 * t for t in times], label=cache, linewidth=0.8)
    count = max(len(t) for t in results["positions"].values())
    kv_ms = [floor_ms + 1000 * results["rows_at_positions"] * p * results["kv_bytes_per_position"]
             / results["bandwidth_bytes_per_s"] for p in (1, count)]
    by_position.axhline(floor_ms, color="black", linestyle="--", label="weight floor")
    by_position.plot([1, count], kv_ms, color="gray", linestyle=":", label="weight + KV floor")
    by_position.set_xlabel("position (new tokens so far)")
    by_position.set_ylabel("ms per step")
    by_position.set_title(f"{results['rows_at_positions']} rows")
    by_position.legend()
    rows = sorted(int(r) for r in results["rows"])
    by_rows.plot(rows, [results["rows"][str(r)] for r in rows], marker="o", label="preallocated")
    by_rows.axhline(floor_ms, color="black", linestyle="--", label="weight floor")
    by_rows.set_xscale("log", base=2)
    by_rows.set_xlabel("rows decoding")
    by_rows.set_ylabel("ms per step (median)")
    by_rows.legend()
    figure.suptitle(f"SmolLM2-135M fp32 decoding, {results['threads']} threads, "
                    f"copy bandwidth {results['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp.png")
    figure.savefig(temporary, dpi=110)
    temporary.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=16, help="rows for the position sweep")
    parser.add_argument("--row-counts", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--compaction-steps", type=int, default=512)
    parser.add_argument("--rollout-rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-dynamic", action="store_true", help="no DynamicCache position sweep")
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument("--step-dtype", choices=["bfloat16", "float16"],
                        help="also decode the position sweep on a copy of the weights in this dtype")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/decode_speed.json"))
    parser.add_argument("--figure", default=str(ROOT / "docs/figures/decode_speed.png"))
    args = parser.parse_args()

    from rlvr.models import LoraSettings, load_policy
    from rlvr.models.kernels import weight_major_linears
    from rlvr.models.merge import merged_adapter
    from rlvr.rollout.decode_step import DecoderWeights
    from rlvr.utils import atomic_write_text

    torch.set_num_threads(args.threads)
    # As in W1: a LoRA policy, sampled with the adapter merged (the weights read are the base model's size).
    loaded = load_policy("smollm2-135m-instruct", lora=LoraSettings(rank=16, alpha=32))
    model, tokenizer = loaded.policy, loaded.tokenizer
    base = model.get_base_model()
    bandwidth = copy_bandwidth()
    weights = weight_bytes(base)
    floor_ms = 1000 * weights / bandwidth
    results = {
        "threads": args.threads, "bandwidth_bytes_per_s": bandwidth, "weight_bytes": weights,
        "weight_floor_ms": floor_ms, "kv_bytes_per_position": kv_bytes_per_position(base),
        "rows_at_positions": args.rows, "positions": {}, "rows": {}, "compaction_s": {},
    }
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write); weights {weights / 1e6:.0f} MB; "
          f"weight-streaming floor {floor_ms:.1f} ms per step")
    floors = {"preallocated": floor_ms, "dynamic": floor_ms}
    step_dtype = None
    if args.step_dtype:
        step_dtype = getattr(torch, args.step_dtype)
        cast_bytes = sum(p.numel() * step_dtype.itemsize for n, p in base.named_parameters() if "lora_" not in n)
        floors[f"preallocated {args.step_dtype}"] = 1000 * cast_bytes / bandwidth
        results["step_dtype"], results["step_dtype_floor_ms"] = (args.step_dtype,
                                                                  floors[f"preallocated {args.step_dtype}"])
        print(f"{args.step_dtype} weights {cast_bytes / 1e6:.0f} MB; "
              f"floor {results['step_dtype_floor_ms']:.1f} ms per step")

    with merged_adapter(model), torch.inference_mode(), weight_major_linears(model):
        caches = ["preallocated"] + ([] if args.skip_dynamic else ["dynamic"])
        runs = {cache: Run(model, tokenizer, args.rows, args.positions, cache) for cache in caches}
        if step_dtype is not None:
            runs[f"preallocated {args.step_dtype}"] = Run(model, tokenizer, args.rows, args.positions, "preallocated",
                                                          step_dtype=step_dtype)
        lockstep(runs, args.positions)
        for cache, run in runs.items():
            results["positions"][cache] = run.times
            first, last = _median_ms(run.times[:100]), _median_ms(run.times[-100:])
            print(f"{cache:>12}: {args.rows} rows, positions 1-100 {first:.1f} ms, last 100 {last:.1f} ms "
                  f"(x{last / first:.2f}); positions 1-100 at {first / floors[cache]:.2f}x its weight floor "
                  f"({floors[cache]:.1f} ms)")
        del runs
        runs = {str(rows): Run(model, tokenizer, rows, 40, "preallocated") for rows in args.row_counts}
        lockstep(runs, 40)
        results["rows"] = {rows: _median_ms(run.times[8:]) for rows, run in runs.items()}
        print("rows:        " + "  ".join(f"{r}: {ms:.1f}" for r, ms in results["rows"].items()) + "  (ms per step)")
        results["linears_ms"] = linear_orientation_ms(DecoderWeights.of(model, 1), args.row_counts)
        for name, parts in results["linears_ms"].items():
            print(f"{name:>9} layers | head, ms: " + "  ".join(
                f"{r}: {a:.1f} | {b:.1f}" for r, a, b in zip(args.row_counts, parts["layers"], parts["head"])))
        steps = args.compaction_steps
        finish_at = [(row + 1) * steps // 16 for row in range(16)]
        runs = {name: Run(model, tokenizer, 16, steps, cache, fraction, finish_at)
                for name, cache, fraction in (("dynamic cache", "dynamic", 0.0),
                                              ("compact at once", "preallocated", 0.0),
                                              ("compact at a quarter", "preallocated", 0.25),
                                              ("never compact", "preallocated", 1.0))}
        lockstep(runs, steps)
        results["compaction_s"] = {name: sum(run.times) for name, run in runs.items()}
        print(f"compaction ({steps} steps, 16 rows finishing evenly): "
              + ", ".join(f"{name} {s:.1f} s" for name, s in results["compaction_s"].items()))
        del runs
    if not args.skip_rollout:
        seconds = rollout_seconds(loaded, args.rollout_rounds)
        results["rollout_s"] = seconds
        for cache, values in seconds.items():
            print(f"W1 rollout, {cache}: median {statistics.median(values):.2f} s "
                  f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} runs)")

    times = results["positions"]["preallocated"]
    first, last = _median_ms(times[:100]), _median_ms(times[-100:])
    kv_last_ms = 1000 * args.rows * len(times) * results["kv_bytes_per_position"] / bandwidth
    print(f"target: {args.rows} rows within 2x the weight floor ({2 * floor_ms:.1f} ms): first 100 {first:.1f} ms "
          f"{'met' if first <= 2 * floor_ms else 'NOT met'}, last 100 {last:.1f} ms "
          f"{'met' if last <= 2 * floor_ms else 'NOT met'}")
    print(f"target: flat, last 100 <= 1.2x first 100: x{last / first:.2f} {'met' if last <= 1.2 * first else 'NOT met'}"
          f" (at position {len(times)} the {args.rows} rows' keys and values add {kv_last_ms:.1f} ms of streaming "
          f"to the {floor_ms:.1f} ms of weights)")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, json.dumps(results, indent=1) + "\n")
    plot(results, Path(args.figure))
    print(f"wrote {output} and {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
