"""Algorithm presets: each algorithm is data, a partial setting of the `algorithm.*` config keys.

A preset names only the keys it sets (estimator, loss, aggregation, epochs, clip, KL, value model);
every other key keeps its default (`rlvr/config/schema.py`), and a key set in a config file or an
override beats the preset. A key the algorithm section lacks is an error when the preset is used.
`rlvr algorithms` prints this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.registry import Registry


@dataclass(frozen=True)
class AlgorithmPreset:
    """One line of description and the `algorithm.*` keys (without the prefix) the preset sets."""

    description: str
    settings: dict[str, Any] = field(default_factory=dict)


ALGORITHMS: Registry[AlgorithmPreset] = Registry("algorithm")


def _preset(name: str, description: str, **settings: Any) -> None:
    ALGORITHMS.add(name, AlgorithmPreset(description, settings))


# GRPO (DeepSeekMath): group-std advantages, PPO clip against the sampling policy, sequence-mean
# aggregation, several passes over each rollout batch. The paper adds a k3 KL to the reference at
# 0.04; here it is off (the config default, as TRL's beta): its reference pass costs about 10% of a
# CPU step and format_copy learns faster without it. `algorithm.kl_coef=0.04` restores it.
_preset(
    "grpo",
    advantage_estimator="grpo", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="GRPO: group z-scored advantages, clipped ratio, 2 epochs, no KL (kl_coef=0.04: DeepSeekMath's k3)",
)
# GR-REINFORCE: one on-policy pass, group-mean baseline, no importance ratio (so no clipping).
_preset(
    "gr_reinforce",
    advantage_estimator="mean_centered", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.04,
    description="group-mean baseline REINFORCE, one on-policy pass, k3 KL",
)
# RLOO: leave-one-out baseline, one on-policy pass.
_preset(
    "rloo",
    advantage_estimator="rloo", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE leave-one-out baseline, one on-policy pass",
)
# Dr. GRPO: no std scaling and a constant token-sum normaliser remove GRPO's length and
# difficulty biases; no KL.
_preset(
    "dr_grpo",
    advantage_estimator="mean_centered", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_sum_norm",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="Dr. GRPO: mean-centred advantages, token sum / max_new_tokens, no KL",
)
# DAPO: clip-higher (0.2 / 0.28), token-mean, dynamic sampling, soft overlong penalty, no KL.
_preset(
    "dapo",
    advantage_estimator="grpo", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.28, kl_coef=0.0,
    dynamic_sampling=True, overlong_buffer=4, overlong_penalty=1.0,
    description="DAPO: clip-higher, token-mean, dynamic sampling, overlong penalty",
)
# GSPO: sequence-level (geometric-mean) importance ratio with its much tighter clip range.
_preset(
    "gspo",
    advantage_estimator="grpo", policy_loss="gspo", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=3e-4, clip_high=4e-4, kl_coef=0.0,
    description="GSPO: sequence-level ratio, clip 3e-4 / 4e-4",
)
# CS336 assignment 5 loss types.
_preset(
    "no_baseline",
    advantage_estimator="no_baseline", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="REINFORCE on raw rewards (CS336 no_baseline)",
)
_preset(
    "reinforce_with_baseline",
    advantage_estimator="grpo", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="REINFORCE on group-normalised rewards (CS336 reinforce_with_baseline)",
)
# PPO with a learned value (Schulman et al. 2017; InstructGPT-style per-token rewards): GAE with
# gamma 1 (one reward, at the end) and lambda 0.95, whitened over the batch's tokens; the clipped
# surrogate and a clipped value loss (range 0.2) over token_mean, as verl's default PPO; 2 epochs as
# GRPO. The value head shares the policy's LoRA backbone, and vf_coef 0.1 (TRL's PPO default) keeps
# the value loss from steering that shared adapter more than the policy loss does. No KL by default
# (set algorithm.kl_in_reward, e.g. 0.05, for the penalty in the reward); group size 1 is enough.
_preset(
    "ppo",
    advantage_estimator="gae", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0, normalize_advantages=True,
    value_model="shared", gae_gamma=1.0, gae_lambda=0.95, value_clip=0.2, vf_coef=0.1,
    description="PPO: GAE on a learned value head (shared backbone), clipped value loss, token-mean, 2 epochs",
)
# CISPO (MiniMax-M1): the clipped importance weight is a constant factor of a REINFORCE term, so
# clipped tokens keep their gradient; no lower clip (clip_low 1) and the weight capped at 5 (ScaleRL's
# epsilon_max, TRL's recommended epsilon_high), token-mean as in TRL and verl.
_preset(
    "cispo",
    advantage_estimator="grpo", policy_loss="cispo", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=1.0, clip_high=4.0, kl_coef=0.0,
    description="CISPO: clip the importance weight (detached, at most 5), not the update; token-mean",
)
# SAPO (Qwen): a sigmoid gate of the ratio replaces the hard clip; the gate fades faster for
# negative advantages (tau_neg 1.05 > tau_pos 1.0); sequence-mean as in the paper.
_preset(
    "sapo",
    advantage_estimator="grpo", policy_loss="sapo", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0, tau_pos=1.0, tau_neg=1.05,
    description="SAPO: smooth sigmoid gate of the ratio instead of the clip (tau 1.0 / 1.05)",
)
# GMPO: the geometric mean of the token ratios, each clipped in log space to [-0.4, 0.4].
_preset(
    "gmpo",
    advantage_estimator="grpo", policy_loss="geo_mean", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.4, clip_high=0.4, kl_coef=0.0,
    description="GMPO: geometric mean of token ratios, log-space clip 0.4, sequence mean",
)
# GPG: REINFORCE on group-mean advantages scaled by N / (non-zero rewards), one on-policy pass.
_preset(
    "gpg",
    advantage_estimator="gpg", policy_loss="gpg", loss_aggregation="token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="GPG: -A log pi with A = alpha (r - group mean), no ratio, no KL, one pass",
)
# Clip-Cov and KL-Cov (the entropy mechanism of RL): damp the few tokens whose log-prob and
# advantage covary most, which is where entropy collapses.
_preset(
    "clip_cov",
    advantage_estimator="grpo", policy_loss="clip_cov", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="Clip-Cov: PPO clip plus detaching a random 2e-4 of tokens with covariance in (1, 5)",
)
_preset(
    "kl_cov",
    advantage_estimator="grpo", policy_loss="kl_cov", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="KL-Cov: no clip; a 0.1 * abs(log ratio) penalty on the top 2e-4 covariance tokens",
)
# Dual-clip PPO: GRPO whose loss for A < 0 is capped at -A * 3, so a huge ratio on a bad
# completion cannot dominate the step.
_preset(
    "dual_clip",
    advantage_estimator="grpo", policy_loss="dual_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.04, clip_ratio_c=3.0,
    description="GRPO with dual clip: the loss of a negative advantage is at most -A * 3",
)
# REINFORCE++: no group baseline; the reward whitened over the batch's tokens, PPO clip.
_preset(
    "reinforce_plus_plus",
    advantage_estimator="reinforce_plus_plus", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE++: batch token-whitened reward, no group baseline, PPO clip, token-mean",
)
_preset(
    "reinforce_plus_plus_baseline",
    advantage_estimator="reinforce_plus_plus_baseline", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE++-baseline: group-mean baseline, then batch token whitening, PPO clip",
)
# ReMax: the baseline is the reward of one greedy completion per prompt (decoded and scored by the
# loop each iteration), REINFORCE, one on-policy pass.
_preset(
    "remax",
    advantage_estimator="remax", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="ReMax: reward minus the greedy completion's reward, REINFORCE, one pass",
)
# OPO: exactly on-policy (one pass), baseline = the length-weighted group mean, the variance-optimal
# one when a sequence's gradient is the sum of its tokens' (hence the token-sum aggregation).
_preset(
    "opo",
    advantage_estimator="opo", policy_loss="reinforce", loss_aggregation="seq_mean_token_sum_norm",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="OPO: length-weighted group-mean baseline, strictly on-policy, token sum",
)
# Pass@k training: only each group's single best completion is pushed up, by its margin over the
# runner-up in group-std units (sample std, as verl).
_preset(
    "grpo_passk",
    advantage_estimator="grpo_passk", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="GRPO pass@k: only the best of each group, (r_max - r_2nd) / std, counts",
)
