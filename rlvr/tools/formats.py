"""How a model writes a tool call: the text it is told, how calls are read back, where its turn stops.

Two formats, registered in `FORMATS`:
  * `chat_template`: the JSON calls of the tokenizer's own tool format, for templates that have one
    (Qwen2.5, Qwen3, Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`). The template
    itself shows the tools to the model when given `tools=` schemas, so the format adds no words.
  * `tagged`: for models whose template has no tool format (the embedded SmolLM2): a call is the
    tool's name as a tag, `<calculator>123*45</calculator>`. The body is the argument itself when the
    tool takes one parameter, else a JSON object of arguments. Only the offered tools' names are read
    as calls; any other tag is prose.
Every format stops the turn at a call's closing tag (kept in the text), so the environment answers
there. A call that cannot be read (not closed, bad JSON, no name) comes back as a `ToolCall` with
an `error`, never as an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from rlvr.registry import Registry
from rlvr.tools.toolbox import Tool


@dataclass(frozen=True)
class ToolCall:
    """One call as read from an assistant turn; `error` says why it could not be read (then `arguments`
    is None, and `name` too when even the name is unknown)."""

    name: Optional[str]
    arguments: Optional[dict]
    text: str  # the call as the model wrote it
    error: Optional[str] = None


class CallFormat(Protocol):
    name: str
    template_lists_tools: bool  # the chat template lists the tools (`tools=`), not the format's own instructions

    def check_template(self, chat_template: Optional[str]) -> None:
        """Raise ValueError when a tokenizer with this chat template cannot use the format."""

    def instructions(self, tools: Sequence[Tool]) -> str:
        """What the prompt says about calling `tools` ("" when the chat template says it)."""

    def write_call(self, tool: Tool, arguments: dict) -> str:
        """A call of `tool` with `arguments`, as the model should write it."""

    def stop_strings(self, tools: Sequence[Tool]) -> tuple[str, ...]:
        """Strings that end a turn at the end of a call."""

    def parse(self, text: str, tools: Sequence[Tool]) -> list[ToolCall]:
        """The calls in one assistant turn, in order; never raises."""


def _json_arguments(body: str) -> tuple[Optional[dict], Optional[str]]:
    """`(arguments, None)` for a JSON object, else `(None, why not)`."""
    try:
        value = json.loads(body)
    except ValueError as exc:
        return None, f"the arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _scalar(body: str, schema: dict) -> tuple[Any, Optional[str]]:
    """A one-parameter tool's body as the parameter's JSON type (a string stays the text itself)."""
    kind = schema.get("type")
    if kind == "string" or kind is None:
        return body, None
    try:
        return json.loads(body), None
    except ValueError:
        return None, f"expected a {kind}, got {body[:60]!r}"


class TaggedFormat:
    name = "tagged"
    template_lists_tools = False

    def check_template(self, chat_template: Optional[str]) -> None:
        """Any template, or none: the prompt itself says how to call."""

    def instructions(self, tools: Sequence[Tool]) -> str:
        lines = ["To use a tool, write the call and stop; its result comes back in the next message."]
        for tool in tools:
            example = "ARGUMENT" if len(tool.parameters["properties"]) == 1 else "{JSON arguments}"
            lines.append(f"- <{tool.name}>{example}</{tool.name}>: {tool.description}")
        return "\n".join(lines)

    def write_call(self, tool: Tool, arguments: dict) -> str:
        properties = list(tool.parameters["properties"])
        if len(properties) == 1:
            value = arguments[properties[0]]
            body = value if isinstance(value, str) else json.dumps(value)
        else:
            body = json.dumps(arguments)
        return f"<{tool.name}>{body}</{tool.name}>"

    def stop_strings(self, tools: Sequence[Tool]) -> tuple[str, ...]:
        return tuple(f"</{tool.name}>" for tool in tools)

    def parse(self, text: str, tools: Sequence[Tool]) -> list[ToolCall]:
        if not tools:
            return []
        by_name = {tool.name: tool for tool in tools}
        opening = re.compile("<(" + "|".join(re.escape(name) for name in by_name) + ")>")
        calls: list[ToolCall] = []
        position = 0
        while True:
            match = opening.search(text, position)
            if match is None:
                return calls
            name = match.group(1)
            closing = f"</{name}>"
            end = text.find(closing, match.end())
            if end < 0:
                calls.append(ToolCall(name, None, text[match.start():],
                                      f"the call is not closed with {closing} (cut off?)"))
                return calls
            body = text[match.end():end].strip()
            calls.append(self._read(by_name[name], body, text[match.start():end + len(closing)]))
            position = end + len(closing)

    def _read(self, tool: Tool, body: str, written: str) -> ToolCall:
        properties = tool.parameters["properties"]
        if len(properties) == 1:
            (parameter, schema), = properties.items()
            value, error = _scalar(body, schema)
            arguments = None if error else {parameter: value}
        elif not properties and not body:
            arguments, error = {}, None
        else:
            arguments, error = _json_arguments(body)
        return ToolCall(tool.name, arguments, written, error)


TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def template_has_tool_format(chat_template: Optional[str]) -> bool:
    """True when a chat template renders `tools` and writes calls as `<tool_call>` JSON (Qwen2.5, Qwen3,
    Hermes): the templates the `chat_template` format reads."""
    return (bool(chat_template) and TOOL_CALL_OPEN in chat_template
            and re.search(r"\btools\b", chat_template) is not None)


def detect_format(chat_template: Optional[str]) -> str:
    """The format to use with a tokenizer's chat template: `chat_template` when it has a tool format, else `tagged`."""
    return ChatTemplateFormat.name if template_has_tool_format(chat_template) else TaggedFormat.name


