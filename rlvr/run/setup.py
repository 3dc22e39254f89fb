"""What a command builds from its config before the model loads, and then the model itself.

`prepare_task` makes every check that needs no model: the task with its options and data (built
and seeded), the held-out examples an eval needs, and the model source (named, installed, in the
cache: nothing is loaded or converted), and, for a training run or `rlvr eval`, that its estimated
peak memory fits (`rlvr.run.memory_check`, on that command's sizes), with a warning where a bf16 or fp16
setting would multiply slowly on this CPU (`rlvr.run.speed_check`). `rlvr train`, `sft`, `expert-iter`, `check`,
`sweep` and `eval` call it before they create any folder, so a bad config, task, data file or model name fails
with a message that names it, and leaves nothing behind (the checks that need no torch live in
`rlvr.run.preflight`, which the command line runs before torch is imported). `load_run_model` then loads
the policy (and `set_up_value_model` PPO's value model) and `rollout_backend` sets up sampling on it.
"""

from __future__ import annotations

from typing import Optional

import torch

from rlvr.config import Config
from rlvr.models import LoadedModel, LoraSettings, load_policy
from rlvr.models.checkpoints.run_policy import merged_model_from_run
from rlvr.models.value_model import ValueModel, build_value_model
from rlvr.rollout import ROLLOUT_BACKENDS, RolloutBackend
from rlvr.run.memory_check import check_memory
from rlvr.run.preflight import check_init_from, check_model_source
from rlvr.run.speed_check import check_product_speed
from rlvr.tasks import Task, build_task
from rlvr.utils import seed_everything


def expect_config(config) -> None:
    """A TypeError that says how to build a config, for a dict or a path passed where a `Config` belongs."""
    if not isinstance(config, Config):
        raise TypeError(f"expected a Config (Config(...), Config.from_dict(data) or load_config(path)), got "
                        f"{type(config).__name__}")


def check_held_out(task: Task, config: Config) -> None:
    """With train.eval_size > 0 the task must have held-out examples: evaluating on none is an error."""
    if config.train.eval_size > 0 and not task.examples("eval", 1, config.train.seed):
        raise ValueError(f"task {config.task.name!r} has no held-out examples but train.eval_size="
                         f"{config.train.eval_size}: give the task eval data (e.g. task.options.eval_path, or "
                         "task.options.eval_size > 0) or set train.eval_size=0 to train without evaluation")


def prepare_task(config: Config, *, inference: bool = False, run: Optional[str] = None) -> Task:
    """Every check before the model loads, then the task, built with the run's seed set.

    `inference`: `model.name` may also be a run or checkpoint folder (`rlvr eval`). `run`: whose sizes
    the memory estimate takes (`rlvr.run.memory_check.MEMORY_RUNS`); by default `rl`, and none
    with `inference` (`rlvr check --reward` loads no model; `rlvr eval` passes `eval`).
    """
    expect_config(config)
    if config.model.num_threads > 0:
        torch.set_num_threads(config.model.num_threads)
    seed_everything(config.train.seed)
    task = build_task(config.task.name, reward_weights=config.task.reward_weights, options=config.task.options,
                      use_chat_template=config.task.use_chat_template, seed=config.train.seed,
                      max_abs_reward=config.task.max_abs_reward)
    check_held_out(task, config)
    check_model_source(config, inference=inference)
    check_init_from(config)
    run = run if run is not None else (None if inference else "rl")
    if run is not None:
        check_memory(config, task, run)
    check_product_speed(config)
    return task


def load_run_model(config: Config, *, need_reference: bool) -> LoadedModel:
    """The policy: LoRA or full weights, a frozen reference copy only when asked; with `model.init_from`,
    on another run's trained weights (merged), which are then the reference policy too."""
    lora = None
    if config.model.lora:
        lora = LoraSettings(rank=config.model.lora_rank, alpha=config.model.lora_alpha,
                            dropout=config.model.lora_dropout, target_modules=tuple(config.model.lora_target_modules))
    initial = None
    if config.model.init_from:
        initial = merged_model_from_run(config.model.init_from, dtype=config.model.dtype, device=config.model.device)
    return load_policy(
        config.model.name, dtype=config.model.dtype, device=config.model.device, lora=lora,
        gradient_checkpointing=config.model.gradient_checkpointing, need_reference=need_reference,
        memory_kernels=config.model.memory_kernels, fused_lora=config.model.fused_lora,
        base_product_dtype=config.model.base_product_dtype, initial_model=initial,
    )


def set_up_value_model(config: Config, loaded: LoadedModel) -> ValueModel:
    """PPO's value model (`algorithm.value_model`): a head on the policy, or a second copy of the model set
    up as the policy is (its own LoRA adapter or all weights, from `model.init_from` too) with the head."""
    return build_value_model(config.algorithm.value_model, loaded,
                             load_separate=lambda: load_run_model(config, need_reference=False))


def load_model_and_task(config: Config, *, need_reference: bool) -> tuple[LoadedModel, Task]:
    """The task (every check first) and then the policy, seeded: what `rlvr check` runs on."""
    task = prepare_task(config)
    return load_run_model(config, need_reference=need_reference), task


def rollout_backend(config: Config, loaded: LoadedModel) -> RolloutBackend:
    """The configured rollout backend (`rollout.backend`, with `rollout.backend_options`), set up on the loaded
    policy."""
    return ROLLOUT_BACKENDS.get(config.rollout.backend).build(loaded, config.rollout)
