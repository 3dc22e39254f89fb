#!/usr/bin/env python
"""Mutation testing: inject realistic bugs one at a time, show the tests catch each.

The bugs (`scripts/mutations.py`) cover the math (`rlvr/core`, the completion log-prob path,
`rlvr/compat/cs336.py`; tests in `tests/core`) and the code around it where a silent error costs
most: the data-parallel and FSDP step, dynamic sampling, stop strings, the verifier's worker,
sandbox, answer parsing and `judge`, run-folder locks, checkpoint manifests and the resume policy.
Each bug names the test files (or `file::test` node ids) that run against it.

Usage (from the repository root or anywhere):

    python scripts/mutate.py                 # run every mutation and print the table
    python scripts/mutate.py --list          # list the mutations, what each breaks, its tests
    python scripts/mutate.py --only kl_sign_reversed --only clip_removed
    python scripts/mutate.py --jobs 1        # one run at a time (default: 2)

How it works: `rlvr/`, `tests/`, `configs/`, `examples/`, `benchmarks/`, `pyproject.toml`, `run` and `scripts/`
are copied into one temporary directory per worker, so the working tree is never modified. Torch, transformers
and TRL are imported once here; each run forks a child that applies one mutation (exact text replacement)
to its copy, imports rlvr from there (checked: the mutated module must come from the copy) and
runs pytest on the mutation's tests with a JUnit XML report, from which the failing tests are
read. Processes the tests start (two-rank gloo runs, `python -m rlvr`, `accelerate launch`, the
verifier worker) import the mutated copy too: the child puts the copy first on PYTHONPATH (checked
once per copy by starting a process that must import rlvr from it), and the tests locate the
repository from their own files; mutations only such a process can catch show it works. Without
`os.fork` (or with `--subprocess`) each run is a fresh `python -m pytest` instead, which is slower. The
unmutated copy is run first on the union of the selected mutations' tests.

Exit status 1 when the unmutated tests do not pass, when a mutation's search text does not occur
exactly once, or when a mutation is caught by fewer than `--min-catches` (2) distinct test
functions (the cases of one parametrized test count once).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ElementTree

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIED = ["rlvr", "tests", "configs", "examples", "pyproject.toml", "run", "scripts",  # run, scripts: ./run's tests
          "benchmarks"]  # tests/benchmarks import the scripts
RUN_TIMEOUT_S = 600  # one mutation's tests; the unmutated run of them all gets BASELINE_TIMEOUT_S
BASELINE_TIMEOUT_S = 3600


def _load_catalogue():
    """`scripts/mutations.py`, loaded by path (this script is also loaded by path, from the tests)."""
    spec = importlib.util.spec_from_file_location("rlvr_mutations", os.path.join(REPO, "scripts", "mutations.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered while it executes
    spec.loader.exec_module(module)
    return module


_catalogue = _load_catalogue()
Mutation, mutation, MUTATIONS = _catalogue.Mutation, _catalogue.mutation, _catalogue.MUTATIONS


def _copy_tree(workdir: str) -> None:
    for relative in COPIED:
        source, target = os.path.join(REPO, relative), os.path.join(workdir, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(source):
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)


def _mutated_text(mutation: Mutation, original: str) -> str:
    text = original
    for old, new in mutation.replacements:
        count = text.count(old)
        if count != 1:
            raise LookupError(f"{mutation.name}: search text found {count} times in {mutation.path}: {old!r}")
        text = text.replace(old, new)
    return text


def stranded_mutations(mutations: list[Mutation], repo: str = REPO) -> list[str]:
    """One line per mutation whose search text does not occur exactly once in its file.

    A refactor that renames a line a mutation edits strands that mutation; this is checked by
    the default test suite (tests/test_mutations_current.py) so it fails at once, not months later.
    """
    problems = []
    for mutation in mutations:
        path = os.path.join(repo, mutation.path)
        if not os.path.isfile(path):
            problems.append(f"{mutation.name}: file {mutation.path} does not exist")
            continue
        with open(path, encoding="utf-8") as handle:
            original = handle.read()
        try:
            _mutated_text(mutation, original)
        except LookupError as error:
            problems.append(str(error))
    return problems


def missing_tests(mutations: list[Mutation], repo: str = REPO) -> list[str]:
    """One line per test path or `file::function` node id of a mutation that does not exist."""
    problems = []
    for mutation in mutations:
        if not mutation.tests:
            problems.append(f"{mutation.name}: names no tests")
        for entry in mutation.tests:
            path, _, function = entry.partition("::")
            full = os.path.join(repo, path)
            if not os.path.exists(full):
                problems.append(f"{mutation.name}: test path {path} does not exist")
            elif function:
                with open(full, encoding="utf-8") as handle:
                    if f"def {function}(" not in handle.read():
                        problems.append(f"{mutation.name}: {path} defines no test {function}")
    return problems


def union_of_tests(mutations: list[Mutation]) -> list[str]:
    """Every test path the mutations name, once; a node id inside a path already listed is dropped."""
    entries = list(dict.fromkeys(entry for mutation in mutations for entry in mutation.tests))
    whole = [entry for entry in entries if "::" not in entry]

    def covered(entry: str) -> bool:
        path = entry.partition("::")[0]
        return any(path == other or path.startswith(other.rstrip("/") + "/") for other in whole)

    return whole + [entry for entry in entries if "::" in entry and not covered(entry)]


def _pytest_args(workdir: str, tests: list[str], report: str, basetemp: str) -> list[str]:
    return [
        *(os.path.join(workdir, entry) for entry in tests), "-q", "-p", "no:cacheprovider", "--rootdir", workdir,
        "-o", "addopts=", f"--junitxml={report}", f"--basetemp={basetemp}",
    ]


def _module_name(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def _child_environment(workdir: str, threads: int) -> dict[str, str]:
    """Processes the tests start import the mutated copy and never write bytecode into it."""
    inherited = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": workdir + (os.pathsep + inherited if inherited else ""), "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": str(threads)}


def check_subprocess_imports(workdir: str) -> None:
    """A process started with the run's environment, from outside the copy, imports rlvr and tests from it."""
    env = dict(os.environ, **_child_environment(workdir, 1))
    code = "import rlvr, tests; print(rlvr.__file__); print(tests.__file__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=os.path.dirname(workdir), capture_output=True,
                          text=True, timeout=120)
    files = done.stdout.split()
    if done.returncode or len(files) != 2 or not all(f.startswith(workdir + os.sep) for f in files):
        raise RuntimeError(f"a subprocess of the run would not import the copy in {workdir}: "
                           f"{done.stdout or done.stderr}")


