"""The in-process half of `verifiers:<taskset>`: verifiers' asyncio code driven from rlvr's synchronous calls.

verifiers 0.4 is asyncio throughout: `@vf.reward` functions, `@vf.tool` methods and an `Env`'s
`run()` are coroutines, and `run()` stays suspended between the turns of an episode while rlvr's
driver samples the next one. So one event loop runs in a daemon thread for the whole process
(`LOOP`); every verifiers coroutine runs there and rlvr's thread waits for its result. Here also:
a transcript as a verifiers `Trace` (what its rewards read), a taskset's tool servers as rlvr
`Tool`s called in this process (no MCP server), and the `Agent` stand-in an `Env.run()` drives, whose
turns are the policy's (`BridgedAgent`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rlvr.tools.toolbox import DEFAULT_TIMEOUT_SECONDS, Tool
from rlvr.tools.tool_schema import function_schema

DEFAULT_TURN_TIMEOUT_SECONDS = 60.0  # how long rlvr waits for an Env's run() to answer one turn


class EventLoopThread:
    """One asyncio loop in a daemon thread, started on first use; `run` waits for a coroutine's result."""

    def __init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="rlvr-verifiers-loop",
                                                daemon=True)
                self._thread.start()
            return self._loop

    def submit(self, coroutine) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine, timeout: Optional[float] = None) -> Any:
        """The coroutine's result (its exception raised here); TimeoutError after `timeout` seconds."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a verifiers coroutine cannot wait for another on the loop thread")
        future = self.submit(coroutine)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"took longer than {timeout:g} s") from None


LOOP = EventLoopThread()


# -- transcripts

def chat_messages(data) -> list[dict]:
    """A task's opening messages (its system prompt, then its prompt) as rlvr chat messages."""
    from verifiers.v1.types import content_text

    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    else:
        messages += [{"role": message.role, "content": content_text(getattr(message, "content", None))}
                     for message in data.prompt or []]
    return messages


def new_trace(task):
    """An empty verifiers `Trace` of `task`, its state of the task's own state class."""
    import verifiers.v1 as vf
    from verifiers.v1.state import state_cls

    return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                    agent=vf.AgentInfo(config=vf.AgentConfig()), state=state_cls(type(task))())


def append_message(trace, message, sampled: bool = False) -> None:
    """Add `message` (a verifiers message or a chat dict) at the end of the trace's one branch."""
    from verifiers.v1.dialects.chat import parse_message
    from verifiers.v1.graph import MessageNode

    if isinstance(message, dict):
        message = parse_message(message)
    parent = len(trace.nodes) - 1 if trace.nodes else None
    trace.nodes.append(MessageNode(parent=parent, message=message, sampled=sampled))


def prompted_trace(task):
    trace = new_trace(task)
    for message in chat_messages(task.data):
        append_message(trace, message)
    return trace


def assistant_message(text: str, calls: list[tuple[str, str, dict]] = ()):
    """The policy's turn: its text and the calls read from it, as `(id, tool name, arguments)`."""
    import verifiers.v1 as vf

    tool_calls = [vf.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))
                  for call_id, name, arguments in calls] or None
    return vf.AssistantMessage(content=text, tool_calls=tool_calls)


async def score_trace(task, trace, timeout: float) -> None:
    """The task's own scoring (`Task.score`: metrics, then weighted rewards) of `trace`, in place."""
    async with asyncio.timeout(timeout):
        await task.score(trace)


# -- tools

@dataclass(frozen=True)
class ToolMethod:
    """One `@vf.tool` method of a tool server, under the name verifiers shows the model (`<server>_<tool>`)."""

    name: str
    server: Any
    method: Callable
    schema: dict


def tool_methods(servers) -> list[ToolMethod]:
    from verifiers.v1.utils.decorators import discover_decorated

    found = []
    for server in servers:
        for method in discover_decorated(server, "tool"):
            own = getattr(method, "tool_name", None) or method.__name__
            name = f"{server.server_name}_{own}" if server.server_name else own
            try:
                schema = function_schema(method, name)
            except ValueError as exc:
                raise ValueError(f"verifiers tool {type(server).__name__}.{method.__name__}: {exc}") from None
            found.append(ToolMethod(name, server, method, schema))
    names = [tool.name for tool in found]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"verifiers tools: two tools are named {duplicates[0]!r}")
    return found


async def _call_with_state(tool: ToolMethod, trace, arguments: dict) -> Any:
    """Call the method with the episode's state as the server's (verifiers syncs it over a channel; here
    it is the same object, or a copy written back when the server declares another state class)."""
    from verifiers.v1.mcp.server import _call_state

    own_class = tool.server._state_cls
    shared = isinstance(trace.state, own_class)
    state = trace.state if shared else own_class.model_validate(trace.state.model_dump())
    token = _call_state.set(state)
    try:
        result = tool.method(**arguments)
        if inspect.isawaitable(result):
            result = await result
    finally:
        _call_state.reset(token)
    if not shared:
        trace.state = type(trace.state).model_validate({**trace.state.model_dump(), **state.model_dump()})
    return result


