"""The allowed range of every numeric config value, in one table, checked when a config is loaded.

A value out of range fails with a message naming the key, the value and the range. Floats must be
finite wherever NaN or infinity means nothing (a NaN learning rate, temperature or KL coefficient
would only surface later as NaN losses); `tests/test_config.py` checks that every int and float
field of `Config` has an entry here, so a new field cannot skip the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Bounds:
    """low <= value <= high (an open end excludes its bound); floats finite unless `allow_inf`."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    allow_inf: bool = False  # only where infinity means "no limit"
    note: str = ""  # why, or what a special value means

    def admits(self, value: float) -> bool:
        if math.isnan(value) or (math.isinf(value) and not self.allow_inf):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else ("a number (inf allowed)" if self.allow_inf else "a finite number")
        low, high = _number(self.low), _number(self.high)
        if math.isfinite(self.low) and math.isfinite(self.high):
            return f"{kind} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if math.isfinite(self.low):
            return f"{kind} {'>' if self.low_open else '>='} {low}"
        if math.isfinite(self.high):
            return f"{kind} {'<' if self.high_open else '<='} {high}"
        return kind


def _number(value: float) -> str:
    return str(int(value)) if math.isfinite(value) and float(value).is_integer() else f"{value:g}"


def at_least(low: float, note: str = "") -> Bounds:
    return Bounds(low=low, note=note)


def above(low: float, note: str = "", allow_inf: bool = False) -> Bounds:
    return Bounds(low=low, low_open=True, note=note, allow_inf=allow_inf)


PROBABILITY = Bounds(0.0, 1.0)  # a share or probability, ends included
BETA = Bounds(0.0, 1.0, high_open=True, note="Adam's moment decay; 1 would never forget")
FINITE = Bounds()

# Keys are dotted config paths; `task.reward_weights` applies to each weight of the mapping.
FIELD_BOUNDS: dict[str, Bounds] = {
    "model.lora_rank": at_least(1),
    "model.lora_alpha": above(0, "the adapter's scale is lora_alpha / lora_rank"),
    "model.lora_dropout": Bounds(0.0, 1.0, high_open=True),
    "model.num_threads": at_least(0, "0 keeps torch's default"),
    "task.reward_weights": FINITE,
    "task.max_abs_reward": above(0, "a larger reward is counted as a verifier error"),
    "rollout.batch_size": at_least(1),
    "rollout.group_size": at_least(1),
    "rollout.max_new_tokens": at_least(1),
    "rollout.temperature": above(0, "greedy decoding gives no group contrast"),
    "rollout.top_p": Bounds(0.0, 1.0, low_open=True),
    "rollout.top_k": at_least(0, "0 disables"),
    "rollout.min_p": Bounds(0.0, 1.0, note="0 disables"),
    "algorithm.ppo_epochs": at_least(1),
    "algorithm.clip_low": Bounds(0.0, 1.0, high_open=True, note="the ratio's lower clip is 1 - clip_low"),
    "algorithm.clip_high": at_least(0),
    "algorithm.kl_coef": at_least(0, "0 turns the KL term off"),
    "algorithm.advantage_clip": at_least(0, "0 disables"),
    "algorithm.dynamic_sampling_max_rounds": at_least(1),
    "algorithm.overlong_buffer": at_least(0, "0 disables"),
    "algorithm.overlong_penalty": at_least(0),
    "algorithm.entropy_coef": at_least(0, "0 logs entropy without optimising it"),
    "algorithm.gae_gamma": Bounds(0.0, 1.0),
    "algorithm.gae_lambda": Bounds(0.0, 1.0),
    "algorithm.value_clip": at_least(0, "0 disables the value clip"),
    "algorithm.vf_coef": above(0, "the value model learns only through this weight"),
    "algorithm.kl_in_reward": at_least(0, "0 disables the KL penalty in the reward"),
    "algorithm.value_warmup_iterations": at_least(0, "0: the policy learns from the first iteration"),
    "optim.lr": above(0),
    "optim.weight_decay": at_least(0),
    "optim.beta1": BETA,
    "optim.beta2": BETA,
    "optim.eps": above(0, "Adam divides by sqrt(v) + eps"),
    "optim.max_grad_norm": above(0, "inf turns clipping off", allow_inf=True),
    "optim.warmup_steps": at_least(0),
    "optim.minibatch_size": at_least(1),
    "optim.grad_accum_steps": at_least(1),
    "train.iterations": at_least(1),
    "train.seed": Bounds(0, 2**32 - 1),
    "train.eval_every": at_least(0, "0 disables periodic eval"),
    "train.eval_size": at_least(0, "0 disables eval"),
    "train.eval_max_new_tokens": at_least(1, "null: rollout.max_new_tokens"),
    "train.eval_temperature": at_least(0, "0 decodes greedily"),
    "train.eval_top_p": Bounds(0.0, 1.0, low_open=True),
    "train.eval_batch_size": at_least(1),
    "train.save_every": at_least(1),
    "train.keep_checkpoints": at_least(1, "the newest checkpoint is always kept"),
    "train.samples_every": at_least(0, "0 disables samples.jsonl"),
    "train.samples_per_iteration": at_least(0),
    "train.stop_if_dead_for": at_least(0, "0: never"),
    "train.stop_after": at_least(1),
    "health.window": at_least(1),
    "health.truncation_frac": PROBABILITY,
    "health.zero_variance_frac": PROBABILITY,
    "health.clip_frac": PROBABILITY,
    "health.kl_window": at_least(2, "a rise needs two points"),
    "health.kl_max": at_least(0),
    "health.entropy_collapse_frac": PROBABILITY,
    "health.entropy_collapse_within": at_least(0, "0: the whole run"),
    "health.distinct_completions_frac": PROBABILITY,
    "health.solved_frac": PROBABILITY,
    "health.divergence_window": at_least(2, "two halves of at least one iteration"),
    "health.divergence_reward_rise": at_least(0),
    "health.divergence_fall": at_least(0),
    "health.explained_variance_min": Bounds(-math.inf, 1.0, note="explained variance is at most 1"),
    "health.explained_variance_window": at_least(1),
    "sft.max_examples": at_least(0, "0 keeps every row"),
    "sft.epochs": at_least(1),
    "sft.batch_size": at_least(1),
    "sft.microbatch_size": at_least(1),
    "sft.normalize_constant": above(0),
    "sft.eval_every": at_least(0, "0: evaluate only at the start and the end"),
    "sft.save_every": at_least(1),
    "sft.log_generations": at_least(0, "0 disables"),
    "expert_iteration.n_ei_steps": at_least(1),
    "expert_iteration.questions_per_step": at_least(1),
    "expert_iteration.samples_per_question": at_least(1),
    "expert_iteration.min_new_tokens": at_least(0),
    "expert_iteration.sft_epochs": at_least(1),
    "expert_iteration.min_reward": FINITE,
}


def range_error(key: str, value: Any, bounds: Bounds) -> str | None:
    """The message for a value outside `bounds` (None when it is inside, or null)."""
    if value is None:
        return None  # null is allowed exactly where the field's type is Optional
    if not bounds.admits(float(value)):
        note = f" ({bounds.note})" if bounds.note else ""
        return f"{key} must be {bounds.describe(isinstance(value, int))}, got {value!r}{note}"
    return None


def first_range_error(config: Any) -> str | None:
    """The message for the first value of `config` outside its range (in table order), or None."""
    for key, bounds in FIELD_BOUNDS.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for entry, item in items:
            message = range_error(key if entry is None else f"{key}.{entry}", item, bounds)
            if message:
                return message
    return None
