"""Generic typed-config machinery: fields with help, bounds and choices; YAML data -> dataclasses; the printer.

Nothing here knows rlvr's sections (those are in `rlvr/config/schema.py`). A field declares its
help, its allowed range (`bounds=`) and its names (a `Literal[...]` type, or `choices=` for names
that live in a registry) once, in `option(...)`; loading, validation and `rlvr config show` read them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

import yaml

from rlvr.registry import did_you_mean


class ConfigError(ValueError):
    """A configuration problem; the message names the key and the valid choices."""


# ----------------------------------------------------------------------------- declaring a field


@dataclass(frozen=True)
class Bounds:
    """low <= value <= high (an open end excludes its bound); NaN and infinity are always refused."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    note: str = ""  # why, or what a special value means

    def admits(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False  # an int is compared as it is: float(10**400) would overflow
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def interval(self) -> str:
        """"[0, 1)", "(0, 10]": the range as `rlvr config show` and the errors write it."""
        low, high = _number(self.low), _number(self.high)
        return f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def describe(self, integer: bool) -> str:
        return f"{'an integer' if integer else 'a finite number'} in {self.interval()}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def count(low: int, high: int, note: str = "") -> Bounds:
    """An integer range, both ends included."""
    return Bounds(low, high, note=note)


def above(low: float, high: float, note: str = "") -> Bounds:
    """(low, high]: a value that must be strictly above `low`."""
    return Bounds(low, high, low_open=True, note=note)


# A zero-argument function returning the valid names (a `Registry` or any iterable of strings), called
# only when a config is checked: a registry whose module imports torch is not imported by the schema.
Choices = Callable[[], Iterable[str]]


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None,
           bounds: Bounds | tuple[float, float] | None = None, choices: Choices | None = None) -> Any:
    """A config field: its default, its one line of help, its range and its names, declared once.

    `bounds=(lo, hi)` (both ends included) or a `Bounds`: the range of a number, or of each value of a
    dict or list of numbers. `choices=`: the function that returns the valid names of a str (or of each item
    of a list[str]) that come from a registry; fixed names are a `Literal[...]` type instead.
    """
    if isinstance(bounds, tuple):
        bounds = Bounds(*bounds)
    metadata = {"help": help, "bounds": bounds, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def field_help(f: dataclasses.Field) -> str:
    return f.metadata.get("help", "")


def field_bounds(f: dataclasses.Field) -> Bounds | None:
    return f.metadata.get("bounds")


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def literal_choices(tp: Any) -> tuple[str, ...] | None:
    """The names of a `Literal[...]` annotation, also inside `Optional[...]` and `list[...]`; else None."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    for arg in typing.get_args(tp):
        found = literal_choices(arg)
        if found is not None:
            return found
    return None


def field_choices(f: dataclasses.Field, tp: Any) -> list[str] | None:
    """The valid names of a field: its Literal's, or its registry's (imported now), or None."""
    fixed = literal_choices(tp)
    if fixed is not None:
        return list(fixed)
    source = f.metadata.get("choices")
    return None if source is None else list(source())


def choice_error(key: str, value: Any, choices: Iterable[str]) -> str:
    """The one message for a name that is not a choice: key, bad value, a near miss, the valid choices."""
    choices = list(choices)
    return f"{key}: unknown choice {value!r}{did_you_mean(value, choices)}; valid choices: {', '.join(choices)}"


def range_error(key: str, value: Any, bounds: Bounds) -> str | None:
    """The message for a value outside `bounds` (None when it is inside, or null)."""
    if value is None:
        return None  # null is allowed exactly where the field's type is Optional
    if not bounds.admits(value):
        note = f" ({bounds.note})" if bounds.note else ""
        return f"{key} must be {bounds.describe(isinstance(value, int))}, got {value!r}{note}"
    return None


# ----------------------------------------------------------------------------- walking a config


def leaf_fields(root: type) -> list[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, annotation) of every leaf of a dataclass of section dataclasses, in order."""
    rows = []
    for section in dataclasses.fields(root):
        cls = typing.get_type_hints(root)[section.name]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            rows.append((f"{section.name}.{f.name}", f, hints[f.name]))
    return rows


def _value(config: Any, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def first_range_error(config: Any) -> str | None:
    """The message for the first value of `config` outside its field's bounds (in field order), or None."""
    for key, f, _ in leaf_fields(type(config)):
        bounds = field_bounds(f)
        if bounds is None:
            continue
        value = _value(config, key)
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):  # each value of a list of numbers, named by its position
            items = [(f"[{index}]", item) for index, item in enumerate(value)]
        else:
            items = [(None, value)]
        for entry, item in items:
            where = key if entry is None else f"{key}{entry}" if entry.startswith("[") else f"{key}.{entry}"
            message = range_error(where, item, bounds)
            if message:
                return message
    return None


def first_choice_error(config: Any) -> str | None:
    """The message for the first registry-backed name of `config` that its registry lacks, or None.

    Literal names were already checked while the data was read (`coerce`); this imports the registries.
    A name its registry retired (`Registry.rename`) gets a message naming the replacement.
    """
    for key, f, tp in leaf_fields(type(config)):
        source = f.metadata.get("choices")
        if source is None:
            continue
        value = _value(config, key)
        valid = field_choices(f, tp)
        renamed = getattr(source(), "renamed", {})
        for item in value if isinstance(value, list) else [value]:
            if item is not None and item not in valid:
                if item in renamed:
                    return f"{key}: {item!r} was renamed to {renamed[item]!r}; set {key}: {renamed[item]}"
                return choice_error(key, item, valid)
    return None


def with_current_names(root: type, data: Any) -> Any:
    """Nested config data with every registry name that was retired (`Registry.rename`) replaced by its
    successor: a saved run from before a rename resumes as it ran (a rename never changes what a name does).
    Imports the registries the names come from."""
    if not isinstance(data, dict):
        return data
    data = {name: dict(section) if isinstance(section, dict) else section for name, section in data.items()}
    for key, f, _ in leaf_fields(root):
        source = f.metadata.get("choices")
        section, name = key.split(".")
        if source is None or not isinstance(data.get(section), dict) or name not in data[section]:
            continue
        retired = getattr(source(), "renamed", {})
        value = data[section][name]
        if isinstance(value, list):
            data[section][name] = [retired.get(item, item) if isinstance(item, str) else item for item in value]
        elif isinstance(value, str):
            data[section][name] = retired.get(value, value)
    return data


# ----------------------------------------------------------------------------- reading data


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(choice_error(key, value, typing.get_args(tp)))
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        _, value_tp = typing.get_args(tp)
        return {str(k): coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
    raise ConfigError(f"{key}: unsupported type {type_name(tp)}")


def unknown_key_error(key: str, where: str, name: str, valid: Iterable[str]) -> ConfigError:
    valid = list(valid)
    return ConfigError(f"unknown config key {key!r} in {where}{did_you_mean(name, valid)}; "
                       f"valid keys: {', '.join(valid)}")


def build_section(cls: type, data: Any, prefix: str, removed: dict[str, str] | None = None) -> Any:
    """A section dataclass from a mapping of its keys: unknown keys, types and Literal names are checked.

    `removed`: dotted keys that no longer exist, each with the text that says what replaces it.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if f"{prefix}{name}" in (removed or {}):
            raise ConfigError(f"config key {prefix + name!r} was removed: {removed[prefix + name]}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise unknown_key_error(prefix + unknown[0], prefix.rstrip(".") or "top level", unknown[0], fields)
    return cls(**{name: coerce(value, hints[name], f"{prefix}{name}") for name, value in data.items()})


def set_fields(section: Any) -> dict[str, Any]:
    """The fields of a section dataclass that differ from their defaults, as plain data: what it sets."""
    data = dataclasses.asdict(section)
    return {f.name: data[f.name] for f in dataclasses.fields(section) if data[f.name] != field_default(f)}


def parse_scalar(text: str) -> Any:
    """Parse an override value the way YAML would (`true`, `3`, `1e-4`, `[a, b]`, `null`)."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def apply_override(root: type, data: dict, dotted: str, removed: dict[str, str] | None = None) -> None:
    """Apply one `a.b.c=value` override to a nested dict of raw values for the dataclass `root`.

    Inside a mapping field (`task.options`, `task.reward_weights`) the rest of the key is one
    entry of it: `task.options.verifier=math` sets that option and keeps the others. `removed`: as
    for `build_section`.
    """
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} is not of the form key=value (e.g. optim.lr=1e-4)")
    key, text = dotted.split("=", 1)
    if key.strip() in (removed or {}):
        raise ConfigError(f"config key {key.strip()!r} was removed: {removed[key.strip()]}")
    parts = key.strip().split(".")
    cls: Any = root
    node = data
    for depth, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if part not in names:
            where = ".".join(parts[:depth]) or "top level"
            raise ConfigError(
                f"unknown config key {key!r}: {part!r} is not in {where}{did_you_mean(part, names)}; "
                f"valid keys: {', '.join(names)}"
            )
        tp = typing.get_type_hints(cls)[part]
        if depth == len(parts) - 1:
            value = parse_scalar(text)
            if typing.get_origin(tp) is list and isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            node[part] = value
        elif typing.get_origin(tp) is dict:  # `task.options.path=x`: one key of a mapping
            mapping = node.setdefault(part, {})
            if not isinstance(mapping, dict):
                raise ConfigError(f"{'.'.join(parts[: depth + 1])} is not a mapping: {mapping!r}")
            mapping[".".join(parts[depth + 1:])] = parse_scalar(text)
            return
        else:
            if not dataclasses.is_dataclass(tp):
                raise ConfigError(f"{'.'.join(parts[: depth + 1])} is a value, not a section")
            node = node.setdefault(part, {})
            cls = tp


def read_yaml_file(path: Any) -> dict:
    """The mapping a YAML config file holds; a missing file, bad YAML or a non-mapping is a ConfigError."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
    return data


# ----------------------------------------------------------------------------- printing


@dataclass
class KeyDescription:
    """One config key as `rlvr config show` prints it."""

    key: str  # dotted: "optim.lr"
    type_name: str  # "float in (0, 10]", "int in [1, 1048576] or null", "one of population, sample"
    value: Any  # the resolved value
    default: Any  # what runs when the key is not set
    help: str
    default_from: str = ""  # where a default that is not the field's own comes from: "preset dapo"


def type_name(tp: Any) -> str:
    """A readable annotation: `Optional[int]` -> "int or null", `list[str]` -> "list[str]"."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "str"
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return "any" if tp is Any else getattr(tp, "__name__", str(tp))


def field_type_text(f: dataclasses.Field, tp: Any) -> str:
    """The annotation with the field's range or names: "float in (0, 10]", "str in {a, b}", "int in [1, 9] or null"."""
    text = type_name(tp)
    nullable = text.endswith(" or null")
    text = text[: -len(" or null")] if nullable else text
    bounds, choices = field_bounds(f), field_choices(f, tp)
    if bounds is not None:
        text += f" in {bounds.interval()}"
    if choices is not None:
        text += f" {'of' if text.startswith('list') else 'in'} {{{', '.join(choices)}}}"
    return text + (" or null" if nullable else "")


def describe_config(config: Any, defaults: dict[str, Any] | None = None,
                    default_from: str = "", root: type | None = None) -> list[KeyDescription]:
    """Every leaf key of `config` in declaration order, with its type, range or names, default and help.

    `defaults`: dotted keys whose default is not the field's own (an algorithm preset's settings), all
    from `default_from`. `config=None` describes the keys of `root` alone, each value its default.
    """
    defaults = defaults or {}
    rows = []
    for key, f, tp in leaf_fields(type(config) if config is not None else root):
        default = defaults.get(key, field_default(f))
        rows.append(KeyDescription(key=key, type_name=field_type_text(f, tp),
                                   value=default if config is None else _value(config, key), default=default,
                                   help=field_help(f), default_from=default_from if key in defaults else ""))
    return rows


def section_summary(root: type, section: str) -> str:
    """The first line of a config section's docstring: `rlvr config show`'s heading for the section."""
    return (typing.get_type_hints(root)[section].__doc__ or "").strip().splitlines()[0]


def yaml_value(value: Any) -> str:
    """A value as it would be written in a config file or a key=value override."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def format_config(config: Any, defaults: dict[str, Any] | None = None, default_from: str = "") -> str:
    """Each key = its resolved value, its type and default (`describe_config`), a star when it differs, its help."""
    lines, current = [], None
    for row in describe_config(config, defaults, default_from):
        section = row.key.split(".")[0]
        if section != current:
            current = section
            doc = section_summary(type(config), section)
            lines.extend([""] * bool(lines) + [f"[{section}]  {doc.replace('`', '')}"])
        changed = "" if row.value == row.default else "  *"
        source = f" from {row.default_from}" if row.default_from else ""
        lines.append(f"{row.key} = {yaml_value(row.value)}   "
                     f"({row.type_name}, default {yaml_value(row.default)}{source}){changed}")
        lines.append(f"    {row.help.replace('`', '')}")
    return "\n".join(lines)


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: used to compare configs across runs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and key not in ("reward_weights", "options"):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
