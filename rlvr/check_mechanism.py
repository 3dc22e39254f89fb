"""`rlvr check --mechanism`: the update mechanism on fixed candidate responses, no sampling noise.

Two prompts, each with four fixed responses (correct, wrong, correct but badly formatted, no
answer) built from the task's ground truth, are scored by the task's verifier, turned into
advantages, and given 4 optimizer steps with a fresh LoRA adapter. A working update raises the
log-probability of the positive-advantage responses relative to the negative ones.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Callable

import torch

from rlvr.check import CheckRow, row
from rlvr.config import ConfigError, resolve
from rlvr.core import ADVANTAGE_ESTIMATORS, RolloutBatch, build_completion_mask
from rlvr.core.advantages import GREEDY_BASELINE_ESTIMATORS
from rlvr.observe.metric_names import CLIP_FRAC_HIGH, CLIP_FRAC_LOW
from rlvr.models import compute_completion_logprobs, trainable_parameters
from rlvr.registry import Registry
from rlvr.rollout import render_prompts, score_completions
from rlvr.rollout.base import fill_token_id
from rlvr.training.advantages import compute_advantages
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.training.reference import with_reference_logprobs
from rlvr.run.setup import load_model_and_task
from rlvr.training.update import update_policy
from rlvr.utils import peak_rss_bytes

CANDIDATE_LABELS = ("correct", "wrong", "badly formatted", "no answer")
MECHANISM_UPDATES = 4

CandidateFn = Callable[[object], list[str]]

# Per-task hooks: example -> responses in the order of CANDIDATE_LABELS. Tasks without a hook
# use `answer_tag_candidates`, which fits any task that reads its answer from <answer> tags.
MECHANISM_CANDIDATES: Registry[CandidateFn] = Registry("mechanism candidate builder")


def _wrong_answer(truth: str) -> str:
    try:
        return str(int(truth) + 1)
    except ValueError:
        return truth[::-1] + "x" if truth else "x"


def answer_tag_candidates(example) -> list[str]:
    truth = str(example.ground_truth)
    return [f"<answer>{truth}</answer>", f"<answer>{_wrong_answer(truth)}</answer>",
            f"The answer is {truth}.", "I do not know."]


@MECHANISM_CANDIDATES.register("format_copy")
def format_copy_candidates(example) -> list[str]:
    """Rewards 1.3, 0.2, 1.2 and 0: the tagged answer with extra words keeps `answer` and `tag`, loses `strict`."""
    truth = str(example.ground_truth)
    return [f"<answer>{truth}</answer>", f"<answer>{_wrong_answer(truth)}</answer>",
            f"Sure! <answer>{truth}</answer>", "I cannot help with that."]


def _mechanism_config(config):
    """The user's config with a 2 x 4 batch, one minibatch, 4 epochs and a fresh LoRA adapter."""
    if config.algorithm.value_model != "none":
        raise ConfigError(f"rlvr check --mechanism compares fixed candidate responses within their group; "
                          f"algorithm.value_model={config.algorithm.value_model!r} ({config.algorithm.name}) has no "
                          "group baseline to compare against: run rlvr check without --mechanism")
    if config.algorithm.advantage_estimator in GREEDY_BASELINE_ESTIMATORS:
        raise ConfigError(f"rlvr check --mechanism scores fixed responses and decodes nothing; "
                          f"algorithm.advantage_estimator={config.algorithm.advantage_estimator!r} "
                          f"({config.algorithm.name}) needs a greedy completion per prompt as its baseline: run "
                          "rlvr check without --mechanism")
    mech = copy.deepcopy(config)
    mech.model.lora = True
    mech.rollout.batch_size, mech.rollout.group_size = 2, len(CANDIDATE_LABELS)
    mech.optim.minibatch_size, mech.optim.grad_accum_steps = None, 1
    mech.algorithm.ppo_epochs = MECHANISM_UPDATES
    mech.algorithm.dynamic_sampling = False
    mech.algorithm.overlong_buffer = 0
    mech.train.iterations = 1
    return resolve(mech)


