"""A training run, whatever the loop (RL, SFT, expert iteration): everything around the loop itself.

`open_run` builds the task and makes every check that needs no model (rlvr/run/setup.py),
then claims the run folder (a new one, or the resumed one: locked, the config change checked;
rlvr/run/folder.py), loads the model (and PPO's value model), places them on each
data-parallel rank (FSDP sharding included), and sets up the rollout backend and the held-out
evaluation. The loop then calls `start` (resume from the newest intact checkpoint, then open the
metric writers), `evaluate`, `save_checkpoint`, and finally `close` (or uses the session as a
context manager), which releases the folder. Each loop keeps only what is its own: its
optimizer and schedule size, its steps, its records.

It sits in the training package, above `rlvr.run`, because it evaluates with `rlvr.training.evaluation`,
which itself builds on the run set-up (`rlvr eval` prepares its task and backend the same way).

Run-level policies live here once for every loop: the folder lock and the resume config check
(`claim_run_folder`, in `open_run`), the verified checkpoints and the resume's first writes
(`restore_checkpoint` and `commit_resume`, in `start`), manifests (`save_checkpoint`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.config import Config
from rlvr.observe.metric_names import ELAPSED_S, ITERATION, UNIX_TIME
from rlvr.models import LoadedModel, trainable_parameters
from rlvr.rollout import RolloutBackend
from rlvr.models.value_model import ValueModel
from rlvr.tasks import Task, task_label
import rlvr.observe.console as console
from rlvr.models.checkpoints.training_state import gather_checkpoint_state, restore_checkpoint, save_checkpoint
from rlvr.parallel.distributed import SINGLE, Dist, checkpoint_extra, rank_device, restore_rank_state, start_ranks
from rlvr.training.evaluation import evaluate_in_training, held_out_examples
from rlvr.parallel.fsdp import fsdp_requested, shard_loaded_model
from rlvr.observe.generations import log_generations
from rlvr.observe.metrics import RunWriter
from rlvr.run.folder import RUN_LOGS, RunFolder, claim_run_folder
from rlvr.run.setup import expect_config, load_run_model, prepare_task, rollout_backend, set_up_value_model
from rlvr.observe.sinks import build_sinks, require_sink_packages
from rlvr.utils import read_jsonl


@dataclass(frozen=True)
class RunKind:
    """How a loop's runs are named and claimed."""

    name: str  # rl, sft, expert_iteration
    command: str  # as the run lock and the resume log name it
    folder_prefix: str  # before <task>: "" for RL, whose default name ends in the algorithm instead
    with_algorithm: bool
    resumable: bool


RL_RUN = RunKind("rl", "rlvr train", "", True, True)
SFT_RUN = RunKind("sft", "rlvr sft", "sft-", False, True)
EXPERT_ITERATION_RUN = RunKind("expert_iteration", "rlvr expert-iter", "ei-", False, False)


def run_stem(config: Config, kind: RunKind) -> str:
    """The start of a default run folder name: `<prefix><task>[-<algorithm>]` (time and a suffix follow)."""
    stem = kind.folder_prefix + task_label(config.task.name)
    return f"{stem}-{config.algorithm.name}" if kind.with_algorithm else stem


