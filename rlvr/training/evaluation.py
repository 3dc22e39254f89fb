"""Evaluation on held-out examples: one completion each, judged and categorised. One module, one
config, one path for the evaluation inside training runs (every `train.eval_every` iterations,
eval.jsonl) and for `rlvr eval` (generations.jsonl and summary.json).

Both take the examples from `held_out_examples` (`train.eval_size` of the task's eval split),
sample with `eval_settings` (greedy unless `train.eval_temperature` > 0, up to
`train.eval_max_new_tokens`, the rollout's stop strings), on the configured rollout backend, in
chunks of `train.eval_batch_size` inside one backend `sync`, and judge through
`rlvr.rollout.sample_and_score`. Every example becomes a record (prompt, completion, verdict,
category, truncation, length); training runs reduce the records to `eval/*` metrics, `rlvr eval`
to the same metrics plus counts per category with a Wilson 95% interval on the accuracy.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from rlvr.observe.metric_names import (
    EVAL_ACCURACY,
    EVAL_COMPLETION_LEN_MEAN,
    EVAL_EXAMPLES,
    EVAL_NUM_EXAMPLES,
    EVAL_REWARD_MEAN,
    EVAL_SECONDS,
    EVAL_TRUNCATED_FRAC,
    eval_metric,
    eval_reward_component,
)
from rlvr.observe.rollout_stats import EpisodeCounts, episode_stats
from rlvr.config import Config, ConfigError, save_config
from rlvr.models.run_checkpoints import checkpoint_to_load
from rlvr.rollout import RolloutBackend, SamplingSettings, sample_and_score
from rlvr.rollout.episodes import episode_fields
from rlvr.tasks import Example, Task, Verdict, task_label
from rlvr.tasks.base import primary_component
import rlvr.observe.console as console
from rlvr.parallel.distributed import SINGLE, Dist
from rlvr.run.folder import make_run_dir
from rlvr.run.setup import prepare_task, rollout_backend
from rlvr.utils import atomic_write_text, to_json

CATEGORIES = ("correct", "formatted_wrong", "unformatted", "unjudgeable", "timeout", "error")
TRAINING_EVAL_EXAMPLES = 4  # judged completions copied into each eval.jsonl record
SUMMARY_EXAMPLES = 3  # examples of each category in `rlvr eval`'s summary


def held_out_examples(task: Task, config: Config) -> list[Example]:
    """The examples every evaluation of `config` judges: the first `train.eval_size` of the task's eval split."""
    return task.examples("eval", config.train.eval_size, config.train.seed)


def eval_settings(config: Config, task: Task) -> SamplingSettings:
    """Greedy (or `train.eval_temperature` / `eval_top_p`), up to `train.eval_max_new_tokens` (default: the
    rollout budget), with the rollout's stop strings (or the task's) and its other settings."""
    train = config.train
    max_new_tokens = train.eval_max_new_tokens or config.rollout.max_new_tokens
    if train.eval_temperature > 0:
        return SamplingSettings.for_task(config.rollout, task, temperature=train.eval_temperature,
                                         top_p=train.eval_top_p, max_new_tokens=max_new_tokens)
    return SamplingSettings.for_task(config.rollout, task, do_sample=False, max_new_tokens=max_new_tokens)


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
                if scored.episodes is not None:  # the whole conversation, the environment's (masked) spans marked
                    records[-1].update(episode_fields(scored.episodes[offset]))
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
        EVAL_ACCURACY: _mean([float(r["category"] == "correct") for r in records]),
        EVAL_REWARD_MEAN: _mean([v["total"] for v in verdicts]),
        EVAL_TRUNCATED_FRAC: _mean([float(r["truncated"]) for r in records]),
        EVAL_COMPLETION_LEN_MEAN: _mean([float(r["completion_tokens"]) for r in records]),
        EVAL_NUM_EXAMPLES: len(records),
        EVAL_SECONDS: seconds,
    }
    for name in dict.fromkeys(n for v in verdicts for n in v["components"]):
        metrics[eval_reward_component(name)] = _mean([v["components"][name] for v in verdicts if name in v["components"]])
    if records and all("turns" in r for r in records):  # episodes: eval/episode/turns, tool calls, errors, ...
        counts = [EpisodeCounts(turns=r["turns"], tool_calls=r["tool_calls"], tool_errors=r["tool_errors"],
                                env_tokens=r["env_tokens"], tokens=r["completion_tokens"] + r["env_tokens"],
                                truncated_by=r["truncated_by"]) for r in records]
        metrics.update({eval_metric(name): value for name, value in episode_stats(counts).items()})
    metrics[EVAL_EXAMPLES] = [
        {"ground_truth": r["ground_truth"], "completion": r["completion"], "components": r["verdict"]["components"],
         "correct": r["verdict"]["correct"]}
        for r in records[:keep_examples]
    ]
    return metrics


