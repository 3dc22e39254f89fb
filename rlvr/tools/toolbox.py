"""The tool registry: a `Tool` is a Python function with the schema a model is shown, found by name.

`TOOLS` holds the built-in tools (`calculator`, `python`) and any added with `register_tool`.
`get_tool` reads a name the way `task.name` is read: a registered tool, else a function of your
own as `path/to/file.py:function` or `package.module:function` (loaded by `rlvr.tasks.external`,
the loader tasks use), its schema taken from its signature and docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from rlvr.registry import Registry, did_you_mean
from rlvr.tasks.external import FORMS, load_reference, split_reference
from rlvr.tools.tool_schema import function_schema

DEFAULT_TIMEOUT_SECONDS = 5.0  # a call of an in-process tool that takes longer is an error (see execution.py)


@dataclass(frozen=True)
class Tool:
    """A callable tool. `timeout_seconds` None: the function bounds its own time (`python` runs in the
    worker under a hard limit); otherwise the call is abandoned with an error after that many seconds."""

    name: str
    function: Callable
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters"}}
    timeout_seconds: Optional[float] = DEFAULT_TIMEOUT_SECONDS

    @property
    def description(self) -> str:
        return self.schema["function"]["description"]

    @property
    def parameters(self) -> dict:
        """The JSON Schema object of the arguments: `properties` and `required`."""
        return self.schema["function"]["parameters"]


def make_tool(function: Callable, name: str | None = None,
              timeout_seconds: Optional[float] = DEFAULT_TIMEOUT_SECONDS) -> Tool:
    """A `Tool` for `function`, its schema from the signature and docstring (`rlvr.tools.tool_schema`)."""
    if not callable(function):
        raise TypeError(f"a tool must be a function, got {type(function).__name__}")
    schema = function_schema(function, name)
    return Tool(schema["function"]["name"], function, schema, timeout_seconds)


TOOLS: Registry[Tool] = Registry("tool")


def register_tool(function: Callable | None = None, *, name: str | None = None,
                  timeout_seconds: Optional[float] = DEFAULT_TIMEOUT_SECONDS):
    """Add a function to `TOOLS` (under its own name or `name`); usable as `@register_tool` or
    `@register_tool(name=...)`. A taken name is refused. Returns the function."""
    if function is None:
        return lambda given: register_tool(given, name=name, timeout_seconds=timeout_seconds)
    tool = make_tool(function, name, timeout_seconds)
    TOOLS.add(tool.name, tool)
    return function


def get_tool(name: str) -> Tool:
    """The tool a name or reference names (see the module docstring); a miss lists the valid choices."""
    if name in TOOLS:
        return TOOLS.get(name)
    if split_reference(name) is None:
        raise KeyError(f"unknown tool {name!r}{did_you_mean(name, TOOLS)}; valid choices: "
                       f"{', '.join(TOOLS.names())}, or a function of your own as {FORMS}")
    loaded = load_reference(name, f"tool {name!r}")
    if isinstance(loaded, Tool):
        return loaded
    return make_tool(loaded)


def resolve_tools(names: Sequence[str]) -> list[Tool]:
    """The tools `names` name, in order; two tools of one name are refused (a call could not tell them apart)."""
    tools = [get_tool(name) for name in names]
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be distinct")
        seen.add(tool.name)
    return tools
