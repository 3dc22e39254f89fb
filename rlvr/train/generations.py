"""`log_generations`: what the policy writes for a few prompts, scored, with entropy and length.

Each record holds the prompt, the response, the ground truth, the verdict's reward components,
the response's mean token entropy and its length; the summary splits the mean length by
correct and incorrect responses, since a policy that learns to answer often also learns to stop.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rlvr.core import get_response_log_probs, masked_mean, tokenize_prompt_and_output
from rlvr.models.merge import merged_adapter
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
from rlvr.tasks.judging import judge
from rlvr.utils import append_jsonl


def response_entropy(model, tokenizer, prompts: list[str], responses: list[str]) -> list[float]:
    """Mean next-token entropy over each response's tokens (NaN for an empty response)."""
    entropies = []
    with torch.no_grad():
        for prompt, response in zip(prompts, responses):
            if not response:
                entropies.append(math.nan)
                continue
            batch = tokenize_prompt_and_output([prompt], [response], tokenizer)
            device = next(model.parameters()).device
            out = get_response_log_probs(model, batch["input_ids"].to(device), batch["labels"].to(device),
                                         return_token_entropy=True)
            mask = batch["response_mask"].to(device)  # [1, T]
            entropies.append(float(masked_mean(out["token_entropy"], mask)))
    return entropies


def _mean(values) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def log_generations(model, tokenizer, task, examples, *, iteration: int, run_dir: Path | None,
                    max_new_tokens: int, use_chat_template: bool = True, backend: str = "decode_loop",
                    do_sample: bool = False, temperature: float = 1.0, print_summary: bool = True) -> dict:
    """Generate for `examples`, score, append records to `run_dir/generations.jsonl`; return a summary.

    Summary keys: `gen/accuracy`, `gen/reward_mean`, `gen/entropy`, `gen/response_len`,
    `gen/response_len_correct`, `gen/response_len_incorrect` (lengths in tokens; NaN when a group is empty).
    """
    if not examples:
        return {}
    stop_strings = tuple(getattr(task, "stop_strings", ()))
    settings = SamplingSettings(max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                                stop_strings=stop_strings)
    prompts = render_prompts(tokenizer, examples, use_chat_template)
    generate = ROLLOUT_BACKENDS.get(backend)
    with merged_adapter(model):
        generation = generate(model, tokenizer, prompts, 1, settings)
    responses = list(generation.completion_texts)
    lengths = [float(n) for n in generation.completion_lengths.tolist()]
    entropies = response_entropy(model, tokenizer, prompts, responses)
    records = []
    for example, prompt, response, length, entropy in zip(examples, prompts, responses, lengths, entropies):
        verdict = judge(task, response, example)
        records.append({"iteration": iteration, "prompt": prompt, "response": response,
                        "ground_truth": example.ground_truth, "components": verdict.components,
                        "total": verdict.total, "correct": verdict.correct, "entropy": entropy,
                        "response_len": length})
    if run_dir is not None:
        append_jsonl(Path(run_dir) / "generations.jsonl", records)
    summary = {
        "gen/accuracy": _mean([float(r["correct"]) for r in records]),
        "gen/reward_mean": _mean([r["total"] for r in records]),
        "gen/entropy": _mean([r["entropy"] for r in records]),
        "gen/response_len": _mean([r["response_len"] for r in records]),
        "gen/response_len_correct": _mean([r["response_len"] for r in records if r["correct"]]),
        "gen/response_len_incorrect": _mean([r["response_len"] for r in records if not r["correct"]]),
    }
    if print_summary:
        first = records[0]
        print(f"[generations @ {iteration}] n={len(records)} accuracy={summary['gen/accuracy']:.3f} "
              f"entropy={summary['gen/entropy']:.3f} len={summary['gen/response_len']:.1f} "
              f"(correct {summary['gen/response_len_correct']:.1f}, "
              f"incorrect {summary['gen/response_len_incorrect']:.1f}) e.g. {first['response']!r}", flush=True)
    return summary
