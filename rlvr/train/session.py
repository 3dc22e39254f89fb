"""A training run, whatever the loop (RL, SFT, expert iteration): everything around the loop itself.

`open_run` names and creates the run folder (or reopens it to resume), saves the resolved
config, opens the metric writers, loads the model and the task, places the model on each
data-parallel rank (FSDP sharding included), sets up the rollout backend and the held-out
evaluation. The loop then calls `resume`, `evaluate`, `save_checkpoint` and finally `close`
(or uses the session as a context manager). Each loop keeps only what is its own: its
optimizer and schedule size, its steps, its records.

Run-level policies hook in here, once for every loop: a lock on the run folder belongs in
`open_run` (taken before config.yaml is written) and `close`; a check of a resumed config against
the saved one in `open_run`, before config.yaml is replaced; checkpoint manifests in
`save_checkpoint` and `resume`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch

from rlvr.config import Config, save_config
from rlvr.metric_names import ELAPSED_S, ITERATION, UNIX_TIME
from rlvr.models import LoadedModel, LoraSettings, load_policy, trainable_parameters
from rlvr.rollout import ROLLOUT_BACKENDS, RolloutBackend, SamplingSettings
from rlvr.tasks import Task, build_task
from rlvr.train.checkpoint import gather_checkpoint_state, latest_checkpoint, load_checkpoint, save_checkpoint
from rlvr.train.distributed import SINGLE, Dist, checkpoint_extra, rank_device, restore_rank_state, start_ranks
from rlvr.train.evaluation import evaluate_in_training
from rlvr.train.fsdp import fsdp_requested, shard_loaded_model
from rlvr.train.generations import GENERATIONS_FILE, log_generations
from rlvr.train.metrics import RunWriter
from rlvr.train.sinks import build_sinks
from rlvr.utils import seed_everything, truncate_jsonl


@dataclass(frozen=True)
class RunKind:
    """How a loop's runs are named and what an existing folder means for it."""

    name: str  # rl, sft, expert_iteration
    folder_prefix: str  # before <task>: "" for RL, whose default name ends in the algorithm instead
    with_algorithm: bool
    exists_hint: str  # appended to the "already holds a run" error


RL_RUN = RunKind("rl", "", True, "resume it with --resume {run_dir}")
SFT_RUN = RunKind("sft", "sft-", False, "resume it with --resume {run_dir}")
EXPERT_ITERATION_RUN = RunKind("expert_iteration", "ei-", False, "choose another train.run_name")


def new_run_dir(config: Config, kind: RunKind) -> Path:
    """`train.output_dir/train.run_name`, or a timestamped `<prefix><task>[-<algorithm>]-<time>`."""
    task = config.task.name.replace(":", "_")
    name = config.train.run_name or (
        f"{kind.folder_prefix}{task}{'-' + config.algorithm.name if kind.with_algorithm else ''}"
        f"-{datetime.now():%Y%m%d-%H%M%S}")
    return Path(config.train.output_dir) / name


def load_model_and_task(config: Config, *, need_reference: bool) -> tuple[LoadedModel, Task]:
    """The policy (LoRA or full weights, a frozen reference copy only when asked) and the task, seeded."""
    if config.model.num_threads > 0:
        torch.set_num_threads(config.model.num_threads)
    seed_everything(config.train.seed)
    lora = None
    if config.model.lora:
        lora = LoraSettings(rank=config.model.lora_rank, alpha=config.model.lora_alpha,
                            dropout=config.model.lora_dropout, target_modules=tuple(config.model.lora_target_modules))
    loaded = load_policy(
        config.model.name, dtype=config.model.dtype, device=config.model.device, lora=lora,
        gradient_checkpointing=config.model.gradient_checkpointing, need_reference=need_reference,
        memory_kernels=config.model.memory_kernels,
    )
    task = build_task(config.task.name, reward_weights=config.task.reward_weights, options=config.task.options,
                      use_chat_template=config.task.use_chat_template, seed=config.train.seed)
    return loaded, task


def rollout_backend(config: Config, loaded: LoadedModel) -> RolloutBackend:
    """The configured rollout backend (`rollout.backend`), set up on the loaded policy."""
    return ROLLOUT_BACKENDS.get(config.rollout.backend)(loaded.policy, loaded.tokenizer,
                                                       merge_lora=config.rollout.merge_lora)


def eval_settings(config: Config, task: Task) -> SamplingSettings:
    """Greedy, up to `train.eval_max_new_tokens` (default: the rollout budget), the rollout's stop strings."""
    max_new_tokens = config.train.eval_max_new_tokens or config.rollout.max_new_tokens
    return SamplingSettings.for_task(config.rollout, task, do_sample=False, max_new_tokens=max_new_tokens)


