"""`rlvr sft`: supervised fine-tuning on prompt / response pairs, top to bottom.

Each optimizer step takes `sft.batch_size` pairs (a fresh seeded permutation per epoch, so a
resumed run sees the same order), accumulates the masked NLL of the response tokens over
microbatches, clips the gradient and steps. The run around the loop (folder, model, task,
evaluation, checkpoints, resume) is a `RunSession`; SFT loads no reference model and sizes its
schedule by its own steps (epochs x steps per epoch). Shortcuts: prompts are used verbatim (the
data holds rendered prompts), and an optional verifier filter runs once, before training.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from rlvr.config import Config, load_run_config
from rlvr.core import masked_normalize
from rlvr.observe.metric_names import (
    DATA_SIZE,
    DATA_SIZE_BEFORE_FILTER,
    ELAPSED_S,
    ENTROPY,
    EPOCH,
    EVAL_ACCURACY,
    GRAD_NORM,
    ITERATION,
    LOSS,
    LR,
    NLL_PER_TOKEN,
    PEAK_RSS_BYTES,
    RESPONSE_TOKENS,
    SKIPPED_NONFINITE_UPDATES,
    SKIPPED_NONFINITE_UPDATES_TOTAL,
    TIME_ITERATION,
    UNIX_TIME,
)
from rlvr.models import trainable_parameters
from rlvr.models.completion_logprobs import response_rows, rows_logprobs
from rlvr.rollout import score_completions
from rlvr.tasks.task import Example
from rlvr.observe.metrics import MetricSums
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.run.setup import expect_config
from rlvr.training.session import SFT_RUN, open_run
from rlvr.run.sft_data import DEMONSTRATIONS_FILE, EXAMPLE_KEY, kept_row, read_pairs
from rlvr.utils import atomic_write_text, peak_rss_bytes


def sft_loss(log_probs: torch.Tensor, response_mask: torch.Tensor, normalization: str,
             normalize_constant: float = 1.0, token_count: float | None = None) -> torch.Tensor:
    """Masked negative log-likelihood of the response tokens. log_probs, response_mask [B, T] -> scalar.

    token_mean: -sum(m * logp) / token_count, where token_count defaults to sum(m); pass the
    optimizer batch's count so accumulated microbatches add up to the batch's per-token mean.
    constant:   -mean_i [ sum_t m_it logp_it ] / normalize_constant (a per-sequence masked sum).
    """
    if normalization == "token_mean":
        count = response_mask.sum() if token_count is None else token_count
        return -masked_normalize(log_probs, response_mask, normalize_constant=max(float(count), 1.0))
    if normalization == "constant":
        per_sequence = masked_normalize(log_probs, response_mask, dim=-1, normalize_constant=normalize_constant)  # [B]
        return -per_sequence.mean()
    raise ValueError(f"unknown loss normalization {normalization!r}; valid: token_mean, constant")


def filter_correct(pairs: list[dict], task, eos_text: str | None = None) -> list[dict]:
    """The pairs whose response the task's verifier accepts (verdict.correct); the EOS text is not scored."""
    if any(pair["ground_truth"] is None for pair in pairs):
        raise ValueError("filtering needs a ground truth in every row (see sft.ground_truth_field)")
    responses = [pair["response"] for pair in pairs]
    if eos_text:
        responses = [r[: -len(eos_text)] if r.endswith(eos_text) else r for r in responses]
    examples = [pair.get(EXAMPLE_KEY) or Example(prompt=pair["prompt"], ground_truth=pair["ground_truth"])
                for pair in pairs]
    verdicts = score_completions(task, responses, examples)
    return [pair for pair, verdict in zip(pairs, verdicts) if verdict.correct]


def sft_step(policy, tokenizer, optimizer, scheduler, params, pairs: list[dict], *, microbatch_size: int,
             normalization: str, normalize_constant: float, max_grad_norm: float) -> dict:
    """One optimizer step over `pairs` (accumulated in microbatches). -> metrics."""
    policy.train()
    optimizer.zero_grad(set_to_none=True)
    chunks = [pairs[i : i + microbatch_size] for i in range(0, len(pairs), microbatch_size)]
    # The token_mean loss divides by the whole batch's response tokens: counted before any backward.
    batches = [response_rows(tokenizer, [p["prompt"] for p in chunk], [p["response"] for p in chunk])
               for chunk in chunks]
    total_tokens = float(sum(rows.mask.sum() for rows in batches))
    sums = MetricSums()
    for chunk, rows in zip(chunks, batches):
        log_probs, entropy, mask = rows_logprobs(policy, rows)  # [b, L-1] each
        share = len(chunk) / len(pairs)  # sequence-mean losses weigh each microbatch by its rows
        if normalization == "token_mean":
            loss = sft_loss(log_probs, mask, normalization, token_count=total_tokens)
        else:
            loss = sft_loss(log_probs, mask, normalization, normalize_constant) * share
        loss.backward()
        sums.add(LOSS, loss.detach(), 1.0)  # summed below: the batch loss is the sum of the parts
        sums.add_masked(NLL_PER_TOKEN, -log_probs, mask)
        sums.add_masked(ENTROPY, entropy, mask)
    metrics = sums.reduce()
    metrics[LOSS] *= len(chunks)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    skipped = not torch.isfinite(grad_norm)
    if skipped:
        optimizer.zero_grad(set_to_none=True)  # counted below, never silently dropped
    else:
        optimizer.step()
    lr = scheduler.get_last_lr()[0]
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return {**metrics, GRAD_NORM: float(grad_norm), LR: lr, RESPONSE_TOKENS: total_tokens,
            SKIPPED_NONFINITE_UPDATES: int(skipped)}


