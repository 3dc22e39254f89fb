"""Sample and score, the first stages of an RL iteration: B prompts x G judged completions, as groups.

Each round draws B training prompts, samples G completions for each and judges them
(`rlvr.rollout.sample_and_score`), and cuts the result into one `SampledGroup` per prompt,
whose rewards are the verdicts' totals plus DAPO's overlong penalty (NaN where unscorable).
With dynamic sampling, groups that `algorithm.dynamic_sampling_filter` drops (by default those
without reward contrast, `rlvr.core.no_contrast`, the rule the advantages and the statistics use;
or those all correct or all wrong) are set aside and more rounds are sampled until B groups are
kept (at most `dynamic_sampling_max_rounds`; a shortfall is filled with set-aside groups and
counted). Data-parallel, each rank samples its share of every round. `rollout_batch` then lays
the kept groups out as one `RolloutBatch` (the later stages add reference log-probs, PPO's old
values, and the advantages). `greedy_baselines` decodes one more, greedy, completion per kept
prompt and scores it: ReMax's baseline (its `reward_baselines` input, `rlvr.training.estimator_inputs`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from rlvr.core import DYNAMIC_SAMPLING_FILTERS, RolloutBatch, build_completion_mask
from rlvr.rollout import RolloutBackend, SamplingSettings, ScoredRollout, sample_and_score
from rlvr.rollout.generation import fill_token_id
from rlvr.tasks.task import Example, Task, Verdict
from rlvr.parallel.distributed import SINGLE, Dist, check_divisible


@dataclass(frozen=True)
class SampledGroup:
    """One prompt's G completions, judged."""

    example: Example
    prompt: str  # rendered
    input_ids: torch.Tensor  # [G, P + C], prompt left-padded to this round's width P
    attention_mask: torch.Tensor  # [G, P + C]
    prompt_len: int  # P
    texts: list[str]  # [G]
    verdicts: list[Verdict]  # [G]
    lengths: torch.Tensor  # [G] generated tokens
    truncated: torch.Tensor  # [G] bool
    rewards: torch.Tensor  # [G] float32: verdict total + overlong penalty, NaN where unscorable
    loss_mask: torch.Tensor  # [G, C] long: completion tokens that enter the loss (the backend's loss_mask)
    sampler_logprobs: torch.Tensor | None  # [G, C] the sampler's own log-probs, None when it gives none
    episodes: list | None = None  # [G] environment tasks: each row's `EpisodeRecord`; None otherwise


@dataclass(frozen=True)
class CollectedGroups:
    """This rank's kept groups, prompt-major, and what it took to collect them."""

    groups: list[SampledGroup]
    group_size: int
    sampled_groups: int  # groups sampled on this rank, kept or not
    filled_no_contrast: int  # groups without contrast kept because the rounds ran out
    rounds: int
    generation_seconds: float
    scoring_seconds: float

    @property
    def rewards(self) -> torch.Tensor:
        return torch.cat([group.rewards for group in self.groups])  # [N]

    @property
    def group_ids(self) -> torch.Tensor:
        return torch.arange(len(self.groups) * self.group_size) // self.group_size  # [N]

    @property
    def verdicts(self) -> list[Verdict]:
        return [verdict for group in self.groups for verdict in group.verdicts]


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to L_max - buffer, then linear down to -factor at L_max."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_new_tokens - buffer
    over = (lengths.float() - start).clamp(min=0)  # [N]
    return -factor * (over / buffer).clamp(max=1.0)


def group_rewards(verdicts: list[Verdict], lengths: torch.Tensor, algo, max_new_tokens: int) -> torch.Tensor:
    """Verdict totals plus the overlong penalty. [G] float32 (NaN stays NaN)."""
    totals = torch.tensor([v.total for v in verdicts], dtype=torch.float32)  # [G]
    return totals + overlong_penalty(lengths, max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)


