"""Refuse, before the model loads, a run whose estimated peak memory is above what the device has free.

The estimate is `rlvr.models.memory_estimate` on the model's shape (its config or GGUF header,
`rlvr.models.architecture`) and the run's sizes; a prompt is counted as one token per
CHARS_PER_TOKEN characters of its text (subword tokenizers average about 4 on English; 3 leaves room
for digits, code and a chat template's few tokens). One token per character over-counted a
reasoning prompt's activations about fourfold and refused runs that fit.
`train.memory_check=false` skips it. `MEMORY_RUNS` gives each command's sizes to the one estimator:
RL (rollout, eval, update), SFT (`sft.microbatch_size` on its data's longest pair), expert
iteration (Q x G samples, then SFT steps on them) and `rlvr eval` (weights and generation only).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from rlvr.config import Config, ConfigError
from rlvr.models import DTYPES
from rlvr.models.architecture import Architecture, read_architecture
from rlvr.models.memory_estimate import MemoryEstimate, RunSizes, estimate_memory, format_bytes, parameter_count
from rlvr.models.checkpoints.locate import base_model_spec
from rlvr.registry import Registry
from rlvr.tasks import Task
from rlvr.tasks.task import prompt_text
from rlvr.run.sft_data import read_pairs
from rlvr.utils import rng_state, set_rng_state

# The keys that shrink each part of the estimate.
PART_KEYS = {
    "weights": "model.name, model.dtype",
    "reference model": "model.lora=true, algorithm.kl_coef=0 and algorithm.kl_in_reward=0",
    "value model": "algorithm.value_model=shared",
    "gradients and optimizer state": "model.lora=true, model.lora_rank",
    "KV cache": "rollout.batch_size, rollout.group_size, rollout.max_new_tokens, train.eval_batch_size, "
                "train.eval_max_new_tokens",
    "activations": "optim.minibatch_size (or optim.grad_accum_steps, or optim.microbatch_tokens), "
                   "rollout.max_new_tokens, model.gradient_checkpointing=true",
    "logits chunks": "optim.minibatch_size (or optim.grad_accum_steps)",
}


def available_memory(device: str) -> Optional[int]:
    """Bytes free for a run on `device`: CUDA's free memory, or the system's available memory; None if unknown."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0] if torch.cuda.is_available() else None
    if device != "cpu":
        return None
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


CHARS_PER_TOKEN = 3