def epoch_order(num_pairs: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(num_pairs, generator=generator).tolist()


def train_sft(config: Config, resume_dir: str | Path | None = None, force_config_change: bool = False) -> Path:
    """Fine-tune according to `config` (or continue the run in `resume_dir`); returns the run folder."""
    expect_config(config)
    s, train_cfg = config.sft, config.train
    pairs = read_pairs(config)  # before the run folder is created: a bad data path leaves nothing behind
    with open_run(config, SFT_RUN, resume_dir=resume_dir, force_config_change=force_config_change) as session:
        if s.demonstrations:  # the data the run trained on, kept beside it
            atomic_write_text(session.run_dir / DEMONSTRATIONS_FILE,
                              "".join(json.dumps(kept_row(p)) + "\n" for p in pairs))
        size_before_filter = len(pairs)
        if s.filter_correct:
            pairs = filter_correct(pairs, session.task, session.tokenizer.eos_token)
            print(f"sft: the verifier accepted {len(pairs)} of {size_before_filter} examples", flush=True)
        if not pairs:
            raise ValueError("sft: no training examples left")
        steps_per_epoch = math.ceil(len(pairs) / s.batch_size)
        total_steps = s.epochs * steps_per_epoch
        params = trainable_parameters(session.policy)
        optimizer = make_optimizer(params, config.optim)
        scheduler = make_scheduler(optimizer, config.optim, total_steps)
        step, state = session.start(optimizer, scheduler, {SKIPPED_NONFINITE_UPDATES: 0})
        session.evaluate_start(generations=s.log_generations)

        while step < total_steps:
            step_started = time.perf_counter()
            epoch, position = divmod(step, steps_per_epoch)
            order = epoch_order(len(pairs), train_cfg.seed, epoch)
            chosen = [pairs[i] for i in order[position * s.batch_size : (position + 1) * s.batch_size]]
            metrics = sft_step(session.policy, session.tokenizer, optimizer, scheduler, params, chosen,
                               microbatch_size=s.microbatch_size, normalization=s.loss_normalization,
                               normalize_constant=s.normalize_constant, max_grad_norm=config.optim.max_grad_norm)
            step += 1
            state[SKIPPED_NONFINITE_UPDATES] += metrics[SKIPPED_NONFINITE_UPDATES]
            record = {ITERATION: step, EPOCH: epoch + (position + 1) / steps_per_epoch, **metrics,
                      SKIPPED_NONFINITE_UPDATES_TOTAL: state[SKIPPED_NONFINITE_UPDATES],
                      DATA_SIZE: len(pairs), DATA_SIZE_BEFORE_FILTER: size_before_filter,
                      TIME_ITERATION: time.perf_counter() - step_started,
                      ELAPSED_S: session.elapsed(), UNIX_TIME: time.time(), PEAK_RSS_BYTES: peak_rss_bytes()}
            last = step == total_steps
            if train_cfg.eval_size > 0 and (last or (s.eval_every and step % s.eval_every == 0)):
                record[EVAL_ACCURACY] = session.evaluate(step, generations=s.log_generations)[EVAL_ACCURACY]
            session.writer.metrics(record)
            if train_cfg.progress:
                print(f"sft step {step}/{total_steps} loss={record[LOSS]:.4f} lr={record[LR]:.2e} "
                      f"grad_norm={record[GRAD_NORM]:.3f}"
                      + (f" {EVAL_ACCURACY}={record[EVAL_ACCURACY]:.3f}" if EVAL_ACCURACY in record else ""),
                      flush=True)
            if last or step % s.save_every == 0:
                session.save_checkpoint(step, optimizer, scheduler, state)
    return session.run_dir


def resume_sft(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (),
               force_config_change: bool = False) -> Path:
    """Continue the sft run in `run_dir` with its saved config (overrides may add epochs)."""
    return train_sft(load_run_config(run_dir, overrides), resume_dir=Path(run_dir),
                     force_config_change=force_config_change)
