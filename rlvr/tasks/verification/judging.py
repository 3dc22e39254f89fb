"""`judge`: the one way every trainer and evaluator turns a completion into a verdict.

It calls the task's `score` and guards what comes back, so a verifier bug cannot end a run or
silently poison a batch: a `score` that raises, returns something other than a `Verdict`, or gives
a total or component that is infinite or larger in size than `max_abs_reward` (default 1e6;
1e38 already overflows float32 sums and would zero every advantage of its group) becomes a verdict
with status `error`, every component NaN and a detail saying why. A NaN total stays as it is: that
is how a task says "could not be judged" (`unjudgeable`, `timeout`), and such a completion is left
out of its group's advantage and counted (`unscorable`, `status/<status>` in the rollout metrics).

A task that scores a whole batch at once (a model judge sending requests concurrently) defines
`score_batch(completions, examples) -> list[Verdict]`; `judge_batch` calls it with the same guards, per
verdict, and falls back to `judge` one by one when the task has none. One exception passes through on
purpose: `ScorerUnavailable`, raised by a scorer whose service is down for the whole batch, stops the run
with its message instead of training on a batch of errors.

The limit is `task.max_abs_reward` in the config; `build_task` records it on the task it builds,
so every caller applies the same limit without passing it around.

User code cannot end the run: any BaseException from `score` (`SystemExit`, `GeneratorExit`, a
custom subclass, a `KeyboardInterrupt` it raises itself) is contained, and the detail names the
function and what it raised. Only a real Ctrl-C goes through: `judge` wraps the process's SIGINT
handler with one that counts deliveries, and a `KeyboardInterrupt` is re-raised exactly when a SIGINT
arrived while `score` ran. A count rather than a guess from the exception, because a raised and a
delivered `KeyboardInterrupt` look the same; and signals reach only the main thread, so a `score`
running in another thread, or under an ignored SIGINT, never sees a real one.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import traceback
from typing import Optional

from rlvr.tasks.task import Example, Verdict

DEFAULT_MAX_ABS_REWARD = 1e6


class ScorerUnavailable(RuntimeError):
    """A scorer's service (a judge endpoint) failed for every completion of a batch: the run stops, naming
    what to check. The only exception `judge_batch` lets through."""


def _error(task, detail: str, names=None, verifier: str = "", version: str = "") -> Verdict:
    names = tuple(getattr(task, "component_names", ())) if names is None else tuple(names)
    return Verdict(components={name: math.nan for name in names}, total=math.nan, status="error",
                   verifier=verifier or str(getattr(task, "name", type(task).__name__)), version=version,
                   correct=False, detail=detail[:500])


def reward_problem(verdict: Verdict, max_abs_reward: float) -> Optional[str]:
    """Why the verdict's numbers cannot be used as rewards, or None when they can (NaN allowed)."""
    numbers = {"total": verdict.total, **{f"component {name!r}": value for name, value in verdict.components.items()}}
    for label, value in numbers.items():
        try:
            value = float(value)
        except (TypeError, ValueError):
            return f"{label} is not a number ({value!r})"
        if math.isinf(value) or (math.isfinite(value) and abs(value) > max_abs_reward):
            return f"{label} {value!r} is beyond the limit of {max_abs_reward:g} (task.max_abs_reward)"
    return None


class _SigintCounter:
    """A SIGINT handler that counts each delivery, then hands it to the handler it replaced."""

    def __init__(self, previous) -> None:
        self.previous = previous

    def __call__(self, signum, frame):
        global _SIGINTS
        _SIGINTS += 1
        return self.previous(signum, frame)


_SIGINTS = 0  # SIGINTs delivered since the counter was installed


def _count_sigints() -> int:
    """SIGINTs delivered so far, or -1 outside the main thread (which a SIGINT never interrupts).

    In the main thread it first wraps the current Python SIGINT handler in the counter, if not yet.
    """
    if threading.current_thread() is not threading.main_thread():
        return -1
    current = signal.getsignal(signal.SIGINT)
    if callable(current) and not isinstance(current, _SigintCounter):
        signal.signal(signal.SIGINT, _SigintCounter(current))
    return _SIGINTS


