"""`rlvr check --mechanism --record DIR`: the mechanism check under two candidate conditions, one JSON each.

`minimal_pair` gives each of the two prompts its correct and wrong response (G = 2);
`expanded_group` adds the correct-but-badly-formatted and the no-answer ones (G = 4). Each
condition is one `rlvr.check.mechanism.run_mechanism` from the same model and seed (a fresh LoRA
adapter each time), so the two differ in candidate coverage, not in sampling noise. Each record holds the
verifier's pass rates and statuses, the reward spread, the advantages, the zero-variance guard, the
policy separation, the clip fraction, time and memory, and the decision of `rlvr.check.mechanism.decide`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from rlvr import __version__
from rlvr.check.one_batch import format_table
from rlvr.check.mechanism import (
    ACCEPT,
    CANDIDATE_LABELS,
    DECISION_RULE,
    MECHANISM_PROMPTS,
    MECHANISM_UPDATES,
    MechanismDecision,
    MechanismResult,
    candidate_rows,
    decide,
    decide_conditions,
    mechanism_rows,
    run_mechanism,
)
from rlvr.utils import atomic_write_text, to_json

RECORD_SCHEMA = "rlvr-mechanism-record/1"


@dataclass(frozen=True)
class Condition:
    name: str
    group_size: int  # candidates per prompt: the first `group_size` of CANDIDATE_LABELS
    description: str


CONDITIONS = (
    Condition("minimal_pair", 2, "the correct and the wrong response: the smallest group with reward contrast"),
    Condition("expanded_group", 4, "correct, wrong, correct but badly formatted, no answer: edge statuses included"),
)


@dataclass(frozen=True)
class ConditionRun:
    """One condition's measurements and its decision."""

    condition: Condition
    result: MechanismResult
    decision: MechanismDecision


def pass_rate(values: list[bool]) -> float:
    return sum(values) / len(values) if values else math.nan


def verifier_summary(result: MechanismResult) -> dict:
    """Correctness and format pass rates, every component's, the statuses and the unjudgeable count.

    A component passes when it is judged (finite) and at its maximum 1. Format passes when every
    component other than the correctness one does; `correctness_pass_rate` counts the verdicts
    the task marks correct.
    """
    verdicts = result.verdicts
    names = list(dict.fromkeys(name for verdict in verdicts for name in verdict.components))
    passes = {name: [math.isfinite(v.components.get(name, math.nan)) and v.components[name] >= 1.0 for v in verdicts]
              for name in names}
    format_names = [name for name in names if name != result.correctness_component]
    statuses: dict[str, int] = {}
    for verdict in verdicts:
        statuses[verdict.status] = statuses.get(verdict.status, 0) + 1
    return {
        "verifier": sorted({f"{v.verifier} {v.version}" for v in verdicts}),
        "correctness_component": result.correctness_component,
        "format_components": format_names,
        "correctness_pass_rate": pass_rate([bool(v.correct) for v in verdicts]),
        "format_pass_rate": pass_rate([all(passes[name][i] for name in format_names) for i in range(len(verdicts))]),
        "component_pass_rates": {name: pass_rate(flags) for name, flags in passes.items()},
        "status_counts": statuses,
        "unjudgeable_count": statuses.get("unjudgeable", 0),
        "unscored_count": int((~torch.isfinite(result.rewards)).sum()),  # no weighted component judged: A = 0
    }


def reward_std_mean(result: MechanismResult) -> float:
    """Population std of each prompt's finite rewards (0 with fewer than two), mean over the prompts."""
    totals = torch.tensor([verdict.total for verdict in result.verdicts], dtype=torch.float64)  # [N], NaN: unscored
    spreads = []
    for group in result.group_ids.unique().tolist():
        rewards = totals[result.group_ids == group]  # [G]
        finite = rewards[torch.isfinite(rewards)]
        spreads.append(float(finite.std(unbiased=False)) if finite.numel() >= 2 else 0.0)
    return sum(spreads) / len(spreads)


def config_facts(config, condition: Condition) -> dict:
    """What the condition ran: task, model, seed, group size and the update's settings."""
    algo = config.algorithm
    return {
        "task": config.task.name, "model": config.model.name, "seed": config.train.seed,
        "group_size": condition.group_size, "prompts": MECHANISM_PROMPTS,
        "candidate_labels": list(CANDIDATE_LABELS[:condition.group_size]),
        "algorithm": algo.name, "advantage_estimator": algo.advantage_estimator, "policy_loss": algo.policy_loss,
        "loss_aggregation": algo.loss_aggregation, "learning_rate": config.optim.lr,
        "clip_low": algo.clip_low, "clip_high": algo.clip_high, "kl_coef": algo.kl_coef,
        "planned_optimizer_steps": MECHANISM_UPDATES, "lora_rank": config.model.lora_rank,
        "lora_alpha": config.model.lora_alpha, "dtype": config.model.dtype, "device": config.model.device,
    }


