"""Every metric name rlvr writes to metrics.jsonl and eval.jsonl, defined once.

Producers (the training loops, rollout statistics, the update, evaluation) and readers (health
warnings, `rlvr report`, `rlvr check`, progress lines) import these constants instead of
spelling the strings, so renaming a metric renames it everywhere at once and cannot silently
switch off a health check. `tests/observe/test_metric_names.py` checks that no other module spells one
of these names as a literal and that every name a reader uses is one a producer writes.
Families with a variable part (reward components, statuses, eval reward components) have a
prefix and a function that builds the full name.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- every record
ITERATION = "iteration"  # iterations (RL), optimizer steps (SFT) or rounds (expert iteration) done
ELAPSED_S = "elapsed_s"  # seconds since the command started
UNIX_TIME = "time/unix"
PEAK_RSS_BYTES = "peak_rss_bytes"
PEAK_CUDA_BYTES = "peak_cuda_bytes"

# ----------------------------------------------------------------------------- rollout batch
REWARD_PREFIX = "reward/"
REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
REWARD_MAX = "reward/max"
REWARD_SUMMARIES = (REWARD_MEAN, REWARD_STD, REWARD_MAX)  # the rest of reward/* are components
FRAC_NO_CONTRAST_GROUPS = "frac_no_contrast_groups"  # groups without reward contrast (rlvr.core.groups)
FRAC_NONZERO_ADVANTAGES = "frac_nonzero_advantages"
ADVANTAGE_ABS_MEAN = "advantage/abs_mean"
ADVANTAGE_STD = "advantage/std"  # sample std (n - 1) of the batch's advantages, as "GRPO in 20 lines" logs adv_std
UNSCORABLE = "unscorable"  # completions no weighted component could judge
TRUNCATED_FRAC = "truncated_frac"  # share of completions that hit max_new_tokens
COMPLETION_LEN_MEAN = "completion_len/mean"
COMPLETION_LEN_MAX = "completion_len/max"
CORRECT_FRAC = "correct_frac"
DISTINCT_COMPLETIONS_FRAC = "distinct_completions_frac"  # distinct texts per group / group size, mean over groups
NUM_SEQUENCES = "num_sequences"
GENERATED_TOKENS = "generated_tokens"
STATUS_PREFIX = "status/"
DYNAMIC_SAMPLING_ROUNDS = "dynamic_sampling/rounds"
DYNAMIC_SAMPLING_SAMPLED_GROUPS = "dynamic_sampling/sampled_groups"
DYNAMIC_SAMPLING_FILLED_NO_CONTRAST = "dynamic_sampling/filled_no_contrast"
# environment tasks (episodes): means per episode, and the share of episodes each limit cut short
EPISODE_TURNS = "episode/turns"  # assistant turns per episode
EPISODE_TOOL_CALLS = "episode/tool_calls"  # tool calls per episode, all tools
EPISODE_TOOL_ERRORS = "episode/tool_errors"  # failed tool calls per episode (malformed, unknown, timeout, raised)
EPISODE_ENV_TOKEN_FRAC = "episode/env_token_frac"  # environment tokens (loss mask 0) / all tokens after the prompt
EPISODE_TOOL_CALLS_PREFIX = "episode/tool_calls/"  # + tool name: that tool's calls per episode
EPISODE_TOOL_ERRORS_PREFIX = "episode/tool_errors/"  # + tool name: that tool's failed calls per episode
EPISODE_TRUNCATED_PREFIX = "episode/truncated/"  # + limit (max_turns, turn_tokens, episode_tokens): share cut by it
# a model judge (task judge:BASE), over the verdicts it gave; written only when a judge scored the batch
JUDGE_LATENCY = "judge/latency"  # mean seconds per request sent (retries and waits included; cache hits not counted)
JUDGE_RETRIES = "judge/retries"  # requests sent again after a failure or a 429/503, summed over the batch
JUDGE_CACHE_HIT_FRAC = "judge/cache_hit_frac"  # share of judged completions answered without a request of their own
JUDGE_UNPARSED_FRAC = "judge/unparsed_frac"  # share of judged completions whose reply held no strict score

# ----------------------------------------------------------------------------- update
POLICY_LOSS_PER_TOKEN = "policy_loss_per_token"
LOSS = "loss"
KL = "kl"
ENTROPY = "entropy"
ENTROPY_SELECTED_FRAC = "entropy/selected_frac"  # share of tokens with a policy loss (entropy_top_fraction)
CLIP_FRAC_LOW = "clip_frac/low"
CLIP_FRAC_HIGH = "clip_frac/high"
# the courses' clipfrac: share of tokens whose ratio left (1 - clip_low, 1 + clip_high), whichever branch the
# loss took (clip_frac/low and /high count only tokens where the clipped branch is the active one)
CLIP_FRAC_TRUST_REGION = "clip_frac/trust_region"
SURPRISAL = "surprisal"  # mean -log pi_old of the sampled tokens (the courses' "entropy"; `entropy` is the full one)
RATIO_MEAN = "ratio/mean"
POLICY_LOSS_PREFIX = "policy_loss/"  # a loss's own metrics (e.g. policy_loss/dual_clipped), token means
RATIO_FIRST_EPOCH_MAX_DEV = "ratio/first_epoch_max_dev"  # 0 when the first epoch is on-policy
GRAD_NORM = "grad_norm"  # before clipping
LR = "lr"
OPTIMIZER_STEPS = "optimizer_steps"
OPTIMIZER_STEPS_TOTAL = "optimizer_steps_total"
SKIPPED_NONFINITE_UPDATES = "skipped_nonfinite_updates"
SKIPPED_NONFINITE_UPDATES_TOTAL = "skipped_nonfinite_updates_total"
# a rollout backend that reports its own log-probs (vllm): their gap to the trainer's, and the correction's weights
SAMPLER_LOGPROB_ABS_DIFF_MEAN = "rollout/logprob_abs_diff_mean"  # mean |logp_sampler - logp_trainer| per token
SAMPLER_LOGPROB_ABS_DIFF_MAX = "rollout/logprob_abs_diff_max"  # its largest value over the batch
MISMATCH_KL = "rollout/mismatch_kl"  # k3 estimate of KL(pi_sampler || pi_trainer), token mean
# share of tokens with pi_trainer / pi_sampler outside [0.5, 2]
MISMATCH_RATIO_OUT_FRAC = "rollout/mismatch_ratio_out_frac"
# the rollout.correction weight (e.g. min(pi_trainer / pi_sampler, C)), token mean
IS_WEIGHT_MEAN = "rollout/is_weight_mean"
IS_CAPPED_FRAC = "rollout/is_capped_frac"  # share of tokens whose weight hit the cap C (tis_token, tis_sequence)
# share of tokens the correction dropped (weight 0: mask_token, mask_sequence)
IS_DROPPED_FRAC = "rollout/is_dropped_frac"
POLICY_LAG = "rollout/policy_lag"  # rollout.async_steps=1: updates between the weights that sampled the batch and these
# PPO's value model (algorithm.value_model shared or separate)
VALUE_LOSS_PER_TOKEN = "value/loss_per_token"  # 0.5 * the larger squared error, token mean over the epochs
VALUE_CLIP_FRAC = "value/clip_frac"  # share of tokens where the clipped value error is the larger one
VALUE_MEAN = "value/mean"  # the values at sampling time, token mean
RETURN_MEAN = "value/return_mean"  # the GAE returns (value targets), token mean
EXPLAINED_VARIANCE = "value/explained_variance"  # 1 - Var[R - V] / Var[R], values at sampling time
NLL_PER_TOKEN = "nll_per_token"  # SFT
RESPONSE_TOKENS = "response_tokens"  # SFT

# ----------------------------------------------------------------------------- time
TIME_PREFIX = "time/"
TIME_GENERATION = "time/generation"
TIME_SCORING = "time/scoring"
TIME_LOGPROBS = "time/logprobs"  # reference log-probs (only with a KL term)
TIME_VALUES = "time/values"  # the value model's pass over the rollout batch (PPO)
TIME_UPDATE = "time/update"
TIME_ITERATION = "time/iteration"
TIME_PARTS = (TIME_GENERATION, TIME_SCORING, TIME_LOGPROBS, TIME_VALUES, TIME_UPDATE)  # the rest is "other"
TOKENS_PER_SECOND = "tokens_per_second"

# ----------------------------------------------------------------------------- health
HEALTH_WARNINGS = "health/warnings"  # names of the warnings active at this iteration

# ----------------------------------------------------------------------------- SFT and expert iteration
EPOCH = "epoch"
DATA_SIZE = "data/size"
DATA_SIZE_BEFORE_FILTER = "data/size_before_filter"
QUESTIONS_SOLVED = "questions_solved"
QUESTIONS_SOLVED_FRAC = "questions_solved_frac"
DATASET_SIZE = "dataset_size"
SAMPLES = "samples"
ACCEPTED_FRAC = "accepted_frac"

# ----------------------------------------------------------------------------- evaluation (eval.jsonl)
EVAL_ACCURACY = "eval/accuracy"
EVAL_REWARD_MEAN = "eval/reward_mean"
EVAL_TRUNCATED_FRAC = "eval/truncated_frac"
EVAL_COMPLETION_LEN_MEAN = "eval/completion_len_mean"
EVAL_NUM_EXAMPLES = "eval/num_examples"
EVAL_SECONDS = "eval/seconds"
EVAL_REWARD_PREFIX = "eval/reward/"
EVAL_PREFIX = "eval/"  # + an episode/* name: the held-out episodes' turns, tool calls, errors, truncation
EVAL_ENTROPY = "eval/entropy"  # expert iteration: gen/entropy of the logged generations
EVAL_EXAMPLES = "examples"  # a few judged completions (not a number)
# train.eval_samples = n > 1 (sampled eval): eval/accuracy is mean@n; these are written only then
EVAL_SAMPLES_PER_PROMPT = "eval/samples_per_prompt"  # n
EVAL_PASS_AT_PREFIX = "eval/pass@"  # + k: unbiased pass@k, mean over prompts (rlvr.observe.sampled_accuracy)
EVAL_MEAN_AT_PREFIX = "eval/mean@"  # + n: each prompt's share of right samples, mean over prompts
EVAL_MAJ_AT_PREFIX = "eval/maj@"  # + n: share of prompts whose majority-voted answer is right (tasks with answers)
GEN_ACCURACY = "gen/accuracy"
GEN_REWARD_MEAN = "gen/reward_mean"
GEN_ENTROPY = "gen/entropy"
GEN_RESPONSE_LEN = "gen/response_len"
GEN_RESPONSE_LEN_CORRECT = "gen/response_len_correct"
GEN_RESPONSE_LEN_INCORRECT = "gen/response_len_incorrect"


def reward_component(component: str) -> str:
    """`reward/<component>`: the batch mean of one named reward component."""
    return REWARD_PREFIX + component


def status_count(status: str) -> str:
    """`status/<status>`: completions whose verdict had this status (unjudgeable, timeout, error)."""
    return STATUS_PREFIX + status


def eval_reward_component(component: str) -> str:
    """`eval/reward/<component>`: the eval mean of one named reward component."""
    return EVAL_REWARD_PREFIX + component


def eval_metric(name: str) -> str:
    """`eval/<name>`: a rollout metric (`episode/turns`, `episode/tool_calls`, ...) of the held-out episodes."""
    return EVAL_PREFIX + name


def eval_pass_at(k) -> str:
    """`eval/pass@<k>`: the sampled eval's unbiased pass@k, mean over prompts."""
    return EVAL_PASS_AT_PREFIX + str(k)


def eval_mean_at(samples) -> str:
    """`eval/mean@<n>`: the sampled eval's mean accuracy over its n samples per prompt (= eval/accuracy)."""
    return EVAL_MEAN_AT_PREFIX + str(samples)


def eval_maj_at(k) -> str:
    """`eval/maj@<k>`: the share of prompts whose majority vote over k samples is right."""
    return EVAL_MAJ_AT_PREFIX + str(k)


def policy_loss_metric(name: str) -> str:
    """policy_loss/<name>: a metric a policy loss returns beyond ratio and the clip flags (token mean)."""
    return POLICY_LOSS_PREFIX + name


def episode_tool_calls(tool: str) -> str:
    """episode/tool_calls/<tool>: calls of one tool per episode."""
    return EPISODE_TOOL_CALLS_PREFIX + tool


def episode_tool_errors(tool: str) -> str:
    """episode/tool_errors/<tool>: failed calls of one tool per episode."""
    return EPISODE_TOOL_ERRORS_PREFIX + tool


def episode_truncated(limit: str) -> str:
    """episode/truncated/<limit>: the share of episodes a limit (`TRUNCATION_LIMITS`) cut short."""
    return EPISODE_TRUNCATED_PREFIX + limit
