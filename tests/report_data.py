"""Writes run folders with made-up metric files for the report tests (no training needed)."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import load_config, save_config
from rlvr.utils import append_jsonl

# Reward rises to its best at iteration 3 and falls back, so "final" and "best" differ.
REWARDS = [0.25, 0.5, 0.9, 0.5]
EVALS = [(0, 0.0), (2, 0.75), (4, 0.5)]
EVAL_SECONDS = 6.0  # each eval ends 6 s after the iteration it follows
TRICKY_COMPLETION = "<answer>12</answer> & <script>alert('x')</script>"


def write_fake_run(run_dir: Path, overrides: list[str] = (), full: bool = True, reward_offset: float = 0.0) -> Path:
    """A run folder; `full=False` logs only reward/mean (every other figure must be skipped)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(load_config(None, list(overrides)), run_dir / "config.yaml")
    for i, reward in enumerate(REWARDS, start=1):
        record = {"iteration": i, "reward/mean": reward + reward_offset}
        if full:
            record.update({
                "reward/answer": reward / 2, "reward/tag": 0.2 * i / 4, "reward/std": 0.1, "reward/max": 1.3,
                "frac_no_contrast_groups": 0.5 / i, "frac_nonzero_advantages": 1 - 0.5 / i,
                "distinct_completions_frac": 1 - 0.2 * i,
                "kl": 0.01 * i, "clip_frac/low": 0.02, "clip_frac/high": 0.03 * i, "entropy": 2.0 - 0.1 * i,
                "grad_norm": 1.5 / i, "truncated_frac": 0.25, "completion_len/mean": 20.0 - i,
                "time/generation": 10.0, "time/scoring": 0.5, "time/logprobs": 2.0, "time/update": 12.0,
                "time/iteration": 26.0, "time/unix": 1.7e9 + i, "elapsed_s": 30.0 * i,
                "episode/turns": 1.0 + 0.5 * i, "episode/tool_calls": 0.25 * i, "episode/tool_errors": 0.1,
                "episode/env_token_frac": 0.1 * i, "episode/truncated/max_turns": 0.5 / i,
                "episode/truncated/turn_tokens": 0.05,
            })
            if i in (2, 4):
                record["eval/accuracy"] = dict(EVALS)[i]
        append_jsonl(run_dir / "metrics.jsonl", [record])
    if full:
        append_jsonl(run_dir / "eval.jsonl",
                     [{"iteration": it, "eval/accuracy": acc, "elapsed_s": 30.0 * it + EVAL_SECONDS,
                       "eval/seconds": EVAL_SECONDS} for it, acc in EVALS])
        samples = []
        for iteration in (1, 2, 4):
            for j in range(3):
                samples.append({"iteration": iteration, "prompt": f"Copy {iteration}{j} into <answer> tags",
                                "ground_truth": f"{iteration}{j}",
                                "completion": TRICKY_COMPLETION if iteration == 4 else f"it{iteration} plain {j}",
                                "components": {"answer": 1.0 if iteration == 4 else 0.0, "tag": 0.2},
                                "reward": 1.2, "status": "ok", "advantage": 0.5 - j * 0.5})
        append_jsonl(run_dir / "samples.jsonl", samples)
    return run_dir