@dataclass
class RunSession:
    """An open run: its folder, writers, model, task, rollout backend and held-out evaluation."""

    config: Config
    kind: RunKind
    run_dir: Path
    dist: Dist
    writer: RunWriter
    loaded: LoadedModel
    task: Task
    backend: RolloutBackend
    resume_dir: Path | None
    started_at: float
    eval_examples: list = field(default_factory=list)

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

    def resume(self, optimizer, scheduler, fresh_state: dict) -> tuple[int, dict]:
        """(iterations done, loop counters): restored from the last checkpoint when resuming, else (0, fresh_state).

        Resuming restores weights, optimizer, scheduler and RNG states, and drops whatever a crashed
        run logged after its last checkpoint, so the next iterations equal an uninterrupted run's.
        """
        if self.resume_dir is None:
            return 0, fresh_state
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"{self.run_dir} has no checkpoint to resume from")
        restored = load_checkpoint(checkpoint, self.loaded, optimizer, scheduler)
        restore_rank_state(self.dist, restored["distributed"], checkpoint)
        done = restored["iteration"]
        if self.dist.is_main:
            for path in (*self.writer.paths(), self.run_dir / GENERATIONS_FILE):
                truncate_jsonl(path, lambda record: record.get(ITERATION, -1) <= done)
        return done, restored["state"]

    def evaluate(self, iteration: int, generations: int = 0) -> dict:
        """Greedy eval on the held-out examples, written to eval.jsonl; returns the record.

        `generations` > 0 also writes that many judged completions, with entropies, to generations.jsonl.
        """
        metrics, records = evaluate_in_training(
            self.backend, self.task, self.eval_examples, eval_settings(self.config, self.task),
            use_chat_template=self.config.task.use_chat_template, dist=self.dist)
        record = {ITERATION: iteration, ELAPSED_S: self.elapsed(), UNIX_TIME: time.time(), **metrics}
        if generations:
            record.update(log_generations(self.policy, self.tokenizer, records[:generations], iteration=iteration,
                                          run_dir=self.run_dir if self.dist.is_main else None,
                                          print_summary=self.dist.is_main))
        self.writer.eval(record)
        return record

    def save_checkpoint(self, iteration: int, optimizer, scheduler, state: dict) -> None:
        """Checkpoint `iteration` (weights, optimizer, scheduler, counters, RNG). A collective when data-parallel."""
        extra = checkpoint_extra(self.dist)  # every rank's RNG states
        gathered = gather_checkpoint_state(self.loaded, optimizer)  # full tensors (a collective under FSDP)
        if self.dist.is_main:
            save_checkpoint(self.run_dir, iteration, self.loaded, optimizer, scheduler, state,
                            self.config.train.keep_checkpoints, distributed=extra, gathered=gathered)
        self.dist.barrier()

    def close(self) -> None:
        """Flush the metric sinks and release the rollout backend."""
        self.writer.close()
        self.backend.close()

    def __enter__(self) -> "RunSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_run(config: Config, kind: RunKind, *, resume_dir: str | Path | None = None, dist: Dist = SINGLE,
             need_reference: bool = False) -> RunSession:
    """Create (or reopen) the run folder and set up everything a loop needs; see the module docstring."""
    started_at = time.perf_counter()
    if dist.enabled and fsdp_requested(config):
        config.train.fsdp = True  # an Accelerate FSDP launch: recorded in config.yaml, so a resume shards too
    if resume_dir is not None:
        run_dir = Path(resume_dir)
    else:
        run_dir = dist.broadcast(new_run_dir(config, kind))  # rank 0's timestamped name everywhere
        if (run_dir / RunWriter.METRICS_FILE).exists():
            raise FileExistsError(f"{run_dir} already holds a run; {kind.exists_hint.format(run_dir=run_dir)}")
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, run_dir / "config.yaml")
    # Sinks first: a missing sink package stops the run before the model loads.
    writer = RunWriter(run_dir, is_main=dist.is_main, sinks=build_sinks(config, run_dir) if dist.is_main else ())
    config.model.device = rank_device(dist, config.model.device)
    loaded, task = load_model_and_task(config, need_reference=need_reference)
    start_ranks(dist, trainable_parameters(loaded.policy), config.train.seed)  # rank 0's weights, seed + rank
    if dist.enabled and config.train.fsdp:
        layers = shard_loaded_model(loaded, dist)  # decoder layers sharded; their parameters become DTensors
        if dist.is_main:
            print(f"fsdp: {layers} decoder layers sharded across {dist.world_size} processes")
    return RunSession(
        config=config, kind=kind, run_dir=run_dir, dist=dist, writer=writer, loaded=loaded, task=task,
        backend=rollout_backend(config, loaded), resume_dir=None if resume_dir is None else Path(resume_dir),
        started_at=started_at, eval_examples=task.examples("eval", config.train.eval_size, config.train.seed),
    )
