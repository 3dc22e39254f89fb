"""`rlvr expert-iter`: expert iteration, top to bottom.

Each round: sample G completions for each of Q fresh training questions from the current policy,
keep those the task's verifier accepts (`verdict.correct`), fine-tune on them for E epochs with
the SFT step of `rlvr.train.sft`, evaluate greedily. Shortcuts: one optimizer across rounds (its
moments carry over), no checkpoint resume mid-run (a round is short; the trained weights of the
last round are saved), and `min_new_tokens` keeps empty answers out of the kept set.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from rlvr.config import Config
from rlvr.models.merge import merged_adapter
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, render_prompts
from rlvr.tasks import task_label
from rlvr.tasks.judging import judge
from rlvr.train.checkpoint import save_checkpoint
from rlvr.train.evaluate import evaluate
from rlvr.train.generations import log_generations
from rlvr.train.metrics import RunWriter
from rlvr.train.rl import make_scheduler, setup
from rlvr.train.run_folder import claim_run_folder, releases_run_folders
from rlvr.train.sft import epoch_order, sft_step
from rlvr.utils import peak_rss_bytes

ROUND_SEED_STRIDE = 7919  # questions of round r come from seed * stride + r: fresh ones every round


def sample_correct(policy, tokenizer, task, examples, config: Config) -> tuple[list[dict], dict]:
    """Sample G completions per question; return the accepted (prompt, response) pairs and counts."""
    rollout, ei = config.rollout, config.expert_iteration
    stop_strings = tuple(rollout.stop_strings) or tuple(getattr(task, "stop_strings", ()))
    settings = SamplingSettings(
        max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
        top_k=rollout.top_k, min_p=rollout.min_p, stop_strings=stop_strings,
        share_prompt_prefill=rollout.share_prompt_prefill, min_new_tokens=ei.min_new_tokens,
    )
    prompts = render_prompts(tokenizer, examples, config.task.use_chat_template)
    group = ei.samples_per_question
    with merged_adapter(policy, rollout.merge_lora):
        generation = ROLLOUT_BACKENDS.get(rollout.backend)(policy, tokenizer, prompts, group, settings)
    eos_text = tokenizer.eos_token or ""
    accepted, solved, seen = [], 0, set()
    totals = []
    for index, (example, prompt) in enumerate(zip(examples, prompts)):
        any_correct = False
        for row in range(index * group, (index + 1) * group):
            text = generation.completion_texts[row]
            verdict = judge(task, text, example)
            totals.append(verdict.total)
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
    finite = [t for t in totals if math.isfinite(t)]
    stats = {
        "questions": len(examples),
        "questions_solved": solved,
        "samples": len(generation.completion_texts),
        "reward/mean": sum(finite) / len(finite) if finite else math.nan,
        "truncated_frac": float(generation.truncated.float().mean()),
        "completion_len/mean": float(generation.completion_lengths.float().mean()),
    }
    return accepted, stats


@releases_run_folders
def expert_iteration(config: Config) -> Path:
    """Run `expert_iteration.n_ei_steps` rounds; returns the run folder."""
    started_at = time.perf_counter()
    ei, s, train_cfg = config.expert_iteration, config.sft, config.train
    run_dir = claim_run_folder(config, stem=f"ei-{task_label(config.task.name)}", command="rlvr expert-iter",
                               resumable=False).path  # locked until expert_iteration returns
    writer = RunWriter(run_dir)
    loaded, task, params, optimizer, _ = setup(config)
    policy, tokenizer = loaded.policy, loaded.tokenizer
    # An upper bound on optimizer steps: every sample of every round accepted.
    max_steps = ei.n_ei_steps * ei.sft_epochs * math.ceil(ei.questions_per_step * ei.samples_per_question / s.batch_size)
    scheduler = make_scheduler(optimizer, config, max_steps)
    eval_examples = task.examples("eval", train_cfg.eval_size, train_cfg.seed)
    eval_tokens = train_cfg.eval_max_new_tokens or config.rollout.max_new_tokens

    def run_eval(round_index: int) -> dict:
        result = evaluate(policy, tokenizer, task, eval_examples, max_new_tokens=eval_tokens,
                          backend=config.rollout.backend, use_chat_template=config.task.use_chat_template)
        record = {"iteration": round_index, "elapsed_s": time.perf_counter() - started_at, "time/unix": time.time(),
                  **result}
        if s.log_generations:
            record.update(log_generations(policy, tokenizer, task, eval_examples[: s.log_generations],
                                          iteration=round_index, run_dir=run_dir, max_new_tokens=eval_tokens,
                                          use_chat_template=config.task.use_chat_template,
                                          backend=config.rollout.backend))
        writer.eval(record)
        return record

    if train_cfg.eval_size > 0:
        initial = run_eval(0)
        print(f"expert-iter round 0: eval/accuracy={initial['eval/accuracy']:.3f}", flush=True)
    optimizer_steps = 0
    skipped_total = 0
    for round_index in range(1, ei.n_ei_steps + 1):
        round_started = time.perf_counter()
        # 1. Sample and filter.
        questions = task.examples("train", ei.questions_per_step, train_cfg.seed * ROUND_SEED_STRIDE + round_index)
        accepted, stats = sample_correct(policy, tokenizer, task, questions, config)
        sample_seconds = time.perf_counter() - round_started
        # 2. Fine-tune on the accepted samples for E epochs.
        step_metrics: list[dict] = []
        for epoch in range(ei.sft_epochs if accepted else 0):
            order = epoch_order(len(accepted), train_cfg.seed + round_index, epoch)
            for start in range(0, len(order), s.batch_size):
                chosen = [accepted[i] for i in order[start : start + s.batch_size]]
                step_metrics.append(sft_step(policy, tokenizer, optimizer, scheduler, params, chosen,
                                             microbatch_size=s.microbatch_size, normalization=s.loss_normalization,
                                             normalize_constant=s.normalize_constant,
                                             max_grad_norm=config.optim.max_grad_norm))
        optimizer_steps += len(step_metrics)
        skipped = sum(m["skipped_nonfinite_updates"] for m in step_metrics)
        skipped_total += skipped

        def mean_of(key):
            values = [m[key] for m in step_metrics if math.isfinite(m.get(key, math.nan))]
            return sum(values) / len(values) if values else math.nan

        # 3. Log (and evaluate).
        record = {
            "iteration": round_index,
            "questions_solved": stats["questions_solved"],
            "questions_solved_frac": stats["questions_solved"] / stats["questions"],
            "dataset_size": len(accepted),
            "samples": stats["samples"],
            "accepted_frac": len(accepted) / stats["samples"],
            "reward/mean": stats["reward/mean"],
            "truncated_frac": stats["truncated_frac"],
            "completion_len/mean": stats["completion_len/mean"],
            "loss": mean_of("loss"), "nll_per_token": mean_of("nll_per_token"), "entropy": mean_of("entropy"),
            "grad_norm": mean_of("grad_norm"), "lr": scheduler.get_last_lr()[0],
            "optimizer_steps": len(step_metrics), "optimizer_steps_total": optimizer_steps,
            "skipped_nonfinite_updates": skipped, "skipped_nonfinite_updates_total": skipped_total,
            "time/generation": sample_seconds, "time/update": time.perf_counter() - round_started - sample_seconds,
        }
        if train_cfg.eval_size > 0:
            evaluated = run_eval(round_index)
            record["eval/accuracy"] = evaluated["eval/accuracy"]
            record["eval/entropy"] = evaluated.get("gen/entropy", math.nan)
        record.update({"time/iteration": time.perf_counter() - round_started,
                       "elapsed_s": time.perf_counter() - started_at, "time/unix": time.time(),
                       "peak_rss_bytes": peak_rss_bytes()})
        if torch.cuda.is_available():
            record["peak_cuda_bytes"] = torch.cuda.max_memory_allocated()
        writer.metrics(record)
        print(f"expert-iter round {round_index}: solved {stats['questions_solved']}/{stats['questions']} questions, "
              f"kept {len(accepted)} of {stats['samples']} samples, {len(step_metrics)} steps, "
              f"eval/accuracy={record.get('eval/accuracy', math.nan):.3f}, entropy={record['entropy']:.3f}", flush=True)
    save_checkpoint(run_dir, ei.n_ei_steps, loaded, optimizer, scheduler,
                    {"optimizer_steps": optimizer_steps, "skipped_nonfinite_updates": skipped_total},
                    train_cfg.keep_checkpoints)
    return run_dir
