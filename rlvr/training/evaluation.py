"""Evaluation on held-out examples: n = `train.eval_samples` completions each (1, greedy, by default),
judged and categorised. One module, one config, one path for the evaluation inside training runs
(every `train.eval_every` iterations, eval.jsonl) and for `rlvr eval` (generations.jsonl and summary.json).

Both take the examples from `held_out_examples` (`train.eval_size` of the task's eval split),
sample with `eval_settings` (greedy unless `train.eval_temperature` > 0, up to
`train.eval_max_new_tokens`, the rollout's stop strings), on the configured rollout backend, in
chunks of about `train.eval_batch_size` completions inside one backend `sync`, and judge through
`rlvr.rollout.sample_and_score`. Every completion becomes a record (prompt, sample number, completion,
verdict, category, truncation, length); training runs reduce the records to `eval/*` metrics, `rlvr eval`
to the same metrics plus counts per category with a Wilson 95% interval on the accuracy. With n > 1 the
metrics add pass@k, mean@n (which eval/accuracy then is) and maj@n (`rlvr.observe.sampled_accuracy`).
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
    EVAL_PREFIX,
    EVAL_REWARD_MEAN,
    EVAL_SAMPLES_PER_PROMPT,
    EVAL_SECONDS,
    EVAL_TRUNCATED_FRAC,
    eval_maj_at,
    eval_mean_at,
    eval_metric,
    eval_pass_at,
    eval_reward_component,
)
from rlvr.observe.rollout_stats import EpisodeCounts, episode_stats
from rlvr.observe.sampled_accuracy import SampledAccuracy, sampled_accuracy, wilson_interval
from rlvr.config import Config, ConfigError, save_config
from rlvr.models.checkpoints.locate import checkpoint_to_load
from rlvr.rollout import RolloutBackend, SamplingSettings, sample_and_score
from rlvr.rollout.episodes import episode_fields
from rlvr.tasks import Example, Task, Verdict, task_label
from rlvr.tasks.task import extracts_answers, primary_component
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
                      *, use_chat_template: bool, batch_size: int, dist: Dist = SINGLE, samples: int = 1,
                      on_batch: Optional[Callable[[list[dict]], None]] = None) -> list[dict]:
    """`samples` judged completions per example, as records in example order, then sample order (every
    rank's, when data-parallel); a chunk is `batch_size // samples` examples (at least 1).

    Data-parallel (`dist`): each rank evaluates its contiguous shard; the records are gathered in
    rank order. `on_batch(records so far)` runs after each chunk (this rank's records).
    """
    shard = dist.shard_range(len(examples))
    mine = list(examples)[shard.start : shard.stop]
    chunk = max(1, batch_size // samples)  # examples per generate call: about batch_size completions
    records: list[dict] = []
    # One adapter merge (FSDP: one gather of the layers) for all chunks: ranks may have different
    # numbers of chunks, so nothing inside the loop may be a collective.
    with backend.sync():
        for start in range(0, len(mine), chunk):
            scored = sample_and_score(backend, task, mine[start : start + chunk], group_size=samples,
                                      settings=settings, use_chat_template=use_chat_template)
            generation = scored.generation
            for offset, verdict in enumerate(scored.verdicts):  # [chunk * samples], prompt-major
                example_offset, sample = divmod(offset, samples)
                records.append({
                    "index": shard.start + start + example_offset, "sample": sample,
                    "prompt": scored.prompts[example_offset],
                    "ground_truth": _jsonable(scored.examples[example_offset].ground_truth),
                    "completion": generation.completion_texts[offset],
                    "category": categorize(verdict), "truncated": bool(generation.truncated[offset]),
                    "completion_tokens": int(generation.completion_lengths[offset]),
                    "verdict": {"components": verdict.components, "total": verdict.total, "status": verdict.status,
                                "verifier": verdict.verifier, "version": verdict.version,
                                "correct": verdict.correct, "detail": verdict.detail, "answer": verdict.answer},
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


def by_prompt(records: list[dict]) -> list[list[dict]]:
    """The records grouped by held-out example (`index`), each group in sample order."""
    groups: dict[int, list[dict]] = {}
    for record in records:
        groups.setdefault(record["index"], []).append(record)
    return [sorted(group, key=lambda r: r.get("sample", 0)) for group in groups.values()]


def sampled_result(records: list[dict], *, majority: bool) -> Optional[SampledAccuracy]:
    """pass@k, mean@n and maj@n (with `majority`: the task sets `Verdict.answer`) of records with n > 1
    samples per prompt; None for one sample per prompt."""
    groups = by_prompt(records)
    if not groups or all(len(group) == 1 for group in groups):
        return None
    correct = [[r["category"] == "correct" for r in group] for group in groups]
    answers = [[r["verdict"].get("answer") for r in group] for group in groups] if majority else None
    return sampled_accuracy(correct, answers)


def sampled_metrics(result: SampledAccuracy) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The `eval/*` numbers of a sampled eval (samples per prompt, pass@k, mean@n, maj@n) and their Wilson 95%
    intervals over prompts, keyed by metric name."""
    values = {EVAL_SAMPLES_PER_PROMPT: result.samples}
    intervals = {}
    for k, value in result.pass_at.items():
        values[eval_pass_at(k)], intervals[eval_pass_at(k)] = value, list(result.pass_at_ci95[k])
    values[eval_mean_at(result.samples)], intervals[eval_mean_at(result.samples)] = result.mean, list(result.mean_ci95)
    if result.majority is not None:
        values[eval_maj_at(result.samples)] = result.majority
        intervals[eval_maj_at(result.samples)] = list(result.majority_ci95)
    return values, intervals


def eval_metrics(records: list[dict], seconds: float, keep_examples: int = TRAINING_EVAL_EXAMPLES, *,
                 majority: bool = False) -> dict:
    """What a training run logs per evaluation: `eval/*` means, the count, and a few examples (each the first
    sample of a prompt). With n > 1 samples per prompt also pass@k, mean@n and maj@n (`majority`: the task
    sets `Verdict.answer`), and eval/accuracy is mean@n."""
    verdicts = [record["verdict"] for record in records]
    sampled = sampled_result(records, majority=majority)
    metrics = {
        EVAL_ACCURACY: _mean([float(r["category"] == "correct") for r in records]) if sampled is None
        else sampled.mean,
        EVAL_REWARD_MEAN: _mean([v["total"] for v in verdicts]),
        EVAL_TRUNCATED_FRAC: _mean([float(r["truncated"]) for r in records]),
        EVAL_COMPLETION_LEN_MEAN: _mean([float(r["completion_tokens"]) for r in records]),
        EVAL_NUM_EXAMPLES: len(records) if sampled is None else sampled.prompts,
        EVAL_SECONDS: seconds,
    }
    if sampled is not None:
        metrics.update(sampled_metrics(sampled)[0])
    for name in dict.fromkeys(n for v in verdicts for n in v["components"]):
        metrics[eval_reward_component(name)] = _mean([v["components"][name] for v in verdicts
                                                      if name in v["components"]])
    if records and all("turns" in r for r in records):  # episodes: eval/episode/turns, tool calls, errors, ...
        counts = [EpisodeCounts(turns=r["turns"], tool_calls=r["tool_calls"], tool_errors=r["tool_errors"],
                                env_tokens=r["env_tokens"], tokens=r["completion_tokens"] + r["env_tokens"],
                                truncated_by=r["truncated_by"]) for r in records]
        metrics.update({eval_metric(name): value for name, value in episode_stats(counts).items()})
    metrics[EVAL_EXAMPLES] = [
        {"ground_truth": r["ground_truth"], "completion": r["completion"], "components": r["verdict"]["components"],
         "correct": r["verdict"]["correct"]}
        for r in [r for r in records if r.get("sample", 0) == 0][:keep_examples]
    ]
    return metrics


def evaluate_in_training(backend: RolloutBackend, task: Task, examples: Sequence[Example], config: Config,
                         *, dist: Dist = SINGLE) -> tuple[dict, list[dict]]:
    """The in-training eval: (eval/* metrics, the records). Every rank returns the same."""
    started = time.perf_counter()
    records = evaluate_examples(backend, task, examples, eval_settings(config, task),
                                use_chat_template=config.task.use_chat_template,
                                batch_size=config.train.eval_batch_size, dist=dist, samples=config.train.eval_samples)
    seconds = time.perf_counter() - started
    return eval_metrics(records, dist.max_scalar(seconds) if dist.enabled else seconds,
                        majority=extracts_answers(task)), records


# ----------------------------------------------------------------------------- rlvr eval


def summarize(records: list[dict], keep_examples: int = SUMMARY_EXAMPLES, *, majority: bool = False) -> dict:
    """`rlvr eval`'s summary: accuracy with its Wilson interval, counts per category, a few examples of each.

    n > 1 samples per prompt: `num_examples` counts prompts, `counts` and `truncated` completions; the
    accuracy is mean@n, and `sampled` holds pass@k, mean@n and maj@n (`majority`) by short name
    (`pass@4`), `sampled_ci95` their Wilson intervals over prompts, `prompt_outcomes` the prompts
    right in all, some and none of their samples.
    """
    counts = {category: 0 for category in CATEGORIES}
    examples: dict[str, list] = {category: [] for category in CATEGORIES}
    for record in records:
        counts[record["category"]] += 1
    for record in sorted(records, key=lambda r: (r.get("sample", 0), r["index"])):  # first samples first
        if len(examples[record["category"]]) < keep_examples:
            examples[record["category"]].append(
                {"index": record["index"], "sample": record.get("sample", 0), "ground_truth": record["ground_truth"],
                 "completion": record["completion"][-400:], "detail": record["verdict"]["detail"]})
    total = len(records)
    sampled = sampled_result(records, majority=majority)
    summary = {
        "num_examples": total,
        "accuracy": counts["correct"] / total if total else math.nan,
        "accuracy_ci95": list(wilson_interval(counts["correct"], total)),
        "samples_per_prompt": 1, "num_completions": total, "sampled": {}, "sampled_ci95": {},
    }
    if sampled is not None:
        values, intervals = sampled_metrics(sampled)
        del values[EVAL_SAMPLES_PER_PROMPT]
        summary.update(num_examples=sampled.prompts, accuracy=sampled.mean, accuracy_ci95=list(sampled.mean_ci95),
                       samples_per_prompt=sampled.samples,
                       sampled={name.removeprefix(EVAL_PREFIX): value for name, value in values.items()},
                       sampled_ci95={name.removeprefix(EVAL_PREFIX): value for name, value in intervals.items()},
                       prompt_outcomes={"all_right": sampled.solved_all, "some_right": sampled.solved_some,
                                        "none_right": sampled.solved_none})
    return {
        **summary,
        "counts": counts,
        "truncated": sum(r["truncated"] for r in records),
        "mean_completion_tokens": sum(r["completion_tokens"] for r in records) / total if total else math.nan,
        "examples": {k: v for k, v in examples.items() if v},
    }


def format_summary(summary: dict, title: str = "") -> str:
    low, high = summary["accuracy_ci95"]
    lines = [title] if title else []
    samples = summary.get("samples_per_prompt", 1)
    per_prompt = f" x {samples} samples (accuracy = mean@{samples})" if samples > 1 else ""
    lines.append(f"accuracy {summary['accuracy']:.3f} (95% CI {low:.3f} to {high:.3f}) on "
                 f"{summary['num_examples']} examples{per_prompt}; {summary['truncated']} truncated; "
                 f"{summary['mean_completion_tokens']:.0f} tokens per completion; {summary['seconds']:.0f} s")
    if summary.get("sampled"):
        lines.append("  " + "  ".join(f"{name} {value:.3f} [{summary['sampled_ci95'][name][0]:.3f}, "
                                      f"{summary['sampled_ci95'][name][1]:.3f}]"
                                      for name, value in summary["sampled"].items()))
        outcomes = summary["prompt_outcomes"]
        lines.append(f"  prompts right in all {samples} samples: {outcomes['all_right']}, in some: "
                     f"{outcomes['some_right']}, in none: {outcomes['none_right']}")
    lines.append("  " + "  ".join(f"{name}={count}" for name, count in summary["counts"].items()))
    for category, examples in summary["examples"].items():
        lines.append(f"  -- {category}")
        for example in examples:
            completion = example["completion"].replace("\n", " ")[-160:]
            sample = f" sample {example.get('sample', 0)}" if samples > 1 else ""
            lines.append(f"     #{example['index']}{sample} truth={example['ground_truth']!r:.40} ...{completion!r}"
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
    samples = config.train.eval_samples

    def write_progress(records: list[dict]) -> None:  # a crash leaves a whole file
        atomic_write_text(generations_path, "".join(to_json(r) + "\n" for r in records))
        log(f"  {len(records) // samples}/{len(examples)}")

    started = time.perf_counter()
    chunk = max(1, config.train.eval_batch_size // samples)
    console.say(config, f"evaluating {len(examples)} held-out prompts"
                        + (f" x {samples} samples" if samples > 1 else "") + f", {chunk} at a time; writing {output}")
    with rollout_backend(config, loaded) as backend, torch.no_grad():
        records = evaluate_examples(backend, task, examples, settings, use_chat_template=config.task.use_chat_template,
                                    batch_size=config.train.eval_batch_size, samples=samples, on_batch=write_progress)
    seconds = time.perf_counter() - started
    summary = summarize(records, majority=extracts_answers(task))
    metrics = eval_metrics(records, seconds, majority=extracts_answers(task))
    del metrics[EVAL_EXAMPLES]  # summarize keeps examples of each category
    summary.update(seconds=seconds, metrics=metrics, task=config.task.name, model=model.name,
                   decoding="sampled" if settings.do_sample else "greedy",
                   task_options=_jsonable(config.task.options), use_chat_template=config.task.use_chat_template,
                   do_sample=settings.do_sample, temperature=settings.temperature if settings.do_sample else 0.0,
                   top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                   stop_strings=list(settings.stop_strings), seed=config.train.seed,
                   main_component=primary_component(task))
    atomic_write_text(output / "summary.json", json.dumps(json.loads(to_json(_jsonable(summary))), indent=2) + "\n")
    log(format_summary(summary, f"{config.task.name} / {model.name}"))
    log(f"written: {generations_path}, summary.json and config.yaml")
    return EvalResult(folder=output, summary=summary, records=records)