def group_correct(group: SampledGroup) -> torch.Tensor:
    """Which of a group's completions the verifier judged correct. -> bool [G]"""
    return torch.tensor([verdict.correct for verdict in group.verdicts], dtype=torch.bool)


def split_groups(scored: ScoredRollout, algo, max_new_tokens: int) -> list[SampledGroup]:
    """One `SampledGroup` per example of a scored round, its rewards computed once here."""
    generation = scored.generation
    groups = []
    for index, (example, prompt) in enumerate(zip(scored.examples, scored.prompts)):
        rows = scored.rows(index)
        verdicts = scored.verdicts[rows]
        lengths = generation.completion_lengths[rows]
        groups.append(SampledGroup(
            example=example, prompt=prompt, input_ids=generation.input_ids[rows],
            attention_mask=generation.attention_mask[rows], prompt_len=generation.prompt_len,
            texts=generation.completion_texts[rows], verdicts=verdicts, lengths=lengths,
            truncated=generation.truncated[rows], rewards=group_rewards(verdicts, lengths, algo, max_new_tokens),
            loss_mask=generation.loss_mask[rows],
            sampler_logprobs=None if generation.sampler_logprobs is None else generation.sampler_logprobs[rows],
            episodes=None if scored.episodes is None else scored.episodes[rows],
        ))
    return groups


def round_seed(train_seed: int, iteration: int, round_index: int = 0) -> int:
    """The seed of the training prompts drawn in round `round_index` of `iteration` (0-based)."""
    return (train_seed * 1_000_003 + iteration) * 101 + round_index


def collect_groups(backend: RolloutBackend, task: Task, settings: SamplingSettings, config, iteration: int,
                   dist: Dist = SINGLE) -> CollectedGroups:
    """Sample and score until this rank holds its B / world_size groups (see the module docstring)."""
    rollout, algo = config.rollout, config.algorithm
    quota = check_divisible(dist, rollout.batch_size)  # groups this rank keeps
    started = time.perf_counter()
    kept: list[SampledGroup] = []
    set_aside: list[SampledGroup] = []
    rounds = sampled = 0
    scoring_seconds = 0.0
    max_rounds = algo.dynamic_sampling_max_rounds if algo.dynamic_sampling else 1
    keep = DYNAMIC_SAMPLING_FILTERS.get(algo.dynamic_sampling_filter)

    def kept_everywhere() -> int:  # a collective: every rank runs the same number of rounds
        return int(dist.sum_scalar(len(kept))) if dist.enabled else len(kept)

    # One adapter merge (FSDP: one gather of the layers) for all rounds, so ranks that sample more
    # rounds or more decoding steps than others need no collectives.
    with backend.sync():
        while kept_everywhere() < rollout.batch_size and rounds < max_rounds:
            seed = round_seed(config.train.seed, iteration, rounds)
            rounds += 1
            if len(kept) >= quota:
                continue  # this rank is full; the others still sample
            examples = dist.shard(task.examples("train", rollout.batch_size, seed))
            scored = sample_and_score(backend, task, examples, group_size=rollout.group_size, settings=settings,
                                      use_chat_template=config.task.use_chat_template)
            scoring_seconds += scored.scoring_seconds
            for group in split_groups(scored, algo, rollout.max_new_tokens):
                sampled += 1
                if algo.dynamic_sampling and not keep(group.rewards, group_correct(group)):
                    set_aside.append(group)
                elif len(kept) < quota:
                    kept.append(group)
    filled = quota - len(kept)  # dynamic sampling ran out of rounds
    kept += set_aside[:filled]
    return CollectedGroups(groups=kept, group_size=rollout.group_size, sampled_groups=sampled,
                           filled_no_contrast=filled, rounds=rounds,
                           generation_seconds=time.perf_counter() - started - scoring_seconds,
                           scoring_seconds=scoring_seconds)


@dataclass(frozen=True)
class GreedyBaselines:
    """ReMax's baseline: the reward of one greedy completion per kept prompt, repeated over its group."""

    rewards: torch.Tensor  # [N] float32, NaN where the greedy completion could not be judged
    seconds: float