@dataclass
class RunSession:
    """An open run: its claimed folder, model, task, rollout backend and held-out evaluation."""

    config: Config
    kind: RunKind
    folder: RunFolder
    dist: Dist
    loaded: LoadedModel
    task: Task
    backend: RolloutBackend
    resume_dir: Path | None
    started_at: float
    eval_examples: list = field(default_factory=list)
    value_model: ValueModel | None = None  # PPO only
    writer: RunWriter | None = None  # opened by `start`, once a resume has made its first writes

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    @property
    def resumed(self) -> bool:
        return self.resume_dir is not None

    @property
    def policy(self):
        return self.loaded.policy

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    def elapsed(self) -> float:
        return time.perf_counter() - self.started_at

    def trainable_parameters(self) -> list:
        """What the optimizer updates: the policy's trainable weights, then the value model's (if any)."""
        own = [] if self.value_model is None else self.value_model.parameters()
        return [*trainable_parameters(self.policy), *own]

    def start(self, optimizer, scheduler, fresh_state: dict) -> tuple[int, dict]:
        """(iterations done, loop counters), then the metric writers open.

        Resuming loads the newest intact checkpoint (weights, optimizer, scheduler, RNG states) and
        only then writes: logs after the checkpoint dropped, config.yaml, resumes.jsonl. So the
        next iterations equal an uninterrupted run's. A new run returns (0, fresh_state).
        """
        done, state = 0, fresh_state
        if self.resume_dir is not None:
            restored = restore_checkpoint(self.run_dir, self.loaded, optimizer, scheduler, self.dist,
                                          value_model=self.value_model)
            restore_rank_state(self.dist, restored["distributed"], restored["checkpoint"])
            done, state = restored["iteration"], restored["state"]
            self.folder.commit_resume(restored, self.dist)
        main = self.dist.is_main
        self.writer = RunWriter(self.run_dir, is_main=main,
                                sinks=build_sinks(self.config, self.run_dir) if main else ())
        return done, state

    def evaluate(self, iteration: int, generations: int = 0) -> dict:
        """Evaluate on the held-out examples (greedy unless train.eval_temperature > 0), written to eval.jsonl;
        returns the record.

        `generations` > 0 also writes that many judged completions, with entropies, to generations.jsonl.
        """
        with console.stage(self.config, f"evaluation at iteration {iteration} on {len(self.eval_examples)} "
                                        "held-out prompts"):
            metrics, records = evaluate_in_training(self.backend, self.task, self.eval_examples, self.config,
                                                    dist=self.dist)
        record = {ITERATION: iteration, ELAPSED_S: self.elapsed(), UNIX_TIME: time.time(), **metrics}
        if generations:
            record.update(log_generations(self.policy, self.tokenizer, records[:generations], iteration=iteration,
                                          run_dir=self.run_dir if self.dist.is_main else None,
                                          print_summary=self.dist.is_main))
        self.writer.eval(record)
        return record

    def evaluate_start(self, generations: int = 0) -> dict | None:
        """Iteration 0's eval, of the starting weights: a new run's, unless train.eval_size is 0 or
        train.eval_on_start is false (a chained run: the stage before it evaluated them last); None when skipped."""
        train_cfg = self.config.train
        if self.resumed or train_cfg.eval_size == 0 or not train_cfg.eval_on_start:
            return None
        return self.evaluate(0, generations)

    def save_checkpoint(self, iteration: int, optimizer, scheduler, state: dict) -> None:
        """Checkpoint `iteration` (weights, optimizer, scheduler, counters, RNG). A collective when data-parallel."""
        extra = checkpoint_extra(self.dist)  # every rank's RNG states
        # Full tensors (a collective under FSDP).
        gathered = gather_checkpoint_state(self.loaded, optimizer, self.value_model)
        if self.dist.is_main:
            console.say(self.config, f"checkpoint at iteration {iteration}")
            save_checkpoint(self.run_dir, iteration, self.loaded, optimizer, scheduler, state,
                            self.config.train.keep_checkpoints, distributed=extra, gathered=gathered,
                            value_model=self.value_model)
        self.dist.barrier()

    def close(self) -> None:
        """Flush the metric sinks, release the rollout backend and the run folder."""
        try:
            if self.writer is not None:
                self.writer.close()
            self.backend.close()
        finally:
            self.folder.release()

    def __enter__(self) -> "RunSession":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None or not issubclass(exc_type, KeyboardInterrupt) or not self.dist.is_main:
            self.close()
            return
        try:  # still holding the folder's lock while deciding what to keep
            if self.writer is not None:
                self.writer.close()
                self.writer = None
            self.report_stop()
        finally:
            self.close()

    def report_stop(self) -> None:
        """Ctrl-C or SIGTERM: say which checkpoint a resume continues from; a new folder with no checkpoint and no
        metrics (a stop during start-up or the step-0 eval) is removed, one with metrics is said to be deletable."""
        summary = console.summarize_run(self.run_dir, self.kind.command if self.kind.resumable else None)
        if summary.checkpoints:
            newest = Path(summary.checkpoints[-1]).name
            print(f"stopped: `{summary.next_commands[0]}` continues from {newest} (the newest checkpoint)"
                  if self.kind.resumable else f"stopped: the newest checkpoint is {newest} ({self.kind.command} runs "
                  "are not resumed; rlvr eval and rlvr export read it)", file=sys.stderr, flush=True)
        elif self.folder.created and summary.iterations is None and not read_jsonl(self.run_dir / "eval.jsonl"):
            for name in RUN_LOGS:  # empty logs opened by the writer; nothing was recorded in them
                log = self.run_dir / name
                if log.exists() and log.stat().st_size == 0:
                    log.unlink()
            self.folder.abandon()
            gone = not self.run_dir.exists()
            print(f"stopped before the first checkpoint: {'removed' if gone else 'kept'} {self.run_dir}"
                  f"{'' if gone else ' (it holds other files; no checkpoint: it may be deleted)'}",
                  file=sys.stderr, flush=True)
        else:
            print(f"stopped before the first checkpoint: {self.run_dir} holds no checkpoint, so nothing can be "
                  "resumed; its logs are kept for `rlvr report`, and the folder may be deleted",
                  file=sys.stderr, flush=True)