class ChatTemplateFormat:
    template_lists_tools = True
    name = "chat_template"

    def check_template(self, chat_template: Optional[str]) -> None:
        """Raise when the tokenizer's template has no `<tool_call>` tool format (use `tagged` then)."""
        if not template_has_tool_format(chat_template):
            raise ValueError("tool call format 'chat_template': this tokenizer's chat template has no tool format "
                             f"(no `tools` and {TOOL_CALL_OPEN}); valid choices: {', '.join(FORMATS.names())} "
                             "(use 'tagged' for a model without one)")

    def instructions(self, tools: Sequence[Tool]) -> str:
        return ""  # the chat template lists the tools and says how to call them

    def write_call(self, tool: Tool, arguments: dict) -> str:
        return f"{TOOL_CALL_OPEN}\n{json.dumps({'name': tool.name, 'arguments': arguments})}\n{TOOL_CALL_CLOSE}"

    def stop_strings(self, tools: Sequence[Tool]) -> tuple[str, ...]:
        return (TOOL_CALL_CLOSE,)

    def parse(self, text: str, tools: Sequence[Tool]) -> list[ToolCall]:
        calls: list[ToolCall] = []
        position = 0
        while True:
            start = text.find(TOOL_CALL_OPEN, position)
            if start < 0:
                return calls
            end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
            if end < 0:
                calls.append(ToolCall(None, None, text[start:], f"the call is not closed with {TOOL_CALL_CLOSE} "
                                                                "(cut off?)"))
                return calls
            written = text[start:end + len(TOOL_CALL_CLOSE)]
            calls.append(self._read(text[start + len(TOOL_CALL_OPEN):end].strip(), written))
            position = end + len(TOOL_CALL_CLOSE)

    @staticmethod
    def _read(body: str, written: str) -> ToolCall:
        call, error = _json_arguments(body)
        if error:
            return ToolCall(None, None, written, error.replace("the arguments are", "the call is"))
        name = call.get("name")
        if not isinstance(name, str) or not name:
            return ToolCall(None, None, written, 'the call has no "name" string')
        arguments = call.get("arguments", call.get("parameters", {}))
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            arguments, error = _json_arguments(arguments)
            if error:
                return ToolCall(name, None, written, error)
        if not isinstance(arguments, dict):
            return ToolCall(name, None, written, f'"arguments" must be a JSON object, got {type(arguments).__name__}')
        return ToolCall(name, arguments, written)


FORMATS: Registry[CallFormat] = Registry("tool call format")
FORMATS.add(TaggedFormat.name, TaggedFormat())
FORMATS.add(ChatTemplateFormat.name, ChatTemplateFormat())
