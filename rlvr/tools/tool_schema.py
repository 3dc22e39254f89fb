"""A tool's JSON schema from its Python function: type hints give the JSON types, the docstring the words.

The schema has the function-calling shape chat templates take (`apply_chat_template(messages,
tools=[...])`): `{"type": "function", "function": {"name", "description", "parameters"}}`, where
`parameters` is a JSON Schema object. The description is the docstring's first paragraph; each
parameter's description comes from its line under `Args:` (`name: text` or `name (type): text`,
continued on more-indented lines). A parameter without a type hint, `*args` or `**kwargs` is an
error naming it: the model could not be told what to pass.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Callable, Literal, Union

# Python type -> JSON Schema type.
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", tuple: "array",
              dict: "object"}
# Docstring section headers that end the description (one string: a lone "examples" reads as a metric name).
SECTION_HEADERS = tuple("args arguments parameters returns return raises yields examples example notes note".split())
_ARG_LINE = re.compile(r"(\*{0,2}[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)")


def json_type(hint: Any, where: str) -> dict:
    """The JSON Schema of one type hint: `str` -> {"type": "string"}, `list[int]` -> an array of integers,
    `Optional[X]` -> X's, `Literal["a", "b"]` -> an enum. Anything else is a ValueError naming `where`."""
    origin = typing.get_origin(hint)
    if hint in JSON_TYPES:
        return {"type": JSON_TYPES[hint]}
    if origin is Literal:
        values = typing.get_args(hint)
        kinds = {JSON_TYPES.get(type(value)) for value in values}
        if None in kinds or len(kinds) != 1:
            raise ValueError(f"{where}: Literal values must all be str, int, float or bool of one kind")
        return {"type": kinds.pop(), "enum": list(values)}
    if origin in (Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(members) == 1:
            return json_type(members[0], where)
        return {"anyOf": [json_type(member, where) for member in members]}
    if origin in (list, tuple):
        items = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        schema = {"type": "array"}
        if len(set(items)) == 1:
            schema["items"] = json_type(items[0], where)
        return schema
    if origin is dict:
        return {"type": "object"}
    raise ValueError(f"{where}: type {hint!r} has no JSON type; use str, int, float, bool, list, dict, "
                     "Optional[...] or Literal[...]")


def parse_docstring(docstring: str | None) -> tuple[str, dict[str, str]]:
    """`(description, {parameter: description})`: the first paragraph, and the `Args:` section's entries."""
    text = inspect.cleandoc(docstring or "")
    paragraphs = re.split(r"\n\s*\n", text, maxsplit=1)
    first = paragraphs[0]
    if first.strip().lower().rstrip(":") in SECTION_HEADERS:
        first = ""
    description = " ".join(line.strip() for line in first.splitlines()).strip()
    arguments: dict[str, str] = {}
    in_args, current, base_indent = False, None, None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped:
            continue
        header = stripped.lower().rstrip(":")
        if stripped.endswith(":") and header in SECTION_HEADERS and indent == 0:
            in_args, current, base_indent = header in ("args", "arguments", "parameters"), None, None
            continue
        if not in_args:
            continue
        if base_indent is None:
            base_indent = indent
        match = _ARG_LINE.fullmatch(stripped)
        if indent == base_indent and match:
            current = match.group(1).lstrip("*")
            arguments[current] = match.group(2).strip()
        elif current is not None and indent > base_indent:  # a continuation line
            arguments[current] = f"{arguments[current]} {stripped}".strip()
    return description, arguments


def function_schema(function: Callable, name: str | None = None) -> dict:
    """The function-calling schema of `function` (see the module docstring); `name` defaults to its own."""
    name = name or getattr(function, "__name__", None)
    if not name or not re.fullmatch(r"[A-Za-z_][\w-]*", name):
        raise ValueError(f"tool name {name!r} must be letters, digits, '_' or '-', starting with a letter or '_'")
    description, argument_text = parse_docstring(inspect.getdoc(function))
    if not description:
        raise ValueError(f"tool {name!r}: the function needs a docstring whose first paragraph says what it does "
                         "(the model reads it)")
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:  # noqa: BLE001 - an unresolvable annotation, named in the message
        raise ValueError(f"tool {name!r}: its type hints cannot be resolved ({exc})") from None
    properties: dict[str, dict] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        where = f"tool {name!r} parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ValueError(f"{where}: *args and **kwargs cannot be described to a model; name each parameter")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ValueError(f"{where}: a positional-only parameter cannot be passed by name")
        if parameter.name not in hints:
            raise ValueError(f"{where} has no type hint; add one (str, int, float, bool, list, dict)")
        schema = json_type(hints[parameter.name], where)
        if parameter.name in argument_text:
            schema["description"] = argument_text[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        properties[parameter.name] = schema
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
