"""The `python` tool's side inside its sandboxed worker process: run code, return what it printed.

Loaded by the worker (`VerifierWorker(extra_functions="rlvr.tools.python_worker")`) before the
sandbox closes; the code then runs under the worker's limits (`rlvr.tasks.verification.sandbox`). Printed output
beyond the limit is dropped as it is written, so a print loop cannot fill the memory. The value of a
final bare expression is printed, as in a Python prompt. Each call starts in an emptied folder.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import os
import traceback


# The worker's own folder, read when the worker imports this module (before the sandbox closes), so
# code that changes directory cannot move where the next call starts or what it empties.
FOLDER = os.path.realpath(os.environ.get("RLVR_VERIFIER_TMPDIR", "."))


class CappedWriter(io.TextIOBase):
    """A text stream that keeps the first `limit` characters written to it and counts the rest."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.kept: list[str] = []
        self.size = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = max(0, self.limit - self.size)
        self.kept.append(text[:room])
        self.size += min(len(text), room)
        self.dropped += max(0, len(text) - room)
        return len(text)

    def text(self) -> str:
        return "".join(self.kept)


def _empty_folder() -> None:
    """Remove what earlier calls left in the worker's folder (full paths: the sandbox refuses `dir_fd`)."""
    os.chdir(FOLDER)
    for folder, folders, files in os.walk(FOLDER, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))
        for name in folders:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                os.remove(path) if os.path.islink(path) else os.rmdir(path)


def run_python(code: str, max_output_chars: int) -> dict:
    """`{"output", "dropped", "error"}`: what the code printed (cut to `max_output_chars`), how many
    characters were dropped, and its exception as `Type: message` with the last frames, or None."""
    _empty_folder()
    writer = CappedWriter(max_output_chars)
    error = None
    with contextlib.redirect_stdout(writer), contextlib.redirect_stderr(writer):
        try:
            tree = ast.parse(code, "<python>", "exec")
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):  # show a final expression's value, as a Python prompt does
                tree.body[-1] = ast.Expr(ast.Call(ast.Name("__rlvr_show", ast.Load()), [last.value], []))
                ast.fix_missing_locations(tree)
            namespace = {"__name__": "__main__", "__builtins__": builtins,
                         "__rlvr_show": lambda value: None if value is None else print(repr(value))}
            exec(compile(tree, "<python>", "exec"), namespace)  # noqa: S102 - the sandbox is the wall
        except BaseException as exc:  # noqa: BLE001 - SystemExit and all: told to the model
            frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
            error = "".join(frames)[-1500:].strip()
    return {"output": writer.text(), "dropped": writer.dropped, "error": error}


FUNCTIONS = {"run_python": (run_python, None)}
