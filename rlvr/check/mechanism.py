"""`rlvr check --mechanism`: the update mechanism on fixed candidate responses, no sampling noise.

Two prompts, each with G fixed responses (the first G of: correct, wrong, correct but badly
formatted, no answer; G = 4 by default) built from the task's ground truth, are scored by the
task's verifier, turned into advantages, and given 4 optimizer steps with a fresh LoRA adapter,
through the training loop's own preparation stages and update (`rlvr.training.iteration`).
A working update raises the log-probability of the positive-advantage responses relative to the
negative ones. `run_mechanism` measures (a typed `MechanismResult`), `mechanism_rows` judges it
as table rows, and `decide` applies the decision rule that `rlvr.check.mechanism_record` writes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.check.one_batch import CheckRow, row
from rlvr.config import ConfigError, resolve
from rlvr.core import ADVANTAGE_ESTIMATORS, RolloutBatch, build_completion_mask, no_contrast_groups
from rlvr.observe.metric_names import CLIP_FRAC_HIGH, CLIP_FRAC_LOW, TIME_UPDATE
from rlvr.models import compute_completion_logprobs, trainable_parameters
from rlvr.registry import Registry
from rlvr.rollout import render_prompts, score_completions
from rlvr.rollout.generation import fill_token_id
from rlvr.training.estimator_inputs import input_needs
from rlvr.training.iteration import AdvantageInputs, Learner, plan_iteration, prepare, timed
from rlvr.training.optim import make_optimizer, make_scheduler
from rlvr.run.setup import load_model_and_task
from rlvr.tasks import Verdict
from rlvr.tasks.task import primary_component
from rlvr.training.update import UpdateResult
from rlvr.utils import peak_rss_bytes

CANDIDATE_LABELS = ("correct", "wrong", "badly formatted", "no answer")
MECHANISM_UPDATES = 4
MECHANISM_PROMPTS = 2
ADVANTAGE_TOLERANCE = 1e-8  # |A| above this is a non-zero advantage (a zeroed group's are exactly 0)
MIN_SEPARATION = 0.0  # nats; the update must move A>0 responses above A<0 ones: separation > this

CandidateFn = Callable[[object], list[str]]

# Per-task hooks: example -> responses in the order of CANDIDATE_LABELS (a run with G candidates per
# prompt takes the first G). Tasks without a hook use `answer_tag_candidates`, which fits any task
# that reads its answer from <answer> tags.
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


def _mechanism_config(config, group_size: int = len(CANDIDATE_LABELS)):
    """The user's config with a 2 x `group_size` batch, one minibatch, 4 epochs and a fresh LoRA adapter."""
    if not 2 <= group_size <= len(CANDIDATE_LABELS):
        raise ConfigError(f"rlvr check --mechanism: group_size {group_size} must be 2 to {len(CANDIDATE_LABELS)} "
                          f"(the first G of the candidates {', '.join(CANDIDATE_LABELS)})")
    if config.algorithm.value_model != "none":
        raise ConfigError(f"rlvr check --mechanism compares fixed candidate responses within their group; "
                          f"algorithm.value_model={config.algorithm.value_model!r} ({config.algorithm.name}) has no "
                          "group baseline to compare against: run rlvr check without --mechanism")
    inputs = ADVANTAGE_ESTIMATORS.traits(config.algorithm.advantage_estimator).inputs
    if inputs:  # made from a rollout, which the mechanism check does not sample
        raise ConfigError(f"rlvr check --mechanism scores fixed responses and decodes nothing; "
                          f"algorithm.advantage_estimator={config.algorithm.advantage_estimator!r} "
                          f"({config.algorithm.name}) needs {' and '.join(input_needs(name) for name in inputs)}: "
                          "run rlvr check without --mechanism")
    mech = copy.deepcopy(config)
    mech.model.lora = True
    mech.rollout.batch_size, mech.rollout.group_size = MECHANISM_PROMPTS, group_size
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


