"""`rlvr expert-iter`: expert iteration, top to bottom.

Each round: sample G completions for each of Q fresh training questions from the current policy,
keep those the task's verifier accepts (`verdict.correct`), fine-tune on them for E epochs with
the SFT step of `rlvr.training.sft`, evaluate greedily. The run around the loop is a `RunSession`
(no reference model; the schedule is sized by an upper bound on this loop's own steps).
Shortcuts: one optimizer across rounds (its moments carry over), no checkpoint resume mid-run (a
round is short; the trained weights of the last round are saved), and `min_new_tokens` keeps
empty answers out of the kept set.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from rlvr.config import Config
from rlvr.observe.metric_names import (
    ACCEPTED_FRAC,
    COMPLETION_LEN_MEAN,
    DATASET_SIZE,
    ELAPSED_S,
    ENTROPY,
    EVAL_ACCURACY,
    EVAL_ENTROPY,
    GEN_ENTROPY,
    GRAD_NORM,
    ITERATION,
    LOSS,
    LR,
    NLL_PER_TOKEN,
    OPTIMIZER_STEPS,
    OPTIMIZER_STEPS_TOTAL,
    PEAK_CUDA_BYTES,
    PEAK_RSS_BYTES,
    QUESTIONS_SOLVED,
    QUESTIONS_SOLVED_FRAC,
    REWARD_MEAN,
    SAMPLES,
    SKIPPED_NONFINITE_UPDATES,
    SKIPPED_NONFINITE_UPDATES_TOTAL,
    TIME_GENERATION,
    TIME_ITERATION,
    TIME_UPDATE,
    TRUNCATED_FRAC,
    UNIX_TIME,
)
from rlvr.models import trainable_parameters
from rlvr.rollout import RolloutBackend, SamplingSettings, sample_and_score
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.training.session import EXPERT_ITERATION_RUN, open_run
from rlvr.training.sft import epoch_order, sft_step
from rlvr.utils import peak_rss_bytes

ROUND_SEED_STRIDE = 7919  # questions of round r come from seed * stride + r: fresh ones every round


def sample_correct(backend: RolloutBackend, task, examples, config: Config) -> tuple[list[dict], dict]:
    """Sample G completions per question; return the accepted (prompt, response) pairs and counts."""
    ei = config.expert_iteration
    settings = SamplingSettings.for_task(config.rollout, task, min_new_tokens=ei.min_new_tokens)
    scored = sample_and_score(backend, task, examples, group_size=ei.samples_per_question, settings=settings,
                              use_chat_template=config.task.use_chat_template)
    eos_text = backend.tokenizer.eos_token or ""
    accepted, solved, seen = [], 0, set()
    for index, (example, prompt) in enumerate(zip(scored.examples, scored.prompts)):
        rows = scored.rows(index)
        any_correct = False
        for text, verdict in zip(scored.completion_texts[rows], scored.verdicts[rows]):
            # Accepted: correct, and with ei.min_reward set, a total reward at least that high
            # (e.g. format_copy's 1.3 also asks for nothing but the tags, so trailing text is not learned).
            if not verdict.correct or (ei.min_reward is not None and not verdict.total >= ei.min_reward):
                continue
            any_correct = True
            if ei.deduplicate and (prompt, text) in seen:
                continue
            seen.add((prompt, text))
            # The response ends with EOS so the fine-tuned policy learns to stop after the answer.
            accepted.append({"prompt": prompt, "response": text + eos_text, "ground_truth": example.ground_truth})
        solved += any_correct
    finite = [v.total for v in scored.verdicts if math.isfinite(v.total)]
    generation = scored.generation
    stats = {
        "questions": len(scored.examples),
        QUESTIONS_SOLVED: solved,
        SAMPLES: len(scored),
        REWARD_MEAN: sum(finite) / len(finite) if finite else math.nan,
        TRUNCATED_FRAC: float(generation.truncated.float().mean()),
        COMPLETION_LEN_MEAN: float(generation.completion_lengths.float().mean()),
    }
    return accepted, stats


def expert_iteration(config: Config) -> Path:
    """Run `expert_iteration.n_ei_steps` rounds; returns the run folder."""
    ei, s, train_cfg = config.expert_iteration, config.sft, config.train
    with open_run(config, EXPERT_ITERATION_RUN) as session:
        policy, tokenizer, task = session.policy, session.tokenizer, session.task
        params = trainable_parameters(policy)
        optimizer = make_optimizer(params, config.optim)
        # An upper bound on optimizer steps: every sample of every round accepted.
        max_steps = ei.n_ei_steps * ei.sft_epochs * math.ceil(ei.questions_per_step * ei.samples_per_question
                                                              / s.batch_size)
        scheduler = make_scheduler(optimizer, config.optim, max_steps)
        session.start(optimizer, scheduler, {})  # a new run (expert iteration does not resume): opens the writers
        initial = session.evaluate_start(generations=s.log_generations)
        if initial is not None:
            print(f"expert-iter round 0: {EVAL_ACCURACY}={initial[EVAL_ACCURACY]:.3f}", flush=True)
        optimizer_steps = 0
        skipped_total = 0
        for round_index in range(1, ei.n_ei_steps + 1):
            round_started = time.perf_counter()
            # 1. Sample and filter.
            questions = task.examples("train", ei.questions_per_step, train_cfg.seed * ROUND_SEED_STRIDE + round_index)
            accepted, stats = sample_correct(session.backend, task, questions, config)
            sample_seconds = time.perf_counter() - round_started
            # 2. Fine-tune on the accepted samples for E epochs.
            step_metrics: list[dict] = []
            for epoch in range(ei.sft_epochs if accepted else 0):
                order = epoch_order(len(accepted), train_cfg.seed + round_index, epoch)
                for start in range(0, len(order), s.batch_size):
                    chosen = [accepted[i] for i in order[start : start + s.batch_size]]
                    step_metrics.append(sft_step(policy, tokenizer, optimizer, scheduler, params, chosen,
                                                 microbatch_size=s.microbatch_size,
                                                 normalization=s.loss_normalization,
                                                 normalize_constant=s.normalize_constant,
                                                 max_grad_norm=config.optim.max_grad_norm))
            optimizer_steps += len(step_metrics)
            skipped = sum(m[SKIPPED_NONFINITE_UPDATES] for m in step_metrics)
            skipped_total += skipped

            def mean_of(key):
                values = [m[key] for m in step_metrics if math.isfinite(m.get(key, math.nan))]
                return sum(values) / len(values) if values else math.nan

            # 3. Log (and evaluate).
            record = {
                ITERATION: round_index,
                QUESTIONS_SOLVED: stats[QUESTIONS_SOLVED],
                QUESTIONS_SOLVED_FRAC: stats[QUESTIONS_SOLVED] / stats["questions"],
                DATASET_SIZE: len(accepted),
                SAMPLES: stats[SAMPLES],
                ACCEPTED_FRAC: len(accepted) / stats[SAMPLES],
                REWARD_MEAN: stats[REWARD_MEAN],
                TRUNCATED_FRAC: stats[TRUNCATED_FRAC],
                COMPLETION_LEN_MEAN: stats[COMPLETION_LEN_MEAN],
                LOSS: mean_of(LOSS), NLL_PER_TOKEN: mean_of(NLL_PER_TOKEN), ENTROPY: mean_of(ENTROPY),
                GRAD_NORM: mean_of(GRAD_NORM), LR: scheduler.get_last_lr()[0],
                OPTIMIZER_STEPS: len(step_metrics), OPTIMIZER_STEPS_TOTAL: optimizer_steps,
                SKIPPED_NONFINITE_UPDATES: skipped, SKIPPED_NONFINITE_UPDATES_TOTAL: skipped_total,
                TIME_GENERATION: sample_seconds, TIME_UPDATE: time.perf_counter() - round_started - sample_seconds,
            }
            evaluate_now = round_index == ei.n_ei_steps or round_index % ei.eval_every == 0
            if train_cfg.eval_size > 0 and evaluate_now:
                evaluated = session.evaluate(round_index, generations=s.log_generations)
                record[EVAL_ACCURACY] = evaluated[EVAL_ACCURACY]
                record[EVAL_ENTROPY] = evaluated.get(GEN_ENTROPY, math.nan)
            record.update({TIME_ITERATION: time.perf_counter() - round_started, ELAPSED_S: session.elapsed(),
                           UNIX_TIME: time.time(), PEAK_RSS_BYTES: peak_rss_bytes()})
            if torch.cuda.is_available():
                record[PEAK_CUDA_BYTES] = torch.cuda.max_memory_allocated()
            session.writer.metrics(record)
            print(f"expert-iter round {round_index}: solved {stats[QUESTIONS_SOLVED]}/{stats['questions']} questions, "
                  f"kept {len(accepted)} of {stats[SAMPLES]} samples, {len(step_metrics)} steps, "
                  f"{EVAL_ACCURACY}={record.get(EVAL_ACCURACY, math.nan):.3f}, {ENTROPY}={record[ENTROPY]:.3f}",
                  flush=True)
        session.save_checkpoint(ei.n_ei_steps, optimizer, scheduler,
                                {OPTIMIZER_STEPS: optimizer_steps, SKIPPED_NONFINITE_UPDATES: skipped_total})
    return session.run_dir
