"""The task interface: a task yields examples and scores a completion into a `Verdict`.

A verdict holds named reward components (NaN when a component cannot be judged), the weighted
total, and a status (`ok`, `unjudgeable`, `timeout`, `error`) with the verifier's name and
version, so a run can tell format from correctness and never scores an unjudgeable answer as 0
by accident.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol, Union

STATUSES = ("ok", "unjudgeable", "timeout", "error")

Messages = list[dict[str, str]]


@dataclass
class Example:
    """One prompt: raw text or chat messages, the ground truth, and free-form metadata."""

    prompt: Union[str, Messages]
    ground_truth: Any
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeCall:
    """What judging one completion through a model endpoint cost (`rlvr.tasks.judge`): the `judge/*` metrics
    are computed from these, so they survive the data-parallel gather with the verdicts."""

    seconds: float  # wall time of the request(s), retries and waits included; 0 when cached
    retries: int  # requests sent again after a failure or a 429/503
    cached: bool  # answered from the cache (or by an identical request in the same batch)
    unparsed: bool  # the judge replied but its reply held no score in the declared form


@dataclass
class Verdict:
    components: dict[str, float]
    total: float
    status: str
    verifier: str
    version: str
    correct: bool = False
    detail: str = ""
    # The answer the verifier extracted and judged, as text (None: none found, or a verifier that
    # extracts none); the sampled eval's majority vote (maj@k) votes on it.
    answer: Optional[str] = None
    # Set by a model judge only (`rlvr.tasks.judge`): the request's latency, retries, cache hit; None otherwise.
    judge_call: Optional[JudgeCall] = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verdict status {self.status!r} is not one of {', '.join(STATUSES)}")

    @property
    def scorable(self) -> bool:
        """False when no component could be judged: such a completion gets no advantage."""
        return math.isfinite(self.total)


def weighted_total(components: dict[str, float], weights: dict[str, float]) -> float:
    """Sum of weight * component over the judgeable components.

    NaN when no component that carries weight could be judged: a completion whose only
    judgeable component has weight 0 (say, the format, when the answer timed out) has no
    meaningful total and must not be scored as 0.
    """
    judged = [(name, value) for name, value in components.items() if math.isfinite(value)]
    if not any(weights.get(name, 0.0) != 0.0 for name, _ in judged):
        return math.nan
    return float(sum(weights.get(name, 0.0) * value for name, value in judged))


def resolve_weights(defaults: dict[str, float], overrides: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(
            f"task.reward_weights: unknown component {unknown[0]!r}; valid components: {', '.join(defaults)}"
        )
    return {**defaults, **overrides}


def train_indices(count: int, pool_size: int, seed: int) -> list[int]:
    """`count` indices into a training pool of `pool_size` items, drawn by `seed`: without replacement within
    each pass over the pool, a new shuffled pass when one is used up."""
    rng = random.Random(seed)
    indices: list[int] = []
    while len(indices) < count:
        indices += rng.sample(range(pool_size), min(count - len(indices), pool_size))
    return indices


def check_count_option(task_name: str, key: str, value: Any, minimum: int = 0) -> int:
    """A task option that counts something: an integer >= `minimum`, checked when the task is built."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{task_name}: task.options.{key}={value!r} must be an integer >= {minimum}")
    return value


def check_seconds_option(task_name: str, key: str, value: Any) -> float:
    """A task option in seconds: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{task_name}: task.options.{key}={value!r} must be a finite number of seconds > 0")
    return float(value)


def primary_component(task) -> str:
    """The component that says whether the answer is right, which the `reward_divergence` health warning
    watches: the task's `primary_component`, else `answer` when it has one, else its first component."""
    declared = getattr(task, "primary_component", None)
    components = tuple(task.component_names)
    if declared is not None:
        if declared not in components:
            raise ValueError(f"task {task.name!r}: primary_component {declared!r} is not one of its components "
                             f"({', '.join(components)})")
        return declared
    return "answer" if "answer" in components else components[0]


def extracts_answers(task) -> bool:
    """Whether the task's verdicts carry the extracted answer (`Verdict.answer`), so that a sampled eval can
    report maj@k: the task's `extracts_answers` (default False)."""
    return bool(getattr(task, "extracts_answers", False))


def prompt_text(prompt: Union[str, Messages]) -> str:
    """The text of a prompt: raw text as is, chat messages' contents joined by newlines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(message.get("content", "")) for message in prompt)


class Task(Protocol):
    name: str
    component_names: tuple[str, ...]
    # Optional: the component that says whether the answer is right (default: `answer`, else the
    # first component); `primary_component(task)` reads it.
    # Optional: `extracts_answers = True` when its verdicts set `Verdict.answer` (the sampled eval's
    # maj@k votes on it); `extracts_answers(task)` reads it.
    # Generation ends at the first of these, kept in the text (`</answer>` for the r1_zero
    # prompt); () for none. `rollout.stop_strings`, when set, replaces them.
    stop_strings: tuple[str, ...]

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        """`count` examples of `split` ("train" or "eval"), deterministic given `seed`."""

    def score(self, completion: str, example: Example) -> Verdict:
        """Judge one completion; never raises for any string the model can produce."""

    def iter_eval(self) -> Iterator[Example]:
        """The held-out examples in a fixed order."""
