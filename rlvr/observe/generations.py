"""`log_generations`: what the policy wrote for a few eval prompts, judged, with entropy and length.

It reads the records of the eval that just ran (`rlvr.training.evaluation`), so nothing is sampled
twice. Each line of generations.jsonl holds the prompt, the response, the ground truth, the
verdict's reward components, the response's mean token entropy and its length; the summary
splits the mean length by correct and incorrect responses, since a policy that learns to answer
often also learns to stop.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rlvr.core import masked_mean
from rlvr.models.completion_logprobs import response_logprobs
from rlvr.observe.metric_names import (
    GEN_ACCURACY,
    GEN_ENTROPY,
    GEN_RESPONSE_LEN,
    GEN_RESPONSE_LEN_CORRECT,
    GEN_RESPONSE_LEN_INCORRECT,
    GEN_REWARD_MEAN,
    ITERATION,
)
from rlvr.utils import append_jsonl

GENERATIONS_FILE = "generations.jsonl"
EPISODE_FIELDS = ("transcript", "turns", "truncated_by")


def response_entropy(model, tokenizer, prompts: list[str], responses: list[str]) -> list[float]:
    """Mean next-token entropy over each response's tokens (NaN for an empty response)."""
    entropies = []
    with torch.no_grad():
        for prompt, response in zip(prompts, responses):
            if not response:
                entropies.append(math.nan)
                continue
            _, entropy, mask = response_logprobs(model, tokenizer, [prompt], [response], enable_grad=False)
            entropies.append(float(masked_mean(entropy, mask)))
    return entropies


def _mean(values) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def log_generations(model, tokenizer, eval_records: list[dict], *, iteration: int, run_dir: Path | None,
                    print_summary: bool = True) -> dict:
    """Append one line per eval record to `run_dir/generations.jsonl`; return the `gen/*` summary.

    Lengths are in tokens; a mean over an empty set (no correct response, say) is NaN.
    """
    if not eval_records:
        return {}
    prompts = [r["prompt"] for r in eval_records]
    responses = [r["completion"] for r in eval_records]
    entropies = response_entropy(model, tokenizer, prompts, responses)
    lines = [{ITERATION: iteration, "prompt": r["prompt"], "response": r["completion"],
              "ground_truth": r["ground_truth"], "components": r["verdict"]["components"],
              "total": r["verdict"]["total"], "correct": r["verdict"]["correct"], "entropy": entropy,
              "response_len": float(r["completion_tokens"])}
             for r, entropy in zip(eval_records, entropies)]
    for line, record in zip(lines, eval_records):  # episodes: the transcript with the environment's spans marked
        line.update({key: record[key] for key in EPISODE_FIELDS if key in record})
    if run_dir is not None:
        append_jsonl(Path(run_dir) / GENERATIONS_FILE, lines)
    summary = {
        GEN_ACCURACY: _mean([float(line["correct"]) for line in lines]),
        GEN_REWARD_MEAN: _mean([line["total"] for line in lines]),
        GEN_ENTROPY: _mean([line["entropy"] for line in lines]),
        GEN_RESPONSE_LEN: _mean([line["response_len"] for line in lines]),
        GEN_RESPONSE_LEN_CORRECT: _mean([line["response_len"] for line in lines if line["correct"]]),
        GEN_RESPONSE_LEN_INCORRECT: _mean([line["response_len"] for line in lines if not line["correct"]]),
    }
    if print_summary:
        print(f"[generations @ {iteration}] n={len(lines)} accuracy={summary[GEN_ACCURACY]:.3f} "
              f"entropy={summary[GEN_ENTROPY]:.3f} len={summary[GEN_RESPONSE_LEN]:.1f} "
              f"(correct {summary[GEN_RESPONSE_LEN_CORRECT]:.1f}, "
              f"incorrect {summary[GEN_RESPONSE_LEN_INCORRECT]:.1f}) e.g. {lines[0]['response']!r}", flush=True)
    return summary
