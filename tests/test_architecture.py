"""Imports point one way: foundation <- core <- models, tasks <- rollout <- algorithms <- observe <- config <- run
<- training <- cli, and never in a circle.

Every `import` and `from ... import` in the package is read with `ast`, function-level (lazy)
imports included, and each module is given the layer of its longest listed prefix. A module may
import its own layer or a lower one; any import of a higher layer, and any cycle among modules,
fails with the offending edges. Each train package is its own layer, so an import from one to a higher one
(observe importing run) fails even inside a function. Packages are also checked as wholes: collapsing every
module to its package (`rlvr.tasks.task` to `rlvr.tasks`) must leave no cycle among packages of one layer
either. No two module files under rlvr/ share a name (`__init__.py` aside): one name, one place, so a
file's name says which it is. The rule functions are also run on synthetic inputs (a made-up
upward import, a made-up cycle, a fake package written to a temporary folder) to show they fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Lowest first. A module belongs to the layer of the longest prefix that matches its dotted name
# ("rlvr" itself, the package's __init__, matches only exactly: it re-exports the Python API, so it
# sits on top with the commands).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("rlvr.registry", "rlvr.utils", "rlvr.observe.metric_names", "rlvr.storage_errors")),
    ("core", ("rlvr.core",)),
    # rlvr.models.checkpoints, every checkpoint's home, is part of rlvr.models: export, the value model and the
    # rlvr.models API load a run's weights, and it imports only models, parallel and the foundation.
    ("models, tasks", ("rlvr.models", "rlvr.models.checkpoints", "rlvr.tasks", "rlvr.parallel", "rlvr.tools",
                       "rlvr.compat", "rlvr.testing")),
    ("rollout", ("rlvr.rollout",)),
    # The train packages, each its own layer: algorithm presets are data; observe reports explicit values (it
    # imports no config); config validates names against every registry below it (observe's health checks and
    # sinks included); run is the infrastructure a run needs (folder, lock, set-up); training is
    # the loops, their stages, the session they run in and the evaluation it calls.
    ("algorithms", ("rlvr.algorithms",)),
    ("observe", ("rlvr.observe",)),
    ("config", ("rlvr.config",)),
    ("run", ("rlvr.run",)),
    ("training", ("rlvr.training",)),
    ("cli, Python API", ("rlvr", "rlvr.cli", "rlvr.__main__", "rlvr.algorithm_tables", "rlvr.check",
                         "rlvr.reward_kinds", "rlvr.sweep", "rlvr.sweep_stages", "rlvr.sweep_runs", "rlvr.study",
                         "rlvr.report")),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_edges(root: Path, package: str = "rlvr") -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in the file), for every .py under root/package."""
    paths = sorted((root / package).rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    edges: dict[str, set[str]] = {}
    for path in paths:
        source = module_name(path, root)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from a.b import c` imports a.b, and a.b.c when that is a module.
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            targets.update(name for name in names if name in modules)
        edges[source] = targets - {source}
    return edges


def layer_of(module: str) -> int:
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "rlvr" and module.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    if best is None:
        raise KeyError(f"module {module} is in no layer; add it to LAYERS in tests/test_architecture.py")
    return best


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(source):
                found.append(f"{source} ({LAYERS[layer_of(source)][0]}) imports "
                             f"{target} ({LAYERS[layer_of(target)][0]})")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_imports_only_downward():
    edges = import_edges(REPO)
    assert len(edges) > 60 and "rlvr.training.rl" in edges
    assert upward_imports(edges) == []


def test_the_package_has_no_import_cycle():
    assert cycles(import_edges(REPO)) == []


def package_of(module: str) -> str:
    """`rlvr.tasks.verification.worker` -> `rlvr.tasks`; a top-level module (`rlvr.cli`) is its own package."""
    return ".".join(module.split(".")[:2])


def package_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    collapsed: dict[str, set[str]] = {}
    for source, targets in edges.items():
        package = package_of(source)
        collapsed.setdefault(package, set()).update(package_of(t) for t in targets if package_of(t) != package)
    return collapsed


# Issue 60's last package cycle: tools use the verification worker, safe_parse and the reference loader
# (rlvr.tasks), and tasks offer tools (rlvr.tasks.calculator, verifiers_env). Remove it here once those sit
# below both; any other package cycle fails now.
KNOWN_PACKAGE_CYCLES = [["rlvr.tasks", "rlvr.tools"]]


def test_the_packages_have_no_import_cycle():
    assert cycles(package_edges(import_edges(REPO))) == KNOWN_PACKAGE_CYCLES


def test_the_train_packages_import_only_downward_as_packages():
    train = ("rlvr.algorithms", "rlvr.observe", "rlvr.config", "rlvr.run", "rlvr.training")
    collapsed = package_edges(import_edges(REPO))
    for lower, package in enumerate(train):
        assert not collapsed[package] & set(train[lower + 1:]), f"{package} imports a train package above it"


def test_every_module_has_a_layer():
    for module in import_edges(REPO):
        layer_of(module)  # raises for a module no prefix covers
    try:
        layer_of("rlvr.new_module")
    except KeyError as error:
        assert "add it to LAYERS" in str(error)
    else:
        raise AssertionError("a module outside every layer was given one")


def test_the_rules_fail_on_an_upward_import_and_a_cycle():
    upward = {"rlvr.core.kl": {"rlvr.training.rl"}, "rlvr.training.rl": {"rlvr.core.kl"}}
    assert upward_imports(upward) == ["rlvr.core.kl (core) imports rlvr.training.rl (training)"]
    assert cycles(upward) == [["rlvr.core.kl", "rlvr.training.rl"]]
    three = {"rlvr.training.a": {"rlvr.training.b"}, "rlvr.training.b": {"rlvr.training.c"},
             "rlvr.training.c": {"rlvr.training.a"}, "rlvr.training.d": {"rlvr.training.a"}}
    assert upward_imports(three) == [] and cycles(three) == [["rlvr.training.a", "rlvr.training.b", "rlvr.training.c"]]


def test_a_fake_package_with_an_upward_lazy_import_is_caught(tmp_path):
    package = tmp_path / "rlvr"
    for folder in (package, package / "core", package / "observe"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "config.py").write_text("def validate():\n    from rlvr.observe.sinks import SINKS\n")
    (package / "observe" / "sinks.py").write_text("from rlvr.config import validate\nSINKS = {}\n")
    (package / "core" / "kl.py").write_text("def estimator():\n    import rlvr.observe.sinks\n")
    edges = import_edges(tmp_path)
    assert edges["rlvr.core.kl"] == {"rlvr.observe.sinks"}
    assert upward_imports(edges) == ["rlvr.core.kl (core) imports rlvr.observe.sinks (observe)",
                                     "rlvr.observe.sinks (observe) imports rlvr.config (config)"]
    assert cycles(edges) == [["rlvr.config", "rlvr.observe.sinks"]]


def test_a_package_level_upward_import_or_cycle_is_caught(tmp_path):
    """observe importing run (the console reading run's numbers, as it once did) is upward, lazy or not; two
    packages of one layer importing each other through different modules is a package cycle, not a module one."""
    package = tmp_path / "rlvr"
    for folder in (package, package / "observe", package / "run", package / "tasks", package / "tools"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "run" / "numbers.py").write_text("def final_and_best():\n    return None\n")
    (package / "observe" / "console.py").write_text("def summary():\n    from rlvr.run.numbers import final_and_best\n")
    (package / "tasks" / "calculator.py").write_text("import rlvr.tools.toolbox\n")
    (package / "tasks" / "external.py").write_text("")
    (package / "tools" / "toolbox.py").write_text("from rlvr.tasks.external import load_reference\n")
    edges = import_edges(tmp_path)
    assert upward_imports(edges) == ["rlvr.observe.console (observe) imports rlvr.run.numbers (run)"]
    assert cycles(edges) == []
    assert cycles(package_edges(edges)) == [["rlvr.tasks", "rlvr.tools"]]
    assert cycles(package_edges({"rlvr.observe.console": {"rlvr.run.numbers"}})) == []


def repeated_file_names(root: Path, package: str = "rlvr") -> dict[str, list[str]]:
    """file name -> the files under root/package that have it, for each name (other than __init__.py) held twice."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        if path.name != "__init__.py":
            found.setdefault(path.name, []).append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_no_two_files_of_the_package_share_a_name():
    assert len(list((REPO / "rlvr").rglob("*.py"))) > 60
    assert repeated_file_names(REPO) == {}


def test_a_file_name_held_in_two_packages_is_caught(tmp_path):
    """The registry and the tools' registry (`rlvr/registry.py`, `rlvr/tools/registry.py`), as they once were;
    __init__.py in every package and one name at two depths of one package count as they should."""
    for name in ("__init__.py", "registry.py", "tools/__init__.py", "tools/registry.py", "tasks/__init__.py",
                 "tasks/task.py", "tasks/verification/__init__.py", "tasks/verification/grading.py"):
        path = tmp_path / "rlvr" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert repeated_file_names(tmp_path) == {"registry.py": ["rlvr/registry.py", "rlvr/tools/registry.py"]}
    (tmp_path / "rlvr" / "tasks" / "verification" / "task.py").write_text("")
    assert repeated_file_names(tmp_path)["task.py"] == ["rlvr/tasks/task.py", "rlvr/tasks/verification/task.py"]