def greedy_baselines(backend: RolloutBackend, task: Task, settings: SamplingSettings, collected: CollectedGroups,
                     config) -> GreedyBaselines:
    """Decode one greedy completion for each kept group's prompt and score it as the group's completions are."""
    started = time.perf_counter()
    examples = [group.example for group in collected.groups]
    greedy = dataclasses.replace(settings, do_sample=False)
    scored = sample_and_score(backend, task, examples, group_size=1, settings=greedy,
                              use_chat_template=config.task.use_chat_template)
    rewards = group_rewards(scored.verdicts, scored.generation.completion_lengths, config.algorithm,
                            config.rollout.max_new_tokens)  # [B]
    return GreedyBaselines(rewards=rewards.repeat_interleave(collected.group_size),  # [N], prompt-major
                           seconds=time.perf_counter() - started)


def _pad_left_right(tensors: list[torch.Tensor], prompt_lens: list[int], fill: int) -> tuple[torch.Tensor, int]:
    """Stack per-group [G, P_g + C_g] tensors into one [N, P + C] with prompts aligned at column P."""
    width_prompt = max(prompt_lens)
    width_completion = max(t.shape[1] - p for t, p in zip(tensors, prompt_lens))
    rows = []
    for tensor, p in zip(tensors, prompt_lens):
        left = width_prompt - p
        right = width_completion - (tensor.shape[1] - p)
        rows.append(torch.nn.functional.pad(tensor, (left, right), value=fill))
    return torch.cat(rows, dim=0), width_prompt


def _per_token_layout(per_completion: list[torch.Tensor], prompt_lens: list[int]) -> torch.Tensor:
    """Per-group [G, C_g] completion values laid out like log-probs, [N, L-1] (column t is token t+1), 0 elsewhere."""
    full = [torch.cat([values.new_zeros(values.shape[0], p), values], dim=1)
            for values, p in zip(per_completion, prompt_lens)]
    return _pad_left_right(full, prompt_lens, 0)[0][:, 1:]  # [N, L-1]


def rollout_batch(collected: CollectedGroups, tokenizer, task_name: str) -> RolloutBatch:
    """The kept groups as one batch (prompt-major); no advantages or reference log-probs yet.

    The completion mask is the attention mask's completion tokens and the backend's loss mask; the
    sampler's log-probs, when the backend gave them, are kept apart in `sampler_logprobs`.
    """
    fill_id = fill_token_id(tokenizer)
    groups = collected.groups
    prompt_lens = [group.prompt_len for group in groups]
    input_ids, prompt_len = _pad_left_right([group.input_ids for group in groups], prompt_lens, fill_id)  # [N, L]
    attention_mask, _ = _pad_left_right([group.attention_mask for group in groups], prompt_lens, 0)  # [N, L]
    loss_mask = _per_token_layout([group.loss_mask for group in groups], prompt_lens)  # [N, L-1]
    reported = [group.sampler_logprobs is not None for group in groups]
    if any(reported) and not all(reported):
        raise ValueError("the rollout backend returned sampler log-probs for some rounds and not for others")
    sampler_logprobs = None
    if groups and all(reported):
        sampler_logprobs = _per_token_layout([group.sampler_logprobs.float() for group in groups], prompt_lens)
    rewards = collected.rewards  # [N]
    texts = [text for group in groups for text in group.texts]
    return RolloutBatch(
        input_ids=input_ids, attention_mask=attention_mask, prompt_len=prompt_len,
        completion_mask=build_completion_mask(input_ids, attention_mask, prompt_len) * loss_mask,  # [N, L-1]
        old_logprobs=None, ref_logprobs=None, sampler_logprobs=sampler_logprobs,
        rewards=torch.where(torch.isfinite(rewards), rewards, torch.zeros_like(rewards)),
        advantages=None, group_ids=collected.group_ids, task_names=[task_name] * len(texts),
        completion_texts=texts,
    )
