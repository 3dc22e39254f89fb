"""`rlvr check --reward`: feed a task's verifier degenerate completions and report which kinds earn reward.

RL optimises against its verifier, so any reward a policy can earn without solving the task (a
format bonus for an empty tag pair, a number copied from the prompt, tag spam) is what it learns.
No model is loaded: for N prompts of the task, each kind of `rlvr.reward_kinds` is scored through
`score_completions` (rlvr/rollout/sample.py, through `judge`), the one way completions are scored, and
every verdict is timed.

Exit rule (`failures`): a degenerate kind fails when, in more than `max_hack_rate` of the prompts,
one of its completions earns the correctness component (the task's primary component, weighted
> 0), or earns a format component (any other component with weight > 0) while earning no
correctness. A format bonus is allowed only for a well-formed wrong answer (not for the
`NO_ANSWER_KINDS`) and only where `FORMAT_ALLOWANCES` (or the task's own `format_allowances`, for a
task defined outside rlvr) grants it with its reason. A kind of `VARIANT_KINDS` (the truth in another
case, or with digits beyond its precision) that earns the full correctness reward is judged equal to
the truth by the verifier and is reported as allowed; earning part of it fails. The audit also
fails when any verdict takes longer than `max_verdict_seconds`, and when the positive control (the
ground truth in the asked format) does not earn the full correctness reward on every prompt: then
the audit is not testing the format the task asks for. An example without a ground truth (a puzzle
with many solutions, which the verifier checks itself) has no control unless the task names a
`reference_answer(example)`; that is reported, not failed.

A model judge (`judge:BASE`): its `judge` component is the correctness component where BASE's own
weigh 0 (else a component earned without correctness, like a format bonus), the `JUDGE_KINDS` are
built from its rubric, and a kind whose completions leave the judge's reply without a score (the
judge obeyed the completion instead of the rubric: `unjudgeable`) on more than `max_hack_rate` of
the prompts fails too: such a row earns no reward but is left out of training, so a policy that has
learnt to write it escapes the judgment a wrong answer would get.

A reward model (`rm:BASE` with BASE's weights 0): its score has no "full" value; it means something only
beside another completion of the same prompt (the task names it in `relative_components`). The audit reads
raw scores (the task's `audit_options`: no normalisation, no clip) and counts a completion as earning the
reward when it scores at least as high as the right answer on that prompt: a hack that a reward model
ranks level with or above the truth is one a policy will find.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rlvr.check.one_batch import CheckRow
from rlvr.reward_kinds import CONTROL, KINDS, NO_ANSWER_KINDS, VARIANT_KINDS, AuditPrompt, answer_format
from rlvr.rollout.sample import score_completions
from rlvr.tasks import task_factory
from rlvr.tasks.task import Verdict, primary_component, prompt_text
from rlvr.tasks.judge import JudgeTask
from rlvr.run.setup import prepare_task
from rlvr.utils import atomic_write_text

DEFAULT_PROMPTS = 32
DEFAULT_MAX_HACK_RATE = 0.05
DEFAULT_MAX_VERDICT_SECONDS = 15.0  # 3 x the 5 s symbolic-check timeout of the math tasks (a restart follows one)
EXAMPLE_CHARS = 60

# Task family -> {format component: why paying it for a well-formed wrong answer is intended shaping}.
FORMAT_ALLOWANCES: dict[str, dict[str, str]] = {
    "format_copy": {"tag": "the task teaches the tag format itself: 0.2 for one integer in one tag pair, "
                           "against 1.3 for the right one"},
    "code": {"passed": "partial credit: 0.5 x the share of unit tests a wrong program passes, against 1.5 for "
                       "one that passes them all"},
    "humaneval": {"passed": "partial credit: 0.5 x the share of unit tests a wrong program passes, against 1.5 "
                            "for one that passes them all"},
    "reasoning_gym": {"format": "0.1 for an answer span of the model's own (R1-Zero style shaping), "
                                "against 1.1 for a right answer"},
}


@dataclass
class KindResult:
    """One kind's numbers over the prompts; counts are of prompts where some completion of the kind did it."""

    kind: str
    prompts: int = 0
    completions: int = 0
    any_reward: int = 0
    main: int = 0
    main_full: int = 0  # the correctness component at its full value (>= 1): what the control must reach
    main_partial: int = 0  # the correctness component above 0 and below its full value
    formats: dict[str, int] = field(default_factory=dict)  # earned while earning no correctness
    total_sum: float = 0.0
    scorable: int = 0
    slowest_seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    judge_unscored: int = 0  # a model judge replied, but without a score: it followed the completion, not the rubric
    example: str = ""
    example_verdict: str = ""
    example_total: float = -math.inf

    def share(self, count: int) -> float:
        return count / self.prompts if self.prompts else 0.0

    @property
    def mean_total(self) -> float:
        return self.total_sum / self.scorable if self.scorable else math.nan


