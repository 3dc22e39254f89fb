"""TRL's GRPOTrainer set up from plain settings, for the benchmarks that put rlvr beside it.

One harness for `vs_trl.py` (speed) and `arithmetic_learning.py` (learning curves): the trainer
is built from a `TrlSettings` (LoRA, batch, token budget, optimizer, clip, epochs, KL), its
reward is an rlvr task's verdict through `rlvr.rollout.score_completions` (the one path rlvr's
own runs judge with), each optimizer step's generation and no-grad log-prob passes are timed,
and stop strings reach `generate` (TRL builds a `GenerationConfig` but does not hand `generate`
the tokenizer that `stop_strings` needs, so the model's `generate` is given it here).

    pip install -e ".[bench]"      # TRL and datasets
"""

from __future__ import annotations

import functools
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TrlSettings:
    """What GRPOTrainer needs to run a given rlvr budget. One step = one optimizer step."""

    model_path: str  # a local model folder (rlvr.models.resolve_model_path gives it for any model spec)
    prompts_per_step: int  # B
    group_size: int  # G: completions per prompt
    max_new_tokens: int
    lr: float
    steps: int  # optimizer steps; a generation round serves num_iterations of them
    lora_rank: int = 16
    lora_alpha: float = 32
    lora_targets: tuple[str, ...] = LORA_TARGETS
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0  # KL coefficient
    num_iterations: int = 1  # optimizer steps per generation round (rlvr's ppo_epochs)
    microbatches: int = 1  # forward / backward passes accumulated per optimizer step (rlvr's grad_accum_steps)
    loss_type: str = "grpo"  # grpo (seq-mean-token-mean), dapo (token-mean), dr_grpo (sum / constant)
    scale_rewards: str = "group"  # group: divide by the group std (TRL: sample std); none: mean-centred only
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    lr_scheduler: str = "constant"
    warmup_steps: int = 0
    stop_strings: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class StepTimes:
    """Seconds per optimizer step: the whole step, its generation, its no-grad log-prob passes."""

    step: list[float] = field(default_factory=list)
    generation: list[float] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def update(self) -> list[float]:
        return [s - g - p for s, g, p in zip(self.step, self.generation, self.logprobs)]


def task_reward(task, examples: list, on_scored: Optional[Callable[[list], None]] = None) -> Callable:
    """A TRL reward function: each completion judged by `task` against `examples[example_index]`.

    Completions come as text (raw prompts) or as chat messages; `on_scored(verdicts)` sees each
    batch's verdicts (to log reward components).
    """
    from rlvr.rollout import score_completions

    def reward(completions, example_index, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        verdicts = score_completions(task, texts, [examples[i] for i in example_index])
        if on_scored is not None:
            on_scored(verdicts)
        return [v.total for v in verdicts]  # NaN where unscorable: TRL's nansum leaves it out

    reward.__name__ = f"rlvr_{task.name}".replace(":", "_")
    return reward


def build_trainer(settings: TrlSettings, rows: list[dict], reward_funcs: list, callbacks: list = (),
                  dtype: str = "float32", extra_args: Optional[dict] = None):
    """(GRPOTrainer, StepTimes) on `rows` ({"prompt": text or messages, ...} in order, no shuffling).

    `extra_args`: more GRPOConfig fields (bf16, use_vllm, vllm_mode, ...), over the ones set here.
    With `use_vllm` the stop strings go to vLLM's SamplingParams (`stop`, kept in the output)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    times = StepTimes()
    current = {"generation": 0.0, "logprobs": 0.0, "started": 0.0}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            current.update(generation=0.0, logprobs=0.0, started=time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            times.step.append(time.perf_counter() - current["started"])
            times.generation.append(current["generation"])
            times.logprobs.append(current["logprobs"])

    extra_args = dict(extra_args or {})
    stops = list(settings.stop_strings)
    if extra_args.get("use_vllm"):
        generation_kwargs = {"stop": stops, "include_stop_str_in_output": True} if stops else None
    else:
        generation_kwargs = {"stop_strings": stops} if stops else None
    config = dict(
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-"), use_cpu=not torch.cuda.is_available(), bf16=False,
        fp16=False, loss_type=settings.loss_type, scale_rewards=settings.scale_rewards,
        num_generations=settings.group_size,
        # One generation round of B x G rows per optimizer step (steps_per_generation defaults to the
        # accumulation steps), its loss taken over `microbatches` passes.
        per_device_train_batch_size=settings.prompts_per_step * settings.group_size // settings.microbatches,
        gradient_accumulation_steps=settings.microbatches, max_completion_length=settings.max_new_tokens,
        beta=settings.beta, num_iterations=settings.num_iterations, gradient_checkpointing=False, report_to="none",
        learning_rate=settings.lr, lr_scheduler_type=settings.lr_scheduler, warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay, max_grad_norm=settings.max_grad_norm, temperature=settings.temperature,
        top_p=settings.top_p, top_k=settings.top_k, epsilon=settings.clip_low, epsilon_high=settings.clip_high,
        max_steps=settings.steps, logging_steps=1, save_strategy="no", shuffle_dataset=False, seed=settings.seed,
        dataloader_num_workers=0, generation_kwargs=generation_kwargs,
    )
    args = GRPOConfig(**{**config, **extra_args})
    model = AutoModelForCausalLM.from_pretrained(settings.model_path, dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(settings.model_path, padding_side="left")
    peft_config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                             target_modules=list(settings.lora_targets), task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[StepTimer(), *callbacks])
    if settings.stop_strings:  # generate() needs the tokenizer to find stop strings in decoded text
        trainer.model.generate = functools.partial(trainer.model.generate, tokenizer=tokenizer)

    def timed(name, method, only_without_grad=False):
        def wrapper(*a, **kw):
            started = time.perf_counter()
            try:
                return method(*a, **kw)
            finally:
                if not only_without_grad or not torch.is_grad_enabled():
                    current[name] += time.perf_counter() - started
        return wrapper

    trainer._generate = timed("generation", trainer._generate)
    # Scoring passes without a graph (old / reference log-probs); the loss's own pass has one.
    trainer._get_per_token_logps_and_entropies = timed(
        "logprobs", trainer._get_per_token_logps_and_entropies, only_without_grad=True)
    return trainer, times
