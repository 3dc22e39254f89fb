"""Greedy evaluation on a task's held-out examples (exact match and reward components)."""

from __future__ import annotations

import math
import time

import torch

from rlvr.models.merge import merged_adapter
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
from rlvr.tasks.judging import judge
from rlvr.train.distributed import SINGLE


def check_held_out(task, config) -> None:
    """With train.eval_size > 0 the task must have held-out examples: evaluating on none is an error."""
    if config.train.eval_size > 0 and not task.examples("eval", 1, config.train.seed):
        raise ValueError(f"task {config.task.name!r} has no held-out examples but train.eval_size="
                         f"{config.train.eval_size}: give the task eval data (e.g. task.options.eval_path, or "
                         "task.options.eval_size > 0) or set train.eval_size=0 to train without evaluation")


def evaluate(model, tokenizer, task, examples, *, max_new_tokens: int, backend: str = "decode_loop",
             use_chat_template: bool = True, batch_size: int = 32, keep_examples: int = 4, dist=SINGLE) -> dict:
    """Generate greedily for each example, score it, and return summary numbers plus a few examples.

    Data-parallel (`dist`): each rank generates its contiguous shard; the per-example values are
    gathered in rank order, so every rank returns the summary over all examples.
    """
    examples = dist.shard(examples)
    generate = ROLLOUT_BACKENDS.get(backend)
    # A task's stop strings (`</answer>` for the r1_zero prompt) end generation there, kept in the text.
    stop_strings = tuple(getattr(task, "stop_strings", ()))
    settings = SamplingSettings(max_new_tokens=max_new_tokens, do_sample=False, stop_strings=stop_strings)
    started = time.perf_counter()
    correct, totals, truncated, lengths = [], [], [], []
    components: dict[str, list[float]] = {}
    kept = []
    # One merge (or, under FSDP, one gather of the layers) for all chunks: ranks may have different
    # numbers of chunks, so nothing inside the loop may be a collective.
    with merged_adapter(model):
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            prompts = render_prompts(tokenizer, chunk, use_chat_template)
            generation = generate(model, tokenizer, prompts, 1, settings)
            for example, text, cut, length in zip(chunk, generation.completion_texts, generation.truncated.tolist(),
                                                  generation.completion_lengths.tolist()):
                verdict = judge(task, text, example)
                correct.append(float(verdict.correct))
                totals.append(verdict.total)
                truncated.append(float(cut))
                lengths.append(float(length))
                for name, value in verdict.components.items():
                    components.setdefault(name, []).append(value)
                if len(kept) < keep_examples:
                    kept.append({"ground_truth": example.ground_truth, "completion": text,
                                 "components": verdict.components, "correct": verdict.correct})

    seconds = time.perf_counter() - started
    if dist.enabled:
        shares = dist.gather((correct, totals, truncated, lengths, components, kept))
        correct, totals, truncated, lengths = ([v for share in shares for v in share[k]] for k in range(4))
        components = {name: [v for share in shares for v in share[4].get(name, [])]
                      for name in dict.fromkeys(n for share in shares for n in share[4])}
        kept = [e for share in shares for e in share[5]][:keep_examples]

    def mean(values):
        finite = [v for v in values if math.isfinite(v)]
        return sum(finite) / len(finite) if finite else math.nan

    result = {
        "eval/accuracy": mean(correct),
        "eval/reward_mean": mean(totals),
        "eval/truncated_frac": mean(truncated),
        "eval/completion_len_mean": mean(lengths),
        "eval/num_examples": len(correct),
        "eval/seconds": dist.max_scalar(seconds) if dist.enabled else seconds,
    }
    for name, values in components.items():
        result[f"eval/reward/{name}"] = mean(values)
    result["examples"] = kept
    return result