@dataclass(frozen=True)
class MechanismResult:
    """What one mechanism run measured. Tensors are [N] = 2 prompts x `group_size` rows, prompt-major, on the CPU."""

    group_size: int
    labels: tuple[str, ...]  # each row's candidate label (CANDIDATE_LABELS)
    verdicts: tuple[Verdict, ...]  # the task verifier's, one per row
    correctness_component: str  # the component that says the answer is right (`primary_component`)
    rewards: torch.Tensor  # [N] verdict totals, NaN where no weighted component could be judged
    group_ids: torch.Tensor  # [N] the prompt each row answers
    advantages: torch.Tensor  # [N] as the training loop computes them
    logprob_change: torch.Tensor  # [N] log p(response | prompt) after the update minus before
    all_equal_advantage_max: float  # max |A| the estimator gives one group of equal rewards (0 when guarded)
    update: UpdateResult
    update_seconds: float
    peak_memory_bytes: int
    peak_memory_source: str  # "cuda_allocated" (reset before the update) or "process_peak_rss" (whole process)

    @property
    def positive(self) -> torch.Tensor:
        return self.advantages > ADVANTAGE_TOLERANCE  # [N] bool

    @property
    def negative(self) -> torch.Tensor:
        return self.advantages < -ADVANTAGE_TOLERANCE  # [N] bool

    @property
    def nonzero_advantages(self) -> int:
        return int(self.positive.sum() + self.negative.sum())

    @property
    def has_advantage_signal(self) -> bool:
        """Some response is pushed up and some down: the update has a direction to follow."""
        return bool(self.positive.any() and self.negative.any())

    @property
    def policy_separation(self) -> float:
        """Mean log-prob change of the A>0 responses minus that of the A<0 ones (nats); NaN without both."""
        if not self.has_advantage_signal:
            return math.nan
        return float(self.logprob_change[self.positive].mean() - self.logprob_change[self.negative].mean())

    @property
    def no_contrast(self) -> torch.Tensor:
        """Per prompt: its group has no reward contrast (`rlvr.core.no_contrast_groups`). -> bool [2]."""
        return no_contrast_groups(self.rewards, self.group_ids, int(self.group_ids.max()) + 1)

    @property
    def no_contrast_zeroed(self) -> int:
        """How many groups without reward contrast got advantage exactly 0 on every row."""
        return sum(int(bool((self.advantages[self.group_ids == group] == 0).all()))
                   for group in self.no_contrast.nonzero().flatten().tolist())

    @property
    def zero_variance_guard_passed(self) -> bool:
        """An all-equal group gets 0 from the estimator, and so does every group of this batch without contrast."""
        return self.all_equal_advantage_max == 0.0 and self.no_contrast_zeroed == int(self.no_contrast.sum())

    @property
    def clip_fraction(self) -> float:
        """Share of tokens clipped (low + high), mean over the update's steps."""
        return self.update.metrics.get(CLIP_FRAC_LOW, 0.0) + self.update.metrics.get(CLIP_FRAC_HIGH, 0.0)


# The decision rule, one place: each criterion in the order it is judged, the decision its failure
# gives, and what it asks. The first failed criterion names the decision; none failed: ACCEPT.
ACCEPT = "accept_mechanism"
TUNE = "tune"  # across conditions: some condition was not accepted
DECISION_RULE: tuple[tuple[str, str, str], ...] = (
    ("zero_variance_guard", "guard_failed",
     "an all-equal group, and every group of the batch without reward contrast, gets advantage exactly 0"),
    ("reward_contrast", "no_reward_contrast", "some prompt's candidates get different rewards from the verifier"),
    ("advantage_signal", "no_advantage_signal",
     f"some advantage > {ADVANTAGE_TOLERANCE:g} and some < -{ADVANTAGE_TOLERANCE:g}"),
    ("finite_updates", "non_finite_update", f"all {MECHANISM_UPDATES} optimizer steps had a finite loss and gradient"),
    ("policy_separation", "no_separation", f"policy separation > {MIN_SEPARATION:g} nats"),
)


