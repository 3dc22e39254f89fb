"""Where a decoding step's time goes: torch profiler over `decode_loop`'s steps, grouped into categories.

Runs the embedded SmolLM2-135M-Instruct (LoRA merged, as in W1) with 16 rows of one prompt,
sampling at temperature 1 with a stop string, and profiles the steps around a given position for
each cache: the model's forward on transformers' DynamicCache (the path before the preallocated
cache) and `decode_step` on the preallocated cache. Operator self-times are summed into
categories; "Python and dispatch" is the wall time no operator accounts for. Beside the table: the
weight-streaming floor (weight bytes / copy bandwidth, as `decode_speed.py` measures it) and how many
times it the matrix products alone take: the step cannot come within 2x the floor while its products
alone take more.

    OMP_NUM_THREADS=2 python benchmarks/performance/decode_profile.py --positions 100 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

PRODUCTS = "weight matmuls (layers and LM head)"
# Operator name -> category; anything unlisted is "elementwise and other operators".
CATEGORIES = {
    "aten::mm": PRODUCTS,
    "aten::addmm": PRODUCTS,
    # products with oneDNN-packed weights (`decode_step` up to PACKED_LAYER_ROWS / PACKED_HEAD_ROWS rows)
    "mkldnn::_linear_pointwise": PRODUCTS,
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::bmm": "attention",
    "aten::_softmax": "attention",
    "aten::cat": "KV cache growth (cat) and copies",
    "aten::copy_": "KV cache growth (cat) and copies",
    "aten::index": "KV cache growth (cat) and copies",
}
RANGES = ("sampling", "stop strings")


def profile_steps(model, tokenizer, cache: str, rows: int, position: int, window: int) -> dict[str, float]:
    """Milliseconds per step by category over `window` steps that start at `position`."""
    from rlvr.models.kernels import weight_major_linears
    from rlvr.rollout import SamplingSettings
    from rlvr.rollout.decode_loop import sample_tokens, start_decoding
    from rlvr.rollout.decode_step import DecoderWeights
    from rlvr.rollout.stop_strings import StopStringMatcher

    settings = SamplingSettings(max_new_tokens=position + window, stop_strings=("</answer>",))
    encoded = tokenizer(["Hi"], return_tensors="pt", add_special_tokens=False)
    capacity = encoded["input_ids"].shape[1] + position + window
    weights = DecoderWeights.of(model, capacity) if cache == "preallocated" else None
    matcher = StopStringMatcher(tokenizer, settings.stop_strings, model.config.vocab_size)
    tokens = torch.zeros(rows, position + window + 1, dtype=torch.long)
    active = torch.arange(rows)
    with torch.inference_mode(), weight_major_linears(model):
        logits, decoder = start_decoding(model, encoded["input_ids"], encoded["attention_mask"], rows, weights,
                                         capacity)

        def one_step(step):
            with record_function("sampling"):
                chosen = sample_tokens(logits.float(), settings)
            tokens[:, step] = chosen
            with record_function("stop strings"):
                matcher.finished(tokens, active, chosen, step, torch.zeros(rows, dtype=torch.bool))
            return decoder.step(chosen)

        for step in range(position):
            logits = one_step(step)
        started = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            for step in range(position, position + window):
                logits = one_step(step)
        wall_ms = 1000 * (time.perf_counter() - started) / window
    totals: dict[str, float] = {}
    for event in profiler.events():
        # Operators inside a range (and the range's own Python time) count for that range.
        inside, parent = (event.name if event.name in RANGES else None), event.cpu_parent
        while inside is None and parent is not None:
            inside, parent = (parent.name if parent.name in RANGES else None), parent.cpu_parent
        category = inside or CATEGORIES.get(event.name, "elementwise and other operators")
        totals[category] = totals.get(category, 0.0) + event.self_cpu_time_total / 1000 / window
    totals["Python and dispatch"] = max(0.0, wall_ms - sum(totals.values()))
    totals["wall"] = wall_ms
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--window", type=int, default=20, help="steps profiled at each position")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from rlvr.models import LoraSettings, load_policy
    from rlvr.models.merge import merged_adapter

    torch.set_num_threads(args.threads)
    loaded = load_policy("smollm2-135m-instruct", lora=LoraSettings(rank=16, alpha=32))
    columns = [(cache, position) for position in args.positions for cache in ("dynamic", "preallocated")]
    results = {}
    with merged_adapter(loaded.policy):
        for cache, position in columns:
            results[(cache, position)] = profile_steps(loaded.policy, loaded.tokenizer, cache, args.rows, position,
                                                       args.window)
    names = [name for name in dict.fromkeys(n for r in results.values() for n in r) if name != "wall"]
    print(f"ms per decoding step, {args.rows} rows, {args.threads} threads, {args.window} steps profiled per column")
    print("| | " + " | ".join(f"{cache}, position {position}" for cache, position in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in names + ["wall"]:
        print(f"| {name} | " + " | ".join(f"{results[c].get(name, 0.0):.1f}" for c in columns) + " |")
    print("(sampling and stop strings: their operators and Python time; other rows: operator self-times)")
    from benchmarks.performance.decode_speed import copy_bandwidth, weight_bytes

    bandwidth = copy_bandwidth()
    weights = weight_bytes(loaded.policy)
    floor_ms = 1000 * weights / bandwidth
    print(f"weight-streaming floor {floor_ms:.1f} ms ({weights / 1e6:.0f} MB at {bandwidth / 1e9:.1f} GB/s copy "
          f"bandwidth); 2x the floor: {2 * floor_ms:.1f} ms")
    for column in columns:
        products = results[column][PRODUCTS]
        print(f"{column[0]}, position {column[1]}: matrix products alone {products:.1f} ms, "
              f"{products / floor_ms:.1f}x the floor; the step {results[column]['wall'] / floor_ms:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
