"""`verifiers:<taskset>`: a Prime Intellect `verifiers` 0.4 environment as an rlvr task or environment.

`task.name=verifiers:my_taskset` loads the installed taskset package `my_taskset` the way
`vf.load_environment` does (its `__all__` exports a `vf.Taskset`; an `Env` subclass beside it, or
`task.options.env.id`, says how one task becomes an episode). `task.options` are the taskset's config
fields, apart from this adapter's own: `env` (the env config: `id` and its own fields), `eval_taskset`
(taskset fields for the held-out tasks, e.g. `{split: test}`; without it the last `eval_size` tasks are
held out, by default a fifth of them and at most 100), `size` (tasks read, default 10000), `max_turns`,
`call_format` (`tagged`, the default, or `chat_template`), `seat` (the env's role the policy plays) and
`timeout_seconds` (scoring, and each wait for an env's `run()`; default 60).

Prompts are each task's `system_prompt` and `prompt`. Components are the task's `@vf.reward`
functions, by name, weighted as their `weight` says (`task.reward_weights` overrides); the total is the
weighted sum, the `Trace.reward` verifiers computes. A task without tools and without an `Env` of its own
is a single-turn `Task`. One whose tasks or taskset declare tool servers (`vf.Toolset`, `@vf.tool`
methods), or whose `Env` has a `run()` of its own, is an `Environment`: the tools are offered in rlvr's call
format and run by this adapter in this process with the episode's state (verifiers serves them over MCP
and its harness runs the calls); a turn without a call ends the segment, as verifiers' chat harness does;
the `Env`'s `run()` then sends the next user turn (`interaction.turn(text)`) or ends the episode.
`@vf.stop` predicates on the `Trace` or the `Response` end it too. See `rlvr.tasks.verifiers_bridge`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from rlvr.tasks.task import Example, Verdict, check_count_option, check_seconds_option, prompt_text, resolve_weights
from rlvr.tasks.task import train_indices, weighted_total
from rlvr.tasks.environment import EnvReply, Episode, add_counts
from rlvr.tasks.verifiers_bridge import (DEFAULT_TURN_TIMEOUT_SECONDS, LOOP, BridgedAgent, Exchange, UnplayedAgent,
                                         append_message, assistant_message, chat_messages, episode_tools,
                                         open_servers, prompted_trace, score_trace, tool_methods)
from rlvr.tools.execution import run_tool_calls
from rlvr.tools.formats import FORMATS

VERSION = "1"
EXTRA = "pip install 'rlvr[verifiers]' (verifiers 0.4, Python >= 3.11)"
DEFAULT_SIZE = 10_000
DEFAULT_MAX_TURNS = 10
MAX_EVAL_SIZE = 100
# The component holding what an Env's finalize() records (cross-agent judgement, names unknown beforehand): the
# weighted sum of those rewards, so the total stays verifiers' `Trace.reward`.
FINALIZE = "finalize"


def require_verifiers(name: str):
    """`verifiers.v1`, or an ImportError naming the extra that installs it."""
    try:
        import verifiers
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportError(f"{name} needs the `verifiers` package: {EXTRA} ({exc})") from None
    if not verifiers.__version__.startswith("0.4"):
        raise ImportError(f"{name} needs verifiers 0.4, found {verifiers.__version__}: {EXTRA}")
    return vf


def installed_environments() -> list[str]:
    """Taskset ids that can be loaded: verifiers' own and the installed packages that require verifiers."""
    import pkgutil
    from importlib import metadata

    from verifiers.v1 import tasksets

    names = {module.name for module in pkgutil.iter_modules(tasksets.__path__)}
    for dist in metadata.distributions():
        own = (dist.metadata["Name"] or "").lower()
        if own != "verifiers" and any(re.match(r"verifiers\b", r) for r in dist.requires or ()):
            names.update((dist.read_text("top_level.txt") or "").split() or [own.replace("-", "_")])
    return sorted(names)


def load_taskset(name: str, taskset_id: str, taskset_options: dict, env_options: dict):
    """`(env config, taskset)` as verifiers resolves them; an unknown id lists the installed ones."""
    import pydantic
    from verifiers.v1 import resolve_env_config
    from verifiers.v1.utils.loaders import load_taskset as vf_load_taskset

    try:
        config = resolve_env_config({**env_options, "taskset": {**taskset_options, "id": taskset_id}})
        return config, vf_load_taskset(config.taskset)
    except ModuleNotFoundError as exc:
        raise KeyError(f"{name}: no verifiers environment {taskset_id!r} ({exc}); installed: "
                       f"{', '.join(installed_environments()) or '(none)'}") from None
    except (pydantic.ValidationError, TypeError, AttributeError) as exc:
        raise ValueError(f"{name}: task.options do not make a taskset config: {exc}") from None