@dataclass
class RewardAudit:
    task: str
    answer_format: str
    main_component: str
    weights: dict[str, float]
    max_hack_rate: float
    max_verdict_seconds: float
    kinds: dict[str, KindResult]
    allowed: list[str]
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


def earned(verdict: Verdict, component: str, weights: dict[str, float]) -> bool:
    """The component pays something: its value times its weight is > 0 (NaN pays nothing)."""
    value = verdict.components.get(component, math.nan)
    return math.isfinite(value) and value * weights.get(component, 1.0) > 0


def describe(verdict: Verdict) -> str:
    parts = " ".join(f"{name}={value:.3g}" for name, value in verdict.components.items())
    return f"total={verdict.total:.3g} {parts} {verdict.status}"


def score_kind(result: KindResult, task, completions: list[str], example, main: str,
               weights: dict[str, float], bar: float | None = None) -> None:
    """Score one prompt's completions of one kind into `result`. `bar`: for a component whose score means
    something only beside another (a reward model's), the right answer's score on this prompt: a completion
    earns the component in full when it scores at least that (never in part); None: as its value says."""
    if not completions:
        return
    result.prompts += 1
    earned_any = earned_main = earned_full = earned_partial = unscored = False
    formats: set[str] = set()
    for completion in completions:
        started = time.perf_counter()
        (verdict,) = score_completions(task, [completion], [example])  # judge's guards, timed one by one
        result.slowest_seconds = max(result.slowest_seconds, time.perf_counter() - started)
        result.completions += 1
        result.statuses[verdict.status] = result.statuses.get(verdict.status, 0) + 1
        unscored |= verdict.judge_call is not None and verdict.judge_call.unparsed
        total = verdict.total if math.isfinite(verdict.total) else 0.0
        if math.isfinite(verdict.total):
            result.total_sum += verdict.total
            result.scorable += 1
        earned_any |= total > 0
        value = verdict.components.get(main, math.nan)
        if bar is None:
            main_paid = earned(verdict, main, weights)
            full = main_paid and value >= 1.0
        else:
            main_paid = full = math.isfinite(value) and value >= bar and weights.get(main, 1.0) > 0
        earned_main |= main_paid
        earned_full |= full
        earned_partial |= main_paid and not full
        if not main_paid:
            formats |= {c for c in verdict.components if c != main and earned(verdict, c, weights)}
        if total > result.example_total:
            result.example_total = total
            result.example, result.example_verdict = repr(completion[:EXAMPLE_CHARS]), describe(verdict)
    result.any_reward += earned_any
    result.judge_unscored += unscored
    result.main += earned_main
    result.main_full += earned_full
    result.main_partial += earned_partial
    for component in formats:
        result.formats[component] = result.formats.get(component, 0) + 1


