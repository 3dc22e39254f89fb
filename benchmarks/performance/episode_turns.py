"""Seconds per episode rollout with and without continuing each turn from the last one's keys and values.

`decode_loop`'s `continue_turns` (default on, `rlvr/rollout/turn_cache.py`) prefills only what a
turn adds (the last sampled token and the environment's reply); off, every turn prefills the whole
conversation again. Both sides sample the same episodes (the same seed per repeat; the cache
changes only where the keys and values come from), alternating A B B A within one process on a
training rollout of a task's config (by default guess_number: 4 numbers x 8 episodes, up to 7
turns of 24 tokens). The model must play the game to have later turns: by default the SFT warm-up
that `benchmarks/learning/tool_learning.py --task guess_number` leaves in runs/bench-sft-guess_number.

    python benchmarks/performance/episode_turns.py --repeats 4
    python benchmarks/performance/episode_turns.py --config configs/calculator_arithmetic.yaml \\
        --init-from runs/bench-tool-sft

Prints and writes (benchmarks/results/episode_turns.json) the median seconds per rollout of each
side, their spread, the ratio, the tokens prefilled and reused, the turns per episode, and the
day's fp32 matmul rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(ROOT))

from benchmarks.comparisons.vs_trl import matmul_gflops  # noqa: E402

SIDES = ("continued", "full")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/guess_number.yaml")
    parser.add_argument("--init-from", default="runs/bench-sft-guess_number", help="a run whose weights play the task")
    parser.add_argument("--repeats", type=int, default=4, help="rollouts per side (one more, untimed, warms up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/episode_turns.json")
    args = parser.parse_args()
    init_from = (ROOT / args.init_from) if (ROOT / args.init_from).exists() else Path(args.init_from)
    if not init_from.exists():
        raise SystemExit(f"{args.init_from} does not exist: run "
                         "`python benchmarks/learning/tool_learning.py --task guess_number --seeds 0` first "
                         "(its SFT warm-up), "
                         "or pass --init-from RUN")

    import torch

    from rlvr.config import load_config
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, sample_and_score
    from rlvr.run.setup import load_model_and_task
    from rlvr.utils import atomic_write_text

    torch.set_num_threads(args.threads)
    gflops_before = matmul_gflops()
    config = load_config(ROOT / args.config, [f"model.init_from={init_from.resolve()}"])
    loaded, task = load_model_and_task(config, need_reference=False)
    settings = SamplingSettings.for_task(config.rollout, task)
    backends = {side: ROLLOUT_BACKENDS.get("decode_loop")(loaded.policy, loaded.tokenizer,
                                                          continue_turns=side == "continued")
                for side in SIDES}
    seconds = {side: [] for side in SIDES}
    turns, counts, same = [], {"reused": 0, "prefilled": 0}, True
    for repeat in range(args.repeats + 1):
        examples = task.examples("train", config.rollout.batch_size, repeat)
        order = SIDES if repeat % 2 == 0 else tuple(reversed(SIDES))
        tokens = {}
        for side in order:
            backend = backends[side]
            cache = backend.turn_cache
            before = (cache.reused_tokens, cache.prefilled_tokens) if cache else (0, 0)
            torch.manual_seed(repeat)
            started = time.perf_counter()
            scored = sample_and_score(backend, task, examples, group_size=config.rollout.group_size,
                                      settings=settings, use_chat_template=config.task.use_chat_template)
            elapsed = time.perf_counter() - started
            tokens[side] = scored.generation.input_ids
            if repeat == 0:
                continue  # warm-up
            seconds[side].append(elapsed)
            if cache:
                counts["reused"] += cache.reused_tokens - before[0]
                counts["prefilled"] += cache.prefilled_tokens - before[1]
                turns += [sum(1 for turn in record.episode.turns if turn.role == "assistant")
                          for record in scored.episodes]
        same = same and torch.equal(tokens["continued"], tokens["full"])
        print(f"repeat {repeat}{' (warm-up)' if repeat == 0 else ''}: "
              + ", ".join(f"{side} {seconds[side][-1]:.1f} s" for side in SIDES if repeat), flush=True)
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    result = {
        "config": args.config, "init_from": args.init_from, "repeats": args.repeats,
        "seconds": seconds, "median_s": medians,
        "spread_s": {side: [min(values), max(values)] for side, values in seconds.items()},
        "ratio": medians["continued"] / medians["full"],
        "same_episodes": same,
        "tokens_reused": counts["reused"], "tokens_prefilled": counts["prefilled"],
        "assistant_turns_mean": sum(turns) / len(turns),
        "matmul_gflops": {"before": gflops_before, "after": matmul_gflops()},
    }
    print(f"median s per rollout: continued {medians['continued']:.1f} "
          f"({min(seconds['continued']):.1f}-{max(seconds['continued']):.1f}), full {medians['full']:.1f} "
          f"({min(seconds['full']):.1f}-{max(seconds['full']):.1f}); ratio {result['ratio']:.2f}; "
          f"same episodes: {same}")
    print(f"prompt tokens reused {counts['reused']}, prefilled {counts['prefilled']} (continued side); "
          f"{result['assistant_turns_mean']:.2f} assistant turns per episode; matmul GFLOPS "
          f"{gflops_before:.0f} before, {result['matmul_gflops']['after']:.0f} after")
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