def _needs_runtime(function) -> bool:
    import inspect

    parameter = inspect.signature(function).parameters.get("runtime")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def check_supported(name: str, task) -> None:
    """Refuse, naming it, what needs verifiers' sandboxes or model clients, which rlvr does not run."""
    from verifiers.v1.task import Task as VfTask
    from verifiers.v1.utils.decorators import discover_decorated

    kind = type(task).__name__
    problems = []
    if task.NEEDS_CONTAINER or task.data.image:
        problems.append("it needs a container")
    problems += [f"its {hook}() needs a runtime" for hook in ("setup", "finalize")
                 if getattr(type(task), hook) is not getattr(VfTask, hook)]
    if task.config.judges:
        problems.append("its judges need a judge model")
    problems += [f"{fn.__name__} needs a runtime" for kind_ in ("reward", "metric") for fn in task.hooks(kind_)
                 if _needs_runtime(fn)]
    if discover_decorated(task, "intercept"):
        problems.append("@vf.intercept hooks rewrite requests and responses; rlvr trains on the tokens sampled")
    if problems:
        raise ValueError(f"{name}: task {kind} cannot run in rlvr: {'; '.join(problems)}")
    if not task.hooks("reward"):
        raise ValueError(f"{name}: task {kind} has no @vf.reward functions to score with")


@dataclass
class EpisodeState:
    """One episode: the verifiers task and its trace, this episode's tools, and its env exchange if any."""

    task: Any
    trace: Any = None
    tools: list = field(default_factory=list)
    exchange: Optional[Exchange] = None
    error: Optional[str] = None
    segment_start: int = 0  # the trace node where the policy's current segment began
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)


