"""Metric names are defined once (rlvr/observe/metric_names.py): no module spells one as a literal, and every
name a reader uses (health warnings, `rlvr report`, `rlvr check`, the sinks) is one a producer
writes. Read from the source with `ast`, so a reader that looks up a name nobody writes fails
here instead of silently never firing. `tests/training/test_train.py` checks the same names against the
records of a real run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlvr.observe import metric_names

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "rlvr"

# Modules that write metric records (resume_policy: resumes.jsonl, with the same field names), and
# modules that only read them.
PRODUCERS = ("rlvr/observe/rollout_stats.py", "rlvr/sweep_runs.py", "rlvr/training/update.py",
             "rlvr/training/values.py", "rlvr/training/rl.py", "rlvr/training/iteration.py", "rlvr/training/sft.py",
             "rlvr/training/expert_iteration.py", "rlvr/training/evaluation.py", "rlvr/observe/generations.py",
             "rlvr/training/session.py", "rlvr/run/resume_policy.py")
READERS = ("rlvr/observe/health.py", "rlvr/report/figures.py", "rlvr/report/run_data.py", "rlvr/check/one_batch.py",
           "rlvr/check/mechanism.py", "rlvr/observe/sinks.py", "rlvr/observe/metrics.py", "rlvr/run/folder.py",
           "rlvr/observe/console.py", "rlvr/report/health_warnings.py", "rlvr/observe/numbers.py",
           "rlvr/report/study_spec.py", "rlvr/report/study_numbers.py")
# Family builders: a producer calling one writes names that start with its prefix.
FAMILIES = {"reward_component": metric_names.REWARD_PREFIX, "status_count": metric_names.STATUS_PREFIX,
            "eval_reward_component": metric_names.EVAL_REWARD_PREFIX, "eval_metric": metric_names.EVAL_PREFIX,
            "policy_loss_metric": metric_names.POLICY_LOSS_PREFIX,
            "eval_pass_at": metric_names.EVAL_PASS_AT_PREFIX, "eval_mean_at": metric_names.EVAL_MEAN_AT_PREFIX,
            "eval_maj_at": metric_names.EVAL_MAJ_AT_PREFIX,
            "episode_tool_calls": metric_names.EPISODE_TOOL_CALLS_PREFIX,
            "episode_tool_errors": metric_names.EPISODE_TOOL_ERRORS_PREFIX,
            "episode_truncated": metric_names.EPISODE_TRUNCATED_PREFIX}
PREFIXES = {metric_names.REWARD_PREFIX, metric_names.STATUS_PREFIX, metric_names.EVAL_REWARD_PREFIX,
            metric_names.EVAL_PREFIX, metric_names.TIME_PREFIX, metric_names.POLICY_LOSS_PREFIX,
            metric_names.EPISODE_TOOL_CALLS_PREFIX, metric_names.EPISODE_TOOL_ERRORS_PREFIX,
            metric_names.EPISODE_TRUNCATED_PREFIX, metric_names.EVAL_PASS_AT_PREFIX, metric_names.EVAL_MEAN_AT_PREFIX,
            metric_names.EVAL_MAJ_AT_PREFIX}
# Literals equal to a metric name that are something else there.
NOT_METRICS = {
    ("rlvr/report/figures.py", "kl"): "figure file stem",
    ("rlvr/report/figures.py", "entropy"): "figure file stem",
    ("rlvr/report/figures.py", "grad_norm"): "figure file stem",
    ("rlvr/report/figures.py", "truncated_frac"): "figure file stem",
    ("rlvr/models/checkpoints/training_state.py", "iteration"): "a key of trainer_state.pt",
    ("rlvr/models/checkpoints/files.py", "iteration"): "a key of a checkpoint's manifest.json",
    ("rlvr/training/session.py", "iteration"): "the key load_checkpoint returns",
    ("rlvr/observe/generations.py", "entropy"): "a field of generations.jsonl lines",
    ("rlvr/training/evaluation.py", "examples"): "a field of rlvr eval's summary.json",
    ("rlvr/tasks/__init__.py", "examples"): "the Task method",
    ("rlvr/run/resume_policy.py", "iteration"): "the key restore_checkpoint returns",
    ("rlvr/run/folder.py", "iteration"): "the key restore_checkpoint returns",
    ("rlvr/cli.py", "iteration"): "a value of `rlvr report --x` (the x axis)",
    ("rlvr/cli.py", "samples"): "the attribute of `rlvr eval --samples` (train.eval_samples)",
}


def metric_values() -> set[str]:
    values = set()
    for name, value in vars(metric_names).items():
        if name.isupper():
            values.update(value if isinstance(value, tuple) else (value,))
    return values


def names_used(source: str) -> set[str]:
    """The metric names a module uses through `from rlvr.observe.metric_names import ...` (tuples expanded)."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "rlvr.observe.metric_names":
            for alias in node.names:
                value = FAMILIES.get(alias.name, getattr(metric_names, alias.name))
                if callable(value):  # a builder missing from FAMILIES would put a function among the names
                    raise AssertionError(f"{alias.name} builds metric names: add it to FAMILIES with its prefix")
                used.update(value if isinstance(value, tuple) else (value,))
    return used