@dataclass(frozen=True)
class MechanismDecision:
    decision: str  # ACCEPT or the failure decision of the first failed criterion (DECISION_RULE)
    criteria: dict[str, bool]  # criterion -> passed, in DECISION_RULE order

    @property
    def failed_criteria(self) -> list[str]:
        return [name for name, passed in self.criteria.items() if not passed]


def decide(result: MechanismResult) -> MechanismDecision:
    """The decision rule (DECISION_RULE) applied to one condition's result."""
    separation = result.policy_separation
    passed = {
        "zero_variance_guard": result.zero_variance_guard_passed,
        "reward_contrast": not bool(result.no_contrast.all()),
        "advantage_signal": result.has_advantage_signal,
        "finite_updates": result.update.skipped_nonfinite_updates == 0,
        "policy_separation": math.isfinite(separation) and separation > MIN_SEPARATION,
    }
    failure = next((outcome for name, outcome, _ in DECISION_RULE if not passed[name]), ACCEPT)
    return MechanismDecision(failure, {name: passed[name] for name, _, _ in DECISION_RULE})


def decide_conditions(decisions: list[MechanismDecision]) -> str:
    """Across conditions: ACCEPT when every condition is accepted, else TUNE."""
    return ACCEPT if decisions and all(d.decision == ACCEPT for d in decisions) else TUNE


