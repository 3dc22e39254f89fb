"""The documentation: the MkDocs site builds with --strict (broken links, anchors and API references fail it),
its generated configuration reference lists every config key, and the commands written in the README and in
the pages still parse: each `rlvr ...` line with the CLI's own parser, each `key=value` naming a real config
key, each config or script file it names present in the repository, each python block valid Python."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from rlvr.cli import build_parser
from rlvr.config import Config, describe_config

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
DOCS_PACKAGES = {"mkdocs": "mkdocs", "material": "mkdocs-material", "mkdocstrings": "mkdocstrings",
                 "mkdocstrings_handlers.python": "mkdocstrings-python"}
# A documented command's file under one of these folders must exist in the repository (others, such as
# data.parquet or runs/..., stand for the reader's own).
FILE_ROOTS = ("configs/", "examples/", "benchmarks/", "scripts/")


def _require_mkdocs() -> None:
    missing = [dist for module, dist in DOCS_PACKAGES.items() if importlib.util.find_spec(module.split(".")[0]) is None
               or (module.count(".") and importlib.util.find_spec(module) is None)]
    if missing:
        pytest.fail(f"the documentation build needs {', '.join(missing)}: install the docs extra, "
                    f"pip install -e '.[docs]' (rlvr[docs]; rlvr[test] includes it)", pytrace=False)


def _mkdocs_build(config_file: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config_file),
                           "-d", str(site)], cwd=config_file.parent, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.mark.slow
def test_the_site_builds_strict_with_the_generated_reference(tmp_path):
    _require_mkdocs()
    done = _mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    # The configuration reference: every leaf key of every section, counted from the dataclasses here.
    page = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    keys = [f"{section.name}.{f.name}" for section in dataclasses.fields(Config)
            for f in dataclasses.fields(typing.get_type_hints(Config)[section.name])]
    assert len(keys) > 100
    missing = [key for key in keys if f"<code>{key}</code>" not in page]
    assert missing == [], f"keys missing from the configuration reference: {missing}"
    assert "rlvr config show: generated" not in page  # the marker was replaced
    # One help text, as the field's metadata holds it (HTML-escaped as the page shows it).
    (lr,) = [row for row in describe_config(None) if row.key == "optim.lr"]
    assert lr.help.replace("'", "&#39;") in page or lr.help in page
    # The API reference was rendered from the docstrings, not left as a `::: rlvr.core` line.
    core = (tmp_path / "site" / "reference" / "core" / "index.html").read_text()
    assert 'id="rlvr.core.compute_group_advantages"' in core and ":::" not in core
    # The README's tables are included into the home page, not copied.
    home = (tmp_path / "site" / "index.html").read_text()
    assert "reinforce_with_baseline" in home and "reasoning_gym:&lt;name&gt;" in home
    # The estimator, loss and aggregation tables were generated from the registries (docs/gen_tables.py).
    from rlvr.core import ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES

    algorithms = (tmp_path / "site" / "guides" / "algorithms" / "index.html").read_text()
    names = [*ADVANTAGE_ESTIMATORS, *POLICY_LOSSES, *LOSS_AGGREGATIONS]
    assert "rlvr table:" not in algorithms
    assert [name for name in names if f"<td><code>{name}</code></td>" not in algorithms] == []


@pytest.mark.slow
def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    _require_mkdocs()
    site_src = tmp_path / "src"
    shutil.copytree(REPO / "docs", site_src / "docs", ignore=shutil.ignore_patterns("*.png"))
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(REPO / name, site_src / name)
    (site_src / "rlvr").symlink_to(REPO / "rlvr")
    for png in (REPO / "docs").rglob("*.png"):  # the pictures the pages show, without copying them
        (site_src / "docs" / png.relative_to(REPO / "docs")).symlink_to(png)
    page = site_src / "docs" / "guides" / "health.md"
    page.write_text(page.read_text()
                    + "\nSee [the outputs](outputs.md#no-such-section) and [a page](no-such-page.md).\n")
    done = _mkdocs_build(site_src / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "no-such-section" in done.stderr, done.stderr[-4000:]


# ----------------------------------------------------------------------------- the commands in the pages

def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, and ("indented", body) of every 4-space indented block."""
    blocks = [(lang, body) for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for match in re.finditer(r"(?:(?<=\n\n)|^)((?: {4}\S.*\n?(?: {4,}.*\n?)*)+)", prose):
        blocks.append(("indented", "\n".join(line[4:] for line in match.group(1).splitlines())))
    return blocks


def shell_commands(body: str) -> list[list[str]]:
    """Each command of a shell block as argv: continuations joined, comments dropped, `&&` / `;` split,
    leading VAR=value assignments dropped."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        for part in re.split(r"\s(?:&&|;)\s", line):
            argv = shlex.split(part, comments=True)
            while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
                argv = argv[1:]
            if argv:
                commands.append(argv)
    return commands


def rlvr_arguments(argv: list[str]) -> list[str] | None:
    """The arguments an argv passes to the rlvr CLI (`rlvr X`, `python -m rlvr X`, `... -m rlvr X`, `./run rlvr X`,
    `./run train X`), or None when it runs something else."""
    if argv[0] == "rlvr":
        return argv[1:]
    if "-m" in argv and argv[argv.index("-m") + 1:argv.index("-m") + 2] == ["rlvr"]:
        return argv[argv.index("-m") + 2:]
    if argv[0] == "./run" and len(argv) > 1 and argv[1] in ("rlvr", "train"):
        return argv[2:] if argv[1] == "rlvr" else ["train", *argv[2:]]
    return None


def _config_keys() -> set[str]:
    return {row.key for row in describe_config(None)}


def _key_problem(key: str, keys: set[str]) -> str | None:
    """None when `key` (a dotted override key) names a config key or lies inside an open mapping."""
    if key in keys:
        return None
    open_keys = ("task.options", "task.reward_weights", "rollout.backend_options")  # each checked by its owner
    if any(key.startswith(f"{open_key}.") for open_key in open_keys):
        return None
    return f"unknown config key {key!r}"


def _file_problem(path: str) -> str | None:
    if path.startswith(FILE_ROOTS) and not (REPO / path.split(":")[0]).exists():
        return f"{path.split(':')[0]} does not exist"
    return None


def command_problems(argv: list[str], keys: set[str]) -> list[str]:
    """What is wrong with one documented command: an rlvr command the parser refuses, an unknown config key, a
    repository file that does not exist, an unknown ./run verb. Empty when nothing is."""
    problems = [p for p in map(_file_problem, argv) if p]
    if argv[0] == "./run":
        sys.path.insert(0, str(REPO / "scripts"))
        try:
            from bootstrap import COMMAND_EXTRAS
        finally:
            sys.path.remove(str(REPO / "scripts"))
        if len(argv) > 1 and argv[1] not in COMMAND_EXTRAS:
            problems.append(f"./run has no command {argv[1]!r}; it has {', '.join(COMMAND_EXTRAS)}")
    arguments = rlvr_arguments(argv)
    if arguments is None or arguments == ["--version"]:
        return problems
    try:
        args, extra = build_parser().parse_known_args(arguments)
    except SystemExit:
        return problems + [f"the rlvr parser refuses {shlex.join(arguments)!r}"]
    if extra and (not hasattr(args, "items") or any(item.startswith("-") for item in extra)):
        return problems + [f"unrecognized arguments {extra}"]
    items = [*getattr(args, "items", []), *extra]
    overrides = [item for item in items if "=" in item and not item.startswith("-")]
    grid = [spec.split("=", 1)[0] for spec in getattr(args, "grid", []) or []]
    for key in [item.split("=", 1)[0] for item in overrides] + [k for spec in grid for k in spec.split("+")]:
        problem = _key_problem(key, keys)
        if problem:
            problems.append(problem)
    return problems


def documented_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOC_FILES:
        for lang, body in code_blocks(path.read_text()):
            if lang in ("bash", "sh", "indented"):
                found += [(str(path.relative_to(REPO)), argv) for argv in shell_commands(body)]
    return found


def test_the_pages_hold_the_commands_this_test_reads():
    commands = documented_commands()
    pages = {page for page, _ in commands}
    assert {"README.md", "docs/guides/getting-started.md", "docs/guides/your-own.md", "docs/results/learning.md",
            "docs/results/performance.md", "docs/guides/reports-and-sweeps.md"} <= pages
    rlvr_lines = [argv for _, argv in commands if rlvr_arguments(argv) is not None]
    assert len(rlvr_lines) > 40  # the pages are full of rlvr commands: the block reader must find them
    assert ["./run", "train"] in [argv[:2] for _, argv in commands]


def test_every_documented_command_parses_and_names_real_keys_and_files():
    keys = _config_keys()
    problems = [f"{page}: {shlex.join(argv)}: {problem}"
                for page, argv in documented_commands() for problem in command_problems(argv, keys)]
    assert problems == [], "\n".join(problems)


def test_the_command_check_catches_each_kind_of_mistake():
    keys = _config_keys()
    assert command_problems(["rlvr", "train", "configs/format_copy_grpo.yaml", "optim.lr=3e-4"], keys) == []
    assert command_problems(["rlvr", "trian"], keys) == ["the rlvr parser refuses 'trian'"]
    assert command_problems(["rlvr", "train", "optim.lrr=3e-4"], keys) == ["unknown config key 'optim.lrr'"]
    assert command_problems(["rlvr", "eval", "--limt", "4"], keys) == ["unrecognized arguments ['--limt']"]
    assert command_problems(["rlvr", "train", "configs/no_such.yaml"], keys) == ["configs/no_such.yaml does not exist"]
    assert command_problems(["rlvr", "sweep", "--grid", "algorithm.name+optim.lrr=1,2"], keys) == [
        "unknown config key 'optim.lrr'"]
    assert command_problems(["rlvr", "train", "task.options={path: x.jsonl}", "task.options.eval_size=8"], keys) == []
    assert command_problems(["./run", "tests"], keys)[0].startswith("./run has no command 'tests'")
    assert command_problems(["python", "-m", "rlvr", "chek"], keys) == ["the rlvr parser refuses 'chek'"]


def test_the_block_reader_finds_fenced_and_indented_commands():
    text = ("Prose.\n\n```bash\nrlvr train a=1 \\\n  b=2   # comment\nX=1 rlvr tasks && rlvr algorithms\n```\n\n"
            "    rlvr eval --limit 4\n\nMore prose.\n")
    blocks = code_blocks(text)
    assert [lang for lang, _ in blocks] == ["bash", "indented"]
    assert [argv for _, body in blocks for argv in shell_commands(body)] == [
        ["rlvr", "train", "a=1", "b=2"], ["rlvr", "tasks"], ["rlvr", "algorithms"], ["rlvr", "eval", "--limit", "4"]]


def test_every_python_block_is_valid_python():
    bad = []
    for path in DOC_FILES:
        for lang, body in code_blocks(path.read_text()):
            if lang == "python":
                try:
                    ast.parse(body)
                except SyntaxError as exc:
                    bad.append(f"{path.relative_to(REPO)}: {exc}")
    assert bad == []


def test_the_config_reference_hook_writes_one_row_per_key_from_rlvr_config():
    spec = importlib.util.spec_from_file_location("gen_config", REPO / "docs" / "gen_config.py")
    gen_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_config)
    markdown = gen_config.config_reference()
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    described = describe_config(None)
    assert len(rows) == len(described) > 100
    (lr_row,) = [row for row in rows if row.startswith("| `optim.lr` |")]
    (lr,) = [r for r in described if r.key == "optim.lr"]
    # the no-config default
    assert lr_row == f"| `optim.lr` | float in (0, 10] | `0.0005` | {lr.help.replace('|', chr(92) + '|')} |"
    assert ("## `expert_iteration`" in markdown
            and markdown.count("|---|---|---|---|") == len(dataclasses.fields(Config)))
    assert gen_config._cell("a | b") == "a \\| b" and gen_config._code("x`y") == "`` x`y ``"
    page = (REPO / "docs" / "reference" / "config.md").read_text()
    filled = gen_config.on_page_markdown(page, None, None, None)
    assert [line for line in filled.splitlines() if line.startswith("| `")] == rows and gen_config.MARKER not in filled
    assert gen_config.on_page_markdown("no marker here", None, None, None) == "no marker here"
