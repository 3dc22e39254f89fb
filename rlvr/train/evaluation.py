"""Evaluation on held-out examples: one completion each, judged and categorised. One module for
the evaluation inside training runs (greedy, every `train.eval_every` iterations, eval.jsonl) and
for `rlvr eval` (sampled by default, generations.jsonl and summary.json).

Both sample and judge through `rlvr.rollout.sample_and_score`, in chunks, inside one backend
`sync`. Every example becomes a record (prompt, completion, verdict, category, truncation,
length); training runs reduce the records to `eval/*` metrics, `rlvr eval` to counts per
category with a Wilson 95% interval on the accuracy. `rlvr eval`'s defaults follow CS336
assignment 5: temperature 1.0, top-p 1.0, up to 1024 new tokens, stop at the prompt's stop
string (`</answer>` for `r1_zero`), kept.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Sequence

from rlvr.metric_names import (
    EVAL_ACCURACY,
    EVAL_COMPLETION_LEN_MEAN,
    EVAL_EXAMPLES,
    EVAL_NUM_EXAMPLES,
    EVAL_REWARD_MEAN,
    EVAL_SECONDS,
    EVAL_TRUNCATED_FRAC,
    eval_reward_component,
)
from rlvr.rollout import RolloutBackend, SamplingSettings, sample_and_score
from rlvr.tasks.base import Example, Task, Verdict
from rlvr.train.distributed import SINGLE, Dist
from rlvr.utils import atomic_write_text, to_json

CATEGORIES = ("correct", "formatted_wrong", "unformatted", "unjudgeable", "timeout", "error")
TRAINING_EVAL_BATCH = 32  # prompts generated together by the in-training eval
TRAINING_EVAL_EXAMPLES = 4  # judged completions copied into each eval.jsonl record


def check_held_out(task, config) -> None:
    """With train.eval_size > 0 the task must have held-out examples: evaluating on none is an error."""
    if config.train.eval_size > 0 and not task.examples("eval", 1, config.train.seed):
        raise ValueError(f"task {config.task.name!r} has no held-out examples but train.eval_size="
                         f"{config.train.eval_size}: give the task eval data (e.g. task.options.eval_path, or "
                         "task.options.eval_size > 0) or set train.eval_size=0 to train without evaluation")


def categorize(verdict: Verdict) -> str:
    """One outcome per completion. "formatted" means the format component is at its maximum (1)."""
    if verdict.status in ("timeout", "error", "unjudgeable"):
        return verdict.status
    if verdict.correct:
        return "correct"
    return "formatted_wrong" if verdict.components.get("format", 1.0) >= 1.0 else "unformatted"


def _jsonable(value):
    return json.loads(json.dumps(value, default=str, allow_nan=True))


def evaluate_examples(backend: RolloutBackend, task: Task, examples: Sequence[Example], settings: SamplingSettings,
                      *, use_chat_template: bool, batch_size: int, dist: Dist = SINGLE,
                      on_batch: Optional[Callable[[list[dict]], None]] = None) -> list[dict]:
    """One judged completion per example, as records in example order (every rank's, when data-parallel).

    Data-parallel (`dist`): each rank evaluates its contiguous shard; the records are gathered in
    rank order. `on_batch(records so far)` runs after each chunk (this rank's records).
    """
    shard = dist.shard_range(len(examples))
    mine = list(examples)[shard.start : shard.stop]
    records: list[dict] = []
    # One adapter merge (FSDP: one gather of the layers) for all chunks: ranks may have different
    # numbers of chunks, so nothing inside the loop may be a collective.
    with backend.sync():
        for start in range(0, len(mine), batch_size):
            scored = sample_and_score(backend, task, mine[start : start + batch_size], group_size=1,
                                      settings=settings, use_chat_template=use_chat_template)
            generation = scored.generation
            for offset, (example, prompt, verdict) in enumerate(zip(scored.examples, scored.prompts, scored.verdicts)):
                records.append({
                    "index": shard.start + start + offset, "prompt": prompt,
                    "ground_truth": _jsonable(example.ground_truth), "completion": generation.completion_texts[offset],
                    "category": categorize(verdict), "truncated": bool(generation.truncated[offset]),
                    "completion_tokens": int(generation.completion_lengths[offset]),
                    "verdict": {"components": verdict.components, "total": verdict.total, "status": verdict.status,
                                "verifier": verdict.verifier, "version": verdict.version,
                                "correct": verdict.correct, "detail": verdict.detail},
                })
            if on_batch is not None:
                on_batch(records)
    if dist.enabled:
        records = [record for share in dist.gather(records) for record in share]
    return records


def _mean(values) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def eval_metrics(records: list[dict], seconds: float, keep_examples: int = TRAINING_EVAL_EXAMPLES) -> dict:
    """What a training run logs per evaluation: `eval/*` means, the count, and a few examples."""
    verdicts = [record["verdict"] for record in records]
    metrics = {
        EVAL_ACCURACY: _mean([float(v["correct"]) for v in verdicts]),
        EVAL_REWARD_MEAN: _mean([v["total"] for v in verdicts]),
        EVAL_TRUNCATED_FRAC: _mean([float(r["truncated"]) for r in records]),
        EVAL_COMPLETION_LEN_MEAN: _mean([float(r["completion_tokens"]) for r in records]),
        EVAL_NUM_EXAMPLES: len(records),
        EVAL_SECONDS: seconds,
    }
    for name in dict.fromkeys(n for v in verdicts for n in v["components"]):
        metrics[eval_reward_component(name)] = _mean([v["components"][name] for v in verdicts if name in v["components"]])
    metrics[EVAL_EXAMPLES] = [
        {"ground_truth": r["ground_truth"], "completion": r["completion"], "components": r["verdict"]["components"],
         "correct": r["verdict"]["correct"]}
        for r in records[:keep_examples]
    ]
    return metrics


def evaluate_in_training(backend: RolloutBackend, task: Task, examples: Sequence[Example], settings: SamplingSettings,
                         *, use_chat_template: bool, dist: Dist = SINGLE) -> tuple[dict, list[dict]]:
    """The in-training eval: (eval/* metrics, the records). Every rank returns the same."""
    started = time.perf_counter()
    records = evaluate_examples(backend, task, examples, settings, use_chat_template=use_chat_template,
                                batch_size=TRAINING_EVAL_BATCH, dist=dist)
    seconds = time.perf_counter() - started
    return eval_metrics(records, dist.max_scalar(seconds) if dist.enabled else seconds), records


# ----------------------------------------------------------------------------- rlvr eval


@dataclass
class EvalSettings:
    max_new_tokens: int = 1024
    temperature: float = 1.0  # 0 means greedy decoding
    top_p: float = 1.0
    batch_size: int = 8
    keep_examples: int = 3  # per category, in the summary


def wilson_interval(successes: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); (nan, nan) when total is 0.

    centre = (p + z²/2n) / (1 + z²/n), half-width = z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    Unlike the normal approximation it stays inside [0, 1] and is not zero-width at p = 0 or 1.
    """
    if total <= 0:
        return math.nan, math.nan
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(records: list[dict], keep_examples: int = 3) -> dict:
    """`rlvr eval`'s summary: accuracy with its Wilson interval, counts per category, a few examples of each."""
    counts = {category: 0 for category in CATEGORIES}
    examples: dict[str, list] = {category: [] for category in CATEGORIES}
    for record in records:
        counts[record["category"]] += 1
        if len(examples[record["category"]]) < keep_examples:
            examples[record["category"]].append(
                {"index": record["index"], "ground_truth": record["ground_truth"],
                 "completion": record["completion"][-400:], "detail": record["verdict"]["detail"]})
    total = len(records)
    low, high = wilson_interval(counts["correct"], total)
    return {
        "num_examples": total,
        "accuracy": counts["correct"] / total if total else math.nan,
        "accuracy_ci95": [low, high],
        "counts": counts,
        "truncated": sum(r["truncated"] for r in records),
        "mean_completion_tokens": sum(r["completion_tokens"] for r in records) / total if total else math.nan,
        "examples": {k: v for k, v in examples.items() if v},
    }


def format_summary(summary: dict, title: str = "") -> str:
    low, high = summary["accuracy_ci95"]
    lines = [title] if title else []
    lines.append(f"accuracy {summary['accuracy']:.3f} (95% CI {low:.3f} to {high:.3f}) on "
                 f"{summary['num_examples']} examples; {summary['truncated']} truncated; "
                 f"{summary['mean_completion_tokens']:.0f} tokens per completion; {summary['seconds']:.0f} s")
    lines.append("  " + "  ".join(f"{name}={count}" for name, count in summary["counts"].items()))
    for category, examples in summary["examples"].items():
        lines.append(f"  -- {category}")
        for example in examples:
            completion = example["completion"].replace("\n", " ")[-160:]
            lines.append(f"     #{example['index']} truth={example['ground_truth']!r:.40} ...{completion!r}"
                         + (f" [{example['detail'][:80]}]" if example["detail"] else ""))
    return "\n".join(lines)


def evaluate_task(task_name: str, model_name: str, *, task_options: Optional[dict] = None,
                  use_chat_template: Optional[bool] = None, limit: Optional[int] = None,
                  settings: Optional[EvalSettings] = None, output_dir: Optional[str | Path] = None,
                  dtype: str = "float32", device: str = "cpu", seed: int = 0, log=print) -> dict:
    """`rlvr eval`: load the model, build the task, evaluate `limit` held-out examples, write and print results.

    `use_chat_template=None` asks the task (`rlvr.tasks.default_use_chat_template`): raw text for
    the r1_zero prompt, the chat template otherwise.
    """
    import torch

    from rlvr.config import RolloutConfig
    from rlvr.models.runs import load_model_for_inference
    from rlvr.rollout import ROLLOUT_BACKENDS
    from rlvr.tasks import build_task, default_use_chat_template, task_label
    from rlvr.utils import seed_everything

    options = dict(task_options or {})
    if use_chat_template is None:
        use_chat_template = default_use_chat_template(task_name, options)
    settings = settings or EvalSettings()
    seed_everything(seed)
    task = build_task(task_name, options=options, use_chat_template=use_chat_template, seed=seed)
    examples = list(task.iter_eval())
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise ValueError(f"task {task_name!r} has no eval examples")
    output = Path(output_dir) if output_dir else Path("runs") / (
        f"eval-{task_label(task_name)}-{datetime.now():%Y%m%d-%H%M%S}")
    output.mkdir(parents=True, exist_ok=True)
    loaded = load_model_for_inference(model_name, dtype=dtype, device=device)  # a run folder too
    rollout = RolloutConfig(max_new_tokens=settings.max_new_tokens, temperature=max(settings.temperature, 1e-6),
                            top_p=settings.top_p)
    sampling = SamplingSettings.for_task(rollout, task, do_sample=settings.temperature > 0)
    generations_path = output / "generations.jsonl"

    def write_progress(records: list[dict]) -> None:  # a crash leaves a whole file
        atomic_write_text(generations_path, "".join(to_json(r) + "\n" for r in records))
        if len(records) % 40 == 0:
            log(f"  {len(records)}/{len(examples)}")

    started = time.perf_counter()
    with ROLLOUT_BACKENDS.get("decode_loop")(loaded.policy, loaded.tokenizer) as backend, torch.no_grad():
        records = evaluate_examples(backend, task, examples, sampling, use_chat_template=use_chat_template,
                                    batch_size=settings.batch_size, on_batch=write_progress)
    summary = summarize(records, settings.keep_examples)
    summary.update(seconds=time.perf_counter() - started, stop_strings=list(sampling.stop_strings), task=task_name,
                   model=model_name, task_options=_jsonable(options), use_chat_template=use_chat_template,
                   temperature=settings.temperature, top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                   seed=seed)
    atomic_write_text(output / "summary.json", json.dumps(json.loads(to_json(_jsonable(summary))), indent=2) + "\n")
    log(format_summary(summary, f"{task_name} / {model_name}"))
    log(f"written: {generations_path} and summary.json")
    return summary
