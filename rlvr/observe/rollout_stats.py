"""Numbers and sample records of one rollout batch, over every rank's groups.

Data-parallel, each rank holds its own groups; `gather_rollout` collects every rank's rows in
rank order (the order one process would have), so every rank computes the same statistics. The
share of groups without reward contrast uses `rlvr.core.no_contrast_rows`, the rule dynamic
sampling and the advantage estimators use. For an environment task the episodes add `episode/*`
(`episode_stats`): turns, tool calls and errors, the environment's share of the tokens, truncation by limit.
A model judge's verdicts carry what each request cost (`Verdict.judge_call`); `judge_stats` sums them
into `judge/*`, so they are gathered with the verdicts like every other per-row number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from rlvr.core import RolloutBatch, no_contrast_rows, masked_mean_per_row
from rlvr.observe.metric_names import (
    ADVANTAGE_ABS_MEAN,
    ADVANTAGE_STD,
    COMPLETION_LEN_MAX,
    COMPLETION_LEN_MEAN,
    CORRECT_FRAC,
    DISTINCT_COMPLETIONS_FRAC,
    DYNAMIC_SAMPLING_FILLED_NO_CONTRAST,
    DYNAMIC_SAMPLING_ROUNDS,
    DYNAMIC_SAMPLING_SAMPLED_GROUPS,
    EPISODE_ENV_TOKEN_FRAC,
    EPISODE_TOOL_CALLS,
    EPISODE_TOOL_ERRORS,
    EPISODE_TURNS,
    FRAC_NONZERO_ADVANTAGES,
    FRAC_NO_CONTRAST_GROUPS,
    GENERATED_TOKENS,
    JUDGE_CACHE_HIT_FRAC,
    JUDGE_LATENCY,
    JUDGE_RETRIES,
    JUDGE_UNPARSED_FRAC,
    NUM_SEQUENCES,
    REWARD_MAX,
    REWARD_MEAN,
    REWARD_STD,
    TRUNCATED_FRAC,
    UNSCORABLE,
    reward_component,
    episode_tool_calls,
    episode_tool_errors,
    episode_truncated,
    status_count,
)
from rlvr.rollout.episodes import episode_fields
from rlvr.tasks.task import Verdict
from rlvr.tasks.environment import TRUNCATION_LIMITS
from rlvr.parallel.distributed import SINGLE, Dist

NON_OK_STATUSES = ("unjudgeable", "timeout", "error")  # counted as status/<name>


class CollectedGroups(Protocol):
    """What this module reads of an iteration's kept groups (`rlvr.training.collect.CollectedGroups`).

    Described here rather than imported: observe sits below training, so training hands its groups in.
    Each group has `prompt`, `example`, `texts`, `verdicts`, `lengths`, `truncated` and `episodes`
    (`rlvr.training.collect.SampledGroup`).
    """

    groups: list
    group_size: int
    sampled_groups: int
    filled_no_contrast: int
    rounds: int

    @property
    def rewards(self) -> torch.Tensor: ...  # [N]

    @property
    def verdicts(self) -> list[Verdict]: ...  # [N]


@dataclass(frozen=True)
class RolloutRows:
    """Every rank's rows of one rollout batch, in rank order, and the sampling counters summed."""

    verdicts: list[Verdict]  # [N]
    rewards: torch.Tensor  # [N], NaN where unscorable
    advantages: torch.Tensor  # [N], one per sequence (per-token advantages averaged over the row)
    lengths: torch.Tensor  # [N]
    truncated: torch.Tensor  # [N] bool
    group_size: int
    sampled_groups: int
    filled_no_contrast: int
    rounds: int
    samples: list[dict]  # one record per completion, for samples.jsonl
    episodes: list[EpisodeCounts] | None = None  # [N] environment tasks only


@dataclass(frozen=True)
class EpisodeCounts:
    """What the episode metrics need of one episode (small, so ranks can exchange them)."""

    turns: int
    tool_calls: dict[str, int]
    tool_errors: dict[str, int]
    env_tokens: int  # loss mask 0
    tokens: int  # after the prompt, the policy's and the environment's
    truncated_by: str | None

    @classmethod
    def of(cls, record) -> "EpisodeCounts":
        return cls(turns=record.turns, tool_calls=dict(record.tool_calls), tool_errors=dict(record.tool_errors),
                   env_tokens=record.env_tokens, tokens=len(record.token_ids),
                   truncated_by=record.episode.truncated_by)