class VerifiersTask:
    """A single-turn verifiers taskset: one completion per prompt, scored by the task's own rewards."""

    def __init__(self, environment: Optional[str] = None, reward_weights=None, use_chat_template=True, seed=0,
                 env: Optional[dict] = None, eval_taskset: Optional[dict] = None, eval_size: Optional[int] = None,
                 size: int = DEFAULT_SIZE, max_turns: Optional[int] = None, call_format: str = "tagged",
                 seat: Optional[str] = None, timeout_seconds: float = DEFAULT_TURN_TIMEOUT_SECONDS, **taskset_options):
        if not environment:
            raise ValueError("verifiers: name the taskset, e.g. task.name=verifiers:my_taskset")
        self.name = f"verifiers:{environment}"
        self.vf = require_verifiers(self.name)
        self.use_chat_template, self.seed = use_chat_template, seed
        self.timeout_seconds = check_seconds_option(self.name, "timeout_seconds", timeout_seconds)
        self.env_config, self.taskset = load_taskset(self.name, environment, taskset_options, dict(env or {}))
        tasks = list(itertools.islice(iter(self.taskset), check_count_option(self.name, "size", size, minimum=1)))
        if not tasks:
            raise ValueError(f"{self.name}: the taskset yielded no tasks")
        self.train, self.held_out = self._split(environment, tasks, taskset_options, env, eval_taskset, eval_size)
        probe = self.train[0]
        check_supported(self.name, probe)
        from verifiers.v1.utils.loaders import environment_class

        self.env_class = environment_class(self.env_config.taskset.id, self.env_config.id)
        rewards = probe.hooks("reward")
        self.default_weights = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in rewards}
        if self.env_class is not self.vf.SingleAgentEnv:
            if FINALIZE in self.default_weights:
                raise ValueError(f"{self.name}: a reward function may not be named {FINALIZE!r} (rlvr's component "
                                 "for the rewards the env's finalize() records)")
            self.default_weights[FINALIZE] = 1.0
        self.component_names = tuple(self.default_weights)
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.primary_component = max(self.component_names, key=lambda c: self.default_weights[c])
        self.stop_strings: tuple[str, ...] = ()
        self._options = {"max_turns": max_turns, "call_format": call_format, "seat": seat}

    def _split(self, environment, tasks, taskset_options, env, eval_taskset, eval_size):
        if eval_taskset is not None:
            _, held_out_set = load_taskset(self.name, environment, {**taskset_options, **dict(eval_taskset)},
                                           dict(env or {}))
            count = MAX_EVAL_SIZE if eval_size is None else check_count_option(self.name, "eval_size", eval_size)
            return tasks, list(itertools.islice(iter(held_out_set), count))
        count = (min(MAX_EVAL_SIZE, len(tasks) // 5) if eval_size is None
                 else check_count_option(self.name, "eval_size", eval_size))
        if count >= len(tasks):
            raise ValueError(f"{self.name}: holding out task.options.eval_size={count} of {len(tasks)} tasks leaves "
                             "none to train on; hold out fewer, or name a held-out taskset in eval_taskset")
        return tasks[:len(tasks) - count], tasks[len(tasks) - count:]

    # -- examples

    def prompt_messages(self, task) -> list[dict]:
        return chat_messages(task.data)

    def _example(self, split: str, index: int) -> Example:
        task = (self.train if split == "train" else self.held_out)[index]
        messages = self.prompt_messages(task)
        return Example(prompt=messages if self.use_chat_template else prompt_text(messages),
                       ground_truth=getattr(task.data, "answer", None),
                       metadata={"split": split, "index": index, "vf_idx": task.data.idx})

    def task_of(self, example: Example):
        """The verifiers task an example was made from."""
        return (self.train if example.metadata["split"] == "train" else self.held_out)[example.metadata["index"]]

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self._example("eval", i) for i in range(min(count, len(self.held_out)))]
        if split != "train":
            raise ValueError(f"{self.name}: unknown split {split!r}; valid splits: train, eval")
        indices = train_indices(count, len(self.train), seed)
        return [self._example("train", i) for i in indices]

    def iter_eval(self) -> Iterator[Example]:
        return iter(self.examples("eval", len(self.held_out), 0))

    # -- scoring

    async def score_async(self, task, trace) -> None:
        """Score `trace` in place, on the loop; a failure is kept on the trace (`info`), as verifiers keeps it
        on its own, and becomes the verdict's status."""
        try:
            await score_trace(task, trace, self.timeout_seconds)
        except TimeoutError:
            trace.info["rlvr_scoring"] = ("timeout", f"scoring took longer than {self.timeout_seconds:g} s")
        except Exception as exc:  # noqa: BLE001 - a reward function's failure is this completion's verdict
            trace.info["rlvr_scoring"] = ("error", f"{type(exc).__name__}: {exc}")

    def _score(self, task, trace) -> None:
        LOOP.run(self.score_async(task, trace))

    def verdict(self, trace, error: Optional[str] = None) -> Verdict:
        """The trace's rewards as a verdict: one component per reward function, NaN where none was recorded."""
        status, detail = trace.info.get("rlvr_scoring", ("ok", ""))
        if error is not None:
            status, detail = "error", error
        functions = [name for name in self.component_names if name != FINALIZE]
        unnamed = sorted(set(trace.rewards) - set(functions))
        if status == "ok" and unnamed and FINALIZE not in self.component_names:
            status, detail = "error", (f"rewards {unnamed} are not reward functions of the task (keyed scores): "
                                       "rlvr needs one score per @vf.reward function")
        components = {name: math.nan if status != "ok" or trace.rewards.get(name) is None
                      else float(trace.rewards[name].score) for name in functions}
        if FINALIZE in self.component_names:
            components[FINALIZE] = (math.nan if status != "ok" else
                                    float(sum(trace.rewards[name].value for name in unnamed
                                              if trace.rewards[name] is not None)))
        total = weighted_total(components, self.weights)
        if status == "ok" and not math.isfinite(total):
            status, detail = "unjudgeable", "no reward function recorded a score"
        stop = f"stop: {trace.stop_condition}" if trace.stop_condition else ""
        return Verdict(components=components, total=total, status=status, verifier=self.name, version=VERSION,
                       correct=status == "ok" and components[self.primary_component] >= 1.0,
                       detail="; ".join(part for part in (detail, stop) if part))

    def score(self, completion: str, example: Example) -> Verdict:
        task = self.task_of(example)
        trace = prompted_trace(task)
        append_message(trace, assistant_message(completion), sampled=True)
        self._score(task, trace)
        return self.verdict(trace)


