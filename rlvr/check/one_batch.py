"""`rlvr check`: a preflight that runs one real rollout batch and one update and verifies the
intermediate quantities (importance ratio, advantages, KL, completion mask, loss, gradient, dtype,
truncation), printing a pass/fail table. `rlvr check --mechanism` lives in `mechanism.py`.

Each quantity is recomputed here by a route independent of the training code where one exists:
the completion mask from the token ids, the sampling-time log-probs from a plain full-sequence
forward of the policy as it samples (adapter merged, eval mode), so a bug in the training path
shows up as a failed row instead of a run that quietly learns nothing.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch

from rlvr.core import ADVANTAGE_ESTIMATORS, compute_per_token_logprobs, kl_per_token
from rlvr.observe.metric_names import GRAD_NORM, LOSS, TIME_UPDATE, TRUNCATED_FRAC
from rlvr.models import compute_completion_logprobs, reference_context, trainable_parameters
from rlvr.models.policy import dtype_name, resolve_dtype
from rlvr.rollout import SamplingSettings
from rlvr.rollout.generation import eos_token_ids
from rlvr.rollout.episodes import ENV_SPAN_CLOSE, ENV_SPAN_OPEN, transcript
from rlvr.training.iteration import Learner, plan_iteration, prepare, sample_rollout, timed
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.observe.rollout_stats import advantage_per_row, gather_rollout, rollout_stats
from rlvr.run.setup import load_model_and_task, rollout_backend, set_up_value_model
from rlvr.training.microbatching import forward_group_size, training_microbatches

RATIO_TOLERANCE = 1e-3  # max |pi_update / pi_sampling - 1| on the first minibatch
ADVANTAGE_SUM_TOLERANCE = 1e-4  # max |sum of a group's advantages|
KL_TOLERANCE = 1e-4  # mean per-token KL to the reference before any step


@dataclass
class CheckRow:
    name: str
    value: str
    threshold: str
    result: str  # PASS, FAIL, WARN (reported, does not fail the check) or INFO
    note: str = ""


def row(name: str, value, threshold: str, passed: bool | None, note: str = "", warn_only: bool = False) -> CheckRow:
    text = value if isinstance(value, str) else (f"{value:.3g}" if isinstance(value, float) else str(value))
    result = "INFO" if passed is None else ("PASS" if passed else ("WARN" if warn_only else "FAIL"))
    return CheckRow(name, text, threshold, result, note)


def format_table(rows: list[CheckRow],
                 header: tuple[str, ...] = ("check", "value", "threshold", "result", "note")) -> str:
    header = CheckRow(*header)
    table = [header, *rows]
    widths = [max(len(getattr(r, f)) for r in table) for f in ("name", "value", "threshold", "result")]
    lines = []
    for r in table:
        cells = [getattr(r, f).ljust(w) for f, w in zip(("name", "value", "threshold", "result"), widths)]
        lines.append("  ".join(cells + [r.note]).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failed(rows: list[CheckRow]) -> bool:
    return any(r.result == "FAIL" for r in rows)


def expected_completion_mask(input_ids: torch.Tensor, prompt_len: int, eos_ids: set[int], max_new_tokens: int,
                             tokenizer=None, stop_strings=()) -> torch.Tensor:
    """The completion mask re-derived from token ids alone. [N, L] -> float [N, L-1].

    A completion starts at column `prompt_len` and runs up to and including its first EOS (or
    `max_new_tokens` tokens); a row stopped by a stop string ends just before the EOS filler.
    Column t refers to token t+1.
    """
    num_rows, seq_len = input_ids.shape
    mask = torch.zeros(num_rows, seq_len - 1)
    completion = input_ids[:, prompt_len:]  # [N, C]
    for r in range(num_rows):
        tokens = completion[r].tolist()
        end = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
        length = len(tokens) if end is None else end + 1
        if end is not None and stop_strings and tokenizer is not None:
            text = tokenizer.decode(tokens[:end], skip_special_tokens=True)
            if any(text.endswith(s) for s in stop_strings):
                length = end
        length = min(length, max_new_tokens)
        mask[r, prompt_len - 1 : prompt_len - 1 + length] = 1.0
    return mask


def _stage(message: str, started: float) -> None:
    print(f"rlvr check: {message} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)


def _masked_max(values: torch.Tensor, mask: torch.Tensor) -> float:
    keep = mask != 0
    return float(values[keep].abs().max()) if bool(keep.any()) else 0.0


def completion_mask_row(batch, tokenizer, policy, rollout, settings) -> CheckRow:
    """The batch's completion mask against the one re-derived from the ids (first EOS or stop string)."""
    expected = expected_completion_mask(batch.input_ids, batch.prompt_len, eos_token_ids(tokenizer, policy),
                                        rollout.max_new_tokens, tokenizer, settings.stop_strings)
    wrong = int((expected != batch.completion_mask).sum())
    return row("completion mask", wrong, "= 0 wrong cells", wrong == 0,
               f"{int(expected.sum())} generated tokens re-derived from the ids")


