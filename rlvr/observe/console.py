"""What a run tells the console: a start banner, one line per start-up stage, an end summary.

Every command that trains or evaluates (train, sft, expert-iter, eval, sweep) prints through these
functions, so the lines read the same everywhere. Stage lines and the banner go to stderr (stdout
stays free for `--json`), from the main process only; `train.progress=false` silences them. The end
summary is read back from the folder's files (eval.jsonl, metrics.jsonl, checkpoints/, an eval's
summary.json), so it says what is on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlvr.observe.metric_names import EVAL_ACCURACY, ITERATION, REWARD_MEAN, eval_reward_component
from rlvr.observe.numbers import final_and_best, series
from rlvr.utils import read_jsonl


def shown(config) -> bool:
    """Whether progress lines are printed: train.progress, and only from the main process."""
    return bool(config.train.progress) and os.environ.get("RANK", "0") == "0"


def say(config, message: str) -> None:
    """One line on stderr; through tqdm, so a live progress bar is redrawn below it instead of split by it."""
    if not shown(config):
        return
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - transformers depends on tqdm
        print(f"rlvr: {message}", file=sys.stderr, flush=True)
        return
    tqdm.write(f"rlvr: {message}", file=sys.stderr)
    sys.stderr.flush()


@contextlib.contextmanager
def stage(config, message: str):
    """`with stage(config, "loading the model"):` prints the line, then how long it took."""
    say(config, f"{message} ...")
    started = time.perf_counter()
    yield
    say(config, f"{message}: done in {time.perf_counter() - started:.1f} s")


def banner_lines(config, command: str, run_dir: Path, device: str, threads: int) -> list[str]:
    """The resolved essentials of a run, one `name: value` per line."""
    r, a = config.rollout, config.algorithm
    return [
        f"{command.removeprefix('rlvr ')}: {config.task.name} with {a.name} on {config.model.name}"
        f" ({'LoRA r=' + str(config.model.lora_rank) if config.model.lora else 'full fine-tuning'})",
        f"  batch: {r.batch_size} prompts x {r.group_size} completions = {config.rollout_size} sequences per "
        f"iteration, up to {r.max_new_tokens} new tokens; {config.train.iterations} iterations, lr {config.optim.lr:g}",
        f"  device: {device}, {threads} torch threads",
        f"  run folder: {run_dir}",
    ]


def banner(config, command: str, run_dir: Path) -> None:
    import torch

    show_banner(config, banner_lines(config, command, run_dir, config.model.device, torch.get_num_threads()))


def show_banner(config, lines: list[str]) -> None:
    """Every command's banner: its lines on stderr, one `rlvr:` line each, as the stage lines are."""
    for line in lines:
        say(config, line)


def sampling_text(settings) -> str:
    """A `SamplingSettings` in words: `greedy, up to 24 new tokens, stop at '</answer>'`."""
    how = (f"temperature {settings.temperature:g}, top-p {settings.top_p:g}" if settings.do_sample else "greedy")
    stops = f", stop at {', '.join(map(repr, settings.stop_strings))}" if settings.stop_strings else ""
    return f"{how}, up to {settings.max_new_tokens} new tokens{stops}"


def eval_banner_lines(config, *, prompts: int, settings, checkpoint: Path | None, output: str) -> list[str]:
    """`rlvr eval`'s essentials: model (or run checkpoint), task, prompts, sampling, where it writes."""
    model = config.model.name + (f" (checkpoint {checkpoint})" if checkpoint is not None else "")
    return [
        f"eval: {config.task.name} on {model}",
        f"  prompts: the first {prompts} of the eval split (train.eval_size={config.train.eval_size}), "
        f"{config.train.eval_batch_size} at a time, seed {config.train.seed}",
        f"  sampling: {sampling_text(settings)}" + (f", {config.train.eval_samples} completions per prompt "
                                                    f"(train.eval_samples)" if config.train.eval_samples > 1 else ""),
        f"  output: {output}",
    ]


def sweep_banner_lines(grid: list[tuple[tuple[str, ...], list[str]]], runs: int, sweep_dir: Path) -> list[str]:
    """`rlvr sweep`'s essentials: each grid axis, the number of runs, the folder."""
    axes = [f"  grid: {'+'.join(keys)} = {', '.join(values)}" for keys, values in grid]
    return [f"sweep: {runs} runs, one after another", *axes, f"  sweep folder: {sweep_dir}"]