class VerifiersEnvironment(VerifiersTask):
    """A verifiers taskset with tools or an `Env` of its own: an rlvr `Environment` (see the module docstring)."""

    def __init__(self, environment: Optional[str] = None, **kwargs):
        super().__init__(environment, **kwargs)
        self._setup_episodes()

    @classmethod
    def from_task(cls, task: VerifiersTask) -> "VerifiersEnvironment":
        """The environment of a taskset already loaded as `task` (the taskset is not read twice)."""
        environment = cls.__new__(cls)
        environment.__dict__.update(task.__dict__)
        environment._setup_episodes()
        return environment

    def _setup_episodes(self) -> None:
        from verifiers.v1.configs.agent import agent_config_fields
        from verifiers.v1.session import hook_boundary
        from verifiers.v1.types import Request

        options = self._options
        if options["call_format"] not in FORMATS:
            raise ValueError(f"{self.name}: task.options.call_format={options['call_format']!r}; valid choices: "
                             f"{', '.join(FORMATS.names())}")
        self.call_format = FORMATS.get(options["call_format"])
        seats = agent_config_fields(self.env_config)
        self.seat = options["seat"] or (next(iter(seats)) if len(seats) == 1 else None)
        if self.seat not in seats:
            raise ValueError(f"{self.name}: task.options.seat={options['seat']!r}; the env's seats are "
                             f"{', '.join(seats)}: name the one the policy plays")
        default_turns = seats[self.seat].max_turns or DEFAULT_MAX_TURNS
        self.max_turns = check_count_option(self.name, "max_turns", options["max_turns"] or default_turns, minimum=1)
        self.env = None if self.env_class is self.vf.SingleAgentEnv else self.env_class(self.env_config)
        probe = self.train[0]
        self.shared_servers = type(self.taskset).toolsets(self.taskset.config)
        self._shared_open = False
        self.methods = tool_methods(type(probe).toolsets(probe.config) + self.shared_servers)
        self.tool_names = tuple(method.name for method in self.methods)
        self.tool_schemas = (tuple(method.schema for method in self.methods) if self.call_format.template_lists_tools
                             else ())
        self.stop_strings = self.call_format.stop_strings(episode_tools(self.methods, {}, None))
        stops = {fn.__name__: (hook_boundary(fn, allow_trace=True), fn) for fn in probe.hooks("stop")}
        if any(boundary is Request for boundary, _ in stops.values()):
            raise ValueError(f"{self.name}: @vf.stop predicates on the Request are not run by rlvr; "
                             "write them on the Trace or the Response")

    def prompt_messages(self, task) -> list[dict]:
        messages = chat_messages(task.data)
        instructions = self.call_format.instructions(episode_tools(self.methods, {}, None)) if self.methods else ""
        if not instructions:
            return messages
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": f"{messages[0]['content']}\n\n{instructions}"}, *messages[1:]]
        return [{"role": "system", "content": instructions}, *messages]

    def check_tokenizer(self, tokenizer) -> None:
        self.call_format.check_template(getattr(tokenizer, "chat_template", None))

    # -- the episode

    def start(self, example: Example) -> EpisodeState:
        state = EpisodeState(task=self.task_of(example))
        try:
            if not self._shared_open:
                LOOP.run(open_servers(self.shared_servers), self.timeout_seconds)
                self._shared_open = True
            servers = type(state.task).toolsets(state.task.config)
            LOOP.run(open_servers(servers, state.task), self.timeout_seconds)
            if self.env is None:
                state.trace = prompted_trace(state.task)
            else:
                state.exchange = Exchange()
                LOOP.submit(self._play(state.task, state.exchange))
                kind, value = state.exchange.to_driver.get(timeout=self.timeout_seconds)
                if kind != "open":
                    raise ValueError(value or f"the env's run() did not start seat {self.seat!r} with the task's "
                                              "prompt")
                state.trace = value
            state.segment_start = len(state.trace.nodes)
            instances = {type(server): server for server in servers + self.shared_servers}
            state.tools = episode_tools(self.methods, instances, state.trace)
        except Exception as exc:  # noqa: BLE001 - the episode is judged an error, the run goes on
            state.error = f"starting the episode failed: {type(exc).__name__}: {exc}"
        return state

    async def _play(self, task, exchange: Exchange) -> None:
        """The env's own episode (`setup`, `run`, `finalize`) with the policy in its seat."""
        vf, error = self.vf, None
        try:
            agents = vf.Agents(self.env.config, make=lambda name, spec: (
                BridgedAgent(name, exchange, task, self.score_async) if name == self.seat
                else UnplayedAgent(name, self.seat)))
            await self.env.setup(agents)
            await self.env.run(task, agents)
            if exchange.trace is None:
                raise ValueError(f"the env's run() never ran seat {self.seat!r}")
            episode = vf.Episode(env=vf.EnvInfo(id=self.env_config.env_id), traces=[exchange.trace],
                                 task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key))
            await self.env.finalize(task, episode)
        except Exception as exc:  # noqa: BLE001 - handed to the driver as the episode's error
            error = f"the env's episode failed: {type(exc).__name__}: {exc}"
        finally:
            exchange.finished = True
            exchange.to_driver.put(("done", error))

    def _stopped(self, state: EpisodeState, response=None) -> bool:
        """Run the task's @vf.stop predicates (on the Response when given, else on the Trace)."""
        from verifiers.v1.session import call_hook, hook_boundary
        from verifiers.v1.types import Response

        wanted = Response if response is not None else self.vf.Trace
        for fn in state.task.hooks("stop"):
            if hook_boundary(fn, allow_trace=True) is wanted:
                available = {Response: response, self.vf.Trace: state.trace}
                if LOOP.run(call_hook(fn, available), self.timeout_seconds):
                    state.trace.stop(fn.__name__)
                    return True
        return False

    def respond(self, state: EpisodeState, assistant_text: str) -> EnvReply:
        if state.error is not None:
            return EnvReply(done=True)
        try:
            return self._respond(state, assistant_text)
        except Exception as exc:  # noqa: BLE001 - never raises: the episode ends, judged an error
            state.error = f"{type(exc).__name__}: {exc}"
            return EnvReply(done=True)

    def _respond(self, state: EpisodeState, text: str) -> EnvReply:
        from verifiers.v1.agent import Segment
        from verifiers.v1.types import Response, ToolMessage

        calls = self.call_format.parse(text, state.tools)
        turn = state.trace.num_turns
        call_ids = [f"call_{turn}_{i}" for i in range(len(calls))]
        message = assistant_message(text, [(i, c.name, c.arguments) for i, c in zip(call_ids, calls)
                                           if c.arguments is not None and c.name in self.tool_names])
        append_message(state.trace, message, sampled=True)
        response = Response(id=f"rlvr-{turn}", created=0, model="policy", message=message,
                            finish_reason="tool_calls" if calls else "stop")
        if self._stopped(state, response):
            return EnvReply(done=True)
        if calls:
            run = run_tool_calls(text, state.tools, self.call_format)
            for call_id, outcome in zip(call_ids, run.outcomes):
                content = outcome.output if outcome.ok else f"error: {outcome.output}"
                append_message(state.trace, ToolMessage(tool_call_id=call_id, content=content, name=outcome.tool))
            add_counts(state.tool_calls, run.tool_calls)
            add_counts(state.tool_errors, run.tool_errors)
            done = self._stopped(state)
            return EnvReply(content=run.content, role="tool", done=done, tool_calls=run.tool_calls,
                            tool_errors=run.tool_errors)
        if state.exchange is None:
            state.trace.stop("agent_completed")
            return EnvReply(done=True)
        segment = Segment(messages=[node.message for node in state.trace.nodes[state.segment_start:]],
                          root_reply=None)
        state.exchange.resolve(segment)
        kind, value = state.exchange.to_driver.get(timeout=self.timeout_seconds)
        if kind == "done":
            state.error = value
            return EnvReply(done=True)
        state.segment_start = len(state.trace.nodes)
        if self._stopped(state):
            return EnvReply(done=True)
        return EnvReply(content=value, role="user")

    def score_episode(self, episode: Episode) -> Verdict:
        state = episode.state
        if not isinstance(state, EpisodeState) or state.trace is None:
            error = state.error if isinstance(state, EpisodeState) else "the episode never started"
            return Verdict(components=dict.fromkeys(self.component_names, math.nan), total=math.nan, status="error",
                           verifier=self.name, version=VERSION, detail=error or "")
        if episode.truncated_by is not None:
            state.trace.stop(episode.truncated_by)
        exchange = state.exchange
        if exchange is None:
            self._score(state.task, state.trace)
        elif not exchange.finished:
            exchange.over = True  # the seat's pending turn comes back terminated, as a verifiers limit does
            exchange.resolve(None)
            try:
                while True:
                    kind, value = exchange.to_driver.get(timeout=self.timeout_seconds)
                    if kind == "done":
                        state.error = state.error or value
                        break
            except Exception:  # noqa: BLE001 - queue.Empty: the env never finished
                state.error = state.error or f"the env's run() did not end within {self.timeout_seconds:g} s"
        return self.verdict(state.trace, state.error)


def runs_episodes(task: VerifiersTask) -> bool:
    """True when the taskset declares tool servers or has an `Env` of its own: then it runs as episodes."""
    probe = task.train[0]
    has_tools = bool(type(probe).toolsets(probe.config) or type(task.taskset).toolsets(task.taskset.config))
    return has_tools or task.env_class is not task.vf.SingleAgentEnv


def verifiers_task(environment: Optional[str] = None, **kwargs):
    """The `verifiers` task family: a `VerifiersEnvironment` when the taskset runs as episodes, else a
    single-turn `VerifiersTask`."""
    task = VerifiersTask(environment, **kwargs)
    return VerifiersEnvironment.from_task(task) if runs_episodes(task) else task
