#!/usr/bin/env python
"""Mutation testing of the math: inject realistic bugs one at a time, show the tests catch each.

The math is `rlvr/core`, the completion log-prob path in `rlvr/models/completion_logprobs.py`
and the CS336 functions in `rlvr/compat/cs336.py`; the tests are `tests/core`.

Usage (from the repository root or anywhere):

    python scripts/mutate.py                 # run every mutation and print the table
    python scripts/mutate.py --list          # list the mutations and what each one breaks
    python scripts/mutate.py --only kl_sign_reversed --only clip_removed
    python scripts/mutate.py --jobs 1        # one run at a time (default: 2)

How it works: `rlvr/__init__.py`, `rlvr/registry.py`, `rlvr/core/`, `rlvr/models/`, `rlvr/compat/`
and `tests/core/` are copied into one temporary directory per worker, so the working tree is
never modified. Torch, transformers and TRL are imported once here; each run forks a child that applies one mutation
(exact text replacement) to its copy, imports rlvr from there and runs pytest on `tests/core`
with a JUnit XML report, from which the failing tests are read. Without `os.fork` (or with
`--subprocess`) each run is a fresh `python -m pytest` instead, which is slower.

Exit status 1 when the unmutated suite does not pass, when a mutation's search text does not
occur exactly once, or when a mutation is caught by fewer than `--min-catches` (2) distinct test
functions (the cases of one parametrized test count once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIED = ["rlvr/__init__.py", "rlvr/registry.py", "rlvr/core", "rlvr/models", "rlvr/compat", "tests/core"]
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    description: str
    replacements: tuple[tuple[str, str], ...]  # (exact text, replacement); each text must occur once


def mutation(name: str, path: str, description: str, *replacements: tuple[str, str]) -> Mutation:
    return Mutation(name, path, description, tuple(replacements))


MUTATIONS = [
    mutation(
        "mask_keeps_prompt", "rlvr/core/masks.py",
        "completion mask also covers prompt tokens",
        ("target_is_completion = target_position >= prompt_len",
         "target_is_completion = target_position >= 1"),
    ),
    mutation(
        "mask_shifted_by_one", "rlvr/core/masks.py",
        "completion mask aligned with input tokens instead of targets",
        ("target_is_real = attention_mask[:, 1:] != 0",
         "target_is_real = attention_mask[:, :-1] != 0"),
        ("torch.arange(1, seq_len, device=input_ids.device)",
         "torch.arange(0, seq_len - 1, device=input_ids.device)"),
    ),
    mutation(
        "logits_not_shifted", "rlvr/core/logprobs.py",
        "logits at t score token t instead of t+1 (off by one)",
        ("return torch.cat([input_ids[:, 1:], dummy], dim=1)  # [B, L]",
         "return input_ids  # [B, L]"),
    ),
    mutation(
        "no_fp32_upcast", "rlvr/core/logprobs.py",
        "log-softmax taken in bf16/fp16",
        ("compute_dtype = torch.promote_types(logits.dtype, torch.float32)",
         "compute_dtype = logits.dtype"),
    ),
    mutation(
        "position_ids_ignore_padding", "rlvr/core/logprobs.py",
        "left padding shifts the positions of the real tokens",
        ("position_ids = position_ids_from_attention_mask(attention_mask)  # [B, L]",
         "position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)  # [B, L]"),
    ),
    mutation(
        "kl_sign_reversed", "rlvr/core/kl.py",
        "d = log(pi / pi_ref) instead of log(pi_ref / pi)",
        ("log_ratio = logp_ref - logp_new  # [B, T]",
         "log_ratio = logp_new - logp_ref  # [B, T]"),
    ),
    mutation(
        "kl_missing_minus_one", "rlvr/core/kl.py",
        "k3 = exp(d) - d without the -1",
        ("return torch.expm1(log_ratio) - log_ratio",
         "return torch.exp(log_ratio) - log_ratio"),
    ),
    mutation(
        "kl_not_clamped", "rlvr/core/kl.py",
        "log-ratio not clamped before exp",
        ("log_ratio = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)  # [B, T]",
         "log_ratio = log_ratio  # [B, T]"),
    ),
    mutation(
        "minibatch_shuffles_only_input_ids", "rlvr/core/batch.py",
        "the permutation is applied to input_ids only",
        ("minibatch = batch.select(index)",
         "minibatch = batch.select(torch.arange(start, start + len(index)))\n"
         "        minibatch.input_ids = batch.input_ids[index]"),
    ),
    mutation(
        "advantages_groups_transposed", "rlvr/core/advantages.py",
        "contiguous groups read as a transposed [G, N/G] reshape",
        ("return torch.arange(num_samples, device=device) // group_size, num_samples // group_size",
         "return torch.arange(num_samples, device=device) % (num_samples // group_size), num_samples // group_size"),
    ),
    mutation(
        "cs336_rewards_reshaped_transposed", "rlvr/compat/cs336.py",
        "CS336 group normalization reshapes the wrong way round",
        ("grouped = raw_rewards.view(-1, group_size)",
         "grouped = raw_rewards.view(group_size, -1).T"),
    ),
    mutation(
        "sample_std_instead_of_population", "rlvr/core/advantages.py",
        "population std replaced by sample std",
        ('degrees_of_freedom = stats["counts"] if std == "population" else stats["counts"] - 1',
         'degrees_of_freedom = stats["counts"] - 1'),
    ),
    mutation(
        "std_eps_dropped", "rlvr/core/advantages.py",
        "eps no longer added to the group std",
        ("advantages = centred / (group_std[index] + eps)  # [N]",
         "advantages = centred / group_std[index]  # [N]"),
    ),
    mutation(
        "zero_spread_groups_not_zeroed", "rlvr/core/advantages.py",
        "groups without spread keep float-noise advantages",
        ("        advantages = centred  # [N]\n"
         "    return torch.where(_degenerate(stats, eps)[index], torch.zeros_like(advantages), advantages)",
         "        advantages = centred  # [N]\n    return advantages"),
    ),
    mutation(
        "rloo_baseline_includes_self", "rlvr/core/advantages.py",
        "RLOO baseline is the full group mean",
        ('baseline = (stats["sums"][index] - rewards) / others',
         'baseline = stats["means"][index]'),
    ),
    mutation(
        "reinforce_without_advantage", "rlvr/core/policy_losses.py",
        "REINFORCE loss forgets to weight by the advantage",
        ("return -advantages * policy_log_probs  # [B, T]",
         "return -policy_log_probs  # [B, T]"),
    ),
    mutation(
        "clip_loss_wrong_sign", "rlvr/core/policy_losses.py",
        "GRPO clip loss maximised instead of minimised",
        ("loss = -torch.min(unclipped_objective, clipped_objective)",
         "loss = torch.min(unclipped_objective, clipped_objective)"),
    ),
    mutation(
        "clip_removed", "rlvr/core/policy_losses.py",
        "ratio never clipped",
        ("clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T]",
         "clipped_ratio = ratio  # [B, T]"),
    ),
    mutation(
        "min_replaced_by_max", "rlvr/core/policy_losses.py",
        "optimistic instead of pessimistic bound",
        ("loss = -torch.min(unclipped_objective, clipped_objective)",
         "loss = -torch.max(unclipped_objective, clipped_objective)"),
    ),
    mutation(
        "old_logprobs_not_detached", "rlvr/core/policy_losses.py",
        "gradient flows into the old policy's log-probs",
        ("log_ratio = policy_log_probs - old_log_probs.detach()  # [B, T]",
         "log_ratio = policy_log_probs - old_log_probs  # [B, T]"),
    ),
    mutation(
        "gspo_sum_not_mean", "rlvr/core/policy_losses.py",
        "GSPO sequence ratio uses the sum, not the mean, of token log-ratios",
        ("sequence_log_ratio = masked_mean_per_row(log_ratio, mask).unsqueeze(-1)  # [B, 1]",
         "sequence_log_ratio = (log_ratio * mask).sum(-1, keepdim=True)  # [B, 1]"),
    ),
    mutation(
        "loss_not_divided_by_accumulation", "rlvr/compat/cs336.py",
        "microbatch loss not divided by the accumulation steps",
        ("    loss = batch_loss / gradient_accumulation_steps\n    loss.backward()\n    return loss\n",
         "    loss = batch_loss\n    loss.backward()\n    return loss\n"),
    ),
    mutation(
        "token_mean_ignores_global_count", "rlvr/core/aggregation.py",
        "token_mean divides by the microbatch's own token count",
        ("    return values.sum() / num_tokens",
         "    return values.sum() / weights.sum()"),
    ),
    mutation(
        "gae_bootstraps_from_padding", "rlvr/core/value.py",
        "GAE runs through masked columns: the last token bootstraps from the padding's value",
        ("next_value = torch.where(keep[:, t], values[:, t], next_value)  # [B]",
         "next_value = values[:, t]  # [B]"),
        ("next_advantage = torch.where(keep[:, t], advantage, next_advantage)  # [B]",
         "next_advantage = advantage  # [B]"),
    ),
    mutation(
        "value_clip_min_not_max", "rlvr/core/value.py",
        "clipped value loss takes the optimistic min of the two squared errors",
        ("per_token = 0.5 * torch.max(unclipped_error, clipped_error)  # [B, T]",
         "per_token = 0.5 * torch.min(unclipped_error, clipped_error)  # [B, T]"),
    ),
    mutation(
        "whiten_ignores_mask", "rlvr/core/value.py",
        "whitening statistics taken over padding and prompt columns too",
        ("kept = values[keep]  # [n]",
         "kept = values.flatten()  # [n]"),
    ),
    mutation(
        "shared_prompt_cache_detached", "rlvr/models/completion_logprobs.py",
        "the prompt run once per group is cut out of the graph: no gradient through the prompt",
        ("cache.batch_repeat_interleave(group_size)  # keys/values",
         "[setattr(layer, k, getattr(layer, k).detach()) for layer in cache.layers for k in ('keys', 'values')]; cache.batch_repeat_interleave(group_size)  # keys/values"),
    ),
    mutation(
        "completion_scored_from_own_position", "rlvr/models/completion_logprobs.py",
        "completion token t scored from the hidden state at t instead of t-1 (off by one)",
        ("scoring_hidden = torch.cat([last_prompt_hidden, completion_hidden[:, :-1]], dim=1)",
         "scoring_hidden = completion_hidden"),
    ),
    mutation(
        "head_gradient_without_softmax_term", "rlvr/core/head_logprobs.py",
        "frozen LM head: d log p(t) / d h taken as w_t / T, forgetting the -sum_v p_v w_v of the normalizer",
        ("jacobian_parts.append((weight_c[chunk_targets] - expected) / temperature)",
         "jacobian_parts.append(weight_c[chunk_targets] / temperature)"),
    ),
]


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


def _pytest_args(workdir: str, report: str) -> list[str]:
    return [
        os.path.join(workdir, "tests", "core"), "-q", "-p", "no:cacheprovider", "--rootdir", workdir,
        "-o", "addopts=", "-o", "testpaths=tests/core", f"--junitxml={report}",
    ]


def _start_fork(workdir: str, report: str, log: str, threads: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 4
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(workdir)
        sys.path.insert(0, workdir)
        import pytest
        import torch

        torch.set_num_threads(threads)
        import rlvr.compat.cs336
        import rlvr.core
        import rlvr.models.completion_logprobs

        for module in (rlvr.core, rlvr.models.completion_logprobs, rlvr.compat.cs336):
            if not os.path.abspath(module.__file__).startswith(workdir):
                print(f"{module.__name__} imported from {module.__file__}, not from {workdir}", flush=True)
                os._exit(3)
        code = int(pytest.main(_pytest_args(workdir, report)))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start_subprocess(workdir: str, report: str, log: str, threads: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=workdir, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS=str(threads))
    with open(log, "w") as handle:
        return subprocess.Popen([sys.executable, "-m", "pytest", *_pytest_args(workdir, report)],
                                cwd=workdir, env=env, stdout=handle, stderr=subprocess.STDOUT)


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


def _run_all(jobs: list[tuple[str, Mutation | None]], workers: int, use_fork: bool, scratch: str):
    """Run every job (None = unmutated). Returns {name: (failed tests, tests run) or None}."""
    threads = 1 if workers > 1 else 2
    slots = []
    for index in range(workers):
        workdir = os.path.join(scratch, f"worker{index}")
        _copy_tree(workdir)
        slots.append(workdir)
    originals = {m.path: open(os.path.join(REPO, m.path)).read() for _, m in jobs if m is not None}
    pending, running, results = list(jobs), {}, {}
    free = list(slots)
    while pending or running:
        while pending and free:
            name, mutation = pending.pop(0)
            workdir = free.pop()
            for path, text in originals.items():  # restore every file, then apply this mutation
                with open(os.path.join(workdir, path), "w") as handle:
                    handle.write(text)
            if mutation is not None:
                with open(os.path.join(workdir, mutation.path), "w") as handle:
                    handle.write(_mutated_text(mutation, originals[mutation.path]))
            report = os.path.join(scratch, f"{name}.xml")
            log = os.path.join(scratch, f"{name}.log")
            starter = _start_fork if use_fork else _start_subprocess
            running[name] = (starter(workdir, report, log, threads), workdir, report, time.monotonic())
        time.sleep(0.2)
        for name, (handle, workdir, report, started) in list(running.items()):
            if use_fork:
                done = os.waitpid(handle, os.WNOHANG)[0] != 0
            else:
                done = handle.poll() is not None
            if not done and time.monotonic() - started > RUN_TIMEOUT_S:
                if use_fork:
                    os.kill(handle, 9)
                    os.waitpid(handle, 0)
                else:
                    handle.kill()
                    handle.wait()
                done = True
            if done:
                results[name] = _failed_tests(report)
                del running[name]
                free.append(workdir)
                print(f"  finished {name}", file=sys.stderr, flush=True)
    return results


def _preload() -> None:
    """Import the heavy third-party modules once, so every forked run starts warm."""
    import pytest  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401
    from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: F401


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
            print(f"{mutation.name:<{width}}  {mutation.path:<28}  {mutation.description}")
        return 0
    known = {m.name for m in MUTATIONS}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        print(f"unknown mutation(s) {unknown}; valid: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    selected = [m for m in MUTATIONS if not args.only or m.name in args.only]

    missing = stranded_mutations(selected)
    if missing:
        print("\n".join(missing), file=sys.stderr)
        return 1

    use_fork = hasattr(os, "fork") and not args.subprocess
    sys.dont_write_bytecode = True  # a mutated module must never be shadowed by a stale .pyc
    if use_fork:
        _preload()
    started = time.monotonic()
    jobs = [("(unmutated)", None)] + [(m.name, m) for m in selected]
    with tempfile.TemporaryDirectory(prefix="rlvr-mutate-") as scratch:
        results = _run_all(jobs, max(1, args.jobs), use_fork, scratch)

    status = 0
    baseline = results["(unmutated)"]
    if baseline is None or baseline[0]:
        print(f"the unmutated suite does not pass: {baseline}", file=sys.stderr)
        status = 1
    tests_run = baseline[1] if baseline else 0
    width = max(len(m.name) for m in selected) if selected else 10
    print(f"\n{'mutation':<{width}}  tests  cases  test functions that caught it (cases if parametrized)")
    print(f"{'-' * width}  -----  -----  {'-' * 60}")
    for mutation in selected:
        result = results[mutation.name]
        if result is None:
            print(f"{mutation.name:<{width}}  {'ERROR':>5}  {'':>5}  (no test report: the run crashed or timed out)")
            status = 1
            continue
        functions: dict[str, int] = {}
        for case in result[0]:
            base = case.split("[")[0]
            functions[base] = functions.get(base, 0) + 1
        names = [f"{name} ({count})" if count > 1 else name for name, count in functions.items()]
        lines = textwrap.wrap(", ".join(names), 110) or ["NOT CAUGHT"]
        print(f"{mutation.name:<{width}}  {len(functions):>5}  {len(result[0]):>5}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{width}}  {'':>5}  {'':>5}  {line}")
        if len(functions) < args.min_catches:
            status = 1
    verdict = "OK" if status == 0 else "FAILED"
    print(f"\n{verdict}: {len(selected)} mutations, {tests_run} tests per run, "
          f"at least {args.min_catches} catching test functions required, {time.monotonic() - started:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