def model_load_message(config) -> str:
    """"loading the model NAME", saying when the embedded GGUF file is converted first (once, about 45 s)."""
    from rlvr.models import converted_model_dir, is_complete_conversion
    from rlvr.models.embedded import EMBEDDED_MODELS, embedded_gguf_location

    name = config.model.name
    message = f"loading the model {name}"
    try:
        if name in EMBEDDED_MODELS:
            folder, gguf_file = embedded_gguf_location(name)
            if not is_complete_conversion(converted_model_dir(name, folder / gguf_file)):
                return message + " (converting the embedded GGUF file once, about 45 s on a laptop CPU)"
    except (OSError, ValueError):
        pass
    return message


def iteration_estimate(config, done: int, total: int, seconds: float) -> None:
    """After the first iteration: its time and what the rest should take at that pace."""
    left = total - done
    if left > 0:
        say(config, f"iteration {done}/{total} took {seconds:.1f} s: about {seconds * left / 60:.1f} min for the "
                    f"remaining {left} (evals and checkpoints add to it)")


@dataclass
class RunSummary:
    """What a finished (or stopped) run left: its numbers, its checkpoints, the commands that use them."""

    run_dir: str
    iterations: int | None = None
    final_reward: float | None = None
    final_eval: float | None = None
    best_eval: float | None = None
    best_eval_iteration: int | None = None
    checkpoints: list[str] = field(default_factory=list)
    next_commands: list[str] = field(default_factory=list)


def _checkpoints(run_dir: Path) -> list[str]:
    from rlvr.models.checkpoints.files import checkpoint_folders, checkpoint_root

    return [str(p) for p in reversed(checkpoint_folders(checkpoint_root(run_dir)))]  # oldest first


def summarize_run(run_dir: str | Path, resume_command: str | None = "rlvr train") -> RunSummary:
    """The summary of `run_dir`; `resume_command` None: the run cannot be resumed (expert iteration)."""
    run_dir = Path(run_dir)
    metrics, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    summary = RunSummary(run_dir=str(run_dir), checkpoints=_checkpoints(run_dir))
    if metrics:
        summary.iterations = metrics[-1].get(ITERATION)
        summary.final_reward = metrics[-1].get(REWARD_MEAN)
    summary.final_eval, summary.best_eval, summary.best_eval_iteration = final_and_best(*series(evals, EVAL_ACCURACY))
    run = str(run_dir)
    summary.next_commands = ([f"{resume_command} --resume {run}"] if resume_command else []) + [
        f"rlvr eval {run}/config.yaml --model {run}", f"rlvr export {run} --out DIR", f"rlvr report {run}"]
    if not summary.checkpoints:
        summary.next_commands = [f"rlvr report {run}"] if (metrics or evals) else []
    return summary


