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
    preset = ALGORITHMS.get("grpo")
    assert config.algorithm.ppo_epochs == preset.ppo_epochs == 2
    assert config.algorithm.kl_estimator == "k3"
    assert config.algorithm.policy_loss == "grpo_clip"
    assert config.algorithm.loss_aggregation == "seq_mean_token_mean"
    # The batch invariant: one optimizer step per epoch.
    assert config.optim.minibatch_size * config.optim.grad_accum_steps == config.rollout_size


def test_overrides_and_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  name: dapo\nrollout:\n  group_size: 4\n  batch_size: 2\noptim:\n  grad_accum_steps: 2\n")
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
        (["algorithm.name=ppo2"], "unknown algorithm 'ppo2' (did you mean 'ppo'?); valid choices: cispo, clip_cov, "
                                  "dapo, dr_grpo, dual_clip, gmpo, gpg, gr_reinforce, grpo"),
        (["algorithm.policy_loss=bogus"], "algorithm.policy_loss: unknown name 'bogus'; valid choices:"),
        (["algorithm.name=gmpo", "algorithm.entropy_top_fraction=0.2"],
         "algorithm.entropy_top_fraction=0.2 selects tokens, and algorithm.policy_loss='geo_mean' gives every token"),
        (["algorithm.entropy_top_fraction=0"], "algorithm.entropy_top_fraction must be a finite number in (0, 1]"),
        (["algorithm.clip_ratio_c=1.0"], "algorithm.clip_ratio_c must be a finite number in (1, 1000000]"),
        (["algorithm.tau_neg=0"], "algorithm.tau_neg must be a finite number in (0, 1000]"),
        (["algorithm.clip_cov_lb=5", "algorithm.clip_cov_ub=5"], "algorithm.clip_cov_lb=5.0 must be below"),
        (["algorithm.name=grpo_passk", "rollout.group_size=1"], "algorithm.advantage_estimator='grpo_passk' compares"),
        (["algorithm.loss_aggregation=mean"], "valid choices: seq_mean_token_mean, seq_mean_token_sum_norm, token_mean"),
        (["task.name=chess"], "task.name: unknown task 'chess'; valid choices: "),
        (["optim.minibatch_size=5", "optim.grad_accum_steps=2"], "must equal rollout.batch_size * rollout.group_size = 32"),
        (["optim.grad_accum_steps=3", "optim.minibatch_size=null"], "optim.grad_accum_steps=3 must divide"),
        (["algorithm.std=biased"], "algorithm.std: 'biased' is not one of population, sample"),
        (["rollout.temperature=0"], "rollout.temperature must be a finite number in (0, 100], got 0.0"),
        (["model.dtype=fp8"], "model.dtype: 'fp8' is not one of"),
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
    with pytest.raises(ConfigError, match="unknown config key 'rollout.groupsize'.*valid keys: backend, batch_size, group_size"):
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

    configs = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))
    assert len(configs) >= len(ALGORITHMS)
    for path in configs:
        load_config(path)


def test_no_config_run_is_the_shipped_grpo_config():
    from pathlib import Path

    from rlvr.config import config_to_dict

    shipped = Path(__file__).resolve().parents[1] / "configs" / "format_copy_grpo.yaml"
    assert config_to_dict(load_config()) == config_to_dict(load_config(shipped))
    assert load_config().algorithm.kl_coef == 0.0
    # The preset itself keeps the KL anchor: other presets and explicit files are not affected.
    assert ALGORITHMS.get("grpo").kl_coef == 0.04
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
        ("task.reward_weights={answer: .nan}", "task.reward_weights.answer must be a finite number in [-10000, 10000], got nan"),
        ("expert_iteration.min_reward=.inf", "expert_iteration.min_reward must be a finite number in [-1e+30, 1e+30], got inf"),
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


def test_every_range_has_two_finite_ends():
    import math

    from rlvr.config_ranges import FIELD_BOUNDS

    open_ended = [key for key, bounds in FIELD_BOUNDS.items()
                  if not (math.isfinite(bounds.low) and math.isfinite(bounds.high))]
    assert open_ended == []
    assert FIELD_BOUNDS["rollout.max_new_tokens"].admits(2**20) and not FIELD_BOUNDS["rollout.max_new_tokens"].admits(2**63)


def test_a_huge_integer_is_refused_not_overflowed():
    with pytest.raises(ConfigError, match="rollout.batch_size must be an integer in"):
        load_config(None, [f"rollout.batch_size={10**400}"])


