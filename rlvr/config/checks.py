"""What a built config must satisfy beyond each key's own type, range and names: the cross-field invariants.

`resolve` runs when a `Config` is built: value ranges and registry names (declared with each field),
the derived batch sizes, the task's existence and the invariants below; every message names the keys.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.loading import ConfigError, first_choice_error, first_range_error


def resolve(config, check: bool = True):
    """Check value ranges and names, derive batch sizes, check invariants, resolve the chat template.

    `check=False` only derives (to compare a saved config as it was, right or wrong).
    """
    if not check:
        _derive_batch(config)
        try:
            _resolve_chat_template(config)
        except (KeyError, ValueError, ImportError):  # a task that no longer loads: left null, as it was
            pass
        return config
    check_task_family(config)
    message = first_range_error(config)
    if message:
        raise ConfigError(message)
    _derive_batch(config)
    message = first_choice_error(config)
    if message:
        raise ConfigError(message)
    validate(config)
    _resolve_chat_template(config)
    return config


def _task_error(exc: Exception) -> ConfigError:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return ConfigError(message if message.startswith("task.name") else f"task.name: {message}")


def check_task_family(config) -> None:
    """A task.name that names no task fails here, before the registries import the tensor libraries."""
    from rlvr.tasks import task_factory

    try:
        task_factory(config.task.name)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        raise _task_error(exc) from None


def _resolve_chat_template(config) -> None:
    """`task.use_chat_template: null` becomes the task's own choice (false for the r1_zero prompt)."""
    from rlvr.tasks import default_use_chat_template

    if config.task.use_chat_template is None:
        config.task.use_chat_template = default_use_chat_template(config.task.name, config.task.options)


def _derive_batch(config) -> None:
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


def validate(config) -> None:
    """Cross-field invariants (a key's own range and names are declared with its field); messages name the keys."""
    from rlvr.core import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
    from rlvr.tasks import check_task_name

    r, a, o, t = config.rollout, config.algorithm, config.optim, config.train
    step_rows = o.minibatch_size * o.grad_accum_steps
    if step_rows > config.rollout_size or config.rollout_size % step_rows:
        raise ConfigError(
            f"optim.minibatch_size * optim.grad_accum_steps = {o.minibatch_size} * {o.grad_accum_steps} "
            f"= {step_rows} must divide rollout.batch_size * rollout.group_size = {config.rollout_size} "
            f"into whole optimizer steps; valid step sizes: "
            f"{', '.join(str(d) for d in range(1, config.rollout_size + 1) if config.rollout_size % d == 0)} "
            f"(equal to it: one optimizer step per epoch)"
        )
    from rlvr.rollout import ROLLOUT_BACKENDS

    backend_class = ROLLOUT_BACKENDS.get(r.backend)
    try:
        backend_class.check_options(r.backend_options)
    except ValueError as exc:
        raise ConfigError(f"rollout.backend_options: {exc}") from None
    if backend_class.requires_lora and not config.model.lora:
        raise ConfigError(f"rollout.backend={r.backend} needs model.lora=true: {backend_class.requires_lora}")
    try:  # a task of your own is imported here, so a wrong path fails before any model loads
        check_task_name(config.task.name, options=config.task.options, reward_weights=config.task.reward_weights)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        raise _task_error(exc) from None
    if a.overlong_buffer >= r.max_new_tokens and a.overlong_buffer > 0:
        raise ConfigError(
            f"algorithm.overlong_buffer={a.overlong_buffer} must be in [0, rollout.max_new_tokens={r.max_new_tokens})"
        )
    if a.dynamic_sampling and r.group_size < 2:
        raise ConfigError("algorithm.dynamic_sampling needs rollout.group_size >= 2")
    if a.entropy_top_fraction < 1 and POLICY_LOSSES.traits(a.policy_loss).sequence_level:
        sequence_level = POLICY_LOSSES.names_where(lambda traits: traits.sequence_level)
        raise ConfigError(
            f"algorithm.entropy_top_fraction={a.entropy_top_fraction} selects tokens, and "
            f"algorithm.policy_loss={a.policy_loss!r} gives every token of a sequence the same sequence-level "
            f"loss; use a token-level loss (not {', '.join(sequence_level)}) or set "
            "entropy_top_fraction=1"
        )
    if a.clip_cov_lb >= a.clip_cov_ub:
        raise ConfigError(f"algorithm.clip_cov_lb={a.clip_cov_lb} must be below algorithm.clip_cov_ub="
                          f"{a.clip_cov_ub}: no covariance lies in between")
    if ADVANTAGE_ESTIMATORS.traits(a.advantage_estimator).group_baseline and r.group_size < 2:
        raise ConfigError(
            f"algorithm.advantage_estimator={a.advantage_estimator!r} compares each completion with the rest of "
            f"its group, so rollout.group_size={r.group_size} gives every advantage 0 and nothing is learned; "
            "use rollout.group_size >= 2, or an estimator without a group baseline (algorithm.name=no_baseline)"
        )
    _validate_value_model(config)
    _validate_base_product_dtype(config, backend_class)
    if t.eval_temperature == 0 and t.eval_top_p != 1:
        raise ConfigError(f"train.eval_top_p={t.eval_top_p} does nothing when the eval decodes greedily "
                          "(train.eval_temperature=0); set train.eval_temperature > 0 to sample, or leave "
                          "eval_top_p at 1")
    if t.eval_temperature == 0 and t.eval_samples > 1:
        raise ConfigError(f"train.eval_samples={t.eval_samples} needs sampling: greedy decoding "
                          "(train.eval_temperature=0) gives the same completion every time; set "
                          "train.eval_temperature > 0 (e.g. 0.8), or leave train.eval_samples at 1")
    _validate_names(config)
    if len(set(t.loggers)) != len(t.loggers):
        raise ConfigError(f"train.loggers lists a logger twice: {t.loggers}")
    s, e = config.sft, config.expert_iteration
    if s.batch_size % s.microbatch_size:
        raise ConfigError(f"sft.microbatch_size={s.microbatch_size} must divide sft.batch_size={s.batch_size}")
    if s.demonstration_slips and not s.demonstrations:
        raise ConfigError(f"sft.demonstration_slips={s.demonstration_slips} needs sft.demonstrations=N: the wrong "
                          "workings are a share of the task's demonstrations")
    if e.min_new_tokens > r.max_new_tokens:
        raise ConfigError(
            f"expert_iteration.min_new_tokens={e.min_new_tokens} must be <= rollout.max_new_tokens={r.max_new_tokens}"
        )