def longest_prompt_tokens(task: Task, config: Config) -> int:
    """Tokens of the longest prompt among a rollout batch's worth of training and eval examples, counted
    as its characters / CHARS_PER_TOKEN, rounded up.

    The global random states are restored after: a task may draw its examples from them, and the run
    must sample what it would have without this look.
    """
    states = rng_state()
    try:
        examples = task.examples("eval", config.rollout.batch_size, config.train.seed)
        try:
            examples = examples + task.examples("train", config.rollout.batch_size, config.train.seed)
        except ValueError:  # no training problems: an eval-only task (the training loop says so when it starts)
            pass
    finally:
        set_rng_state(states)
    longest = max((len(prompt_text(example.prompt)) for example in examples), default=0)
    return -(-longest // CHARS_PER_TOKEN)


def longest_pair_tokens(config: Config) -> int:
    """Tokens of `sft.data_path`'s longest prompt + response (as many rows as the run uses), counted as
    characters / CHARS_PER_TOKEN, rounded up."""
    longest = max((len(str(p["prompt"])) + len(str(p["response"])) for p in read_pairs(config)), default=0)
    return -(-longest // CHARS_PER_TOKEN)


def _shared_sizes(config: Config, prompt_tokens: int) -> dict:
    """The sizes every command shares: the weights' dtype, the eval batch, LoRA, checkpointing."""
    t, m = config.train, config.model
    eval_new_tokens = t.eval_max_new_tokens if t.eval_max_new_tokens is not None else config.rollout.max_new_tokens
    return dict(dtype_bytes=torch.empty((), dtype=DTYPES[m.dtype]).element_size(),
                eval_rows=min(t.eval_batch_size, t.eval_size), eval_tokens=prompt_tokens + eval_new_tokens,
                lora_rank=m.lora_rank if m.lora else 0, lora_targets=tuple(m.lora_target_modules),
                gradient_checkpointing=m.gradient_checkpointing)


@dataclass(frozen=True)
class MemoryRun:
    """One command's sizes for the estimate, and the keys that shrink a part where they differ from RL's."""

    sizes: Callable[[Config, int], RunSizes]  # (config, longest prompt in tokens) -> sizes
    part_keys: dict[str, str]


MEMORY_RUNS: Registry[MemoryRun] = Registry("memory estimate run")
EVAL_KV_KEYS = "train.eval_batch_size, train.eval_max_new_tokens"


def run_sizes(config: Config, prompt_tokens: int) -> RunSizes:
    """`rlvr train`: B x G rollouts, updates of `optim.minibatch_size` of them, a reference and a value model."""
    r = config.rollout
    return RunSizes(
        rollout_rows=config.rollout_size, rollout_tokens=prompt_tokens + r.max_new_tokens,
        microbatch_rows=update_microbatch_rows(config, prompt_tokens + r.max_new_tokens),
        reference=config.algorithm.kl_coef > 0 or config.algorithm.kl_in_reward > 0 or config.algorithm.log_kl,
        value_model=config.algorithm.value_model, **_shared_sizes(config, prompt_tokens),
    )


def update_microbatch_rows(config: Config, full_width: int) -> int:
    """Rows of the update's largest microbatch at full width: `optim.minibatch_size`, or with
    `optim.microbatch_tokens` as many as the budget holds at that width (whole groups, at least one)."""
    budget = config.optim.microbatch_tokens
    if budget is None:
        return config.optim.minibatch_size
    group = 1 if config.model.gradient_checkpointing else config.rollout.group_size  # the packed unit
    groups = max(1, budget // (group * max(full_width, 1)))
    return min(groups * group, config.rollout_size)


def sft_sizes(config: Config, prompt_tokens: int) -> RunSizes:
    """`rlvr sft`: no rollout; `sft.microbatch_size` pairs a pass, each as long as the data's longest."""
    return RunSizes(rollout_rows=0, rollout_tokens=0, microbatch_rows=config.sft.microbatch_size,
                    update_tokens=longest_pair_tokens(config), **_shared_sizes(config, prompt_tokens))


def expert_iteration_sizes(config: Config, prompt_tokens: int) -> RunSizes:
    """`rlvr expert-iter`: Q x G samples generated together, then SFT steps on the accepted ones."""
    ei = config.expert_iteration
    return RunSizes(rollout_rows=ei.questions_per_step * ei.samples_per_question,
                    rollout_tokens=prompt_tokens + config.rollout.max_new_tokens,
                    microbatch_rows=config.sft.microbatch_size, **_shared_sizes(config, prompt_tokens))


def eval_sizes(config: Config, prompt_tokens: int) -> RunSizes:
    """`rlvr eval`: the weights and the eval batch's generation; nothing is trained."""
    shared = {**_shared_sizes(config, prompt_tokens), "lora_rank": 0}  # a run's adapter is merged or small
    return RunSizes(rollout_rows=0, rollout_tokens=0, microbatch_rows=0, training=False, **shared)


MEMORY_RUNS.add("rl", MemoryRun(run_sizes, {}))
MEMORY_RUNS.add("sft", MemoryRun(sft_sizes, {
    "KV cache": EVAL_KV_KEYS,
    "activations": "sft.microbatch_size, sft.max_examples (its longest pair), model.gradient_checkpointing=true",
    "logits chunks": "sft.microbatch_size"}))
MEMORY_RUNS.add("expert_iteration", MemoryRun(expert_iteration_sizes, {
    "KV cache": "expert_iteration.questions_per_step, expert_iteration.samples_per_question, "
                f"rollout.max_new_tokens, {EVAL_KV_KEYS}",
    "activations": "sft.microbatch_size, rollout.max_new_tokens, model.gradient_checkpointing=true",
    "logits chunks": "sft.microbatch_size"}))
MEMORY_RUNS.add("eval", MemoryRun(eval_sizes, {"KV cache": EVAL_KV_KEYS}))


def memory_refusal(estimate: MemoryEstimate, available: int, arch: Architecture, config: Config,
                   run: str = "rl") -> str:
    """The error for an estimate above `available`: every part by size, with the keys that shrink it."""
    keys = {**PART_KEYS, **MEMORY_RUNS.get(run).part_keys}
    parts = sorted(((name, size) for name, size in estimate.parts.items() if size > 0), key=lambda p: -p[1])
    listed = "; ".join(f"{name} {format_bytes(size)} ({keys[name]})" for name, size in parts)
    return (f"train.memory_check: the run needs about {format_bytes(estimate.peak)} at its peak but "
            f"{config.model.device} has {format_bytes(available)} available (model.name={config.model.name}, "
            f"{parameter_count(arch) / 1e6:.1f}M parameters). By part, with the keys that make it smaller: {listed}. "
            f"Generation (KV cache {format_bytes(estimate.generation)}) and the update (activations and logits "
            f"{format_bytes(estimate.update)}) do not overlap: the larger counts. Lower those sizes, or set "
            "train.memory_check=false to start anyway")


def check_memory(config: Config, task: Task, run: str = "rl") -> Optional[MemoryEstimate]:
    """Raise ConfigError when the estimated peak of `run` (a `MEMORY_RUNS` name: rl, sft, expert_iteration,
    eval) is above the available memory; the estimate, or None if skipped."""
    memory_run = MEMORY_RUNS.get(run)
    if not config.train.memory_check:
        return None
    arch = read_architecture(base_model_spec(config.model.name))  # `rlvr eval` may name a run folder
    available = available_memory(config.model.device)
    if arch is None or available is None:
        unknown = "the model's shape (not a Llama-style config)" if arch is None else \
            f"the memory available on {config.model.device}"
        print(f"note: train.memory_check skipped: {unknown} is unknown", file=sys.stderr)
        return None
    estimate = estimate_memory(arch, memory_run.sizes(config, longest_prompt_tokens(task, config)))
    if estimate.peak > available:
        raise ConfigError(memory_refusal(estimate, available, arch, config, run))
    return estimate