def episode_mask_row(collected, batch) -> CheckRow:
    """Episodes: the batch's completion mask against each episode's own record of which tokens the policy sampled."""
    expected = torch.zeros_like(batch.completion_mask)  # [N, L-1]: column t scores token t+1
    records = [record for group in collected.groups for record in group.episodes]
    for index, record in enumerate(records):
        start = batch.prompt_len - 1
        expected[index, start:start + len(record.policy_mask)] = torch.tensor(record.policy_mask,
                                                                              dtype=expected.dtype)
    wrong = int((expected != batch.completion_mask).sum())
    env_tokens = sum(record.env_tokens for record in records)
    return row("completion mask", wrong, "= 0 wrong cells", wrong == 0,
               f"{int(expected.sum())} policy tokens; {env_tokens} environment tokens kept out of the loss")


def run_check(config) -> list[CheckRow]:
    """One rollout batch and one update with `config`'s model and task; returns the table rows.

    The batch goes through the training loop's own stages, as `rlvr.training.iteration` plans them
    (sampling, reference log-probs, values, advantages, update), so the rows check what `rlvr train` would do.
    """
    rows: list[CheckRow] = []
    rollout, algo = config.rollout, config.algorithm
    check_started = time.perf_counter()
    plan = plan_iteration(config)
    loaded, task = load_model_and_task(config, need_reference=plan.needs_reference)
    value_model = set_up_value_model(config, loaded) if plan.needs_value_model else None
    params = trainable_parameters(loaded.policy) + ([] if value_model is None else value_model.parameters())
    optimizer = make_optimizer(params, config.optim)
    scheduler = make_scheduler(optimizer, config.optim, config.train.iterations * config.steps_per_iteration)
    learner = Learner(loaded, value_model, optimizer, scheduler, params, config)
    backend = rollout_backend(config, loaded)
    _stage(f"loaded {config.model.name}; sampling one rollout batch", check_started)
    policy, tokenizer = loaded.policy, loaded.tokenizer

    # 1. The weights are in the requested dtype.
    wanted = resolve_dtype(config.model.dtype)
    found = sorted({dtype_name(p.dtype) for p in policy.parameters() if p.is_floating_point()})
    rows.append(row("model dtype", ",".join(found), f"= {config.model.dtype}", found == [dtype_name(wanted)]))

    # 2. One real rollout batch, as iteration 0 of `rlvr train` would sample, score and prepare it (with the
    # estimator's inputs, e.g. ReMax's greedy completion per prompt, and the stages the plan lists).
    has_reference = loaded.is_lora or loaded.reference is not None
    settings = SamplingSettings.for_task(rollout, task)
    sampled = sample_rollout(backend, task, tokenizer, settings, config, iteration=0, policy_version=0)
    collected = sampled.collected
    batch = prepare(sampled.batch, sampled.advantage_inputs(), learner, plan)
    stats = rollout_stats(gather_rollout(collected, batch), algo.dynamic_sampling)
    _stage(f"sampled {len(batch)} completions; recomputing log-probs", check_started)

    # 3. The completion mask covers exactly the generated tokens (EOS included, no prompt, no padding);
    # for episodes, exactly the policy's tokens of each conversation (the environment's never).
    if collected.groups and collected.groups[0].episodes is not None:
        rows.append(episode_mask_row(collected, batch))
        longest = max((record for group in collected.groups for record in group.episodes), key=lambda r: r.turns)
        print(f"rlvr check: the longest episode ({longest.turns} turns), the environment's (masked) spans in "
              f"{ENV_SPAN_OPEN} {ENV_SPAN_CLOSE}:\n{transcript(longest.episode, mark_environment=True)}",
              file=sys.stderr)
    else:
        rows.append(completion_mask_row(batch, tokenizer, policy, rollout, settings))

    # 4. Advantages sum to 0 within each group (for the estimators that centre: `EstimatorTraits.centring`).
    if ADVANTAGE_ESTIMATORS.traits(algo.advantage_estimator).centring and algo.advantage_clip == 0:
        sums = torch.zeros(int(batch.group_ids.max()) + 1).index_add_(0, batch.group_ids, batch.advantages.float())
        worst = float(sums.abs().max())
        rows.append(row("advantages centred", worst, f"|group sum| <= {ADVANTAGE_SUM_TOLERANCE:g}",
                        worst <= ADVANTAGE_SUM_TOLERANCE, f"estimator {algo.advantage_estimator}"))
    else:
        rows.append(row("advantages centred", "n/a", "-", None,
                        f"estimator {algo.advantage_estimator} / advantage_clip {algo.advantage_clip} need not centre"))
    nonzero = float((advantage_per_row(batch).abs() > 1e-8).float().mean())
    rows.append(row("nonzero advantages", nonzero, "> 0", nonzero > 0,
                    "" if nonzero > 0 else "no group had reward contrast: the gradient is 0", warn_only=True))

    # 5. Importance ratio on the update's first microbatch, before any step: the update's forward against
    # the policy as it sampled (adapter merged, eval mode, plain full-sequence forward).
    device = next(policy.parameters()).device
    group_size = forward_group_size(config)
    first = next(iter(training_microbatches(batch, config, device, group_size=group_size))).batch  # the update's first
    input_ids, attention_mask, mask = first.input_ids, first.attention_mask, first.completion_mask  # [b, l], [b, l-1]
    first_prompt_len = first.prompt_len
    policy.train(False)
    with backend.sync():  # the policy exactly as the backend samples from it
        sampling_logprobs = compute_per_token_logprobs(policy, input_ids, attention_mask, enable_grad=False,
                                                       temperature=rollout.temperature)  # [b, L-1]
    policy.train(True)  # as update_policy runs it
    with torch.no_grad():
        update_logprobs, _ = compute_completion_logprobs(
            policy, input_ids, attention_mask, first_prompt_len, group_size=group_size, enable_grad=False,
            temperature=rollout.temperature, with_entropy=False, completion_mask=mask)  # [b, L-1]
    policy.train(False)
    ratio = torch.exp(update_logprobs.float() - sampling_logprobs.float())  # [b, L-1]
    deviation = _masked_max(ratio - 1, mask)
    rows.append(row("importance ratio at step 0", f"{deviation:.2e}", f"|ratio-1| <= {RATIO_TOLERANCE:g}",
                    deviation <= RATIO_TOLERANCE, "update forward vs sampling-time policy, first minibatch"))

    # 6. KL: the estimator gives 0 on identical log-probs, and the policy equals its reference at step 0.
    identical = _masked_max(kl_per_token(update_logprobs, update_logprobs, estimator=algo.kl_estimator), mask)
    rows.append(row(f"KL {algo.kl_estimator} of identical log-probs", identical, "= 0", identical == 0.0))
    if has_reference:
        if batch.ref_logprobs is not None:
            ref_logprobs = first.ref_logprobs
        else:
            with reference_context(loaded) as reference:
                ref_logprobs, _ = compute_completion_logprobs(
                    reference, input_ids, attention_mask, first_prompt_len, group_size=group_size, enable_grad=False,
                    temperature=rollout.temperature, with_entropy=False, completion_mask=mask)
        kl = kl_per_token(update_logprobs, ref_logprobs, estimator=algo.kl_estimator)  # [b, L-1]
        kl_mean = float((kl * mask).sum() / mask.sum().clamp(min=1))
        rows.append(row("KL to reference at step 0", kl_mean, f"<= {KL_TOLERANCE:g}", abs(kl_mean) <= KL_TOLERANCE,
                        f"kl_coef {algo.kl_coef}"))
    else:
        rows.append(row("KL to reference at step 0", "n/a", "-", None, "full fine-tuning without a reference"))

    # 7. One update: finite loss, finite non-zero gradient.
    _stage(f"running one update ({config.steps_per_iteration} optimizer steps)", check_started)
    timings: dict[str, float] = {}
    with timed(timings, TIME_UPDATE):
        update = learner.update(batch)
    loss = update.metrics.get(LOSS, math.nan)
    rows.append(row("loss finite", loss, "finite", math.isfinite(loss),
                    f"{update.skipped_nonfinite_updates} of {config.steps_per_iteration} steps skipped"))
    grad_norm = update.metrics.get(GRAD_NORM, math.nan)
    rows.append(row("gradient norm", grad_norm, "finite, > 0", math.isfinite(grad_norm) and grad_norm > 0,
                    f"before clipping at {config.optim.max_grad_norm}"))

    # 8. Truncation: the budget has to fit the task. An untrained policy often rambles past it (a
    # warning); when no completion ends at all, no sample shows the policy how to stop (a failure).
    truncated = stats[TRUNCATED_FRAC]
    limit = config.health.truncation_frac
    if truncated >= 1.0:
        rows.append(row("truncated completions", truncated, "< 1", False,
                        f"no completion ended within max_new_tokens {rollout.max_new_tokens}; raise it"))
    else:
        rows.append(row("truncated completions", truncated, f"<= {limit:g} (warn)", truncated <= limit,
                        f"max_new_tokens {rollout.max_new_tokens}", warn_only=True))
    rows.append(row("update time (s)", f"{timings[TIME_UPDATE]:.1f}", "-", None,
                    f"{config.steps_per_iteration} optimizer steps"))
    return rows
