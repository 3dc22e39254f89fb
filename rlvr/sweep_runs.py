"""One run of a sweep (a grid point or a `before:` stage): the command that makes it, its status, and
bringing it to done.

Commands (`RUN_COMMANDS`): `train` (RL, the default), `sft`, `expert-iter` and `eval`, each as its
`rlvr` command would run it, into the run's folder. A rerun of a sweep is resumable run by run: a
finished run (its `sweep_done.json` written) is skipped, a run with a checkpoint is resumed from it,
and a run that crashed before its first checkpoint starts over from its config, its stale logs
removed first so none is appended to. Only a `train` run's budget is its config's
`train.iterations` (a longer budget resumes it); any other run is finished by its done file.
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from rlvr.utils import atomic_write_text

DONE_FILE = "sweep_done.json"  # written when a run of the sweep returns; a grid run's holds its iteration budget
# What a run that crashed before its first checkpoint leaves behind; removed before it starts over.
STALE_LOGS = ("metrics.jsonl", "samples.jsonl", "eval.jsonl", "generations.jsonl")


def _train(config, run_dir: Path):
    from rlvr.training.rl import train

    return train(config)


def _resume_train(config, run_dir: Path):
    from rlvr.training.rl import resume

    return resume(run_dir, [f"train.iterations={config.train.iterations}"])


def _sft(config, run_dir: Path):
    from rlvr.training.sft import train_sft

    return train_sft(config)


def _resume_sft(config, run_dir: Path):
    from rlvr.training.sft import resume_sft

    return resume_sft(run_dir)


def _expert_iteration(config, run_dir: Path):
    from rlvr.training.expert_iteration import expert_iteration

    return expert_iteration(config)


def _expert_iteration_saved(config, run_dir: Path):
    """Expert iteration checkpoints once, after its last round: a checkpoint means every round ran."""
    return run_dir


def _eval(config, run_dir: Path):
    """`rlvr eval` into the run folder, plus its metrics as one eval.jsonl record at iteration 0 (what a study
    and `rlvr report` read of a run)."""
    from rlvr.observe.metric_names import ITERATION
    from rlvr.training.evaluation import evaluate
    from rlvr.utils import to_json

    result = evaluate(config, output_dir=run_dir, log=lambda line: print(line, flush=True))
    atomic_write_text(run_dir / "eval.jsonl", to_json({ITERATION: 0, **result.summary["metrics"]}) + "\n")
    return result


def _eval_never_checkpoints(config, run_dir: Path):
    raise RuntimeError(f"{run_dir}: an eval run has no checkpoint to resume from; remove the folder to run it again")


@dataclass(frozen=True)
class RunCommand:
    start: Callable  # (config, run_dir) -> a run from its config, into run_dir (train.output_dir/train.run_name)
    resume: Callable  # (config, run_dir) -> the run continued from its latest checkpoint
    budget: bool = False  # the run's length is train.iterations (a done file below the budget is resumed)
    inference: bool = False  # model.name may be a run folder (as `rlvr eval --model RUN`)
    sft_data: bool = False  # the command reads sft.data_path (or sft.demonstrations)


RUN_COMMANDS: dict[str, RunCommand] = {
    "train": RunCommand(_train, _resume_train, budget=True),
    "sft": RunCommand(_sft, _resume_sft, sft_data=True),
    "expert-iter": RunCommand(_expert_iteration, _expert_iteration_saved),
    "eval": RunCommand(_eval, _eval_never_checkpoints, inference=True),
}


def _checkpoint_iteration(run_dir: Path) -> int | None:
    from rlvr.models.checkpoints.locate import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    return int(checkpoint.name.split("_")[-1]) if checkpoint is not None else None


def run_status(run_dir: Path, iterations: int | None) -> str:
    """"new", "finished", "resume" (has a checkpoint) or "restart" (logged, but no checkpoint).

    `iterations`: the budget a grid run must have reached (a done file or a checkpoint at it or past it);
    None for a run with its own budget (a `before:` stage): only its done file finishes it."""
    done = run_dir / DONE_FILE
    if done.exists() and (iterations is None or json.loads(done.read_text()).get("iterations", 0) >= iterations):
        return "finished"
    checkpoint_iteration = _checkpoint_iteration(run_dir)
    if checkpoint_iteration is not None:
        return "finished" if iterations is not None and checkpoint_iteration >= iterations else "resume"
    return "restart" if (run_dir / "metrics.jsonl").exists() else "new"


def status_of(command: RunCommand, config, run_dir: Path) -> str:
    """`run_status` of a run that `command` makes from `config`."""
    return run_status(run_dir, config.train.iterations if command.budget else None)


def train_to_done(command: RunCommand, config, run_dir: Path, status: str, record: dict) -> None:
    """Bring one run to done from its `status`: skip it (finished), resume it, or start it (a restart's stale
    logs removed first); then write `record` as its done file."""
    if status == "finished":
        return
    if status == "resume":
        command.resume(config, run_dir)
    else:
        for stale in STALE_LOGS:
            (run_dir / stale).unlink(missing_ok=True)
        command.start(config, run_dir)
    atomic_write_text(run_dir / DONE_FILE, json.dumps(record) + "\n")