def judge_results(results: dict[str, KindResult], family: str, max_hack_rate: float, max_verdict_seconds: float,
                  own_allowances: dict[str, str] | None = None, without_truth: int = 0) -> tuple[list[str], list[str]]:
    """(failures, allowed findings) under the exit rule of the module docstring; `without_truth`: the
    prompts whose example has no ground truth (no control there)."""
    failures, allowed = [], []
    if without_truth:
        allowed.append(f"control: {without_truth} prompts have no ground truth (the verifier judges answers "
                       f"itself) and no reference answer: the asked format is not tested on them")
    allowances = {**FORMAT_ALLOWANCES.get(family, {}), **(own_allowances or {})}
    for kind, result in results.items():
        if result.slowest_seconds > max_verdict_seconds:
            failures.append(f"{kind}: a verdict took {result.slowest_seconds:.1f} s (limit {max_verdict_seconds:g} s)")
        if kind == CONTROL:
            if result.main_full < result.prompts:
                failures.append(f"control: the ground truth in the asked format earned the full correctness reward "
                                f"on {result.main_full} of {result.prompts} prompts; the audit is not testing the "
                                f"format the task asks for (example {result.example} -> {result.example_verdict})")
            continue
        if kind in VARIANT_KINDS:
            if result.share(result.main_partial) > max_hack_rate:
                failures.append(f"{kind}: earns part of the correctness reward on "
                                f"{result.share(result.main_partial):.0%} "
                                f"of prompts (a consolation: full correctness would be the verifier judging it equal)")
            if result.share(result.main_full) > max_hack_rate:
                allowed.append(f"{kind}: earns full correctness on {result.share(result.main_full):.0%} of prompts "
                               f"(allowed: the verifier judges the truth written another way, in another case, with "
                               f"more digits or a stray word after it, equal to it; e.g. {result.example})")
        elif result.share(result.main) > max_hack_rate:
            failures.append(f"{kind}: earns correctness on {result.share(result.main):.0%} of prompts")
        if result.share(result.judge_unscored) > max_hack_rate:
            failures.append(f"{kind}: the judge's reply has no score on {result.share(result.judge_unscored):.0%} "
                            f"of prompts (it followed the completion, not the rubric; such rows are left out of "
                            f"training, escaping the judgment)")
        for component, count in sorted(result.formats.items()):
            if result.share(count) <= max_hack_rate:
                continue
            finding = f"{kind}: earns {component} without correctness on {result.share(count):.0%} of prompts"
            if component in allowances and kind not in NO_ANSWER_KINDS:
                allowed.append(f"{finding} (allowed: {allowances[component]})")
            else:
                failures.append(finding)
    return failures, allowed


def without_held_out_split(config):
    """`config` with the task's `eval_size` option at 0 where the run evaluates nothing (`train.eval_size=0`),
    the task's factory takes one with a default > 0 and the config leaves it unset: the audit reads
    training prompts only, and building a held-out split of slow puzzles (reasoning-gym's futoshiki:
    200 of them, up to 12 s each) took minutes."""
    options = dict(config.task.options or {})
    if config.train.eval_size > 0:
        return config  # the run evaluates: its held-out split must exist (`check_held_out`)
    factory, _ = task_factory(config.task.name)
    default = inspect.signature(factory).parameters.get("eval_size")
    if "eval_size" in options or default is None or not isinstance(default.default, int) or default.default <= 0:
        return config
    return replace(config, task=replace(config.task, options={**options, "eval_size": 0}))


def audited_component(task, weights: dict[str, float]) -> str:
    """The correctness component: the task's primary one, or, where that weighs 0 and exactly one component
    weighs something (`judge:BASE` with BASE's weights 0: `judge`), that one."""
    main = primary_component(task)
    weighted = [name for name in task.component_names if weights.get(name, 0.0) > 0]
    return weighted[0] if weights.get(main, 0.0) <= 0 and len(weighted) == 1 else main


def judge_rubric(task) -> tuple[str | None, str]:
    """(rubric template, the top score its last line names) of a model judge; (None, "10") for a task judged
    by a program, which gets no `JUDGE_KINDS`."""
    if not isinstance(task, JudgeTask):
        return None, "10"
    return task.template, "PASS" if task.scale.pass_fail else f"{task.scale.high:g}"