def _raised(task, exc: BaseException, method: str = "score") -> str:
    """`score of task 'x' (module.Class.score) raised SystemExit: 3 (at file.py:12 in helper)`."""
    score = getattr(task, method, None)
    where = f"{getattr(score, '__module__', '?')}.{getattr(score, '__qualname__', type(score).__name__)}"
    message = f": {exc}" if str(exc) else ""
    frames = traceback.extract_tb(exc.__traceback__)
    origin = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    name = getattr(task, "name", type(task).__name__)
    return f"{method} of task {name!r} ({where}) raised {type(exc).__name__}{message}{origin}"


def judge(task, completion: str, example: Example, max_abs_reward: Optional[float] = None) -> Verdict:
    """`task.score(completion, example)`, guarded: never raises (but for a real Ctrl-C), never
    returns an unusable reward.

    `max_abs_reward` defaults to the task's `max_abs_reward` (set by `build_task`), else 1e6.
    """
    return _guarded(task, "score", (completion, example), max_abs_reward)


def error_verdict(task, detail: str) -> Verdict:
    """A verdict with status `error` and every component NaN (left out of its group's advantage)."""
    return _error(task, detail)


def judge_episode(task, episode, max_abs_reward: Optional[float] = None) -> Verdict:
    """`task.score_episode(episode)` for an environment's finished episode, guarded as `judge` guards `score`."""
    return _guarded(task, "score_episode", (episode,), max_abs_reward)


def judge_batch(task, completions, examples, max_abs_reward: Optional[float] = None) -> list[Verdict]:
    """One guarded verdict per (completion, example): `task.score_batch` when the task has one, else `judge`
    one by one. A `score_batch` that raises (but `ScorerUnavailable`) or returns the wrong number of
    verdicts gives every row an `error` verdict; each verdict is checked as `judge` checks one."""
    completions, examples = list(completions), list(examples)
    if not callable(getattr(task, "score_batch", None)):
        return [judge(task, completion, example, max_abs_reward) for completion, example in zip(completions, examples)]
    limit = float(max_abs_reward if max_abs_reward is not None
                  else getattr(task, "max_abs_reward", DEFAULT_MAX_ABS_REWARD))
    sigints = _count_sigints()
    try:
        verdicts = task.score_batch(completions, examples)
    except ScorerUnavailable:
        raise
    except KeyboardInterrupt as exc:
        if sigints >= 0 and _SIGINTS != sigints:
            raise
        return [_error(task, _raised(task, exc, "score_batch")) for _ in completions]
    except BaseException as exc:  # noqa: BLE001 - user code must not stop a run
        return [_error(task, _raised(task, exc, "score_batch")) for _ in completions]
    if not isinstance(verdicts, (list, tuple)) or len(verdicts) != len(completions):
        got = f"{len(verdicts)} verdicts" if isinstance(verdicts, (list, tuple)) else type(verdicts).__name__
        return [_error(task, f"score_batch returned {got} for {len(completions)} completions") for _ in completions]
    return [_checked(task, verdict, "score_batch", limit) for verdict in verdicts]


def _checked(task, verdict, method: str, limit: float) -> Verdict:
    if not isinstance(verdict, Verdict):
        return _error(task, f"{method} returned {type(verdict).__name__}, not a Verdict")
    problem = reward_problem(verdict, limit)
    if problem is not None:
        return _error(task, f"unscorable: {problem}", verdict.components, verdict.verifier, verdict.version)
    return verdict


def _guarded(task, method: str, args: tuple, max_abs_reward: Optional[float]) -> Verdict:
    limit = float(max_abs_reward if max_abs_reward is not None
                  else getattr(task, "max_abs_reward", DEFAULT_MAX_ABS_REWARD))
    sigints = _count_sigints()
    try:
        verdict = getattr(task, method)(*args)
    except KeyboardInterrupt as exc:
        if sigints >= 0 and _SIGINTS != sigints:  # a real Ctrl-C arrived while score ran: the user stops
            raise
        return _error(task, _raised(task, exc, method))
    except BaseException as exc:  # noqa: BLE001 - user code must not stop a run (SystemExit included)
        return _error(task, _raised(task, exc, method))
    return _checked(task, verdict, method, limit)
