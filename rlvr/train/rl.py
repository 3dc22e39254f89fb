"""`rlvr train`: the RL loop, top to bottom.

Each iteration: take B prompts, sample G completions each (prompt-major), score them, compute
group advantages, run `ppo_epochs` optimizer steps over the batch, log one line of metrics,
evaluate and checkpoint now and then. Launched data-parallel, each rank does this on its share
of the B prompts (rlvr/train/distributed.py), optionally with the decoder layers sharded
(FSDP, rlvr/train/fsdp.py). Shortcuts taken, on purpose: rollouts and update share one model
(LoRA's reference is the same model with the adapter disabled), and the old log-probs come from
the first update epoch instead of a separate forward pass.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from rlvr.config import Config, load_run_config
from rlvr.models import LoraSettings, load_policy, reference_context, trainable_parameters
from rlvr.tasks import build_task, task_label
from rlvr.train.checkpoint import gather_checkpoint_state, restore_checkpoint, save_checkpoint
from rlvr.train.collect import collect_rollout_batch
from rlvr.train.distributed import (check_divisible, checkpoint_extra, init_distributed, rank_device,
                                    restore_rank_state, start_ranks)
from rlvr.train.evaluate import check_held_out, evaluate
from rlvr.train.fsdp import fsdp_requested, shard_loaded_model
from rlvr.train.health import HealthMonitor
from rlvr.train.metrics import RunWriter
from rlvr.train.run_folder import claim_run_folder, releases_run_folders
from rlvr.train.sinks import build_sinks, require_sink_packages
from rlvr.train.update import update_policy
from rlvr.utils import peak_rss_bytes, read_jsonl, seed_everything


def make_scheduler(optimizer, config: Config, total_steps: int):
    """Linear warm-up over `optim.warmup_steps` optimizer steps, then constant / linear / cosine."""
    warmup, schedule = config.optim.warmup_steps, config.optim.schedule

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def setup(config: Config):
    """Model, task, optimizer and scheduler for a config (shared by train, check and benchmarks)."""
    if config.model.num_threads > 0:
        torch.set_num_threads(config.model.num_threads)
    seed_everything(config.train.seed)
    # The task first: a bad task option or data file fails before minutes of model loading.
    task = build_task(config.task.name, reward_weights=config.task.reward_weights,
                      options=config.task.options, use_chat_template=config.task.use_chat_template,
                      seed=config.train.seed, max_abs_reward=config.task.max_abs_reward)
    check_held_out(task, config)
    lora = None
    if config.model.lora:
        lora = LoraSettings(rank=config.model.lora_rank, alpha=config.model.lora_alpha,
                            dropout=config.model.lora_dropout,
                            target_modules=tuple(config.model.lora_target_modules))
    loaded = load_policy(
        config.model.name, dtype=config.model.dtype, device=config.model.device, lora=lora,
        gradient_checkpointing=config.model.gradient_checkpointing,
        need_reference=config.algorithm.kl_coef > 0, memory_kernels=config.model.memory_kernels,
    )
    params, optimizer, scheduler = make_optimizer(loaded, config)
    return loaded, task, params, optimizer, scheduler


def make_optimizer(loaded, config: Config):
    """AdamW over the policy's trainable parameters and its LR schedule: (params, optimizer, scheduler)."""
    params = trainable_parameters(loaded.policy)
    optimizer = torch.optim.AdamW(
        params, lr=config.optim.lr, betas=(config.optim.beta1, config.optim.beta2),
        eps=config.optim.eps, weight_decay=config.optim.weight_decay,
    )
    scheduler = make_scheduler(optimizer, config, config.train.iterations * config.algorithm.ppo_epochs)
    return params, optimizer, scheduler