def _encode(tokenizer, prompts: list[str], responses: list[str]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompts left-padded to width P, responses (+ EOS) right-padded after them: ids, attention mask, P."""
    pad = fill_token_id(tokenizer)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    response_ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    width_prompt = max(len(p) for p in prompt_ids)
    width_response = max(len(r) for r in response_ids)
    ids = torch.full((len(prompts), width_prompt + width_response), pad, dtype=torch.long)  # [N, L]
    attention = torch.zeros_like(ids)  # [N, L]
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[i, width_prompt - len(p) : width_prompt] = torch.tensor(p)
        ids[i, width_prompt : width_prompt + len(r)] = torch.tensor(r)
        attention[i, width_prompt - len(p) : width_prompt + len(r)] = 1
    return ids, attention, width_prompt


def _sequence_logprobs(policy, ids, attention, prompt_len, mask, config) -> torch.Tensor:
    """log pi(response | prompt) per row. -> [N]."""
    was_training = policy.training
    policy.train(False)
    logprobs, _ = compute_completion_logprobs(policy, ids, attention, prompt_len, group_size=config.rollout.group_size,
                                              enable_grad=False, temperature=config.rollout.temperature,
                                              with_entropy=False, completion_mask=mask)  # [N, L-1]
    policy.train(was_training)
    return (logprobs * mask).sum(dim=1)  # [N]


def run_mechanism_check(config) -> tuple[list[CheckRow], list[CheckRow]]:
    """Returns (one row per candidate response, the check rows)."""
    config = _mechanism_config(config)
    algo = config.algorithm
    loaded, task = load_model_and_task(config, need_reference=algo.kl_coef > 0)
    params = trainable_parameters(loaded.policy)
    optimizer = make_optimizer(params, config.optim)
    scheduler = make_scheduler(optimizer, config.optim, config.train.iterations * algo.ppo_epochs)
    policy, tokenizer = loaded.policy, loaded.tokenizer
    device = next(policy.parameters()).device
    builder = MECHANISM_CANDIDATES.get(task.name) if task.name in MECHANISM_CANDIDATES else answer_tag_candidates
    examples = task.examples("train", 2, config.train.seed)
    responses = [text for example in examples for text in builder(example)]
    group = len(CANDIDATE_LABELS)
    prompts = [p for p in render_prompts(tokenizer, examples, config.task.use_chat_template) for _ in range(group)]
    verdicts = score_completions(task, responses, [examples[i // group] for i in range(len(responses))])

    ids, attention, prompt_len = _encode(tokenizer, prompts, responses)
    ids, attention = ids.to(device), attention.to(device)
    mask = build_completion_mask(ids, attention, prompt_len)  # [N, L-1]
    rewards = torch.tensor([v.total for v in verdicts], dtype=torch.float32)  # [N], NaN where unscorable
    group_ids = torch.arange(len(responses)) // group  # [N]
    advantages = compute_advantages(rewards, group_ids, algo,
                                    completion_mask=mask.cpu())  # [N], as the training loop computes them
    batch = RolloutBatch(input_ids=ids, attention_mask=attention, prompt_len=prompt_len, completion_mask=mask,
                         old_logprobs=None, ref_logprobs=None,
                         rewards=torch.where(torch.isfinite(rewards), rewards, torch.zeros_like(rewards)),
                         advantages=advantages.to(device), group_ids=group_ids)
    if algo.kl_coef > 0:
        batch = with_reference_logprobs(loaded, batch, config)

    before = _sequence_logprobs(policy, ids, attention, prompt_len, mask, config)  # [N]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    update = update_policy(policy, optimizer, scheduler, batch, config, params)
    seconds = time.perf_counter() - started
    change = (_sequence_logprobs(policy, ids, attention, prompt_len, mask, config) - before).cpu()  # [N]

    candidate_rows = []
    for i, verdict in enumerate(verdicts):
        components = " ".join(f"{k}={v:g}" for k, v in verdict.components.items())
        candidate_rows.append(CheckRow(
            f"prompt {i // group} {CANDIDATE_LABELS[i % group]}", f"{verdict.total:g}", components,
            verdict.status, f"advantage {float(advantages[i]):+.3f}  logp change {float(change[i]):+.3f}"))

    rows = []
    positive, negative = advantages > 1e-8, advantages < -1e-8
    contrast = bool(positive.any() and negative.any())
    rows.append(row("candidates have reward contrast", int(positive.sum() + negative.sum()), "> 0 nonzero advantages",
                    contrast, f"rewards {', '.join(f'{float(r):g}' for r in rewards[:group])} (prompt 0)"))
    separation = float(change[positive].mean() - change[negative].mean()) if contrast else math.nan
    rows.append(row("policy separation", separation, "> 0", separation > 0,
                    "mean logp change of A>0 responses minus that of A<0 ones"))
    estimator = ADVANTAGE_ESTIMATORS.get(algo.advantage_estimator)
    flat = estimator(torch.ones(group), group_ids=torch.zeros(group, dtype=torch.long), std=algo.std,
                     completion_mask=torch.ones(group, 1))  # [G]
    flat_max = float(flat.abs().max())
    rows.append(row("all-equal group advantages", flat_max, "= 0", flat_max == 0.0, f"estimator {algo.advantage_estimator}"))
    skipped = update.skipped_nonfinite_updates
    rows.append(row("updates applied", update.optimizer_steps, f"= {MECHANISM_UPDATES}", skipped == 0,
                    f"{skipped} skipped as non-finite"))
    clip = update.metrics.get(CLIP_FRAC_LOW, 0.0) + update.metrics.get(CLIP_FRAC_HIGH, 0.0)
    rows.append(row("clip fraction", clip, f"<= {config.health.clip_frac:g}", clip <= config.health.clip_frac,
                    f"lr {config.optim.lr:g}, clip {algo.clip_low}/{algo.clip_high}", warn_only=True))
    rows.append(row("update time (s)", f"{seconds:.2f}", "-", None, f"{MECHANISM_UPDATES} optimizer steps"))
    memory = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else peak_rss_bytes()
    rows.append(row("peak memory (MiB)", f"{memory / 2**20:.0f}", "-", None,
                    "CUDA allocated" if torch.cuda.is_available() else "process peak RSS"))
    return candidate_rows, rows