def episode_stats(episodes: list[EpisodeCounts]) -> dict[str, float]:
    """episode/* metrics: turns, tool calls and errors (all tools, and per tool) per episode, the share of
    tokens after the prompt that are the environment's, and the share of episodes each limit cut short."""
    count = len(episodes)
    tools = sorted({tool for e in episodes for tool in (*e.tool_calls, *e.tool_errors)})
    total_tokens = sum(e.tokens for e in episodes)
    stats = {
        EPISODE_TURNS: sum(e.turns for e in episodes) / count,
        EPISODE_TOOL_CALLS: sum(sum(e.tool_calls.values()) for e in episodes) / count,
        EPISODE_TOOL_ERRORS: sum(sum(e.tool_errors.values()) for e in episodes) / count,
        EPISODE_ENV_TOKEN_FRAC: sum(e.env_tokens for e in episodes) / total_tokens if total_tokens else 0.0,
    }
    for tool in tools:
        stats[episode_tool_calls(tool)] = sum(e.tool_calls.get(tool, 0) for e in episodes) / count
        stats[episode_tool_errors(tool)] = sum(e.tool_errors.get(tool, 0) for e in episodes) / count
    for limit in TRUNCATION_LIMITS:
        stats[episode_truncated(limit)] = sum(e.truncated_by == limit for e in episodes) / count
    return stats


def judge_stats(verdicts: list[Verdict]) -> dict[str, float]:
    """judge/* metrics over the verdicts a model judge gave (those with `judge_call`); {} when there are none.

    latency: mean seconds per request sent (rows answered from the cache or by an identical row sent no
    request); retries: summed; cache_hit_frac and unparsed_frac: shares of the judged rows.
    """
    calls = [v.judge_call for v in verdicts if v.judge_call is not None]
    if not calls:
        return {}
    sent = [call for call in calls if not call.cached]
    return {
        JUDGE_LATENCY: sum(call.seconds for call in sent) / len(sent) if sent else 0.0,
        JUDGE_RETRIES: sum(call.retries for call in calls),
        JUDGE_CACHE_HIT_FRAC: sum(call.cached for call in calls) / len(calls),
        JUDGE_UNPARSED_FRAC: sum(call.unparsed for call in calls) / len(calls),
    }


def advantage_per_row(batch: RolloutBatch) -> torch.Tensor:
    """[N]: the advantages themselves, or per-token advantages averaged over each completion."""
    if batch.advantages.dim() == 1:
        return batch.advantages
    return masked_mean_per_row(batch.advantages, batch.completion_mask)


def sample_records(collected: CollectedGroups, row_advantages: torch.Tensor) -> list[dict]:
    """prompt, ground truth, completion, reward components, reward, status and advantage of each row
    (episodes: also the transcript with the environment's spans marked, turns and truncation)."""
    group_size = collected.group_size
    return [
        {"prompt": group.prompt, "ground_truth": group.example.ground_truth, "completion": group.texts[j],
         "components": group.verdicts[j].components, "reward": group.verdicts[j].total,
         "status": group.verdicts[j].status, "advantage": float(row_advantages[i * group_size + j]),
         **({} if group.episodes is None else episode_fields(group.episodes[j]))}
        for i, group in enumerate(collected.groups) for j in range(group_size)
    ]


def gather_rollout(collected: CollectedGroups, batch: RolloutBatch, dist: Dist = SINGLE) -> RolloutRows:
    """This rank's rows, or every rank's under data parallelism (a collective)."""
    groups = collected.groups
    row_advantages = advantage_per_row(batch)
    share = (collected.verdicts, collected.rewards, row_advantages.cpu(),
             torch.cat([g.lengths for g in groups]), torch.cat([g.truncated for g in groups]),
             collected.sampled_groups, collected.filled_no_contrast, sample_records(collected, row_advantages),
             None if groups and groups[0].episodes is None
             else [EpisodeCounts.of(record) for group in groups for record in group.episodes])
    shares = dist.gather(share) if dist.enabled else [share]
    return RolloutRows(
        verdicts=[v for part in shares for v in part[0]],
        rewards=torch.cat([part[1] for part in shares]), advantages=torch.cat([part[2] for part in shares]),
        lengths=torch.cat([part[3] for part in shares]), truncated=torch.cat([part[4] for part in shares]),
        group_size=collected.group_size, sampled_groups=sum(part[5] for part in shares),
        filled_no_contrast=sum(part[6] for part in shares), rounds=collected.rounds,
        samples=[record for part in shares for record in part[7]],
        episodes=None if any(part[8] is None for part in shares) else [e for part in shares for e in part[8]],
    )