def evaluate_in_training(backend: RolloutBackend, task: Task, examples: Sequence[Example], config: Config,
                         *, dist: Dist = SINGLE) -> tuple[dict, list[dict]]:
    """The in-training eval: (eval/* metrics, the records). Every rank returns the same."""
    started = time.perf_counter()
    records = evaluate_examples(backend, task, examples, eval_settings(config, task),
                                use_chat_template=config.task.use_chat_template,
                                batch_size=config.train.eval_batch_size, dist=dist)
    seconds = time.perf_counter() - started
    return eval_metrics(records, dist.max_scalar(seconds) if dist.enabled else seconds), records


# ----------------------------------------------------------------------------- rlvr eval


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


def summarize(records: list[dict], keep_examples: int = SUMMARY_EXAMPLES) -> dict:
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


@dataclass
class EvalResult:
    """What `evaluate` wrote: the folder, the summary (as in summary.json) and every judged record."""

    folder: Path
    summary: dict
    records: list[dict]

    @property
    def accuracy(self) -> float:
        return self.summary["accuracy"]


def evaluate(config: Config, *, output_dir: Optional[str | Path] = None, log: Callable[[str], None] = print
             ) -> EvalResult:
    """`rlvr eval`: judge `model.name` on the held-out examples of `config`'s task, as a training run does.

    `model.name` may also be a run folder (its latest checkpoint) or a checkpoint folder. Every
    check runs before the model loads; the output folder (`output_dir`, default
    `<train.output_dir>/eval-<task>-<time>-<4 hex digits>`) is created once the model has loaded,
    and gets config.yaml, generations.jsonl (rewritten after each chunk) and summary.json.
    """
    import torch

    from rlvr.models import load_model_for_inference

    with console.stage(config, f"checking the task {config.task.name}, its data and the model source"):
        task = prepare_task(config, inference=True, run="eval")
    examples = held_out_examples(task, config)
    if not examples:
        raise ConfigError(f"train.eval_size={config.train.eval_size}: nothing to evaluate; set train.eval_size "
                          "(rlvr eval --limit N) to the number of held-out examples to judge")
    settings = eval_settings(config, task)
    planned = (str(output_dir) if output_dir is not None else
               f"a new folder {Path(config.train.output_dir) / f'eval-{task_label(config.task.name)}'}-<time>-<hex>")
    console.show_banner(config, console.eval_banner_lines(
        config, prompts=len(examples), settings=settings, checkpoint=checkpoint_to_load(config.model.name),
        output=f"{planned} (generations.jsonl, summary.json, config.yaml)"))
    model = config.model
    with console.stage(config, console.model_load_message(config)):
        loaded = load_model_for_inference(model.name, dtype=model.dtype, device=model.device,
                                          memory_kernels=model.memory_kernels)
    if output_dir is None:
        output = make_run_dir(config.train.output_dir, "", f"eval-{task_label(config.task.name)}")
    else:
        output = Path(output_dir)
        output.mkdir(parents=True, exist_ok=True)
    save_config(config, output / "config.yaml")
    generations_path = output / "generations.jsonl"

    def write_progress(records: list[dict]) -> None:  # a crash leaves a whole file
        atomic_write_text(generations_path, "".join(to_json(r) + "\n" for r in records))
        log(f"  {len(records)}/{len(examples)}")

    started = time.perf_counter()
    console.say(config, f"evaluating {len(examples)} held-out prompts, {config.train.eval_batch_size} at a time; "
                        f"writing {output}")
    with rollout_backend(config, loaded) as backend, torch.no_grad():
        records = evaluate_examples(backend, task, examples, settings, use_chat_template=config.task.use_chat_template,
                                    batch_size=config.train.eval_batch_size, on_batch=write_progress)
    seconds = time.perf_counter() - started
    summary = summarize(records)
    metrics = eval_metrics(records, seconds)
    del metrics[EVAL_EXAMPLES]  # summarize keeps examples of each category
    summary.update(seconds=seconds, metrics=metrics, task=config.task.name, model=model.name,
                   task_options=_jsonable(config.task.options), use_chat_template=config.task.use_chat_template,
                   do_sample=settings.do_sample, temperature=settings.temperature if settings.do_sample else 0.0,
                   top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                   stop_strings=list(settings.stop_strings), seed=config.train.seed,
                   main_component=primary_component(task))
    atomic_write_text(output / "summary.json", json.dumps(json.loads(to_json(_jsonable(summary))), indent=2) + "\n")
    log(format_summary(summary, f"{config.task.name} / {model.name}"))
    log(f"written: {generations_path}, summary.json and config.yaml")
    return EvalResult(folder=output, summary=summary, records=records)
