"""Code from outside rlvr named in a config: `path/to/file.py:Name` or `package.module:Name`.

Tasks (`task.name`) and dataset verifiers (`task.options.verifier`) may name a class or function
of the user's own. The part after the last colon is the attribute; the part before it is a Python
file when it ends in `.py` (relative to the current directory; loaded as a module of its own),
otherwise a dotted module path imported like `python -m` would (the current directory is searched
after the installed packages). Every failure names what was looked for and what went wrong:
no such file, no such module, an error while importing, no such attribute.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
FORMS = "`path/to/file.py:Name` or `package.module:Name`"


def split_reference(reference: str) -> tuple[str, str] | None:
    """`(module_or_file, attribute)` when `reference` has one of the two forms, else None."""
    source, colon, attribute = reference.rpartition(":")
    if not colon or not source or not re.fullmatch(r"[A-Za-z_]\w*", attribute):
        return None
    if source.endswith(".py") or _DOTTED.fullmatch(source):
        return source, attribute
    return None


def _describe_import_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError at {exc.filename}:{exc.lineno}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _load_file(path_text: str, what: str):
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{what}: Python file {str(path)!r} does not exist (relative paths start at "
                                f"the current directory, {os.getcwd()})")
    resolved = path.resolve()
    # One module per file, under a name that is the same in every process (data-parallel ranks).
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", resolved.stem)
    module_name = f"rlvr_user_{stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ValueError(f"{what}: loading {str(path)!r} failed: {_describe_import_error(exc)}") from exc
    return module


class ModuleMissing(KeyError):
    """No module of that name could be found (as opposed to one that failed while importing)."""

    def __init__(self, message: str, module: str):
        super().__init__(message)
        self.module = module


def _import_module(name: str, what: str):
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # as `python -m` would, but after the installed packages
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ModuleMissing(f"{what}: no module named {exc.name!r} (looked in the current directory and on "
                                f"the Python path; a file is written `path/to/file.py:Name`)", exc.name) from None
        raise ValueError(f"{what}: importing {name!r} failed: {_describe_import_error(exc)}") from exc
    except Exception as exc:
        raise ValueError(f"{what}: importing {name!r} failed: {_describe_import_error(exc)}") from exc


def load_reference(reference: str, what: str) -> Any:
    """The object `reference` names (see the module docstring); `what` starts every error message."""
    parts = split_reference(reference)
    if parts is None:
        raise ValueError(f"{what}: {reference!r} is not of the form {FORMS}")
    source, attribute = parts
    module = _load_file(source, what) if source.endswith(".py") else _import_module(source, what)
    if not hasattr(module, attribute):
        public = sorted(name for name, value in vars(module).items()
                        if not name.startswith("_") and callable(value)
                        and getattr(value, "__module__", None) == module.__name__)
        raise KeyError(f"{what}: {source!r} has no attribute {attribute!r}; "
                       f"it defines: {', '.join(public) or '(no classes or functions)'}")
    return getattr(module, attribute)


def describe_signature(function: Callable) -> str:
    try:
        return f"{getattr(function, '__name__', 'it')}{inspect.signature(function)}"
    except (TypeError, ValueError):
        return getattr(function, "__name__", repr(function))


def accepts_keyword(function: Callable, name: str) -> bool:
    """True when `function` can be called with keyword `name` (named, or taken by **kwargs)."""
    parameters = inspect.signature(function).parameters.values()
    return any(p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters) or any(
        p.kind is p.VAR_KEYWORD for p in parameters)


def check_call(function: Callable, what: str, *args, **kwargs) -> None:
    """Raise a ValueError naming the mismatch when `function(*args, **kwargs)` would not bind."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin without a signature: the call itself will tell
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{what}: cannot call {describe_signature(function)}: {exc}") from None