def episode_tools(methods: list[ToolMethod], servers_by_type: dict, trace,
                  timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> list[Tool]:
    """rlvr `Tool`s that call this episode's servers (`servers_by_type`: the schema server's type -> the
    episode's instance) with the episode's trace state; rlvr's `call_tool` bounds each call's time."""
    tools = []
    for method in methods:
        server = servers_by_type.get(type(method.server), method.server)
        bound = ToolMethod(method.name, server, getattr(server, method.method.__name__), method.schema)

        def call(_tool=bound, **arguments):
            return LOOP.run(_call_with_state(_tool, trace, arguments))

        tools.append(Tool(method.name, call, method.schema, timeout_seconds))
    return tools


async def open_servers(servers, task=None) -> None:
    """verifiers' server lifecycle: `setup()`, then `setup_task(task)` for a per-rollout server."""
    for server in servers:
        await server.setup()
        if task is not None:
            await server.setup_task(task)


# -- an Env's run(), turn by turn

@dataclass
class Exchange:
    """The channel between an `Env.run()` on the loop and rlvr's driver, for one episode.

    The env side puts `("open", trace)` when the policy's seat starts, `("user", text)` for each user
    turn it sends, and `("done", error_or_None)` when `run()` (and `finalize`) returned; the driver
    side resolves the seat's pending turn with the policy's segment, or with None when rlvr cut the
    episode (a verifiers `terminated` segment)."""

    to_driver: "queue.Queue[tuple[str, Any]]" = field(default_factory=queue.Queue)
    pending: Optional[asyncio.Future] = None
    trace: Any = None
    finished: bool = False
    over: bool = False  # rlvr cut the episode: the seat takes no more turns

    async def wait_for_policy(self, message: Optional[str]):
        """Hand the driver the user turn `message` (None: the opening) and wait for the policy's segment."""
        self.pending = asyncio.get_running_loop().create_future()
        self.to_driver.put(("user", message) if message is not None else ("open", self.trace))
        return await self.pending

    def resolve(self, segment) -> None:
        """From the driver's thread: the seat's pending turn returns `segment`."""
        def settle() -> None:
            if self.pending is not None and not self.pending.done():
                self.pending.set_result(segment)
        LOOP.loop.call_soon_threadsafe(settle)


class BridgedInteraction:
    """What `agent.interaction(task)` yields: each `turn()` is one segment of the policy's turns."""

    def __init__(self, agent: "BridgedAgent", trace) -> None:
        self.agent, self.trace, self._started = agent, trace, False

    async def turn(self, message=None):
        from verifiers.v1.agent import Segment

        exchange = self.agent.exchange
        if exchange.over:
            return Segment(messages=[], terminated=True)
        if not isinstance(message, (str, type(None))):
            raise TypeError("rlvr's verifiers bridge takes a user turn as text")
        if message is None and self._started:
            raise ValueError("nothing to run a turn on: this exchange takes its next user message")
        if message is not None and not self._started:
            raise ValueError("rlvr opens every episode with the task's own prompt: take the first reply with a "
                             "bare turn()")
        if message is not None:
            append_message(self.trace, {"role": "user", "content": message})
        self._started = True
        segment = await exchange.wait_for_policy(message)
        if segment is None:
            exchange.over = True
            return Segment(messages=[], terminated=True)
        return segment


class BridgedAgent:
    """The policy's seat in an `Env.run()`: its task opens the episode and its turns are sampled by rlvr."""

    def __init__(self, name: str, exchange: Exchange, seed_task, score: Callable) -> None:
        self.name, self.exchange, self.seed_task, self._score = name, exchange, seed_task, score
        self.trainable = True

    def _open(self, task):
        if chat_messages(task.data) != chat_messages(self.seed_task.data):
            raise ValueError(f"seat {self.name!r} was handed a task whose prompt is not the taskset's: rlvr starts "
                             "every episode from the taskset's prompt")
        if self.exchange.trace is not None:
            raise ValueError(f"seat {self.name!r} ran twice in one episode; rlvr trains one run per episode")
        self.exchange.trace = prompted_trace(task)
        return self.exchange.trace

    async def run(self, task, **_):
        """One segment on the task's prompt, scored: as `Agent.run` returns a finished trace."""
        interaction = BridgedInteraction(self, self._open(task))
        await interaction.turn()
        await self._score(task, interaction.trace)
        return interaction.trace

    @contextlib.asynccontextmanager
    async def interaction(self, task, **_):
        interaction = BridgedInteraction(self, self._open(task))
        try:
            yield interaction
        finally:
            await self._score(task, interaction.trace)


class UnplayedAgent:
    """A seat rlvr has no model for: using it fails the episode, naming the seat."""

    def __init__(self, name: str, policy_seat: str) -> None:
        self.name, self._policy_seat, self.trainable = name, policy_seat, False

    def _refuse(self, *_, **__):
        raise ValueError(f"seat {self.name!r} has no model in rlvr (the policy plays {self._policy_seat!r}; "
                         "task.options.seat chooses)")

    run = interaction = _refuse
