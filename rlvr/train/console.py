"""What a run tells the console: a start banner, one line per start-up stage, an end summary.

Every command that trains or evaluates prints through these functions, so the lines read the same
everywhere. Stage lines and the banner go to stderr (stdout stays free for `--json`), from the
main process only; `train.progress=false` silences them. The end summary is read back from the run
folder's files (eval.jsonl, metrics.jsonl, checkpoints/), so it says what is on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlvr.metric_names import EVAL_ACCURACY, ITERATION, REWARD_MEAN
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

    for line in banner_lines(config, command, run_dir, config.model.device, torch.get_num_threads()):
        say(config, line)


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
    from rlvr.models.checkpoint_files import checkpoint_folders, checkpoint_root

    return [str(p) for p in reversed(checkpoint_folders(checkpoint_root(run_dir)))]  # oldest first


def summarize_run(run_dir: str | Path, resume_command: str | None = "rlvr train") -> RunSummary:
    """The summary of `run_dir`; `resume_command` None: the run cannot be resumed (expert iteration)."""
    run_dir = Path(run_dir)
    metrics, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    scored = [(e[ITERATION], e[EVAL_ACCURACY]) for e in evals if isinstance(e.get(EVAL_ACCURACY), (int, float))]
    summary = RunSummary(run_dir=str(run_dir), checkpoints=_checkpoints(run_dir))
    if metrics:
        summary.iterations = metrics[-1].get(ITERATION)
        summary.final_reward = metrics[-1].get(REWARD_MEAN)
    if scored:
        best = max(scored, key=lambda pair: pair[1])  # the first iteration that reached the best accuracy
        summary.final_eval, summary.best_eval, summary.best_eval_iteration = scored[-1][1], best[1], best[0]
    run = str(run_dir)
    summary.next_commands = ([f"{resume_command} --resume {run}"] if resume_command else []) + [
        f"rlvr eval {run}/config.yaml --model {run}", f"rlvr export {run} --out DIR", f"rlvr report {run}"]
    if not summary.checkpoints:
        summary.next_commands = [f"rlvr report {run}"] if (metrics or evals) else []
    return summary


def format_summary(summary: RunSummary) -> str:
    def number(value) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = [f"run folder: {summary.run_dir}",
             f"  iterations: {summary.iterations if summary.iterations is not None else 0}, "
             f"final reward {number(summary.final_reward)}"]
    if summary.best_eval is not None:
        lines.append(f"  eval accuracy: final {number(summary.final_eval)}, best {number(summary.best_eval)} "
                     f"at iteration {summary.best_eval_iteration}")
    if summary.checkpoints:
        lines.append(f"  checkpoints: {', '.join(Path(p).name for p in summary.checkpoints)} in "
                     f"{Path(summary.checkpoints[-1]).parent}")
    else:
        lines.append("  no checkpoint: nothing to resume; the folder may be deleted")
    lines.extend(["  next:"] + [f"    {command}" for command in summary.next_commands])
    return "\n".join(lines)


def summary_json(summary: RunSummary) -> str:
    return json.dumps(asdict(summary))
