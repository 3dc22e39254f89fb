"""benchmarks/ is grouped by kind (benchmarks/README.md): every script sits in a group, every `benchmarks.*` import
names a module that exists (lazy ones inside functions too), the groups import one way (learning and
performance from comparisons, never back), and a script that imports the package puts the repository root
on sys.path first, since `python benchmarks/GROUP/NAME.py` puts only its own folder there."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
GROUPS = ("learning", "performance", "comparisons")
# group -> the other groups it may import from
MAY_IMPORT = {"learning": {"comparisons"}, "performance": {"comparisons"}, "comparisons": set()}


def benchmark_imports(path: Path) -> list[tuple[str, bool]]:
    """(dotted module, at module level) of every `benchmarks.*` import in the file, function-level ones included."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.count(".") <= 1:  # from benchmarks[.group] import name: name may be a module
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(name, id(node) in top) for name in names if name.split(".")[0] == "benchmarks"]
    return found


def _module_exists(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_script_sits_in_a_group():
    loose = sorted(path.name for path in BENCHMARKS.iterdir() if path.suffix in (".py", ".sh")
                   and path.name != "__init__.py")
    assert loose == [], f"scripts outside a group of benchmarks/README.md: {loose}"
    assert sorted(path.name for path in BENCHMARKS.iterdir() if path.is_dir()
                  and (path / "__init__.py").is_file()) == sorted(GROUPS)
    for group in GROUPS:
        assert len(list((BENCHMARKS / group).glob("*.py"))) > 3, group


def test_every_benchmarks_import_names_a_module_that_exists():
    files = [*BENCHMARKS.rglob("*.py"), *(REPO / "tests" / "benchmarks").rglob("*.py")]
    missing = [f"{path.relative_to(REPO)}: {name}" for path in files for name, _ in benchmark_imports(path)
               if not _module_exists(name)]
    assert missing == []
    assert sum(len(benchmark_imports(path)) for path in files) > 20  # the reader finds the imports


def test_the_groups_import_one_way():
    wrong = []
    for group in GROUPS:
        for path in (BENCHMARKS / group).glob("*.py"):
            for name, _ in benchmark_imports(path):
                target = name.split(".")[1]
                if target != group and target not in MAY_IMPORT[group]:
                    wrong.append(f"{path.relative_to(REPO)} ({group}) imports {name}")
    assert wrong == []


def test_a_script_that_imports_the_package_puts_the_repository_root_on_the_path_first():
    for path in BENCHMARKS.rglob("*.py"):
        if path.name == "__init__.py" or not benchmark_imports(path):
            continue
        source = path.read_text()
        assert "Path(__file__).resolve().parents[2]" in source and "sys.path.insert(0, str(" in source, path


def test_the_import_reader_sees_every_form(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("from benchmarks.learning.bench_runs import a\nfrom benchmarks.comparisons import vs_trl\n"
                      "import benchmarks.performance.decode_speed\nimport os\n"
                      "def f():\n    from benchmarks.learning.nope import b\n")
    assert benchmark_imports(script) == [
        ("benchmarks.learning.bench_runs", True), ("benchmarks.comparisons.vs_trl", True),
        ("benchmarks.performance.decode_speed", True), ("benchmarks.learning.nope", False)]
    assert not _module_exists("benchmarks.learning.nope") and _module_exists("benchmarks.comparisons.vs_trl")
