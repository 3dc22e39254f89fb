"""Run the tool calls of one assistant turn and write the environment's reply.

`run_tool_calls` reads the calls (`rlvr.tools.formats`), checks each one's arguments against the
tool's schema, runs it, and returns the reply text with per-tool call and error counts, the shape
`EnvReply(content, role="tool", tool_calls=..., tool_errors=...)` takes. Nothing the model writes
makes it raise: a call that cannot be read, an unknown tool (the message names the offered ones),
wrong arguments, a timeout or an exception in the tool becomes an error message to the model and
one counted error. Outputs longer than `MAX_OUTPUT_CHARS` are cut there, saying so.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from rlvr.tools.formats import CallFormat, ToolCall
from rlvr.tools.toolbox import Tool

MAX_OUTPUT_CHARS = 2000  # of one call's result; a model gains nothing from pages of output
MAX_CALLS_PER_TURN = 8  # calls past this in one turn are errors, not run
# Count keys for calls that name no offered tool: the model's own inventions do not become metric names.
MALFORMED_CALL = "malformed_call"
UNKNOWN_TOOL = "unknown_tool"
JSON_CHECKS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


class ToolError(Exception):
    """Raised by a tool for a failure whose message is for the model as it is (no exception type in front)."""


@dataclass
class CallOutcome:
    tool: str  # the count key: the tool's name, MALFORMED_CALL or UNKNOWN_TOOL
    output: str  # what the model is told
    ok: bool


@dataclass
class ToolRun:
    content: Optional[str]  # the reply; None when the turn holds no call
    outcomes: list[CallOutcome] = field(default_factory=list)
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """`text` cut to `limit` characters, with a note saying how many were dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output truncated: {len(text) - limit} more characters]"


def _matches(value: Any, schema: dict) -> bool:
    if "anyOf" in schema:
        return any(_matches(value, member) for member in schema["anyOf"])
    check = JSON_CHECKS.get(schema.get("type"))
    if check is not None and not check(value):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "items" in schema and isinstance(value, list):
        return all(_matches(item, schema["items"]) for item in value)
    return True


def check_arguments(tool: Tool, arguments: dict) -> Optional[str]:
    """Why `arguments` do not fit `tool`'s schema (missing, unexpected, wrong type), or None when they do."""
    properties = tool.parameters["properties"]
    missing = [name for name in tool.parameters["required"] if name not in arguments]
    if missing:
        return f"missing argument {missing[0]!r}; {tool.name} takes {', '.join(properties) or 'no arguments'}"
    unexpected = sorted(set(arguments) - set(properties))
    if unexpected:
        return f"unexpected argument {unexpected[0]!r}; {tool.name} takes {', '.join(properties) or 'no arguments'}"
    for name, value in arguments.items():
        if not _matches(value, properties[name]):
            wanted = properties[name].get("type") or "one of its types"
            return f"argument {name!r} must be {wanted}, got {type(value).__name__}"
    return None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def call_tool(tool: Tool, arguments: dict) -> str:
    """The tool's result as text; raises ToolError (timeout) or whatever the tool raised."""
    if tool.timeout_seconds is None:
        return _as_text(tool.function(**arguments))
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = tool.function(**arguments)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            result["error"] = exc

    # A thread stops the waiting, not the work: a tool that may hang belongs in the worker (`python`).
    worker = threading.Thread(target=target, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(tool.timeout_seconds)
    if worker.is_alive():
        raise ToolError(f"timed out after {tool.timeout_seconds:g} s")
    if "error" in result:
        raise result["error"]
    return _as_text(result["value"])


def run_call(call: ToolCall, tools_by_name: dict[str, Tool]) -> CallOutcome:
    """One call's outcome; never raises."""
    if call.error is not None:
        return CallOutcome(call.name if call.name in tools_by_name else MALFORMED_CALL,
                           f"malformed call: {call.error}", ok=False)
    tool = tools_by_name.get(call.name)
    if tool is None:
        return CallOutcome(UNKNOWN_TOOL, f"unknown tool {call.name[:60]!r}; the tools are "
                                         f"{', '.join(tools_by_name) or '(none)'}", ok=False)
    problem = check_arguments(tool, call.arguments)
    if problem is not None:
        return CallOutcome(tool.name, f"bad arguments: {problem}", ok=False)
    try:
        return CallOutcome(tool.name, call_tool(tool, call.arguments), ok=True)
    except ToolError as exc:
        return CallOutcome(tool.name, str(exc), ok=False)
    except BaseException as exc:  # noqa: BLE001 - a tool's own failure is told to the model
        return CallOutcome(tool.name, f"{type(exc).__name__}: {exc}", ok=False)


def render_outcomes(outcomes: Sequence[CallOutcome], max_output_chars: int = MAX_OUTPUT_CHARS) -> str:
    """The reply: one call's output alone, several as `name: output` lines; a failure starts with `error: `."""
    texts = [truncate_output(outcome.output if outcome.ok else f"error: {outcome.output}", max_output_chars)
             for outcome in outcomes]
    if len(outcomes) == 1:
        return texts[0]
    return "\n".join(f"{outcome.tool}: {text}" for outcome, text in zip(outcomes, texts))


def run_tool_calls(text: str, tools: Sequence[Tool], call_format: CallFormat, *,
                   max_output_chars: int = MAX_OUTPUT_CHARS, max_calls: int = MAX_CALLS_PER_TURN) -> ToolRun:
    """Read and run the calls in assistant turn `text` against `tools`; see the module docstring."""
    tools_by_name = {tool.name: tool for tool in tools}
    run = ToolRun(content=None)
    calls = call_format.parse(text, tools)
    for index, call in enumerate(calls):
        if index < max_calls:
            outcome = run_call(call, tools_by_name)
        else:
            outcome = CallOutcome(call.name if call.name in tools_by_name else MALFORMED_CALL,
                                  f"not run: at most {max_calls} calls per turn", ok=False)
        run.outcomes.append(outcome)
        run.tool_calls[outcome.tool] = run.tool_calls.get(outcome.tool, 0) + 1
        if not outcome.ok:
            run.tool_errors[outcome.tool] = run.tool_errors.get(outcome.tool, 0) + 1
    if run.outcomes:
        run.content = render_outcomes(run.outcomes, max_output_chars)
    return run