def condition_record(run: ConditionRun, config, runs: list[ConditionRun]) -> dict:
    """The JSON record of one condition; `runs` (every condition) gives the cross-condition fields."""
    result, decision = run.result, run.decision
    separations = {r.condition.name: r.result.policy_separation for r in runs}
    finite = {name: value for name, value in separations.items() if math.isfinite(value)}
    return {
        "schema": RECORD_SCHEMA, "rlvr_version": __version__,
        "condition": run.condition.name, "condition_description": run.condition.description,
        **config_facts(config, run.condition),
        **verifier_summary(result),
        "reward_std_mean": reward_std_mean(result),
        "nonzero_advantages": result.nonzero_advantages,
        "no_contrast_groups": int(result.no_contrast.sum()),
        "no_contrast_groups_zeroed": result.no_contrast_zeroed,
        "all_equal_group_max_abs_advantage": result.all_equal_advantage_max,
        "zero_variance_guard_passed": result.zero_variance_guard_passed,
        "policy_separation": result.policy_separation,
        "mean_clip_fraction": result.clip_fraction,
        "optimizer_steps_taken": result.update.optimizer_steps,
        "skipped_nonfinite_steps": result.update.skipped_nonfinite_updates,
        "update_seconds": result.update_seconds,
        "peak_memory_bytes": result.peak_memory_bytes,
        "peak_memory_source": result.peak_memory_source,
        "update_metrics": dict(result.update.metrics),  # the update's own metric means, under their metric names
        "responses": [
            {"prompt": int(result.group_ids[i]), "label": result.labels[i], "reward": verdict.total,
             "components": dict(verdict.components), "status": verdict.status,
             "advantage": float(result.advantages[i]), "logprob_change": float(result.logprob_change[i])}
            for i, verdict in enumerate(result.verdicts)
        ],
        "decision": decision.decision,
        "criteria": decision.criteria,
        "failed_criteria": decision.failed_criteria,
        "decision_rule": [{"criterion": name, "on_failure": outcome, "requires": text}
                          for name, outcome, text in DECISION_RULE],
        "mechanism_decision": decide_conditions([r.decision for r in runs]),
        "conditions": {r.condition.name: r.decision.decision for r in runs},
        # diagnostic only: the conditions differ in which candidates they hold, not only in group size
        "highest_separation_condition": max(finite, key=finite.get) if finite else None,
    }


def run_conditions(config, conditions: tuple[Condition, ...] = CONDITIONS,
                   echo: Callable[[str], None] = lambda _: None) -> list[ConditionRun]:
    """Each condition from the same model and seed; `echo` gets each condition's tables as it finishes."""
    runs = []
    for condition in conditions:
        result = run_mechanism(config, condition.group_size)
        run = ConditionRun(condition, result, decide(result))
        echo(f"condition {condition.name}: {condition.group_size} candidates per prompt "
             f"({', '.join(CANDIDATE_LABELS[:condition.group_size])})")
        echo(format_table(candidate_rows(result),
                          ("response", "reward", "components", "status", "advantage and change")))
        echo(format_table(mechanism_rows(result, config)))
        failed = f" (failed: {', '.join(run.decision.failed_criteria)})" if run.decision.failed_criteria else ""
        echo(f"decision: {run.decision.decision}{failed}\n")
        runs.append(run)
    return runs


def write_records(runs: list[ConditionRun], config, directory: str | Path) -> list[Path]:
    """DIR/<condition>.json for each run, each written atomically (NaN as null); returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for run in runs:
        record = json.loads(to_json(condition_record(run, config, runs)))  # NaN and inf become null
        path = directory / f"{run.condition.name}.json"
        atomic_write_text(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


def run_mechanism_experiment(config, directory: str | Path, echo: Callable[[str], None] = print) -> str:
    """Run every condition, print its tables, write DIR/<condition>.json; returns the mechanism decision."""
    runs = run_conditions(config, echo=echo)
    for path in write_records(runs, config, directory):
        echo(f"wrote {path}")
    overall = decide_conditions([run.decision for run in runs])
    per_condition = ", ".join(f"{run.condition.name} {run.decision.decision}" for run in runs)
    echo(f"rlvr check --mechanism: {overall} ({per_condition})")
    return overall


__all__ = ["ACCEPT", "CONDITIONS", "Condition", "ConditionRun", "condition_record", "run_conditions",
           "run_mechanism_experiment", "write_records"]
