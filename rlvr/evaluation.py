"""`rlvr eval`: sample one completion per held-out example, score it, and say what went wrong.

Defaults follow CS336 assignment 5 (temperature 1.0, top-p 1.0, up to 1024 new tokens, stop at
the prompt's stop string, here `</answer>` for `r1_zero`, with the stop string kept). Every
example is written with its completion and verdict to `generations.jsonl` (rewritten atomically
after each batch, so a crash leaves a whole file), and the summary gives the accuracy with a
Wilson 95% interval and the count of each outcome: correct, formatted but wrong, unformatted,
unjudgeable, timeout, error.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from rlvr.rollout.base import cut_at_stop  # noqa: F401  (re-exported)
from rlvr.tasks.base import Verdict
from rlvr.tasks.judging import judge

CATEGORIES = ("correct", "formatted_wrong", "unformatted", "unjudgeable", "timeout", "error")


@dataclass
class EvalSettings:
    max_new_tokens: int = 1024
    temperature: float = 1.0  # 0 means greedy decoding
    top_p: float = 1.0
    stop_strings: Optional[Sequence[str]] = None  # None: the task's own (`</answer>` for r1_zero)
    batch_size: int = 8
    keep_examples: int = 3  # per category, in the summary


def categorize(verdict: Verdict) -> str:
    """One outcome per completion. "formatted" means the format component is at its maximum (1)."""
    if verdict.status in ("timeout", "error", "unjudgeable"):
        return verdict.status
    if verdict.correct:
        return "correct"
    return "formatted_wrong" if verdict.components.get("format", 1.0) >= 1.0 else "unformatted"


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


def _jsonable(value):
    return json.loads(json.dumps(value, default=str, allow_nan=True))


def summarize(records: list[dict], keep_examples: int = 3) -> dict:
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


def run_evaluation(model, tokenizer, task, examples, *, settings: EvalSettings, use_chat_template: bool,
                   output_path: Optional[Path] = None, backend: str = "decode_loop", progress=None) -> dict:
    """Generate, score and record every example; return the summary (see `summarize`)."""
    from rlvr.models.merge import merged_adapter
    from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
    from rlvr.utils import atomic_write_text, to_json

    stops = tuple(getattr(task, "stop_strings", ()) if settings.stop_strings is None else settings.stop_strings)
    sampling = SamplingSettings(max_new_tokens=settings.max_new_tokens, temperature=max(settings.temperature, 1e-6),
                                top_p=settings.top_p, stop_strings=stops, do_sample=settings.temperature > 0)
    generate = ROLLOUT_BACKENDS.get(backend)
    records: list[dict] = []
    started = time.perf_counter()
    for start in range(0, len(examples), settings.batch_size):
        chunk = examples[start : start + settings.batch_size]
        prompts = render_prompts(tokenizer, chunk, use_chat_template)
        with merged_adapter(model):
            generation = generate(model, tokenizer, prompts, 1, sampling)
        for offset, (example, prompt, text) in enumerate(zip(chunk, prompts, generation.completion_texts)):
            verdict = judge(task, text, example)
            records.append({
                "index": start + offset, "prompt": prompt, "ground_truth": _jsonable(example.ground_truth),
                "completion": text, "category": categorize(verdict),
                "truncated": bool(generation.truncated[offset]),
                "completion_tokens": int(generation.completion_lengths[offset]),
                "verdict": {"components": verdict.components, "total": verdict.total, "status": verdict.status,
                            "verifier": verdict.verifier, "version": verdict.version,
                            "correct": verdict.correct, "detail": verdict.detail},
            })
        if output_path is not None:
            atomic_write_text(output_path, "".join(to_json(r) + "\n" for r in records))
        if progress is not None:
            progress(len(records), len(examples))
    summary = summarize(records, settings.keep_examples)
    summary["seconds"] = time.perf_counter() - started
    summary["stop_strings"] = list(stops)
    return summary


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
    """Load the model, build the task, evaluate `limit` held-out examples, write and print the results.

    `use_chat_template=None` picks raw text for the `r1_zero` prompt and the chat template otherwise.
    """
    import torch

    from rlvr.models.runs import load_model_for_inference
    from rlvr.tasks import build_task, task_label
    from rlvr.utils import atomic_write_text, seed_everything, to_json

    options = dict(task_options or {})
    if use_chat_template is None:
        use_chat_template = options.get("prompt", "r1_zero") != "r1_zero" if _takes_prompt(task_name) else True
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
    with torch.no_grad():
        summary = run_evaluation(loaded.policy, loaded.tokenizer, task, examples, settings=settings,
                                 use_chat_template=use_chat_template, output_path=output / "generations.jsonl",
                                 progress=lambda done, total: log(f"  {done}/{total}") if done % 40 == 0 else None)
    summary.update(task=task_name, model=model_name, task_options=_jsonable(options),
                   use_chat_template=use_chat_template, temperature=settings.temperature, top_p=settings.top_p,
                   max_new_tokens=settings.max_new_tokens, seed=seed)
    atomic_write_text(output / "summary.json", json.dumps(json.loads(to_json(_jsonable(summary))), indent=2) + "\n")
    log(format_summary(summary, f"{task_name} / {model_name}"))
    log(f"written: {output / 'generations.jsonl'} and summary.json")
    return summary


def _takes_prompt(task_name: str) -> bool:
    return task_name.split(":")[0] in ("gsm8k", "math", "reasoning_gym")