def test_every_numeric_config_field_has_a_declared_range():
    import dataclasses
    import typing

    from rlvr.config import Config
    from rlvr.config_ranges import FIELD_BOUNDS

    numeric = set()
    for section in dataclasses.fields(Config):
        section_type = typing.get_type_hints(Config)[section.name]
        for name, tp in typing.get_type_hints(section_type).items():
            args = set(typing.get_args(tp)) - {type(None)} or {tp}
            if args & {int, float} or (typing.get_origin(tp) is dict and typing.get_args(tp)[1] is float):
                numeric.add(f"{section.name}.{name}")
    assert numeric == set(FIELD_BOUNDS)  # no numeric field without a range, no range for a missing field
    assert len(numeric) > 60


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "rloo", "dapo", "gspo", "reinforce_with_baseline"])
def test_group_baseline_estimators_refuse_groups_of_one(preset):
    with pytest.raises(ConfigError, match="rollout.group_size=1 gives every advantage 0"):
        load_config(None, [f"algorithm.name={preset}", "algorithm.dynamic_sampling=false", "rollout.group_size=1"])


def test_an_estimator_without_a_group_baseline_accepts_groups_of_one():
    config = load_config(None, ["algorithm.name=no_baseline", "rollout.group_size=1"])
    assert config.rollout.group_size == 1


def test_group_baseline_estimators_are_exactly_those_that_zero_a_group_of_one():
    """Checked against the estimators themselves: one with a group baseline gives 0 to a lone sample."""
    import torch

    from rlvr.core import ADVANTAGE_ESTIMATORS
    from rlvr.core.advantages import GROUP_BASELINE_ESTIMATORS, VALUE_BASELINE_ESTIMATORS

    rewards = torch.tensor([0.0, 1.0, 0.3, 2.0])  # different rewards: a baseline-free estimator keeps them
    extra = dict(completion_mask=torch.ones(4, 2), reward_baselines=torch.zeros(4))  # what the loop passes
    zeroed = {name for name in set(ADVANTAGE_ESTIMATORS.names()) - VALUE_BASELINE_ESTIMATORS
              if torch.count_nonzero(ADVANTAGE_ESTIMATORS.get(name)(rewards, group_size=1, **extra)) == 0}
    assert zeroed == set(GROUP_BASELINE_ESTIMATORS)
    assert "none" not in zeroed
    # The value-based estimators take per-token rewards and a value; a group of one is all they need.
    mask = torch.ones(4, 2)
    token_rewards = torch.stack([torch.zeros(4), rewards], dim=1)  # [4, 2]: the reward on the last token
    for name in VALUE_BASELINE_ESTIMATORS:
        advantages = ADVANTAGE_ESTIMATORS.get(name)(token_rewards, group_size=1, completion_mask=mask,
                                                    values=torch.zeros(4, 2), gamma=1.0, lam=0.95)
        assert torch.count_nonzero(advantages) > 0, name


def test_the_ppo_preset_and_config_need_no_groups():
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "format_copy_ppo.yaml")
    algo = config.algorithm
    assert (algo.name, algo.advantage_estimator, algo.policy_loss, algo.value_model) == ("ppo", "gae", "ppo_clip",
                                                                                         "shared")
    assert (algo.gae_gamma, algo.gae_lambda, algo.value_clip, algo.vf_coef) == (1.0, 0.95, 0.2, 0.1)
    assert algo.ppo_epochs == ALGORITHMS.get("grpo").ppo_epochs and algo.normalize_advantages
    assert config.rollout.group_size == 1 and config.rollout_size == load_config().rollout_size  # 32 sequences
    # The group presets keep no value model.
    assert load_config().algorithm.value_model == "none"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["algorithm.name=ppo", "algorithm.value_model=none"], "advantage_estimator='gae' needs a learned value"),
        (["algorithm.name=grpo", "algorithm.value_model=shared"], "set algorithm.value_model=none"),
        (["algorithm.name=ppo", "algorithm.value_model=critic"], "'critic' is not one of none, shared, separate"),
        (["algorithm.name=grpo", "algorithm.kl_in_reward=0.05"], "algorithm.kl_in_reward=0.05 needs a value model"),
        (["algorithm.name=grpo", "algorithm.value_warmup_iterations=2"], "value_warmup_iterations=2 needs a value"),
        (["algorithm.name=ppo", "algorithm.gae_lambda=1.5"], "algorithm.gae_lambda must be a finite number in [0, 1]"),
        (["algorithm.name=ppo", "algorithm.vf_coef=0"], "algorithm.vf_coef must be a finite number in (0, 10000]"),
        (["algorithm.name=ppo", "algorithm.value_clip=-0.1"], "algorithm.value_clip must be a finite number in [0, 1000000]"),
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
