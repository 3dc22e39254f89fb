"""Run folders written as `rlvr train` and `rlvr sweep` write them (config.yaml, metrics.jsonl, eval.jsonl,
sweep_done.json, resumes.jsonl), with the numbers a test chooses, for the study summary's tests."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.config import load_config, save_config

BATCH, GROUP = 2, 4  # 2 prompts x 4 completions: 8 completions per iteration without dynamic sampling


def write_run(folder: Path, *, algorithm: str = "grpo", seed: int = 0, rewards: list[float],
              evals: dict[int, float] | None = None, sampled_groups: list[int] | None = None,
              iteration_seconds: float = 2.0, elapsed: list[float] | None = None, iterations: int | None = None,
              resumed_from: list[int] = (), done: bool = True) -> Path:
    """A run whose iteration i (1-based) logged reward/mean rewards[i-1] at elapsed_s 10 * i (or `elapsed`), and
    evals {iteration: accuracy} at elapsed_s 10 * iteration + 5 (step 0 at 5 s; the later ones also in
    metrics.jsonl, as rlvr train copies them)."""
    folder.mkdir(parents=True)
    planned = iterations or len(rewards)
    config = load_config(None, [f"algorithm.name={algorithm}", f"train.seed={seed}", f"train.iterations={planned}",
                                f"rollout.batch_size={BATCH}", f"rollout.group_size={GROUP}"], check=False)
    save_config(config, folder / "config.yaml")
    metrics = []
    for i, reward in enumerate(rewards, start=1):
        record = {"iteration": i, "reward/mean": reward, "num_sequences": BATCH * GROUP,
                  "time/iteration": iteration_seconds, "elapsed_s": elapsed[i - 1] if elapsed else 10.0 * i}
        if evals and i in evals:  # rlvr train copies each eval's accuracy into that iteration's record
            record["eval/accuracy"] = evals[i]
        if sampled_groups is not None:
            record["dynamic_sampling/sampled_groups"] = sampled_groups[i - 1]
            record["dynamic_sampling/rounds"] = 1
        metrics.append(record)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if evals:
        (folder / "eval.jsonl").write_text("".join(
            json.dumps({"iteration": i, "elapsed_s": 10.0 * i + 5, "eval/accuracy": a, "eval/num_examples": 8}) + "\n"
            for i, a in sorted(evals.items())))
    if resumed_from:
        (folder / "resumes.jsonl").write_text("".join(
            json.dumps({"checkpoint": f"iter_{i}", "iteration": i}) + "\n" for i in resumed_from))
    if done:
        (folder / "sweep_done.json").write_text(json.dumps({"iterations": planned, "grid": []}) + "\n")
    return folder
