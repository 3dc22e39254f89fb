"""Config loading: defaults, YAML + overrides, presets, and a clear error for every bad input."""

import pytest

from rlvr.algorithms import ALGORITHMS
from rlvr.config import ConfigError, load_config


def test_defaults_are_grpo_on_format_copy_with_embedded_model():
    config = load_config()
    assert config.algorithm.name == "grpo"
    assert config.task.name == "format_copy"
    assert config.model.name == "smollm2-135m-instruct"
    # Preset values were filled in.
    preset = ALGORITHMS.get("grpo").settings
    assert config.algorithm.ppo_epochs == preset["ppo_epochs"] == 2
    assert config.algorithm.kl_estimator == "k3"
    assert config.algorithm.policy_loss == "grpo_clip"
    assert config.algorithm.loss_aggregation == "seq_mean_token_mean"
    # The batch invariant: one optimizer step per epoch.
    assert config.optim.minibatch_size * config.optim.grad_accum_steps == config.rollout_size


def test_overrides_and_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  name: dapo\nrollout:\n  group_size: 4\n  batch_size: 2\n"
                    "optim:\n  grad_accum_steps: 2\n")
    config = load_config(path, ["optim.lr=1e-4", "algorithm.clip_high=0.3", "model.lora_target_modules=q_proj,v_proj"])
    assert config.algorithm.name == "dapo"
    assert config.algorithm.clip_high == 0.3  # override beats the preset
    assert config.algorithm.clip_low == 0.2  # preset
    assert config.algorithm.loss_aggregation == "token_mean"
    assert config.optim.lr == 1e-4
    assert config.optim.minibatch_size == 4  # derived: 2*4 / 2
    assert config.model.lora_target_modules == ["q_proj", "v_proj"]


def test_every_preset_resolves():
    for name in ALGORITHMS:
        config = load_config(None, [f"algorithm.name={name}"])
        assert config.algorithm.advantage_estimator is not None


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["optim.lrr=1"], "unknown config key 'optim.lrr'"),
        (["optim.lrr=1"], "valid keys: lr, weight_decay"),
        (["nope.x=1"], "'nope' is not in top level"),
        (["optim.lr=fast"], "optim.lr: expected a number"),
        (["rollout.group_size=2.5"], "rollout.group_size: expected an integer"),
        (["model.lora=maybe"], "model.lora: expected true or false"),
        (["algorithm.name=ppo2"], "algorithm.name: unknown choice 'ppo2' (did you mean 'ppo'?); valid choices: cispo, "
                                  "clip_cov, dapo, dr_grpo, dual_clip, gmpo, gpg, gr_reinforce, grpo"),
        (["algorithm.policy_loss=bogus"], "algorithm.policy_loss: unknown choice 'bogus'; valid choices:"),
        (["algorithm.name=gmpo", "algorithm.entropy_top_fraction=0.2"],
         "algorithm.entropy_top_fraction=0.2 selects tokens, and algorithm.policy_loss='geo_mean' gives every token"),
        (["algorithm.entropy_top_fraction=0"], "algorithm.entropy_top_fraction must be a finite number in (0, 1]"),
        (["model.base_product_dtype=float16"], "model.base_product_dtype: unknown choice 'float16' "
                                               "(did you mean 'bfloat16'?); valid choices: model, bfloat16"),
        (["model.base_product_dtype=bfloat16"], "model.base_product_dtype=bfloat16 needs algorithm.ppo_epochs=1 (it "
                                                "is 2): the rounding of reduced-precision products changes"),
        (["model.base_product_dtype=bfloat16", "algorithm.ppo_epochs=1", "model.fused_lora=false"],
         "model.base_product_dtype=bfloat16 changes the base products of the fused LoRA projections: it needs "
         "model.lora=true and model.fused_lora=true (they are true and false)"),
        (["model.base_product_dtype=bfloat16", "algorithm.ppo_epochs=1", "model.dtype=bfloat16"],
         "model.base_product_dtype=bfloat16 needs model.dtype=float32"),
        (["model.base_product_dtype=bfloat16", "algorithm.ppo_epochs=1", "rollout.backend=hf_generate"],
         "rollout.backend=hf_generate does not report the log-probs it samples with, so the gap could not be "
         "measured or corrected; use one that does: decode_loop, vllm, vllm_server"),
        (["algorithm.clip_ratio_c=1.0"], "algorithm.clip_ratio_c must be a finite number in (1, 1000000]"),
        (["algorithm.tau_neg=0"], "algorithm.tau_neg must be a finite number in (0, 1000]"),
        (["algorithm.clip_cov_lb=5", "algorithm.clip_cov_ub=5"], "algorithm.clip_cov_lb=5.0 must be below"),
        (["algorithm.name=grpo_passk", "rollout.group_size=1"], "algorithm.advantage_estimator='grpo_passk' compares"),
        (["algorithm.loss_aggregation=mean"],
         "valid choices: seq_mean_token_mean, seq_mean_token_sum_norm, token_mean"),
        (["task.name=chess"], "task.name: unknown task 'chess'; valid choices: "),
        (["optim.minibatch_size=5", "optim.grad_accum_steps=2"],
         "must divide rollout.batch_size * rollout.group_size = 32"),
        (["optim.grad_accum_steps=3", "optim.minibatch_size=null"], "optim.grad_accum_steps=3 must divide"),
        (["algorithm.std=biased"], "algorithm.std: unknown choice 'biased'; valid choices: population, sample"),
        (["rollout.temperature=0"], "rollout.temperature must be a finite number in (0, 100], got 0.0"),
        (["model.dtype=fp8"], "model.dtype: unknown choice 'fp8'; valid choices: float32, bfloat16, float16, float64"),
        (["lr"], "is not of the form key=value"),
    ],
)
def test_config_errors_name_the_problem(overrides, expected):
    with pytest.raises((ConfigError, KeyError)) as info:
        load_config(None, overrides)
    message = info.value.args[0] if info.value.args else str(info.value)
    assert expected in message