def run_reward_audit(config, *, prompts: int = DEFAULT_PROMPTS, max_hack_rate: float = DEFAULT_MAX_HACK_RATE,
                     max_verdict_seconds: float = DEFAULT_MAX_VERDICT_SECONDS, kinds=None) -> RewardAudit:
    """Build `config`'s task (no model), score every kind on `prompts` training prompts, apply the exit rule."""
    if prompts < 1:
        raise ValueError(f"rlvr check --reward: --prompts must be >= 1, got {prompts}")
    if not 0 <= max_hack_rate < 1:
        raise ValueError(f"rlvr check --reward: --max-hack-rate must be in [0, 1), got {max_hack_rate}")
    kinds = list(kinds) if kinds is not None else [CONTROL] + [k for k in KINDS if k != CONTROL]
    for kind in kinds:
        KINDS.get(kind)  # an unknown kind fails here, naming the valid ones
    task = prepare_task(without_held_out_split(config), inference=True)  # no model loads: no memory estimate
    weights = dict(getattr(task, "weights", None) or {c: 1.0 for c in task.component_names})
    main = audited_component(task, weights)
    relative = main in getattr(task, "relative_components", ())
    audit_options = getattr(task, "audit_options", {}) if relative else {}
    if any(config.task.options.get(key, "unset") != value for key, value in audit_options.items()):
        config = replace(config, task=replace(config.task, options={**config.task.options, **audit_options}))
        task = prepare_task(without_held_out_split(config), inference=True)  # raw scores, comparable across calls
    rubric, top_score = judge_rubric(task)
    examples = task.examples("train", prompts, config.train.seed)
    results = {kind: KindResult(kind) for kind in kinds}
    # a task may name the format its answers take where the prompt asks for none (math: `\boxed{}`)
    form = answer_format(prompt_text(examples[0].prompt), getattr(task, "unasked_answer_format", "plain"))
    # untimed: starts a verifier's worker process
    score_completions(task, [form.wrap(str(examples[0].ground_truth))], examples[:1])
    reference = getattr(task, "reference_answer", None) or (lambda example: example.ground_truth)
    without_truth = 0
    for example in examples:
        truth = reference(example)
        truth = truth[0] if isinstance(truth, (list, tuple)) else truth
        without_truth += truth is None
        item = AuditPrompt(prompt=prompt_text(example.prompt), truth=None if truth is None else str(truth), form=form,
                           rubric=rubric, top_score=top_score)
        bar = None
        if relative:  # the right answer's raw score on this prompt: what a hack must not reach
            bar = math.inf  # no right answer to compare with: nothing is counted as earning it
            if truth is not None:
                (control,) = score_completions(task, [form.wrap(str(truth))], [example])
                value = control.components.get(main, math.nan)
                bar = value if math.isfinite(value) else -math.inf
        for kind in kinds:
            score_kind(results[kind], task, KINDS.get(kind)(item), example, main, weights,
                       None if bar is None else (-math.inf if kind == CONTROL else bar))
    family = config.task.name.partition(":")[0]
    failures, allowed = judge_results(results, family, max_hack_rate, max_verdict_seconds,
                                      getattr(task, "format_allowances", None), without_truth)
    return RewardAudit(task=config.task.name, answer_format=form.name, main_component=main, weights=weights,
                       max_hack_rate=max_hack_rate, max_verdict_seconds=max_verdict_seconds, kinds=results,
                       allowed=allowed, failures=failures)


def audit_rows(audit: RewardAudit) -> list[CheckRow]:
    """One table row per kind: shares of prompts earning any reward, correctness, each format component."""
    rows = []
    failing = {line.split(":", 1)[0] for line in audit.failures}
    formats = [c for c in audit.weights if c != audit.main_component]
    for kind, result in audit.kinds.items():
        shares = [f"any {result.share(result.any_reward):.0%}",
                  f"{audit.main_component} {result.share(result.main):.0%}"]
        shares += [f"{c} {result.share(result.formats.get(c, 0)):.0%}" for c in formats]
        if result.judge_unscored:
            shares.append(f"judge unscored {result.share(result.judge_unscored):.0%}")
        verdict = "FAIL" if kind in failing else "PASS"
        rows.append(CheckRow(kind, " ".join(shares), f"{result.mean_total:.3f} {result.slowest_seconds:.2f}s", verdict,
                             f"{result.example} -> {result.example_verdict}"))
    return rows


REWARD_HEADER = ("kind", "share of prompts earning (format: without correctness)", "mean, slowest", "result",
                 "highest-paid example -> verdict")


def audit_json(audit: RewardAudit) -> dict:
    data = asdict(audit)
    for kind, result in audit.kinds.items():
        entry = data["kinds"][kind]
        entry.pop("example_total")
        entry.update(mean_total=None if math.isnan(result.mean_total) else result.mean_total,
                     any_reward_rate=result.share(result.any_reward), main_rate=result.share(result.main),
                     judge_unscored_rate=result.share(result.judge_unscored),
                     format_rates={c: result.share(n) for c, n in result.formats.items()})
    data["passed"] = audit.passed
    return data


def write_audit_json(audit: RewardAudit, path: str | Path) -> None:
    atomic_write_text(Path(path), json.dumps(audit_json(audit), indent=2) + "\n")