def _validate_value_model(config) -> None:
    """PPO's keys fit together: GAE needs a value model and a value model needs GAE."""
    from rlvr.core import ADVANTAGE_ESTIMATORS

    a = config.algorithm
    value_based = ADVANTAGE_ESTIMATORS.traits(a.advantage_estimator).value_baseline
    if value_based and a.value_model == "none":
        raise ConfigError(f"algorithm.advantage_estimator={a.advantage_estimator!r} needs a learned value: set "
                          "algorithm.value_model to shared or separate (or use algorithm.name=ppo)")
    if a.value_model != "none" and not value_based:
        raise ConfigError(f"algorithm.value_model={a.value_model!r} is only used by a value-based estimator "
                          f"({', '.join(ADVANTAGE_ESTIMATORS.names_where(lambda traits: traits.value_baseline))}); "
                          f"algorithm.advantage_estimator="
                          f"{a.advantage_estimator!r} uses its group instead: set algorithm.value_model=none")
    for key, value in (("algorithm.kl_in_reward", a.kl_in_reward),
                       ("algorithm.value_warmup_iterations", a.value_warmup_iterations)):
        if value > 0 and a.value_model == "none":
            raise ConfigError(f"{key}={value} needs a value model (algorithm.name=ppo, or algorithm.value_model "
                              "shared or separate)")


def _validate_base_product_dtype(config, backend_class) -> None:
    """`model.base_product_dtype` other than model: fused LoRA over float32 weights, one epoch per batch, and a
    rollout backend that reports its log-probs (the trainer is then another policy than an fp32 sampler)."""
    m, a, r = config.model, config.algorithm, config.rollout
    key = f"model.base_product_dtype={m.base_product_dtype}"
    if m.base_product_dtype == "model":
        return
    if not m.lora or not m.fused_lora:
        raise ConfigError(f"{key} changes the base products of the fused LoRA projections: it needs model.lora=true "
                          f"and model.fused_lora=true (they are {str(m.lora).lower()} and "
                          f"{str(m.fused_lora).lower()})")
    if m.dtype != "float32":
        raise ConfigError(f"{key} needs model.dtype=float32: with model.dtype={m.dtype} the weights already "
                          "multiply in their own dtype")
    if a.ppo_epochs != 1:
        raise ConfigError(
            f"{key} needs algorithm.ppo_epochs=1 (it is {a.ppo_epochs}): the rounding of reduced-precision products "
            "changes with every optimizer step, so from the second epoch on the importance ratio carries about "
            "0.02-0.03 nats of rounding noise a token, a tenth of the clip range (docs/guides/your-own.md, Models); "
            "in the first epoch the ratio is exactly 1")
    if not backend_class.reports_sampler_logprobs:
        from rlvr.rollout import ROLLOUT_BACKENDS

        reporting = [name for name in ROLLOUT_BACKENDS.names()
                     if ROLLOUT_BACKENDS.get(name).reports_sampler_logprobs]
        raise ConfigError(f"{key} makes the trainer another policy than the sampler, and rollout.backend="
                          f"{r.backend} does not report the log-probs it samples with, so the gap could not be "
                          f"measured or corrected; use one that does: {', '.join(reporting)}")


def _validate_names(config) -> None:
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