def metric_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of string literals equal to a metric name or prefix; docstrings are skipped."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    values = metric_values()
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values
            and id(node) not in docstrings]


def unwritten(readers: dict[str, set[str]], producers: dict[str, set[str]]) -> dict[str, set[str]]:
    """Per reader, the names it uses that no producer writes (a prefix counts if some written name has it)."""
    written = set().union(*producers.values())
    missing = {}
    for reader, names in readers.items():
        bad = {n for n in names if n not in written and not (n in PREFIXES and any(w.startswith(n) for w in written))}
        if bad:
            missing[reader] = bad
    return missing


def _sources(paths) -> dict[str, str]:
    return {path: (REPO / path).read_text() for path in paths}


def test_no_module_spells_a_metric_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == "rlvr/observe/metric_names.py":
            continue
        for line, text in metric_literals(path.read_text()):
            if (relative, text) not in NOT_METRICS:
                found.append(f"{relative}:{line}: {text!r}")
    assert not found, "use the constants of rlvr.observe.metric_names:\n" + "\n".join(found)


def test_every_name_a_reader_uses_is_written_by_a_producer():
    readers = {path: names_used(text) for path, text in _sources(READERS).items()}
    producers = {path: names_used(text) for path, text in _sources(PRODUCERS).items()}
    assert all(readers.values()) and all(producers.values())  # each listed module does use the names
    assert unwritten(readers, producers) == {}
    # The health checks read these; each one switched off would go unnoticed without this test.
    assert {metric_names.TRUNCATED_FRAC, metric_names.FRAC_NO_CONTRAST_GROUPS, metric_names.KL,
            metric_names.CLIP_FRAC_LOW, metric_names.ENTROPY,
            metric_names.EXPLAINED_VARIANCE} <= readers["rlvr/observe/health.py"]


def test_every_name_builder_has_its_prefix_in_families(monkeypatch):
    """A builder left out of FAMILIES put the function itself among the written names, and `unwritten`
    then failed or passed depending on where the function's hash fell in the set's iteration order."""
    builders = {name for name, value in vars(metric_names).items()
                if callable(value) and getattr(value, "__module__", None) == metric_names.__name__}
    assert builders == set(FAMILIES)
    for name, prefix in FAMILIES.items():
        assert getattr(metric_names, name)("x") == prefix + "x"
    monkeypatch.delitem(FAMILIES, "eval_metric")
    with pytest.raises(AssertionError, match="eval_metric builds metric names: add it to FAMILIES"):
        names_used("from rlvr.observe.metric_names import eval_metric\n")


def test_every_module_that_uses_metric_names_is_a_producer_or_a_reader():
    users = {path.relative_to(REPO).as_posix() for path in PACKAGE.rglob("*.py")
             if path.name != "metric_names.py" and names_used(path.read_text())}
    assert users == set(PRODUCERS) | set(READERS)


def test_the_checks_catch_a_literal_and_a_name_nobody_writes():
    reader = ("from rlvr.observe.metric_names import KL, REWARD_PREFIX\n"
              "def check(record):\n    return record.get('truncated_frac'), record.get(KL)\n")
    assert metric_literals(reader) == [(3, "truncated_frac")]
    producer_without_kl = "from rlvr.observe.metric_names import LOSS, reward_component\n"
    producers = {"p": names_used(producer_without_kl)}
    assert unwritten({"r": names_used(reader)}, producers) == {"r": {metric_names.KL}}
    # A family prefix is satisfied by its builder function.
    assert metric_names.REWARD_PREFIX not in unwritten({"r": names_used(reader)}, producers)["r"]


@pytest.mark.parametrize("builder, prefix", sorted(FAMILIES.items()))
def test_family_builders_use_their_prefix(builder, prefix):
    assert getattr(metric_names, builder)("x") == prefix + "x"
