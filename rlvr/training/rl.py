"""`rlvr train`: the RL loop, top to bottom.

Each iteration runs the stages `rlvr.training.iteration` plans from the config, each a function with a small
typed result: 1. a rollout source hands over B prompts x G completions sampled and judged (`collect_groups`,
prompt-major groups), laid out as one batch (`rollout_batch`), with the inputs the estimator declares
(`estimator_inputs`; ReMax: one greedy completion per prompt, scored); 2. the preparation stages add reference
log-probs when a KL term needs them (`with_reference_logprobs`), PPO only: the value model's values at sampling
time (`with_old_values`), then turn the rewards into advantages (`with_advantages`: group-relative, or GAE
against the values); 3. the update runs `ppo_epochs` passes over the batch, each one optimizer step or
`optim.steps_per_epoch` (`update_policy`); 4. one line of metrics, evaluation and checkpoints now and then.
With `rollout.async_steps=1` the next iteration's stage 1 runs while 2-3 run, at the weights before this
update (one step off-policy, async_rollout.py). The run around the loop (folder, model, value model, task,
rollout backend, evaluation, checkpoints) is a `RunSession` (session.py). Launched data-parallel, each rank
does this on its share of the B prompts (distributed.py), optionally with the decoder layers sharded (FSDP,
fsdp.py). Shortcuts taken, on purpose: rollouts and update share one model (one step off-policy: a copy sharing
the frozen weights; LoRA's reference is the same model with the adapter disabled), and the old log-probs come
from the first update epoch instead of a separate forward pass (PPO's value pass gives them when the KL penalty
is in the reward, which needs them before the advantages; several optimizer steps per epoch need them before
the first step, so the update computes them first).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rlvr.config import Config, load_run_config
from rlvr.observe.metric_names import (
    ELAPSED_S,
    EVAL_ACCURACY,
    GENERATED_TOKENS,
    HEALTH_WARNINGS,
    ITERATION,
    KL,
    OPTIMIZER_STEPS,
    OPTIMIZER_STEPS_TOTAL,
    PEAK_CUDA_BYTES,
    PEAK_RSS_BYTES,
    POLICY_LAG,
    REWARD_MEAN,
    SKIPPED_NONFINITE_UPDATES,
    SKIPPED_NONFINITE_UPDATES_TOTAL,
    TIME_ITERATION,
    TIME_UPDATE,
    TOKENS_PER_SECOND,
    UNIX_TIME,
)
from rlvr.rollout import SamplingSettings
from rlvr.tasks.task import primary_component
import rlvr.observe.console as console
from rlvr.training.async_rollout import rollout_schedule
from rlvr.training.collect import collect_groups
from rlvr.training.iteration import Learner, plan_iteration, prepare, timed
from rlvr.parallel.distributed import check_divisible, init_distributed
from rlvr.observe.health import HealthMonitor
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.observe.rollout_stats import gather_rollout, rollout_stats
from rlvr.run.setup import expect_config
from rlvr.training.session import RL_RUN, open_run
from rlvr.utils import peak_rss_bytes, read_jsonl

# The run's state (checkpointed, so it carries over a resume): seconds its iterations have taken, with their
# evals and checkpoints, for train.time_budget_minutes.
TRAINING_SECONDS = "training_seconds"


def train(config: Config, resume_dir: str | Path | None = None, force_config_change: bool = False) -> Path:
    """Train according to `config` (or continue the run in `resume_dir`); returns the run folder.

    A resume refuses config changes outside `RESUME_MUTABLE_KEYS` unless `force_config_change`.
    """
    expect_config(config)
    dist = init_distributed(config.model.device)  # one process unless launched data-parallel
    check_divisible(dist, config.rollout.batch_size)
    algo, rollout, train_cfg = config.algorithm, config.rollout, config.train
    plan = plan_iteration(config)  # the stages each iteration runs
    with open_run(config, RL_RUN, resume_dir=resume_dir, dist=dist, need_reference=plan.needs_reference,
                  need_value_model=plan.needs_value_model, force_config_change=force_config_change) as session:
        task = session.task
        value_model = session.value_model  # PPO's value head (and its own model); None for the group presets
        params = session.trainable_parameters()  # the policy's and the value model's; FSDP: the sharded ones
        optimizer = make_optimizer(params, config.optim)
        scheduler = make_scheduler(optimizer, config.optim, train_cfg.iterations * config.steps_per_iteration)
        settings = SamplingSettings.for_task(rollout, task)  # the same for every iteration
        start, state = session.start(optimizer, scheduler, {OPTIMIZER_STEPS: 0, SKIPPED_NONFINITE_UPDATES: 0})
        session.evaluate_start()
        # Every rank sees the same globally reduced records, so every rank takes the same stop decision.
        history = read_jsonl(session.writer.metrics_path) if session.resumed else []  # rebuild the streaks
        health = HealthMonitor.from_config(config, is_main=dist.is_main, history=history,
                                           task_components=tuple(task.component_names),
                                           task_primary=primary_component(task))
        progress = None
        if train_cfg.progress and dist.is_main:
            from tqdm import tqdm

            progress = tqdm(total=train_cfg.iterations, initial=start, desc="rlvr train", unit="it")
        learner = Learner(session.loaded, value_model, optimizer, scheduler, params, config, dist)
        rollouts = rollout_schedule(session, settings, config, dist, state, collect=collect_groups)
        for iteration in range(start, train_cfg.iterations):
            iteration_started = time.perf_counter()
            done = iteration + 1  # iterations finished at the end of this one
            # 1. A rollout from the source: B prompts x G completions sampled and judged (DAPO: more rounds until
            #    B groups have contrast), with the estimator's inputs (ReMax: a greedy decode per prompt);
            #    async_steps=1: sampled during the last iteration, and the next one samples these weights meanwhile.
            sampled = rollouts.take(iteration)  # sampled.batch: [N, L] ids and masks
            timings = sampled.timings()  # generation and scoring seconds
            rollouts.prefetch(iteration + 1)
            # 2. Prepare it as the plan says: reference log-probs for a KL term, PPO's values at sampling time,
            #    then the advantages (each prompt's group against itself, or GAE against the values).
            batch = prepare(sampled.batch, sampled.advantage_inputs(), learner, plan, timings)
            rows = gather_rollout(sampled.collected, batch, dist)  # every rank's rows, for the statistics
            # 3. Update: ppo_epochs passes over the whole batch, each steps_per_epoch optimizer steps (moved to the
            #    model one minibatch at a time); the first value_warmup_iterations train only the value model.
            with timed(timings, TIME_UPDATE):
                update = learner.update(batch, value_warmup=iteration < algo.value_warmup_iterations)
            rollouts.wait()
            state[OPTIMIZER_STEPS] += update.optimizer_steps
            state[SKIPPED_NONFINITE_UPDATES] += update.skipped_nonfinite_updates
            # 4. Log, evaluate, checkpoint, stop on a health warning named in train.stop_on.
            seconds = time.perf_counter() - iteration_started
            lag = iteration - sampled.policy_version if rollout.async_steps else None
            record = iteration_record(done, rollout_stats(rows, algo.dynamic_sampling), update, state, timings,
                                      seconds, session.elapsed(), lag)
            out_of_time = train_cfg.time_budget_minutes is not None and dist.max_scalar(
                state.get(TRAINING_SECONDS, 0.0) + time.perf_counter() - iteration_started
            ) >= 60 * train_cfg.time_budget_minutes
            last = done == train_cfg.iterations or out_of_time
            if train_cfg.eval_size > 0 and (last or (train_cfg.eval_every and done % train_cfg.eval_every == 0)):
                record[EVAL_ACCURACY] = session.evaluate(done)[EVAL_ACCURACY]
            record[HEALTH_WARNINGS] = health.observe(record)
            session.writer.metrics(record)
            if train_cfg.samples_every and done % train_cfg.samples_every == 0:
                session.writer.samples([{ITERATION: done, **s}
                                        for s in rows.samples[: train_cfg.samples_per_iteration]])
            state[TRAINING_SECONDS] = state.get(TRAINING_SECONDS, 0.0) + time.perf_counter() - iteration_started
            saved = last or done % train_cfg.save_every == 0
            if saved:
                session.save_checkpoint(done, optimizer, scheduler, {**state, **rollouts.checkpoint_state()})
            if done == start + 1:
                console.iteration_estimate(config, done, train_cfg.iterations, seconds)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(reward=f"{record[REWARD_MEAN]:.3f}", kl=f"{record.get(KL, 0.0):.4f}",
                                     s_per_it=f"{seconds:.1f}")
            stop_reason = health.stop_reason() or (
                f"train.time_budget_minutes={train_cfg.time_budget_minutes} spent after {done} of "
                f"{train_cfg.iterations} iterations" if out_of_time and done < train_cfg.iterations else None)
            if stop_reason is not None:
                if dist.is_main:
                    print(f"stopping: {stop_reason}")
                if not saved:
                    session.save_checkpoint(done, optimizer, scheduler, {**state, **rollouts.checkpoint_state()})
                break
        if progress is not None:
            progress.close()
    return session.run_dir


def iteration_record(done: int, stats: dict, update, state: dict, timings: dict[str, float], seconds: float,
                     elapsed: float, policy_lag: int | None) -> dict:
    """One line of metrics.jsonl, without the eval accuracy and the health warnings that follow: the rollout's
    statistics, the update's metrics and step counts, the stages' seconds, throughput and memory."""
    record = {
        ITERATION: done, **stats, **update.metrics,
        OPTIMIZER_STEPS: update.optimizer_steps, OPTIMIZER_STEPS_TOTAL: state[OPTIMIZER_STEPS],
        SKIPPED_NONFINITE_UPDATES: update.skipped_nonfinite_updates,
        SKIPPED_NONFINITE_UPDATES_TOTAL: state[SKIPPED_NONFINITE_UPDATES],
        **timings,
        TIME_ITERATION: seconds, TOKENS_PER_SECOND: stats[GENERATED_TOKENS] / seconds,
        ELAPSED_S: elapsed, UNIX_TIME: time.time(), PEAK_RSS_BYTES: peak_rss_bytes(),
    }
    if policy_lag is not None:  # rollout.async_steps=1
        record[POLICY_LAG] = policy_lag
    if torch.cuda.is_available():
        record[PEAK_CUDA_BYTES] = torch.cuda.max_memory_allocated()
    return record


def resume(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), force_config_change: bool = False) -> Path:
    """Continue the run in `run_dir` with its saved config (overrides may extend train.iterations)."""
    return train(load_run_config(run_dir, overrides), resume_dir=Path(run_dir), force_config_change=force_config_change)
