"""Environments: tasks whose rollout is an episode, a conversation between the policy and the task.

An environment is a `Task` (examples, components, stop strings, held-out set) with three more
methods. An episode starts from an example (`start` returns the environment's own state); after
each assistant turn the environment answers through `respond`: a tool result, feedback, or
nothing, and whether the episode is over. When it is over, or a limit cut it short, the task
judges the whole transcript with `score_episode` into the usual `Verdict`.

The episode driver in `rlvr/rollout/` samples every live episode's next turn in one batched call
and inserts the environment's replies as tokens that never enter the loss; the environment only
ever sees text, so it is written and tested without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlvr.tasks.task import Example, Task, Verdict

# Why an episode ended before its environment said so: the limits the driver enforces.
TRUNCATION_LIMITS = ("max_turns", "turn_tokens", "episode_tokens")
REPLY_ROLES = ("user", "tool")


@dataclass
class EnvReply:
    """The environment's answer to one assistant turn."""

    content: str | None = None  # what it says next (rendered as a `role` message); None: nothing
    role: str = "user"  # "tool" for a tool's result (the chat template's tool role), else "user"
    done: bool = False  # the episode is over: score it now
    tool_calls: dict[str, int] = field(default_factory=dict)  # tool name -> calls made in that turn
    tool_errors: dict[str, int] = field(default_factory=dict)  # tool name -> calls that failed

    def __post_init__(self) -> None:
        if self.role not in REPLY_ROLES:
            raise ValueError(f"EnvReply.role {self.role!r} is not one of {', '.join(REPLY_ROLES)}")
        if self.content is None and not self.done:
            raise ValueError("EnvReply: an environment that says nothing must end the episode (done=True)")


@dataclass
class Turn:
    role: str  # "assistant" (the policy), "user" or "tool" (the environment)
    content: str


@dataclass
class Episode:
    """A finished episode as text: what `score_episode` judges and generation logs show."""

    example: Example
    turns: list[Turn]  # the conversation after the prompt, the first turn the policy's
    state: Any = None  # the environment's own state, as `start` and `respond` left it
    truncated_by: str | None = None  # one of TRUNCATION_LIMITS, or None when the environment ended it

    @property
    def assistant_turns(self) -> list[str]:
        return [turn.content for turn in self.turns if turn.role == "assistant"]


@runtime_checkable
class Environment(Task, Protocol):
    # Turns the policy may take before the episode is cut (`rollout.max_turns` overrides it).
    max_turns: int
    # JSON schemas of the tools it offers (`rlvr.tools`), passed to the chat template as `tools=`; () for none.
    tool_schemas: tuple[dict, ...]

    def start(self, example: Example) -> Any:
        """A fresh state for one episode of `example` (each of a group's G episodes gets its own)."""

    def respond(self, state: Any, assistant_text: str) -> EnvReply:
        """Answer the policy's last turn, updating `state`; never raises for any text the model can produce."""

    def score_episode(self, episode: Episode) -> Verdict:
        """Judge a finished (or truncated) episode; never raises."""

    # Optional: `tool_names`, the tools it offers by name: their calls and errors are logged per tool
    # from 0, so a tool the policy never calls shows as 0 (and the `tool_unused` health warning sees it).
    # Optional: `check_tokenizer(tokenizer)` raises ValueError, naming what to change, when the
    # environment cannot run with this tokenizer (a tool format its chat template lacks); the
    # driver calls it before the first turn.


def add_counts(total: dict[str, int], counts: dict[str, int]) -> None:
    """Add per-tool counts (`EnvReply.tool_calls`, `tool_errors`) into `total`, in place."""
    for name, count in counts.items():
        total[name] = total.get(name, 0) + int(count)


def is_environment(task) -> bool:
    """True when `task` runs episodes (has `start`, `respond` and `score_episode`), not single completions."""
    return all(callable(getattr(task, name, None)) for name in ("start", "respond", "score_episode"))
