"""The allowed range of every numeric config value, in one table, checked when a config is loaded.

A value out of range fails with a message naming the key, the value and the range. Every range has
two finite ends and floats must be finite (a NaN learning rate or an infinite gradient-norm clip
would only surface later as NaN losses, a batch of 2**63 as an allocation of that size);
`tests/test_config.py` checks that every int and float field of `Config` has an entry here, so a
new field cannot skip the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Bounds:
    """low <= value <= high (an open end excludes its bound); NaN and infinity are always refused."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    note: str = ""  # why, or what a special value means

    def admits(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False  # an int is compared as it is: float(10**400) would overflow
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        low, high = _number(self.low), _number(self.high)
        return f"{kind} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def count(low: int, high: int, note: str = "") -> Bounds:
    return Bounds(low, high, note=note)


def above(low: float, high: float, note: str = "") -> Bounds:
    return Bounds(low, high, low_open=True, note=note)


# Upper ends: far above any run this library can make, low enough that a typo (2**63, 1e30) fails
# at load instead of as an allocation of that size or an overflow hours later.
MAX_TOKENS = 2**20  # a completion (or prompt) budget in tokens
MAX_PROMPTS = 2**16  # prompts or rows in one batch
MAX_GROUP = 2**12  # completions per prompt
MAX_STEPS = 10**7  # iterations, optimizer steps, epochs and intervals between them
MAX_WINDOW = 10**5  # iterations a health check looks back over
MAX_COEF = 1e4  # a loss weight or penalty coefficient
MAX_REWARD = 1e30  # float32 sums of rewards overflow near 3e38

PROBABILITY = Bounds(0.0, 1.0)  # a share or probability, ends included
BETA = Bounds(0.0, 1.0, high_open=True, note="Adam's moment decay; 1 would never forget")

# Keys are dotted config paths; `task.reward_weights` applies to each weight of the mapping.
FIELD_BOUNDS: dict[str, Bounds] = {
    "model.lora_rank": count(1, 4096),
    "model.lora_alpha": above(0, 65536, "the adapter's scale is lora_alpha / lora_rank"),
    "model.lora_dropout": Bounds(0.0, 1.0, high_open=True),
    "model.num_threads": count(0, 4096, "0 keeps torch's default"),
    "task.reward_weights": Bounds(-MAX_COEF, MAX_COEF),
    "task.max_abs_reward": above(0, MAX_REWARD, "a larger reward is counted as a verifier error"),
    "rollout.batch_size": count(1, MAX_PROMPTS),
    "rollout.group_size": count(1, MAX_GROUP),
    "rollout.max_new_tokens": count(1, MAX_TOKENS),
    "rollout.temperature": above(0, 100, "greedy decoding gives no group contrast"),
    "rollout.top_p": Bounds(0.0, 1.0, low_open=True),
    "rollout.top_k": count(0, 2**24, "0 disables"),
    "rollout.min_p": Bounds(0.0, 1.0, note="0 disables"),
    "rollout.tis_cap": Bounds(0.0, MAX_COEF, note="0 disables the correction"),
    "algorithm.ppo_epochs": count(1, 1000),
    "algorithm.clip_low": Bounds(0.0, 1.0, high_open=True, note="the ratio's lower clip is 1 - clip_low"),
    "algorithm.clip_high": Bounds(0, 100),
    "algorithm.kl_coef": Bounds(0, MAX_COEF, note="0 turns the KL term off"),
    "algorithm.advantage_clip": Bounds(0, 1e6, note="0 disables"),
    "algorithm.dynamic_sampling_max_rounds": count(1, 1000),
    "algorithm.overlong_buffer": count(0, MAX_TOKENS, "0 disables"),
    "algorithm.overlong_penalty": Bounds(0, MAX_COEF),
    "algorithm.entropy_coef": Bounds(0, MAX_COEF, note="0 logs entropy without optimising it"),
    "algorithm.gae_gamma": Bounds(0.0, 1.0),
    "algorithm.gae_lambda": Bounds(0.0, 1.0),
    "algorithm.value_clip": Bounds(0, 1e6, note="0 disables the value clip"),
    "algorithm.vf_coef": above(0, MAX_COEF, "the value model learns only through this weight"),
    "algorithm.kl_in_reward": Bounds(0, MAX_COEF, note="0 disables the KL penalty in the reward"),
    "algorithm.value_warmup_iterations": count(0, MAX_STEPS, "0: the policy learns from the first iteration"),
    "optim.lr": above(0, 10),
    "optim.weight_decay": Bounds(0, 100),
    "optim.beta1": BETA,
    "optim.beta2": BETA,
    "optim.eps": above(0, 1, "Adam divides by sqrt(v) + eps"),
    "optim.max_grad_norm": above(0, 1e9, "a norm above every real gradient's, e.g. 1e9, clips nothing"),
    "optim.warmup_steps": count(0, MAX_STEPS),
    "optim.minibatch_size": count(1, MAX_PROMPTS * MAX_GROUP),
    "optim.grad_accum_steps": count(1, MAX_PROMPTS * MAX_GROUP),
    "train.iterations": count(1, MAX_STEPS),
    "train.seed": count(0, 2**32 - 1),
    "train.eval_every": count(0, MAX_STEPS, "0 disables periodic eval"),
    "train.eval_size": count(0, 10**7, "0 disables eval"),
    "train.eval_max_new_tokens": count(1, MAX_TOKENS, "null: rollout.max_new_tokens"),
    "train.eval_temperature": Bounds(0, 100, note="0 decodes greedily"),
    "train.eval_top_p": Bounds(0.0, 1.0, low_open=True),
    "train.eval_batch_size": count(1, MAX_PROMPTS),
    "train.save_every": count(1, MAX_STEPS),
    "train.keep_checkpoints": count(1, 10**4, "the newest checkpoint is always kept"),
    "train.samples_every": count(0, MAX_STEPS, "0 disables samples.jsonl"),
    "train.samples_per_iteration": count(0, MAX_PROMPTS * MAX_GROUP),
    "train.stop_if_dead_for": count(0, MAX_STEPS, "0: never"),
    "train.stop_after": count(1, MAX_STEPS),
    "health.window": count(1, MAX_WINDOW),
    "health.truncation_frac": PROBABILITY,
    "health.zero_variance_frac": PROBABILITY,
    "health.clip_frac": PROBABILITY,
    "health.kl_window": count(2, MAX_WINDOW, "a rise needs two points"),
    "health.kl_max": Bounds(0, 1e6),
    "health.entropy_collapse_frac": PROBABILITY,
    "health.entropy_collapse_within": count(0, MAX_STEPS, "0: the whole run"),
    "health.distinct_completions_frac": PROBABILITY,
    "health.solved_frac": PROBABILITY,
    "health.divergence_window": count(2, MAX_WINDOW, "two halves of at least one iteration"),
    "health.divergence_reward_rise": Bounds(0, MAX_REWARD),
    "health.divergence_fall": Bounds(0, MAX_REWARD),
    "health.explained_variance_min": Bounds(-1e6, 1.0, note="explained variance is at most 1"),
    "health.explained_variance_window": count(1, MAX_WINDOW),
    "sft.max_examples": count(0, 10**9, "0 keeps every row"),
    "sft.epochs": count(1, MAX_STEPS),
    "sft.batch_size": count(1, MAX_PROMPTS),
    "sft.microbatch_size": count(1, MAX_PROMPTS),
    "sft.normalize_constant": above(0, 1e9),
    "sft.eval_every": count(0, MAX_STEPS, "0: evaluate only at the start and the end"),
    "sft.save_every": count(1, MAX_STEPS),
    "sft.log_generations": count(0, MAX_PROMPTS, "0 disables"),
    "expert_iteration.n_ei_steps": count(1, MAX_STEPS),
    "expert_iteration.questions_per_step": count(1, MAX_PROMPTS),
    "expert_iteration.samples_per_question": count(1, MAX_GROUP),
    "expert_iteration.min_new_tokens": count(0, MAX_TOKENS),
    "expert_iteration.sft_epochs": count(1, MAX_STEPS),
    "expert_iteration.min_reward": Bounds(-MAX_REWARD, MAX_REWARD),
}


def range_error(key: str, value: Any, bounds: Bounds) -> str | None:
    """The message for a value outside `bounds` (None when it is inside, or null)."""
    if value is None:
        return None  # null is allowed exactly where the field's type is Optional
    if not bounds.admits(value):
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