@releases_run_folders
def train(config: Config, resume_dir: str | Path | None = None, force_config_change: bool = False) -> Path:
    """Train according to `config` (or continue the run in `resume_dir`); returns the run folder.

    A resume refuses config changes outside `RESUME_MUTABLE_KEYS` unless `force_config_change`.
    """
    started_at = time.perf_counter()
    dist = init_distributed(config.model.device)  # one process unless launched data-parallel
    check_divisible(dist, config.rollout.batch_size)
    require_sink_packages(config)  # sinks are built once the run folder is ready; their packages are checked now
    if dist.enabled and fsdp_requested(config):
        config.train.fsdp = True  # an Accelerate FSDP launch: recorded in config.yaml, so a resume shards too
    run = claim_run_folder(config, dist, stem=f"{task_label(config.task.name)}-{config.algorithm.name}",
                           command="rlvr train", resume_dir=resume_dir, force_config_change=force_config_change)
    run_dir = run.path  # locked by rank 0 until train returns
    config.model.device = rank_device(dist, config.model.device)
    loaded, task, params, optimizer, scheduler = setup(config)
    start_ranks(dist, params, config.train.seed)  # rank 0's initial weights, seed + rank for sampling
    if dist.enabled and config.train.fsdp:
        layers = shard_loaded_model(loaded, dist)  # decoder layers sharded; their parameters become DTensors
        if dist.is_main:
            print(f"fsdp: {layers} decoder layers sharded across {dist.world_size} processes")
        params, optimizer, scheduler = make_optimizer(loaded, config)  # over the sharded parameters
    ref_ctx = lambda: reference_context(loaded)  # noqa: E731
    rollout, train_cfg = config.rollout, config.train
    eval_examples = task.examples("eval", train_cfg.eval_size, train_cfg.seed)
    eval_tokens = train_cfg.eval_max_new_tokens or rollout.max_new_tokens

    def run_eval(iteration: int) -> dict:
        result = evaluate(loaded.policy, loaded.tokenizer, task, eval_examples, max_new_tokens=eval_tokens,
                          backend=rollout.backend, use_chat_template=config.task.use_chat_template, dist=dist)
        writer.eval({"iteration": iteration, "elapsed_s": time.perf_counter() - started_at,
                     "time/unix": time.time(), **result})
        return result

    start_iteration, state = 0, {"skipped_nonfinite_updates": 0, "optimizer_steps": 0, "dead_iterations": 0}
    if resume_dir is not None:
        restored = restore_checkpoint(run_dir, loaded, optimizer, scheduler, dist)  # the newest intact one
        restore_rank_state(dist, restored["distributed"], restored["checkpoint"])
        start_iteration, state = restored["iteration"], restored["state"]
        run.commit_resume(restored, dist)  # first writes: logs after the checkpoint dropped, config.yaml
    writer = RunWriter(run_dir, is_main=dist.is_main, sinks=build_sinks(config, run_dir) if dist.is_main else ())
    if resume_dir is None and train_cfg.eval_size > 0:
        run_eval(0)

    def save(iteration: int) -> None:
        extra = checkpoint_extra(dist)  # every rank's RNG states (a collective)
        gathered = gather_checkpoint_state(loaded, optimizer)  # full tensors (a collective under FSDP)
        if dist.is_main:
            save_checkpoint(run_dir, iteration, loaded, optimizer, scheduler, state, train_cfg.keep_checkpoints,
                            distributed=extra, gathered=gathered)
        dist.barrier()

    # Every rank sees the same globally reduced records, so every rank takes the same stop decision.
    history = read_jsonl(writer.metrics_path) if resume_dir is not None else []  # resumed: rebuild streaks
    health = HealthMonitor.from_config(config, is_main=writer.is_main, history=history)
    progress = None
    if train_cfg.progress and dist.is_main:
        from tqdm import tqdm

        progress = tqdm(total=train_cfg.iterations, initial=start_iteration, desc="rlvr train", unit="it")
    for iteration in range(start_iteration, train_cfg.iterations):
        iteration_started = time.perf_counter()
        # 1. Rollouts: sample, score, advantages (and reference log-probs when KL is on).
        batch, prompt_len, stats, timings, samples = collect_rollout_batch(
            loaded.policy, loaded.tokenizer, task, config, iteration, ref_ctx, dist=dist
        )
        batch = batch.to(rollout.storage_device)  # minibatches move to the model's device one at a time
        # 2. Update: ppo_epochs optimizer steps over the whole batch.
        update_started = time.perf_counter()
        update_metrics, counters = update_policy(loaded.policy, optimizer, scheduler, batch, prompt_len, config, params,
                                                 dist=dist)
        timings["update"] = time.perf_counter() - update_started
        state["optimizer_steps"] += counters["optimizer_steps"]
        state["skipped_nonfinite_updates"] += counters["skipped_nonfinite_updates"]
        state["dead_iterations"] = state["dead_iterations"] + 1 if stats["frac_zero_variance_groups"] == 1.0 else 0
        # 3. Log.
        seconds = time.perf_counter() - iteration_started
        record = {
            "iteration": iteration + 1,
            **stats,
            **update_metrics,
            "optimizer_steps": counters["optimizer_steps"],
            "optimizer_steps_total": state["optimizer_steps"],
            "skipped_nonfinite_updates": counters["skipped_nonfinite_updates"],
            "skipped_nonfinite_updates_total": state["skipped_nonfinite_updates"],
            **{f"time/{k}": v for k, v in timings.items()},
            "time/iteration": seconds,
            "tokens_per_second": stats["generated_tokens"] / seconds,
            "elapsed_s": time.perf_counter() - started_at,
            "time/unix": time.time(),
            "peak_rss_bytes": peak_rss_bytes(),
        }
        if torch.cuda.is_available():
            record["peak_cuda_bytes"] = torch.cuda.max_memory_allocated()
        last = iteration + 1 == train_cfg.iterations
        if train_cfg.eval_size > 0 and (last or (train_cfg.eval_every and (iteration + 1) % train_cfg.eval_every == 0)):
            record["eval/accuracy"] = run_eval(iteration + 1)["eval/accuracy"]
        record["health/warnings"] = health.observe(record)
        writer.metrics(record)
        if train_cfg.samples_every and (iteration + 1) % train_cfg.samples_every == 0:
            writer.samples([{"iteration": iteration + 1, **s} for s in samples[: train_cfg.samples_per_iteration]])
        if last or (iteration + 1) % train_cfg.save_every == 0:
            save(iteration + 1)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(reward=f"{record['reward/mean']:.3f}", kl=f"{record.get('kl', 0.0):.4f}",
                                 s_per_it=f"{seconds:.1f}")
        stop_reason = health.stop_reason()
        if stop_reason is not None:
            if dist.is_main:
                print(f"stopping: {stop_reason}")
            save(iteration + 1)
            break
    if progress is not None:
        progress.close()
    writer.close()
    return run_dir


def resume(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), force_config_change: bool = False) -> Path:
    """Continue the run in `run_dir` with its saved config (overrides may extend train.iterations)."""
    return train(load_run_config(run_dir, overrides), resume_dir=Path(run_dir), force_config_change=force_config_change)