def _own_group(pid: int) -> None:
    """Make a run (pid 0: this process) the leader of its own process group, so that everything it
    starts (ranks, launched CLI runs, the verifier worker) can be stopped together."""
    try:
        os.setpgid(pid, 0)
    except (PermissionError, ProcessLookupError):  # already done by the other side, or already gone
        pass


def _stop_group(pid: int) -> None:
    """Kill whatever is left of a run's process group (a timed-out run, or stragglers of a finished one)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _start_fork(workdir: str, mutation: Mutation | None, tests: list[str], report: str, basetemp: str, log: str,
                threads: int) -> int:
    pid = os.fork()
    if pid:
        _own_group(pid)
        return pid
    code = 4
    try:
        _own_group(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(workdir)
        sys.path.insert(0, workdir)
        os.environ.update(_child_environment(workdir, threads))
        import pytest
        import torch

        torch.set_num_threads(threads)
        modules = ["rlvr", "tests"] + ([_module_name(mutation.path)] if mutation is not None else [])
        for name in modules:
            module = importlib.import_module(name)
            if not os.path.abspath(module.__file__).startswith(workdir + os.sep):
                print(f"{name} imported from {module.__file__}, not from {workdir}", flush=True)
                os._exit(3)
        code = int(pytest.main(_pytest_args(workdir, tests, report, basetemp)))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start_subprocess(workdir: str, mutation: Mutation | None, tests: list[str], report: str, basetemp: str,
                      log: str, threads: int) -> subprocess.Popen:
    env = dict(os.environ, **_child_environment(workdir, threads))
    with open(log, "w") as handle:
        return subprocess.Popen([sys.executable, "-m", "pytest", *_pytest_args(workdir, tests, report, basetemp)],
                                cwd=workdir, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def _failed_tests(report: str) -> tuple[list[str], int] | None:
    """(names of failed or errored tests, number of tests run), or None without a report."""
    if not os.path.exists(report):
        return None
    failed, total = [], 0
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        total += 1
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").split(".")[-1]
            failed.append(f"{module}::{case.get('name')}")
    return failed, total


def _run_all(jobs: list[tuple[str, Mutation | None, list[str]]], workers: int, use_fork: bool, scratch: str):
    """Run every job (mutation None = unmutated). Returns {name: ((failed tests, tests run) or None, seconds)}."""
    threads = 1 if workers > 1 else 2
    slots = []
    for index in range(workers):
        workdir = os.path.join(scratch, f"worker{index}")
        _copy_tree(workdir)
        check_subprocess_imports(workdir)
        slots.append(workdir)
    originals = {}
    for _, mutation, _ in jobs:
        if mutation is not None and mutation.path not in originals:
            with open(os.path.join(REPO, mutation.path), encoding="utf-8") as handle:
                originals[mutation.path] = handle.read()
    pending, running, results = list(jobs), {}, {}
    free = list(slots)
    try:
        while pending or running:
            while pending and free:
                name, mutation, tests = pending.pop(0)
                workdir = free.pop()
                for path, text in originals.items():  # restore every file, then apply this mutation
                    with open(os.path.join(workdir, path), "w", encoding="utf-8") as handle:
                        handle.write(text)
                if mutation is not None:
                    with open(os.path.join(workdir, mutation.path), "w", encoding="utf-8") as handle:
                        handle.write(_mutated_text(mutation, originals[mutation.path]))
                stem = os.path.join(scratch, name.strip("()"))
                starter = _start_fork if use_fork else _start_subprocess
                started_run = starter(workdir, mutation, tests, f"{stem}.xml", f"{stem}.tmp", f"{stem}.log", threads)
                pid = started_run if use_fork else started_run.pid
                limit = BASELINE_TIMEOUT_S if mutation is None else RUN_TIMEOUT_S
                running[name] = (pid, workdir, f"{stem}.xml", time.monotonic(), limit)
            time.sleep(0.2)
            for name, (pid, workdir, report, started, limit) in list(running.items()):
                # Exited? Asked without reaping it, so its pid (the group's id) cannot be reused
                # before the group is stopped.
                done = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if done or time.monotonic() - started > limit:
                    _stop_group(pid)
                    os.waitpid(pid, 0)
                    seconds = time.monotonic() - started
                    results[name] = (_failed_tests(report) if done else None, seconds)
                    del running[name]
                    free.append(workdir)
                    print(f"  finished {name} ({seconds:.0f} s{'' if done else ', timed out'})", file=sys.stderr,
                          flush=True)
    finally:  # interrupted (Ctrl-C, SIGTERM): nothing a run started outlives this process
        for pid, *_ in running.values():
            _stop_group(pid)
            os.waitpid(pid, 0)
    return results


def _preload() -> None:
    """Import the heavy third-party modules once, so every forked run starts warm."""
    import pytest  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401
    from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: F401


def _print_table(selected: list[Mutation], results: dict, min_catches: int) -> bool:
    """The table of which tests caught each mutation; True when every one was caught often enough."""
    ok = True
    width = max(len(m.name) for m in selected) if selected else 10
    print(f"\n{'mutation':<{width}}  tests  cases  secs  test functions that caught it (cases if parametrized)")
    print(f"{'-' * width}  -----  -----  ----  {'-' * 60}")
    for mutation in selected:
        result, seconds = results[mutation.name]
        if result is None:
            print(f"{mutation.name:<{width}}  {'ERROR':>5}  {'':>5}  {seconds:>4.0f}  "
                  "(no test report: the run crashed or timed out)")
            ok = False
            continue
        functions: dict[str, int] = {}
        for case in result[0]:
            base = case.split("[")[0]
            functions[base] = functions.get(base, 0) + 1
        names = [f"{name} ({count})" if count > 1 else name for name, count in functions.items()]
        lines = textwrap.wrap(", ".join(names), 100) or ["NOT CAUGHT"]
        print(f"{mutation.name:<{width}}  {len(functions):>5}  {len(result[0]):>5}  {seconds:>4.0f}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{width}}  {'':>5}  {'':>5}  {'':>4}  {line}")
        if len(functions) < min_catches:
            ok = False
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this mutation (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--min-catches", type=int, default=2,
                        help="distinct test functions that must catch each mutation (default 2)")
    parser.add_argument("--subprocess", action="store_true", help="fresh interpreter per run instead of fork")
    args = parser.parse_args()

    if args.list:
        width = max(len(m.name) for m in MUTATIONS)
        for mutation in MUTATIONS:
            print(f"{mutation.name:<{width}}  {mutation.path:<36}  {mutation.description}")
            print(f"{'':<{width}}  {'':<36}  tests: {', '.join(mutation.tests)}")
        return 0
    known = {m.name for m in MUTATIONS}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        print(f"unknown mutation(s) {unknown}; valid: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    selected = [m for m in MUTATIONS if not args.only or m.name in args.only]

    problems = stranded_mutations(selected) + missing_tests(selected)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # stop the runs on the way out
    use_fork = hasattr(os, "fork") and not args.subprocess
    sys.dont_write_bytecode = True  # a mutated module must never be shadowed by a stale .pyc
    if use_fork:
        _preload()
    started = time.monotonic()
    baseline_tests = union_of_tests(selected)
    jobs = [("(unmutated)", None, baseline_tests)] + [(m.name, m, list(m.tests)) for m in selected]
    with tempfile.TemporaryDirectory(prefix="rlvr-mutate-") as scratch:
        results = _run_all(jobs, max(1, args.jobs), use_fork, scratch)

    status = 0
    baseline, baseline_seconds = results["(unmutated)"]
    if baseline is None or baseline[0]:
        print(f"the unmutated tests do not pass: {baseline}", file=sys.stderr)
        status = 1
    tests_run = baseline[1] if baseline else 0
    if not _print_table(selected, results, args.min_catches):
        status = 1
    verdict = "OK" if status == 0 else "FAILED"
    print(f"\n{verdict}: {len(selected)} mutations; the unmutated run of their tests ({', '.join(baseline_tests)}): "
          f"{tests_run} tests, {baseline_seconds:.0f} s; at least {args.min_catches} catching test functions "
          f"required; {time.monotonic() - started:.0f} s in all")
    return status


if __name__ == "__main__":
    sys.exit(main())
