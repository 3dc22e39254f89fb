"""Sample completions and judge them: the one path from examples to verdicts.

`sample_and_score` renders B examples' prompts, samples G completions each through a rollout
backend (inside its `sync`), and scores every completion with `score_completions`, the only
place in rlvr that judges a completion (through `rlvr.tasks.verification.judging.judge_batch`, which guards the
task's `score`, or its `score_batch` when it scores a batch at once, against exceptions, wrong types and
unusable rewards). Training rollouts, expert
iteration, evaluation (in training and `rlvr eval`), `rlvr check` and the SFT data filter all
come through here, so they sample with the same settings and judge the same way. For an
environment task (`is_environment`) each row is an episode instead (`episodes.run_episodes`),
judged by the task's `score_episode`; the scoring time is then inside the sampling time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from rlvr.rollout.backend import RolloutBackend
from rlvr.rollout.generation import Generation, SamplingSettings, render_prompts
from rlvr.rollout.episodes import EpisodeRecord, run_episodes
from rlvr.tasks.task import Example, Task, Verdict
from rlvr.tasks.environment import is_environment
from rlvr.tasks.verification.judging import judge_batch


@dataclass(frozen=True)
class ScoredRollout:
    """B examples, G sampled completions each (rows prompt-major: example b owns rows b*G .. b*G+G-1)."""

    examples: list[Example]  # [B]
    prompts: list[str]  # [B], rendered
    group_size: int  # G
    generation: Generation  # N = B*G rows
    verdicts: list[Verdict]  # [N]
    generation_seconds: float
    scoring_seconds: float
    # [N] environment tasks: each row's episode (turns, tool calls, its tokens' owners); None otherwise
    episodes: list[EpisodeRecord] | None = None

    def __len__(self) -> int:
        return len(self.verdicts)

    def rows(self, example_index: int) -> slice:
        """The rows of example `example_index`'s group."""
        return slice(example_index * self.group_size, (example_index + 1) * self.group_size)

    @property
    def completion_texts(self) -> list[str]:
        return self.generation.completion_texts


def score_completions(task: Task, completions: Sequence[str], examples: Sequence[Example]) -> list[Verdict]:
    """One verdict per (completion, example) pair: every completion rlvr judges is judged here, all at once
    when the task has `score_batch` (a model judge's concurrent requests), else one by one. Raises only
    `ScorerUnavailable` (a judge down for the whole batch)."""
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples to judge them against")
    return judge_batch(task, completions, examples)


def sample_and_score(backend: RolloutBackend, task: Task, examples: Sequence[Example], *, group_size: int,
                     settings: SamplingSettings, use_chat_template: bool) -> ScoredRollout:
    """Render `examples`, sample `group_size` completions for each, and judge every completion."""
    examples = list(examples)
    environment = is_environment(task)
    if environment and callable(getattr(task, "check_tokenizer", None)):
        task.check_tokenizer(backend.tokenizer)
    tools = tuple(getattr(task, "tool_schemas", ())) if environment and use_chat_template else ()
    prompts = render_prompts(backend.tokenizer, examples, use_chat_template, tools)
    started = time.perf_counter()
    if environment:  # episodes: sampled turn by turn, judged by score_episode as they finish
        with backend.sync():
            episodes = run_episodes(backend, task, examples, prompts, group_size=group_size, settings=settings,
                                    use_chat_template=use_chat_template)
        seconds = time.perf_counter() - started
        return ScoredRollout(examples=examples, prompts=prompts, group_size=group_size,
                             generation=episodes.generation, verdicts=episodes.verdicts,
                             generation_seconds=seconds, scoring_seconds=0.0, episodes=episodes.records)
    with backend.sync():
        generation = backend.generate(prompts, group_size, settings)
    sampled = time.perf_counter()
    repeated = [example for example in examples for _ in range(group_size)]  # [N], prompt-major
    verdicts = score_completions(task, generation.completion_texts, repeated)
    return ScoredRollout(examples=examples, prompts=prompts, group_size=group_size, generation=generation,
                         verdicts=verdicts, generation_seconds=sampled - started,
                         scoring_seconds=time.perf_counter() - sampled)
