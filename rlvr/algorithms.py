"""Algorithm presets: each algorithm is data, a partial setting of the `algorithm.*` config keys.

A preset names only the keys it sets (estimator, loss, aggregation, epochs, clip, KL, value model);
every other key keeps its default (`rlvr/config/schema.py`), and a key set in a config file or an
override beats the preset. A key the algorithm section lacks is an error when the preset is used.
`rlvr algorithms` prints this table; the README's and the docs' preset tables are rendered from it
(`rlvr.algorithm_tables`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.registry import Registry


@dataclass(frozen=True)
class AlgorithmPreset:
    """One line of description, the `algorithm.*` keys (without the prefix) the preset sets, and for the
    generated tables (`rlvr.algorithm_tables`) the paper it follows and when to reach for it."""

    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    paper: str = ""
    use_when: str = ""


ALGORITHMS: Registry[AlgorithmPreset] = Registry("algorithm")


def _preset(name: str, description: str, *, paper: str = "", use_when: str = "", **settings: Any) -> None:
    ALGORITHMS.add(name, AlgorithmPreset(description, settings, paper, use_when))


# GRPO (DeepSeekMath): group-std advantages, PPO clip against the sampling policy, sequence-mean
# aggregation, several passes over each rollout batch. The paper adds a k3 KL to the reference at
# 0.04; here it is off (the config default, as TRL's beta): its reference pass costs about 10% of a
# CPU step and format_copy learns faster without it. `algorithm.kl_coef=0.04` restores it.
_preset(
    "grpo",
    advantage_estimator="grpo", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="GRPO: group z-scored advantages, clipped ratio, 2 epochs, no KL (kl_coef=0.04: DeepSeekMath's k3)",
    paper="DeepSeekMath, arXiv 2402.03300",
    use_when="the default: outcome rewards, groups of 2 or more",
)
# GR-REINFORCE: one on-policy pass, group-mean baseline, no importance ratio (so no clipping).
_preset(
    "gr_reinforce",
    advantage_estimator="mean_centered", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.04,
    description="group-mean baseline REINFORCE, one on-policy pass, k3 KL",
    paper="the GRPO homework's GR-REINFORCE",
    use_when="one cheap on-policy pass per batch instead of GRPO's two",
)
# RLOO: leave-one-out baseline, one on-policy pass.
_preset(
    "rloo",
    advantage_estimator="rloo", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE leave-one-out baseline, one on-policy pass",
    paper="Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740",
    use_when="one on-policy pass with a baseline free of the sample itself",
)
# Dr. GRPO: no std scaling and a constant token-sum normaliser remove GRPO's length and
# difficulty biases; no KL.
_preset(
    "dr_grpo",
    advantage_estimator="mean_centered", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_sum_norm",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="Dr. GRPO: mean-centred advantages, token sum / max_new_tokens, no KL",
    paper="Dr. GRPO, arXiv 2503.20783",
    use_when="completions of very different lengths: no length or difficulty bias",
)
# DAPO: clip-higher (0.2 / 0.28), token-mean, dynamic sampling, soft overlong penalty, no KL.
_preset(
    "dapo",
    advantage_estimator="grpo", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.28, kl_coef=0.0,
    dynamic_sampling=True, overlong_buffer=4, overlong_penalty=1.0,
    description="DAPO: clip-higher, token-mean, dynamic sampling, overlong penalty",
    paper="DAPO, arXiv 2503.14476",
    use_when="many groups without contrast (all right or all wrong), long or truncated completions",
)
# GSPO: sequence-level (geometric-mean) importance ratio with its much tighter clip range.
_preset(
    "gspo",
    advantage_estimator="grpo", policy_loss="gspo", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=3e-4, clip_high=4e-4, kl_coef=0.0,
    description="GSPO: sequence-level ratio, clip 3e-4 / 4e-4",
    paper="GSPO, arXiv 2507.18071",
    use_when="sequence-level rewards where single token ratios are noisy",
)
# CS336 assignment 5 loss types.
_preset(
    "no_baseline",
    advantage_estimator="no_baseline", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="REINFORCE on raw rewards (CS336 no_baseline)",
    paper="Williams 1992; CS336 assignment 5",
    use_when="the plain policy gradient, as a reference point",
)
_preset(
    "reinforce_with_baseline",
    advantage_estimator="grpo", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="REINFORCE on group-normalised rewards (CS336 reinforce_with_baseline)",
    paper="CS336 assignment 5",
    use_when="CS336's comparison of baselines",
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
    paper="Schulman et al. 2017, arXiv 1707.06347",
    use_when="group size 1, or per-token credit from a learned value",
)
# CISPO (MiniMax-M1): the clipped importance weight is a constant factor of a REINFORCE term, so
# clipped tokens keep their gradient; no lower clip (clip_low 1) and the weight capped at 5 (ScaleRL's
# epsilon_max, TRL's recommended epsilon_high), token-mean as in TRL and verl.
_preset(
    "cispo",
    advantage_estimator="grpo", policy_loss="cispo", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=1.0, clip_high=4.0, kl_coef=0.0,
    description="CISPO: the clipped ratio (at most 5) weighs -A log pi, detached: clipped tokens keep a gradient",
    paper="MiniMax-M1, arXiv 2506.13585",
    use_when="several epochs per batch where PPO's clip would silence rare, decisive tokens",
)
# SAPO (Qwen): a sigmoid gate of the ratio replaces the hard clip; the gate fades faster for
# negative advantages (tau_neg 1.05 > tau_pos 1.0); sequence-mean as in the paper.
_preset(
    "sapo",
    advantage_estimator="grpo", policy_loss="sapo", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0, tau_pos=1.0, tau_neg=1.05,
    description="SAPO: smooth sigmoid gate of the ratio instead of the clip (tau 1.0 / 1.05)",
    paper="SAPO, arXiv 2511.20347",
    use_when="off-policy epochs without the clip's cliff",
)
# GMPO: the geometric mean of the token ratios, each clipped in log space to [-0.4, 0.4].
_preset(
    "gmpo",
    advantage_estimator="grpo", policy_loss="geo_mean", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.4, clip_high=0.4, kl_coef=0.0,
    description="GMPO: geometric mean of token ratios, log-space clip 0.4, sequence mean",
    paper="GMPO, arXiv 2507.20673",
    use_when="long completions where a few extreme token ratios destabilise GRPO",
)
# GPG: REINFORCE on group-mean advantages scaled by N / (non-zero rewards), one on-policy pass.
_preset(
    "gpg",
    advantage_estimator="gpg", policy_loss="gpg", loss_aggregation="token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="GPG: -A log pi with A = alpha (r - group mean), no ratio, no KL, one pass",
    paper="GPG, arXiv 2504.02546",
    use_when="the simplest strictly on-policy baseline",
)
# Clip-Cov and KL-Cov (the entropy mechanism of RL): damp the few tokens whose log-prob and
# advantage covary most, which is where entropy collapses.
_preset(
    "clip_cov",
    advantage_estimator="grpo", policy_loss="clip_cov", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="Clip-Cov: PPO clip plus detaching a random 2e-4 of tokens with covariance in (1, 5)",
    paper="Entropy mechanism, arXiv 2505.22617",
    use_when="entropy collapses early",
)
_preset(
    "kl_cov",
    advantage_estimator="grpo", policy_loss="kl_cov", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="KL-Cov: no clip; a 0.1 * abs(log ratio) penalty on the top 2e-4 covariance tokens",
    paper="Entropy mechanism, arXiv 2505.22617",
    use_when="entropy collapse, a deterministic alternative to clip_cov",
)
# Dual-clip PPO: GRPO whose loss for A < 0 is capped at -A * 3, so a huge ratio on a bad
# completion cannot dominate the step.
_preset(
    "dual_clip",
    advantage_estimator="grpo", policy_loss="dual_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.04, clip_ratio_c=3.0,
    description="GRPO with dual clip: the loss of a negative advantage is at most -A * 3",
    paper="dual-clip PPO, arXiv 1912.09729",
    use_when="stale or off-policy data with huge ratios on bad completions",
)
# REINFORCE++: no group baseline; the reward whitened over the batch's tokens, PPO clip.
_preset(
    "reinforce_plus_plus",
    advantage_estimator="reinforce_plus_plus", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE++: batch token-whitened reward, no group baseline, PPO clip, token-mean",
    paper="REINFORCE++, arXiv 2501.03262",
    use_when="group size 1, or prompts that are all easy or all hard",
)
_preset(
    "reinforce_plus_plus_baseline",
    advantage_estimator="reinforce_plus_plus_baseline", policy_loss="grpo_clip", loss_aggregation="token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="REINFORCE++-baseline: group-mean baseline, then batch token whitening, PPO clip",
    paper="REINFORCE++, arXiv 2501.03262",
    use_when="GRPO over-weighs near-solved prompts: its per-group std becomes one batch scale",
)
# ReMax: the baseline is the reward of one greedy completion per prompt (decoded and scored by the
# loop each iteration), REINFORCE, one on-policy pass.
_preset(
    "remax",
    advantage_estimator="remax", policy_loss="reinforce", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="ReMax: reward minus the greedy completion's reward, REINFORCE, one pass",
    paper="ReMax, arXiv 2310.10505",
    use_when="group size 1 with a baseline (one greedy decode per prompt per iteration)",
)
# OPO: exactly on-policy (one pass), baseline = the length-weighted group mean, the variance-optimal
# one when a sequence's gradient is the sum of its tokens' (hence the token-sum aggregation).
_preset(
    "opo",
    advantage_estimator="opo", policy_loss="reinforce", loss_aggregation="seq_mean_token_sum_norm",
    ppo_epochs=1, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    description="OPO: length-weighted group-mean baseline, strictly on-policy, token sum",
    paper="OPO, arXiv 2505.23585",
    use_when="ragged lengths, exact on-policy training",
)
# Pass@k training: only each group's single best completion is pushed up, by its margin over the
# runner-up in group-std units (sample std, as verl).
_preset(
    "grpo_passk",
    advantage_estimator="grpo_passk", policy_loss="grpo_clip", loss_aggregation="seq_mean_token_mean",
    ppo_epochs=2, clip_low=0.2, clip_high=0.2, kl_coef=0.0, std="sample",
    description="GRPO pass@k: only the best of each group, (r_max - r_2nd) / std, counts",
    paper="pass@k training, arXiv 2503.19595",
    use_when="exploration: one success per group is enough",
)