def _number(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_summary(summary: RunSummary) -> str:
    lines = [f"run folder: {summary.run_dir}",
             f"  iterations: {summary.iterations if summary.iterations is not None else 0}, "
             f"final reward {_number(summary.final_reward)}"]
    if summary.best_eval is not None:
        lines.append(f"  eval accuracy: final {_number(summary.final_eval)}, best {_number(summary.best_eval)} "
                     f"at iteration {summary.best_eval_iteration}")
    if summary.checkpoints:
        lines.append(f"  checkpoints: {', '.join(Path(p).name for p in summary.checkpoints)} in "
                     f"{Path(summary.checkpoints[-1]).parent}")
    else:
        lines.append("  no checkpoint: nothing to resume; the folder may be deleted")
    lines.extend(["  next:"] + [f"    {command}" for command in summary.next_commands])
    return "\n".join(lines)


def summary_json(summary) -> str:
    """Any end summary (a `RunSummary`, `EvalSummary` or `SweepSummary`) as one JSON object."""
    return json.dumps(asdict(summary))


@dataclass
class EvalSummary:
    """What `rlvr eval` left: its numbers, read back from summary.json, and the files it wrote."""

    folder: str
    task: str
    model: str
    num_examples: int
    accuracy: float
    accuracy_ci95: list[float]
    main_component: str | None = None  # the reward component that says the answer is right
    main_component_mean: float | None = None
    files: list[str] = field(default_factory=list)
    decoding: str = "greedy"  # or "sampled" (train.eval_temperature > 0)
    samples_per_prompt: int = 1  # n > 1: accuracy is mean@n
    sampled: dict[str, float] = field(default_factory=dict)  # n > 1: pass@k, mean@n, maj@n by short name
    sampled_ci95: dict[str, list[float]] = field(default_factory=dict)  # their Wilson intervals over prompts


EVAL_FILES = ("generations.jsonl", "summary.json", "config.yaml")


def summarize_eval(folder: str | Path) -> EvalSummary:
    """The end summary of an `rlvr eval` output folder, from its summary.json."""
    folder = Path(folder)
    data = json.loads((folder / "summary.json").read_text())
    main = data.get("main_component")
    return EvalSummary(folder=str(folder), task=data["task"], model=data["model"], num_examples=data["num_examples"],
                       accuracy=data["accuracy"], accuracy_ci95=list(data["accuracy_ci95"]), main_component=main,
                       main_component_mean=data.get("metrics", {}).get(eval_reward_component(main)) if main else None,
                       files=[str(folder / name) for name in EVAL_FILES if (folder / name).exists()],
                       decoding=data.get("decoding", "sampled" if data.get("do_sample") else "greedy"),
                       samples_per_prompt=data.get("samples_per_prompt", 1), sampled=data.get("sampled", {}),
                       sampled_ci95=data.get("sampled_ci95", {}))


def format_eval_summary(summary: EvalSummary) -> str:
    low, high = summary.accuracy_ci95
    how = (f"{summary.samples_per_prompt} samples per prompt, accuracy = mean@{summary.samples_per_prompt}"
           if summary.samples_per_prompt > 1 else summary.decoding)
    lines = [f"eval folder: {summary.folder}",
             f"  {summary.task} on {summary.model}: accuracy {_number(summary.accuracy)} (95% CI {_number(low)} to "
             f"{_number(high)}) on {summary.num_examples} examples ({how})"]
    if summary.sampled:
        lines.append("  " + ", ".join(f"{name} {_number(value)}" for name, value in summary.sampled.items()))
    if summary.main_component is not None:
        lines.append(f"  main reward component {summary.main_component}: mean {_number(summary.main_component_mean)}")
    lines.append(f"  written: {', '.join(Path(f).name for f in summary.files)} in {summary.folder}")
    return "\n".join(lines)


@dataclass
class SweepRun:
    """One run of a sweep: its name (from its grid values), what the sweep did with it, its numbers."""

    name: str
    status: str  # run_status before the sweep ran it: new, restart, resume or finished
    run: RunSummary


@dataclass
class SweepSummary:
    sweep_dir: str
    grid: list[str]  # "key=v1,v2" per axis
    runs: list[SweepRun] = field(default_factory=list)
    report: str | None = None
    next_commands: list[str] = field(default_factory=list)


SWEEP_STATUS_WORDS = {"new": "trained", "restart": "trained again", "resume": "resumed", "finished": "already done"}


def summarize_sweep(sweep_dir: str | Path, grid: list[tuple[tuple[str, ...], list[str]]],
                    runs: list[tuple[str, str, Path]], report: str | Path | None) -> SweepSummary:
    """The end summary of a sweep: `runs` are (name, status, run folder); each run's numbers come from its
    folder, as `summarize_run` reads them."""
    sweep_dir = Path(sweep_dir)
    return SweepSummary(sweep_dir=str(sweep_dir),
                        grid=[f"{'+'.join(keys)}={','.join(values)}" for keys, values in grid],
                        runs=[SweepRun(name, status, summarize_run(folder)) for name, status, folder in runs],
                        report=str(report) if report is not None else None,
                        next_commands=[f"rlvr report {sweep_dir}"])


def format_sweep_summary(summary: SweepSummary) -> str:
    header = ("run", "done now", "iterations", "final eval", "best eval", "at iteration")
    rows = [(r.name, SWEEP_STATUS_WORDS.get(r.status, r.status), str(r.run.iterations or 0), _number(r.run.final_eval),
             _number(r.run.best_eval), "-" if r.run.best_eval_iteration is None else str(r.run.best_eval_iteration))
            for r in summary.runs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"sweep folder: {summary.sweep_dir} ({len(summary.runs)} runs over {'; '.join(summary.grid)})"]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
              for row in [header, *rows]]
    if summary.report is not None:
        lines.append(f"  report: {summary.report}")
    lines.extend(["  next:"] + [f"    {command}" for command in summary.next_commands])
    return "\n".join(lines)