def run_mechanism(config, group_size: int = len(CANDIDATE_LABELS)) -> MechanismResult:
    """Score 2 prompts x `group_size` fixed candidates, compute advantages, run the update; measure each stage."""
    config = _mechanism_config(config, group_size)
    algo = config.algorithm
    plan = plan_iteration(config)  # no value model and no estimator inputs here (`_mechanism_config` refuses them)
    loaded, task = load_model_and_task(config, need_reference=plan.needs_reference)
    params = trainable_parameters(loaded.policy)
    optimizer = make_optimizer(params, config.optim)
    scheduler = make_scheduler(optimizer, config.optim, config.train.iterations * config.steps_per_iteration)
    learner = Learner(loaded, None, optimizer, scheduler, params, config)
    policy, tokenizer = loaded.policy, loaded.tokenizer
    device = next(policy.parameters()).device
    builder = MECHANISM_CANDIDATES.get(task.name) if task.name in MECHANISM_CANDIDATES else answer_tag_candidates
    examples = task.examples("train", MECHANISM_PROMPTS, config.train.seed)
    responses = [text for example in examples for text in builder(example)[:group_size]]
    labels = tuple(CANDIDATE_LABELS[i % group_size] for i in range(len(responses)))
    prompts = [p for p in render_prompts(tokenizer, examples, config.task.use_chat_template) for _ in range(group_size)]
    verdicts = score_completions(task, responses, [examples[i // group_size] for i in range(len(responses))])

    ids, attention, prompt_len = _encode(tokenizer, prompts, responses)  # [N, L]
    rewards = torch.tensor([v.total for v in verdicts], dtype=torch.float32)  # [N], NaN where unscorable
    group_ids = torch.arange(len(responses)) // group_size  # [N]
    batch = RolloutBatch(input_ids=ids, attention_mask=attention, prompt_len=prompt_len,
                         completion_mask=build_completion_mask(ids, attention, prompt_len),  # [N, L-1]
                         old_logprobs=None, ref_logprobs=None,
                         rewards=torch.where(torch.isfinite(rewards), rewards, torch.zeros_like(rewards)),
                         advantages=None, group_ids=group_ids)
    # The stages the training loop runs on a sampled batch: the advantages (and reference log-probs for a KL term).
    batch = prepare(batch, AdvantageInputs(rewards), learner, plan)  # advantages [N]
    ids, attention, mask = batch.input_ids.to(device), batch.attention_mask.to(device), batch.completion_mask.to(device)

    before = _sequence_logprobs(policy, ids, attention, prompt_len, mask, config)  # [N]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    timings: dict[str, float] = {}
    with timed(timings, TIME_UPDATE):
        update = learner.update(batch)
    change = (_sequence_logprobs(policy, ids, attention, prompt_len, mask, config) - before).cpu()  # [N]
    on_cuda = torch.cuda.is_available()
    memory = torch.cuda.max_memory_allocated() if on_cuda else peak_rss_bytes()

    estimator = ADVANTAGE_ESTIMATORS.get(algo.advantage_estimator)
    flat = estimator(torch.ones(group_size), group_ids=torch.zeros(group_size, dtype=torch.long), std=algo.std,
                     completion_mask=torch.ones(group_size, 1))  # [G]
    return MechanismResult(group_size=group_size, labels=labels, verdicts=tuple(verdicts),
                           correctness_component=primary_component(task), rewards=rewards,
                           group_ids=group_ids, advantages=batch.advantages.cpu(), logprob_change=change,
                           all_equal_advantage_max=float(flat.abs().max()), update=update,
                           update_seconds=timings[TIME_UPDATE],
                           peak_memory_bytes=int(memory),
                           peak_memory_source="cuda_allocated" if on_cuda else "process_peak_rss")


def candidate_rows(result: MechanismResult) -> list[CheckRow]:
    """One row per candidate response: reward, components, status, advantage and log-prob change."""
    rows = []
    for i, verdict in enumerate(result.verdicts):
        components = " ".join(f"{k}={v:g}" for k, v in verdict.components.items())
        rows.append(CheckRow(
            f"prompt {int(result.group_ids[i])} {result.labels[i]}", f"{verdict.total:g}", components,
            verdict.status, f"advantage {float(result.advantages[i]):+.3f}  "
                            f"logp change {float(result.logprob_change[i]):+.3f}"))
    return rows


def mechanism_rows(result: MechanismResult, config) -> list[CheckRow]:
    """The check rows: contrast, separation, the all-equal group, updates, clip fraction, time, memory."""
    group = result.group_size
    rows = [row("candidates have reward contrast", result.nonzero_advantages, "> 0 nonzero advantages",
                result.has_advantage_signal,
                f"rewards {', '.join(f'{float(r):g}' for r in result.rewards[:group])} (prompt 0)")]
    separation = result.policy_separation
    rows.append(row("policy separation", separation, f"> {MIN_SEPARATION:g}",
                    math.isfinite(separation) and separation > MIN_SEPARATION,
                    "mean logp change of A>0 responses minus that of A<0 ones"))
    flat_max = result.all_equal_advantage_max
    rows.append(row("all-equal group advantages", flat_max, "= 0", flat_max == 0.0,
                    f"estimator {config.algorithm.advantage_estimator}"))
    skipped = result.update.skipped_nonfinite_updates
    rows.append(row("updates applied", result.update.optimizer_steps, f"= {MECHANISM_UPDATES}", skipped == 0,
                    f"{skipped} skipped as non-finite"))
    clip = result.clip_fraction
    rows.append(row("clip fraction", clip, f"<= {config.health.clip_frac:g}", clip <= config.health.clip_frac,
                    f"lr {config.optim.lr:g}, clip {config.algorithm.clip_low}/{config.algorithm.clip_high}",
                    warn_only=True))
    rows.append(row("update time (s)", f"{result.update_seconds:.2f}", "-", None,
                    f"{MECHANISM_UPDATES} optimizer steps"))
    rows.append(row("peak memory (MiB)", f"{result.peak_memory_bytes / 2**20:.0f}", "-", None,
                    "CUDA allocated" if result.peak_memory_source == "cuda_allocated" else "process peak RSS"))
    return rows


def run_mechanism_check(config, group_size: int = len(CANDIDATE_LABELS)) -> tuple[list[CheckRow], list[CheckRow]]:
    """Returns (one row per candidate response, the check rows)."""
    result = run_mechanism(config, group_size)
    return candidate_rows(result), mechanism_rows(result, config)