def open_run(config: Config, kind: RunKind, *, resume_dir: str | Path | None = None, dist: Dist = SINGLE,
             need_reference: bool = False, need_value_model: bool = False,
             force_config_change: bool = False) -> RunSession:
    """Claim the run folder and set up everything a loop needs; see the module docstring.

    A resume refuses config changes outside `RESUME_MUTABLE_KEYS` unless `force_config_change`.
    `need_value_model`: set up PPO's value model (`algorithm.value_model`).
    """
    started_at = time.perf_counter()
    # Every check that needs no model comes before the folder: a failed start leaves nothing behind.
    expect_config(config)
    require_sink_packages(config)
    with console.stage(config, f"checking the task {config.task.name}, its data and the model source"):
        task = prepare_task(config, run=kind.name)  # model source, task options and data, held-out examples; seeded
    if config.model.init_from and resume_dir is None:  # recorded absolute, so the run's policy can be rebuilt
        config.model.init_from = str(Path(config.model.init_from).expanduser().resolve())
    if dist.enabled and fsdp_requested(config):
        config.train.fsdp = True  # an Accelerate FSDP launch: recorded in config.yaml, so a resume shards too
    folder = claim_run_folder(config, dist, stem=run_stem(config, kind), command=kind.command,
                              resume_dir=resume_dir, force_config_change=force_config_change,
                              resumable=kind.resumable)  # locked by the main process until `close`
    try:
        config.model.device = rank_device(dist, config.model.device)
        console.banner(config, kind.command, folder.path)
        with console.stage(config, console.model_load_message(config)):
            loaded = load_run_model(config, need_reference=need_reference)
        value_model = set_up_value_model(config, loaded) if need_value_model else None
        value_params = [] if value_model is None else value_model.parameters()
        start_ranks(dist, [*trainable_parameters(loaded.policy), *value_params], config.train.seed)  # rank 0's weights
        if dist.enabled and config.train.fsdp:
            layers = shard_loaded_model(loaded, dist)  # decoder layers sharded; their parameters become DTensors
            if value_model is not None and value_model.separate is not None:
                shard_loaded_model(value_model.separate, dist)
            if dist.is_main:
                print(f"fsdp: {layers} decoder layers sharded across {dist.world_size} processes")
        return RunSession(
            config=config, kind=kind, folder=folder, dist=dist, loaded=loaded, task=task,
            backend=rollout_backend(config, loaded), resume_dir=None if resume_dir is None else Path(resume_dir),
            started_at=started_at, eval_examples=held_out_examples(task, config), value_model=value_model,
        )
    except BaseException:
        folder.abandon()  # a new folder holding only config.yaml is removed again
        raise