def test_unknown_key_in_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rollout:\n  groupsize: 4\n")
    with pytest.raises(ConfigError,
                       match="unknown config key 'rollout.groupsize'.*valid keys: backend, batch_size, group_size"):
        load_config(path)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("rollout: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


def test_one_entry_of_a_mapping_can_be_overridden(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task:\n  name: gsm8k\n  options: {path: a.jsonl, eval_size: 4}\n")
    config = load_config(path, ["task.options.eval_size=8", "task.options.prompt=question_only",
                                "task.reward_weights.format=0.5"])
    assert config.task.options == {"path": "a.jsonl", "eval_size": 8, "prompt": "question_only"}
    assert config.task.reward_weights == {"format": 0.5}
    with pytest.raises(ConfigError, match="task.reward_weights.format: expected a number"):
        load_config(path, ["task.reward_weights.format=high"])
    with pytest.raises(ConfigError, match="task.options is not a mapping"):
        load_config(path, ["task.options=3", "task.options.x=1"])


def test_shipped_configs_load():
    from pathlib import Path

    configs = sorted(Path(__file__).resolve().parents[2].joinpath("configs").glob("*.yaml"))
    presets = {load_config(path).algorithm.name for path in configs}
    assert sorted(set(ALGORITHMS) - presets) == []  # every preset has a shipped config that runs it


def test_no_config_run_is_the_shipped_grpo_config():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "configs" / "format_copy_grpo.yaml"
    assert load_config().as_dict() == load_config(shipped).as_dict()
    assert load_config().algorithm.kl_coef == 0.0
    assert load_config(None, ["algorithm.kl_coef=0.04"]).algorithm.kl_coef == 0.04


# Values that were accepted unchecked: each must name the key, the value and the allowed range.
@pytest.mark.parametrize(
    "override, expected",
    [
        ("train.keep_checkpoints=0", "train.keep_checkpoints must be an integer in [1, 10000], got 0"),
        ("train.keep_checkpoints=-3", "train.keep_checkpoints must be an integer in [1, 10000], got -3"),
        ("rollout.top_k=-5", "rollout.top_k must be an integer in [0, 16777216], got -5"),
        ("rollout.min_p=5", "rollout.min_p must be a finite number in [0, 1], got 5.0"),
        ("model.lora_rank=0", "model.lora_rank must be an integer in [1, 4096], got 0"),
        ("optim.warmup_steps=-10", "optim.warmup_steps must be an integer in [0, 10000000], got -10"),
        ("train.eval_max_new_tokens=-5", "train.eval_max_new_tokens must be an integer in [1, 1048576], got -5"),
        ("rollout.temperature=nan", "rollout.temperature must be a finite number in (0, 100], got nan"),
        ("algorithm.clip_high=nan", "algorithm.clip_high must be a finite number in [0, 100], got nan"),
        ("algorithm.kl_coef=nan", "algorithm.kl_coef must be a finite number in [0, 10000], got nan"),
        ("optim.beta1=2", "optim.beta1 must be a finite number in [0, 1), got 2.0"),
        ("optim.beta2=1", "optim.beta2 must be a finite number in [0, 1), got 1.0"),
        ("optim.eps=-1", "optim.eps must be a finite number in (0, 1], got -1.0"),
        ("optim.lr=nan", "optim.lr must be a finite number in (0, 10], got nan"),
        ("optim.lr=inf", "optim.lr must be a finite number in (0, 10], got inf"),
        ("health.clip_frac=1.5", "health.clip_frac must be a finite number in [0, 1], got 1.5"),
        ("train.seed=-1", "train.seed must be an integer in [0, 4294967295], got -1"),
        ("task.reward_weights={answer: .nan}",
         "task.reward_weights.answer must be a finite number in [-10000, 10000], got nan"),
        ("expert_iteration.min_reward=.inf",
         "expert_iteration.min_reward must be a finite number in [-1e+30, 1e+30], got inf"),
        ("train.run_name=/tmp/elsewhere", "train.run_name='/tmp/elsewhere' must be a folder name inside"),
        ("train.run_name=../up", "train.run_name='../up' must be a folder name inside"),
        ("rollout.stop_strings=['']", "rollout.stop_strings must not contain an empty string"),
    ],
)
def test_out_of_range_values_are_refused_with_key_value_and_range(override, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert expected in str(info.value)


def test_boundary_values_inside_the_ranges_are_accepted():
    config = load_config(None, ["train.keep_checkpoints=1", "rollout.top_k=0", "rollout.min_p=1", "optim.beta1=0",
                                "optim.max_grad_norm=1e9", "train.eval_max_new_tokens=null", "train.seed=0",
                                "rollout.max_new_tokens=1048576", "rollout.batch_size=65536"])
    assert config.train.keep_checkpoints == 1 and config.optim.max_grad_norm == 1e9


# Each size accepted 2**63 (and went on to allocate or loop that much): each has a finite upper end now.
@pytest.mark.parametrize("key, high", [
    ("rollout.max_new_tokens", 2**20), ("rollout.batch_size", 2**16), ("rollout.group_size", 2**12),
    ("model.lora_rank", 4096), ("model.num_threads", 4096), ("algorithm.ppo_epochs", 1000),
    ("train.eval_batch_size", 2**16), ("train.eval_max_new_tokens", 2**20), ("train.eval_size", 10**7),
    ("train.samples_per_iteration", 2**28),
])
def test_sizes_refuse_2_to_the_63_naming_key_value_and_range(key, high):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{key}={2**63}"])
    assert str(info.value).startswith(f"{key} must be an integer in [")
    assert f", {high}], got {2**63}" in str(info.value)
    with pytest.raises(ConfigError, match=f"got {high + 1}"):  # the upper end itself is the last value allowed
        load_config(None, [f"{key}={high + 1}"])


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e10"])
def test_max_grad_norm_refuses_infinity_and_huge_values(value):
    with pytest.raises(ConfigError, match=r"optim.max_grad_norm must be a finite number in \(0, 1000000000\], got "):
        load_config(None, [f"optim.max_grad_norm={value}"])


def _declared_bounds() -> dict:
    """{dotted key: Bounds} of every field that declares a range, read from the schema's fields."""
    from rlvr.config import Config
    from rlvr.config.loading import field_bounds, leaf_fields

    return {key: field_bounds(f) for key, f, _ in leaf_fields(Config) if field_bounds(f) is not None}


def test_every_range_has_two_finite_ends():
    import math

    bounds = _declared_bounds()
    open_ended = [key for key, b in bounds.items() if not (math.isfinite(b.low) and math.isfinite(b.high))]
    assert open_ended == []
    assert bounds["rollout.max_new_tokens"].admits(2**20) and not bounds["rollout.max_new_tokens"].admits(2**63)


def test_a_huge_integer_is_refused_not_overflowed():
    with pytest.raises(ConfigError, match="rollout.batch_size must be an integer in"):
        load_config(None, [f"rollout.batch_size={10**400}"])


def test_every_numeric_config_field_has_a_declared_range():
    import dataclasses
    import typing

    from rlvr.config import Config

    numeric = set()
    for section in dataclasses.fields(Config):
        section_type = typing.get_type_hints(Config)[section.name]
        for name, tp in typing.get_type_hints(section_type).items():
            args = set(typing.get_args(tp)) - {type(None)} or {tp}
            if args & {int, float} or (typing.get_origin(tp) is dict and typing.get_args(tp)[1] is float):
                numeric.add(f"{section.name}.{name}")
    assert numeric == set(_declared_bounds())  # no numeric field without a range, no range on a text field
    assert len(numeric) > 60


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "rloo", "dapo", "gspo", "reinforce_with_baseline"])
def test_group_baseline_estimators_refuse_groups_of_one(preset):
    with pytest.raises(ConfigError, match="rollout.group_size=1 gives every advantage 0"):
        load_config(None, [f"algorithm.name={preset}", "algorithm.dynamic_sampling=false", "rollout.group_size=1"])


def test_an_estimator_without_a_group_baseline_accepts_groups_of_one():
    config = load_config(None, ["algorithm.name=no_baseline", "rollout.group_size=1"])
    assert config.rollout.group_size == 1


def test_group_baseline_estimators_are_exactly_those_that_zero_a_group_of_one():
    """Checked against the estimators themselves: one declaring a group baseline gives 0 to a lone sample."""
    import torch

    from rlvr.core import ADVANTAGE_ESTIMATORS

    value_based = set(ADVANTAGE_ESTIMATORS.names_where(lambda traits: traits.value_baseline))
    rewards = torch.tensor([0.0, 1.0, 0.3, 2.0])  # different rewards: a baseline-free estimator keeps them
    extra = dict(completion_mask=torch.ones(4, 2), reward_baselines=torch.zeros(4))  # what the loop passes
    zeroed = {name for name in set(ADVANTAGE_ESTIMATORS.names()) - value_based
              if torch.count_nonzero(ADVANTAGE_ESTIMATORS.get(name)(rewards, group_size=1, **extra)) == 0}
    assert zeroed == set(ADVANTAGE_ESTIMATORS.names_where(lambda traits: traits.group_baseline))
    assert zeroed == {"grpo", "mean_centered", "rloo", "reinforce_plus_plus_baseline", "opo", "grpo_passk", "gpg"}
    assert "none" not in zeroed
    # The value-based estimators take per-token rewards and a value; a group of one is all they need.
    mask = torch.ones(4, 2)
    token_rewards = torch.stack([torch.zeros(4), rewards], dim=1)  # [4, 2]: the reward on the last token
    assert value_based == {"gae"}
    for name in value_based:
        advantages = ADVANTAGE_ESTIMATORS.get(name)(token_rewards, group_size=1, completion_mask=mask,
                                                    values=torch.zeros(4, 2), gamma=1.0, lam=0.95)
        assert torch.count_nonzero(advantages) > 0, name


def test_the_ppo_preset_and_config_need_no_groups():
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "format_copy_ppo.yaml")
    algo = config.algorithm
    assert (algo.name, algo.advantage_estimator, algo.policy_loss, algo.value_model) == ("ppo", "gae", "grpo_clip",
                                                                                         "shared")
    assert (algo.gae_gamma, algo.gae_lambda, algo.value_clip, algo.vf_coef) == (1.0, 0.95, 0.2, 0.1)
    assert algo.ppo_epochs == ALGORITHMS.get("grpo").settings["ppo_epochs"] and algo.normalize_advantages
    assert config.rollout.group_size == 1 and config.rollout_size == load_config().rollout_size  # 32 sequences
    # The group presets keep no value model.
    assert load_config().algorithm.value_model == "none"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["algorithm.name=ppo", "algorithm.value_model=none"], "advantage_estimator='gae' needs a learned value"),
        (["algorithm.name=grpo", "algorithm.value_model=shared"], "set algorithm.value_model=none"),
        (["algorithm.name=ppo", "algorithm.value_model=critic"], "unknown choice 'critic'; valid choices: none, "
                                                                 "shared, separate"),
        (["algorithm.name=grpo", "algorithm.kl_in_reward=0.05"], "algorithm.kl_in_reward=0.05 needs a value model"),
        (["algorithm.name=grpo", "algorithm.value_warmup_iterations=2"], "value_warmup_iterations=2 needs a value"),
        (["algorithm.name=ppo", "algorithm.gae_lambda=1.5"], "algorithm.gae_lambda must be a finite number in [0, 1]"),
        (["algorithm.name=ppo", "algorithm.vf_coef=0"], "algorithm.vf_coef must be a finite number in (0, 10000]"),
        (["algorithm.name=ppo", "algorithm.value_clip=-0.1"],
         "algorithm.value_clip must be a finite number in [0, 1000000]"),
        (["health.explained_variance_min=2"], "health.explained_variance_min must be a finite number in [-1000000, 1]"),
    ],
)
def test_ppo_keys_are_checked_together(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert expected in str(info.value)
    # The same keys in a consistent combination load.
    load_config(None, ["algorithm.name=ppo", "algorithm.value_model=separate", "algorithm.kl_in_reward=0.05",
                       "algorithm.value_warmup_iterations=2", "algorithm.gae_lambda=1", "algorithm.value_clip=0"])


def test_a_preset_is_a_partial_setting_under_the_file_and_the_overrides(tmp_path):
    """default < preset < file < override, and null in a file or override unsets a key back to the preset's."""
    from rlvr.config import AlgorithmConfig

    dapo = ALGORITHMS.get("dapo").settings
    assert "kl_estimator" not in dapo and "ppo_epochs" in dapo  # partial: what it does not set keeps the default
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  name: dapo\n  clip_high: 0.25\n  ppo_epochs: 3\n  dynamic_sampling: false\n")
    config = load_config(path, ["algorithm.ppo_epochs=4"]).algorithm
    assert (config.clip_high, config.ppo_epochs, config.dynamic_sampling) == (0.25, 4, False)  # file, override, file
    assert (config.clip_low, config.overlong_buffer, config.loss_aggregation) == (0.2, 4, "token_mean")  # preset
    assert config.kl_estimator == AlgorithmConfig().kl_estimator == "k3"  # the field's default
    # null unsets: the preset's value where it sets one, the default where it does not.
    reset = load_config(path, ["algorithm.clip_high=null", "algorithm.dynamic_sampling=null",
                               "algorithm.entropy_coef=null"]).algorithm
    assert (reset.clip_high, reset.dynamic_sampling, reset.entropy_coef) == (0.28, True, 0.0)
    # The same file under another preset takes that preset's values for the keys it does not set.
    gspo = load_config(path, ["algorithm.name=gspo"]).algorithm
    assert (gspo.clip_low, gspo.clip_high, gspo.policy_loss) == (3e-4, 0.25, "gspo")


def test_every_preset_names_only_keys_of_the_algorithm_section_and_each_applies():
    from rlvr.config import preset_settings

    for name in ALGORITHMS:
        settings = preset_settings(name)
        resolved = load_config(None, [f"algorithm.name={name}"]).algorithm
        assert settings and {key: getattr(resolved, key) for key in settings} == settings, name


def test_a_preset_that_names_a_key_the_section_lacks_is_an_error(monkeypatch):
    from rlvr.algorithms import AlgorithmPreset

    monkeypatch.setitem(ALGORITHMS._items, "typo_preset", AlgorithmPreset("a slip", {"clip_lo": 0.1}))
    with pytest.raises(ConfigError, match=r"unknown config key 'algorithm.clip_lo' in the settings of preset "
                                          r"'typo_preset' \(did you mean 'clip_low'\?\); valid keys: "):
        load_config(None, ["algorithm.name=typo_preset"])
    monkeypatch.setitem(ALGORITHMS._items, "typo_preset", AlgorithmPreset("a slip", {"clip_low": "wide"}))
    with pytest.raises(ConfigError, match="algorithm.clip_low: expected a number"):  # its values are checked too
        load_config(None, ["algorithm.name=typo_preset"])


def test_a_section_given_as_its_dataclass_sets_the_fields_that_differ_from_their_defaults():
    from rlvr.config import AlgorithmConfig, Config

    ppo = Config(algorithm=AlgorithmConfig(name="ppo"), rollout={"group_size": 1}).algorithm
    assert (ppo.advantage_estimator, ppo.value_model, ppo.normalize_advantages) == ("gae", "shared", True)
    dapo = Config(algorithm=AlgorithmConfig(name="dapo", clip_high=0.3)).algorithm
    assert (dapo.clip_high, dapo.dynamic_sampling) == (0.3, True)


@pytest.mark.parametrize("override, expected", [
    ("algorithm.advantage_estimator=grp", "algorithm.advantage_estimator: unknown choice 'grp' (did you mean "
                                          "'grpo'?); valid choices: gae, gpg, grpo, grpo_passk"),
    ("algorithm.kl_estimator=kk3", "algorithm.kl_estimator: unknown choice 'kk3' (did you mean 'k3'?); valid "
                                   "choices: k1, k2, k3"),
    ("algorithm.kl_estimator=k9", "algorithm.kl_estimator: unknown choice 'k9'; valid choices: k1, k2, k3"),
    ("rollout.backend=hf_generat", "rollout.backend: unknown choice 'hf_generat' (did you mean 'hf_generate'?)"),
    ("train.loggers=[tensorbord]", "train.loggers: unknown choice 'tensorbord' (did you mean 'tensorboard'?); "
                                   "valid choices: aim, mlflow, tensorboard, wandb"),
    ("train.stop_on=[truncation, no_contras]", "train.stop_on: unknown choice 'no_contras' (did you mean "
                                                 "'no_contrast'?)"),
    ("algorithm.value_model=shard", "algorithm.value_model: unknown choice 'shard' (did you mean 'shared'?)"),
])
def test_names_from_a_registry_fail_with_key_value_near_miss_and_choices(override, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert expected in str(info.value)


def test_a_knob_declared_once_is_what_loading_checks_and_show_read():
    """The machinery reads a field's own declaration: a made-up section needs nothing but its fields."""
    import dataclasses
    from typing import Literal

    from rlvr.config.loading import (build_section, describe_config, first_choice_error, first_range_error,
                                     format_config, option)

    @dataclasses.dataclass
    class LossSection:
        """A made-up loss section."""

        tau: float = option(0.5, "a temperature", bounds=(0.0, 1.0))
        mode: Literal["soft", "hard"] = option("soft", "how it clips")
        kernel: str = option("a", "a name from a registry", choices=lambda: ["a", "b"])

    @dataclasses.dataclass
    class Root:
        loss: LossSection = dataclasses.field(default_factory=LossSection)

    def built(**data):
        return Root(loss=build_section(LossSection, data, "loss."))

    assert first_range_error(built(tau=0.7)) is None and first_choice_error(built(kernel="b")) is None
    assert first_range_error(built(tau=1.5)) == "loss.tau must be a finite number in [0, 1], got 1.5"
    assert first_choice_error(built(kernel="c")) == "loss.kernel: unknown choice 'c'; valid choices: a, b"
    with pytest.raises(ConfigError, match=r"loss.mode: unknown choice 'sofft' \(did you mean 'soft'\?\); valid "
                                          r"choices: soft, hard"):
        built(mode="sofft")
    rows = {row.key: row for row in describe_config(built(tau=0.25))}
    assert (rows["loss.tau"].type_name, rows["loss.tau"].default, rows["loss.tau"].value) == ("float in [0, 1]", 0.5,
                                                                                              0.25)
    assert rows["loss.mode"].type_name == "str in {soft, hard}" and rows["loss.kernel"].type_name == "str in {a, b}"
    assert "loss.tau = 0.25   (float in [0, 1], default 0.5)  *" in format_config(built(tau=0.25)).splitlines()


def test_every_sweep_point_of_the_shipped_sweeps_resolves():
    """A sweep resets a base file's algorithm key with null (algorithm.ppo_epochs: null): each preset's own."""
    from pathlib import Path

    from rlvr.sweep import grid_points, load_plan

    epochs = {}
    for path in sorted(Path(__file__).resolve().parents[2].joinpath("configs", "sweeps").glob("*.yaml")):
        plan = load_plan(str(path), [], [])
        for name, point in grid_points(plan):
            config = load_config(plan.base, plan.overrides + point)
            if path.stem == "algorithms_arithmetic":
                epochs[config.algorithm.name] = config.algorithm.ppo_epochs
    # The base file sets ppo_epochs 1; null gives back 2 where the preset sets 2.
    assert epochs == {"grpo": 2, "dr_grpo": 2, "dapo": 2, "rloo": 1, "gr_reinforce": 1, "no_baseline": 1}


def test_a_saved_config_drops_a_removed_key_only_at_its_off_value():
    from rlvr.config import saved_run_data

    saved = {"train": {"stop_if_dead_for": 0, "seed": 1}, "optim": {"lr": 1e-3}}
    assert saved_run_data(saved) == {"train": {"seed": 1}, "optim": {"lr": 1e-3}}
    assert saved["train"] == {"stop_if_dead_for": 0, "seed": 1}  # the caller's data is not changed
    assert saved_run_data({"train": {"stop_if_dead_for": 3}}) == {"train": {"stop_if_dead_for": 3}}  # then it fails
    with pytest.raises(ConfigError, match="'train.stop_if_dead_for' was removed: use train.stop_on"):
        load_config(None, ["train.stop_if_dead_for=0"])  # in a file or an override it fails even at 0


@pytest.mark.parametrize("key, old, new", [
    ("algorithm.advantage_estimator", "none", "no_baseline"),
    ("algorithm.policy_loss", "ppo_clip", "grpo_clip"),
    ("algorithm.policy_loss", "gr_reinforce", "reinforce"),
    ("algorithm.advantage_estimator", "dr_grpo", "mean_centered"),
])
def test_a_retired_registry_name_fails_naming_its_replacement(tmp_path, key, old, new):
    import yaml

    from rlvr.config import load_run_config

    with pytest.raises(ConfigError, match=f"{key}: '{old}' was renamed to '{new}'; set {key}: {new}"):
        load_config(None, [f"{key}={old}"])
    # A run folder saved under the old name resumes as it ran: the retired name reads as its successor,
    # and the config equals the one saved under the new name (a rename changes no behaviour).
    section, name = key.split(".")
    saved = load_config(None, [f"{key}={new}"]).as_dict()
    renamed = {**saved, section: {**saved[section], name: old}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(renamed))
    assert load_run_config(tmp_path).as_dict() == saved
    # Only the saved file is read so: without the registries (check=False) the name is left as saved.
    assert getattr(load_run_config(tmp_path, check=False).algorithm, name) == old


def _kernel_config():
    """A made-up config root with one section whose keys take names from a registry that retired one."""
    import dataclasses

    from rlvr.config.loading import option
    from rlvr.registry import Registry

    kernels: Registry[int] = Registry("kernel")
    kernels.add("gauss", 1)
    kernels.rename("normal", "gauss")

    @dataclasses.dataclass
    class Section:
        """A made-up section."""

        kernel: str = option("gauss", "a name from a registry", choices=lambda: kernels)
        kernels: list = option(factory=list, help="names from a registry", choices=lambda: kernels)
        label: str = option("normal", "free text, no registry")

    @dataclasses.dataclass
    class Root:
        smooth: Section = dataclasses.field(default_factory=Section)

    return Section, Root


def test_a_registry_backed_field_reads_the_registrys_retired_names():
    """Any key whose choices come from a Registry gets the retired-name message, not only the built-in ones."""
    from rlvr.config.loading import build_section, first_choice_error

    Section, Root = _kernel_config()

    def built(name):
        return Root(smooth=build_section(Section, {"kernel": name}, "smooth."))

    assert first_choice_error(built("gauss")) is None
    assert first_choice_error(built("normal")) == ("smooth.kernel: 'normal' was renamed to 'gauss'; "
                                                   "set smooth.kernel: gauss")
    assert first_choice_error(built("box")) == "smooth.kernel: unknown choice 'box'; valid choices: gauss"


def test_saved_data_reads_retired_names_as_their_successors_in_names_and_lists():
    from rlvr.config.loading import with_current_names

    _, Root = _kernel_config()
    saved = {"smooth": {"kernel": "normal", "kernels": ["box", "normal"], "label": "normal"}}
    assert with_current_names(Root, saved) == {"smooth": {"kernel": "gauss", "kernels": ["box", "gauss"],
                                                          "label": "normal"}}
    assert saved["smooth"]["kernel"] == "normal"  # the caller's data is not changed
    assert with_current_names(Root, {"other": 1}) == {"other": 1} and with_current_names(Root, None) is None


def test_a_renamed_key_fails_naming_its_new_name_and_a_saved_run_reads_it_as_the_new_one(tmp_path):
    import yaml

    from rlvr.config import load_run_config

    with pytest.raises(ConfigError, match=r"'health.zero_variance_frac' was removed: renamed health.no_contrast_frac"):
        load_config(None, ["health.zero_variance_frac=0.3"])
    # A run saved before the rename: the old key and the old warning name, as it ran.
    saved = load_config(None, ["health.no_contrast_frac=0.3", "train.stop_on=[no_contrast]"]).as_dict()
    old = {**saved, "health": {k: v for k, v in saved["health"].items() if k != "no_contrast_frac"},
           "train": {**saved["train"], "stop_on": ["zero_variance"]}}
    old["health"]["zero_variance_frac"] = 0.3
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    resumed = load_run_config(tmp_path)
    assert resumed.health.no_contrast_frac == 0.3 and resumed.train.stop_on == ["no_contrast"]
    assert resumed.as_dict() == saved


def test_each_value_of_a_list_of_numbers_is_range_checked_and_named_by_its_position():
    assert load_config(None, ["sft.exclude_eval_seeds=[0, 7]"]).sft.exclude_eval_seeds == [0, 7]
    with pytest.raises(ConfigError, match=r"sft.exclude_eval_seeds\[1\] must be an integer in \[0, 4294967295\], "
                                          r"got -3"):
        load_config(None, ["sft.exclude_eval_seeds=[0, -3]"])