def no_contrast_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups without reward contrast. rewards [N] prompt-major (NaN ignored)."""
    grouped = rewards.view(-1, group_size)  # [B, G]
    return float(no_contrast_rows(grouped).float().mean())


def distinct_completions_fraction(texts: list[str], group_size: int) -> float:
    """Mean over groups of (distinct completions in the group) / group size; texts [N] prompt-major.

    1.0 when every completion of every group differs, 1 / G when each group wrote one text G times
    (a policy collapsed to one answer per prompt). Whitespace at either end does not make a text new.
    """
    groups = [texts[start : start + group_size] for start in range(0, len(texts), group_size)]
    return sum(len({text.strip() for text in group}) / len(group) for group in groups) / len(groups)


def rollout_stats(rows: RolloutRows, dynamic_sampling: bool) -> dict[str, float]:
    """The rollout part of an iteration's metrics (names in `rlvr.observe.metric_names`).

    With groups of one (PPO may sample one completion per prompt) no group can have contrast, and
    none needs it: `frac_no_contrast_groups` is left out rather than reported as 1.
    """
    rewards, verdicts = rows.rewards, rows.verdicts
    finite = rewards[torch.isfinite(rewards)]
    stats = {
        REWARD_MEAN: float(finite.mean()) if finite.numel() else math.nan,
        REWARD_STD: float(finite.std(unbiased=False)) if finite.numel() else math.nan,
        REWARD_MAX: float(finite.max()) if finite.numel() else math.nan,
        FRAC_NONZERO_ADVANTAGES: float((rows.advantages.abs() > 1e-8).float().mean()),
        ADVANTAGE_ABS_MEAN: float(rows.advantages.abs().mean()),
        ADVANTAGE_STD: float(rows.advantages.std()) if rows.advantages.numel() > 1 else 0.0,  # n - 1
        UNSCORABLE: int((~torch.isfinite(rewards)).sum()),
        TRUNCATED_FRAC: float(rows.truncated.float().mean()),
        COMPLETION_LEN_MEAN: float(rows.lengths.float().mean()),
        COMPLETION_LEN_MAX: int(rows.lengths.max()),
        CORRECT_FRAC: sum(v.correct for v in verdicts) / len(verdicts),
        DISTINCT_COMPLETIONS_FRAC: distinct_completions_fraction([s["completion"] for s in rows.samples],
                                                                 rows.group_size),
        NUM_SEQUENCES: len(verdicts),
        GENERATED_TOKENS: int(rows.lengths.sum()),
    }
    if rows.group_size > 1:
        stats[FRAC_NO_CONTRAST_GROUPS] = no_contrast_fraction(rewards, rows.group_size)
    for name in verdicts[0].components:
        values = torch.tensor([v.components[name] for v in verdicts], dtype=torch.float32)
        values = values[torch.isfinite(values)]
        stats[reward_component(name)] = float(values.mean()) if values.numel() else math.nan
    statuses = [v.status for v in verdicts]
    for status in NON_OK_STATUSES:
        stats[status_count(status)] = statuses.count(status)
    stats.update(judge_stats(verdicts))
    if rows.episodes:
        stats.update(episode_stats(rows.episodes))
    if dynamic_sampling:
        stats[DYNAMIC_SAMPLING_ROUNDS] = rows.rounds
        stats[DYNAMIC_SAMPLING_SAMPLED_GROUPS] = rows.sampled_groups
        stats[DYNAMIC_SAMPLING_FILLED_NO_CONTRAST] = rows.filled_no_contrast
    return stats
