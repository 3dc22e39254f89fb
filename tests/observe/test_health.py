"""Live health warnings: each check on synthetic metric streams just above and just below its
threshold, the once-per-streak printing, and the early stop on a tiny model run."""

from __future__ import annotations

import io

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, HealthConfig, load_config
from rlvr.observe.health import HEALTH_CHECKS, HealthMonitor
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

T = HealthConfig()  # window 3, truncation 0.5, zero variance 0.5, clip 0.3, kl 4 / 0.1, entropy 0.25 / any
W5 = HealthConfig(explained_variance_window=5)


def stream(key, values, **constant):
    return [{"iteration": i + 1, key: v, **constant} for i, v in enumerate(values)]


def fires(name, history, thresholds=T):
    return HEALTH_CHECKS.get(name)(history, thresholds) is not None


def test_truncation_fires_only_when_most_completions_are_cut_for_the_whole_window():
    assert fires("truncation", stream("truncated_frac", [0.51, 0.9, 0.51]))
    assert not fires("truncation", stream("truncated_frac", [0.9, 0.5, 0.9]))  # one at the threshold breaks it
    assert not fires("truncation", stream("truncated_frac", [0.49, 0.49, 0.49]))
    assert not fires("truncation", stream("truncated_frac", [1.0, 1.0]))  # shorter than the window
    warning = HEALTH_CHECKS.get("truncation")(stream("truncated_frac", [0.6, 0.7, 0.8]), T)
    assert "80%" in warning.message and "raise rollout.max_new_tokens" in warning.advice


def test_no_contrast_fires_only_when_most_groups_are_flat_for_the_whole_window():
    assert fires("no_contrast", stream("frac_no_contrast_groups", [0.75, 0.51, 1.0]))
    assert not fires("no_contrast", stream("frac_no_contrast_groups", [0.75, 0.5, 1.0]))
    assert not fires("no_contrast", stream("frac_no_contrast_groups", [0.49] * 5))
    warning = HEALTH_CHECKS.get("no_contrast")(stream("frac_no_contrast_groups", [1.0] * 3), T)
    assert "100%" in warning.message and "dapo" in warning.advice


def test_clip_fraction_adds_low_and_high():
    assert fires("clip_fraction", [{"clip_frac/low": 0.16, "clip_frac/high": 0.15}])  # 0.31
    assert not fires("clip_fraction", [{"clip_frac/low": 0.14, "clip_frac/high": 0.15}])  # 0.29
    assert not fires("clip_fraction", [{"clip_frac/low": 0.29}])
    assert not fires("clip_fraction", [{"clip_frac/low": 0.9}, {"clip_frac/low": 0.0, "clip_frac/high": 0.0}])


def test_kl_growth_needs_a_rising_window_and_the_threshold():
    assert fires("kl_growth", stream("kl", [0.02, 0.05, 0.08, 0.11]))
    assert not fires("kl_growth", stream("kl", [0.02, 0.05, 0.08, 0.09]))  # rising, below 0.1
    assert not fires("kl_growth", stream("kl", [0.02, 0.12, 0.11, 0.15]))  # above, but fell once
    assert not fires("kl_growth", stream("kl", [0.3, 0.4, 0.5]))  # window of 4 not yet filled
    assert fires("kl_growth", stream("kl", [0.9, 0.02, 0.05, 0.08, 0.11]))  # only the last 4 count


def test_value_not_learning_needs_the_whole_window_below_the_threshold():
    assert (T.explained_variance_min, T.explained_variance_window) == (0.0, 10)
    assert fires("value_not_learning", stream("value/explained_variance", [-0.001] * 10))
    assert not fires("value_not_learning", stream("value/explained_variance", [-0.001] * 9))

    def fires_w5(values):  # threshold 0 over 5 iterations
        return fires("value_not_learning", stream("value/explained_variance", values), W5)

    # Just below for all five fires; one just above (or at) the threshold breaks it.
    assert fires_w5([-0.5, -0.2, -0.01, -0.001, -0.001])
    assert not fires_w5([-0.5, -0.2, 0.001, -0.001, -0.001])
    assert not fires_w5([-0.5, -0.2, 0.0, -0.001, -0.001])
    assert not fires_w5([-0.9] * 4)  # window not filled
    assert not fires_w5([0.3] * 8)
    assert fires_w5([0.8, 0.9] + [-0.1] * 5)  # only the last 5 count
    # A group preset never writes the value metrics: nothing to warn about.
    assert not fires("value_not_learning", stream("kl", [0.0] * 12))
    # Quiet on a solved task (correct_frac >= solved_frac 0.9), whose returns hardly vary.
    assert not fires("value_not_learning", stream("value/explained_variance", [-0.5] * 10, correct_frac=0.9))
    assert fires("value_not_learning", stream("value/explained_variance", [-0.5] * 10, correct_frac=0.89))
    stricter = HealthConfig(explained_variance_min=0.5, explained_variance_window=2)
    assert fires("value_not_learning", stream("value/explained_variance", [0.49, 0.499]), stricter)
    assert not fires("value_not_learning", stream("value/explained_variance", [0.49, 0.501]), stricter)
    warning = HEALTH_CHECKS.get("value_not_learning")(stream("value/explained_variance", [-0.25] * 5), W5)
    assert "-0.250" in warning.message and "algorithm.vf_coef" in warning.advice


def test_nonfinite_fires_on_any_skipped_update():
    assert fires("nonfinite", [{"skipped_nonfinite_updates": 1}])
    assert not fires("nonfinite", [{"skipped_nonfinite_updates": 0}])
    assert not fires("nonfinite", [{"skipped_nonfinite_updates": 3}, {"skipped_nonfinite_updates": 0}])


def test_entropy_collapse_is_relative_to_the_running_maximum_at_any_iteration():
    assert fires("entropy_collapse", stream("entropy", [2.0, 1.0, 0.49]))  # 24.5% of 2.0
    assert not fires("entropy_collapse", stream("entropy", [2.0, 1.0, 0.51]))  # 25.5%
    late = stream("entropy", [2.0] * 10 + [0.1])  # iteration 11: the old rule looked at the first 10 only
    assert fires("entropy_collapse", late)
    assert not fires("entropy_collapse", late, HealthConfig(entropy_collapse_within=10))  # the old limit, on request
    # Rise then fall: 0.9 is above a quarter of the first value 1.0 but below a quarter of the peak 4.0.
    risen = stream("entropy", [1.0, 4.0, 0.9])
    assert fires("entropy_collapse", risen)
    assert 0.9 >= 0.25 * 1.0  # so a first-value baseline would stay quiet here


def test_monitor_prints_once_per_streak_and_records_active_warnings():
    out = io.StringIO()
    monitor = HealthMonitor(T, stream=out)
    values = [0.1, 0.9, 0.9, 0.9, 0.9, 0.1, 0.9, 0.9, 0.9]
    active = [monitor.observe({"iteration": i + 1, "truncated_frac": v}) for i, v in enumerate(values)]
    assert [("truncation" in a) for a in active] == [False, False, False, True, True, False, False, False, True]
    printed = out.getvalue().splitlines()
    assert len(printed) == 2  # iterations 4 and 9: two streaks, one line each
    assert printed[0].startswith("iteration 4: health warning [truncation]: 90% of completions")
    quiet = io.StringIO()
    HealthMonitor(T, is_main=False, stream=quiet).observe({"skipped_nonfinite_updates": 2})
    assert quiet.getvalue() == ""  # only the main process prints


def test_monitor_stop_rules_and_the_old_key():
    monitor = HealthMonitor(T, stop_on=["no_contrast"], stop_after=2, stream=io.StringIO())
    reasons = []
    for _ in range(5):
        monitor.observe({"frac_no_contrast_groups": 0.75})
        reasons.append(monitor.stop_reason())
    assert reasons[:3] == [None, None, None] and reasons[3] is not None  # warns at 3, stops at 4


def test_config_rejects_unknown_warning_names_and_bad_thresholds():
    with pytest.raises(ConfigError, match="valid choices: clip_fraction, entropy_collapse"):
        load_config(None, ["train.stop_on=[truncation, bogus]"])
    with pytest.raises(ConfigError, match="health.clip_frac"):
        load_config(None, ["health.clip_frac=1.5"])
    with pytest.raises(ConfigError, match="unknown config key 'health.nope'"):
        load_config(None, ["health.nope=1"])
    assert load_config(None, ["train.stop_on=truncation,no_contrast"]).train.stop_on == ["truncation", "no_contrast"]


def test_train_stops_early_on_a_persistent_warning(tiny_model_dir, tmp_path, capsys):
    # A random tiny model rarely emits EOS in 6 tokens: most completions are truncated every iteration.
    run_dir = tmp_path / "stop"
    common = {"model.lora_rank": 4, "model.lora_alpha": 8, "train.eval_size": 0, "train.iterations": 5,
              "health.window": 1, "train.stop_after": 2}
    assert main(["train", *tiny_overrides(tiny_model_dir, run_dir, **common, **{
        "train.stop_on": "[truncation]", "health.truncation_frac": 0.1})]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    assert all("truncation" in r["health/warnings"] and r["truncated_frac"] > 0.1 for r in records)
    captured = capsys.readouterr()
    assert "stopping: the truncation warning has been active for 2 iterations" in captured.out
    assert captured.err.count("health warning [truncation]") == 1
    # Same run with an unreachable threshold: no warning, no stop.
    control = tmp_path / "control"
    assert main(["train", *tiny_overrides(tiny_model_dir, control, **{
        **common, "train.iterations": 3, "train.stop_on": "[truncation]", "health.truncation_frac": 1.0})]) == 0
    records = read_jsonl(control / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2, 3]
    assert all(r["health/warnings"] == [] or "truncation" not in r["health/warnings"] for r in records)


def test_removed_stop_if_dead_for_names_its_replacement_which_stops_a_dead_run(tiny_model_dir, tmp_path, capsys):
    config_file = tmp_path / "old.yaml"
    config_file.write_text("train:\n  stop_if_dead_for: 2\n")
    assert main(["train", str(config_file)]) == 2
    err = capsys.readouterr().err
    assert "train.stop_if_dead_for' was removed: use train.stop_on: [no_contrast] with train.stop_after" in err
    # The replacement: format_copy on a random model gives every reward 0, so every group is flat.
    run_dir = tmp_path / "dead"
    assert main(["train", *tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "format_copy", "model.lora_rank": 4, "model.lora_alpha": 8, "train.eval_size": 0,
        "train.iterations": 5, "train.stop_on": "[no_contrast]", "health.window": 2, "train.stop_after": 1})]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["frac_no_contrast_groups"] for r in records] == [1.0, 1.0]


def _tool_records(calls, errors):
    """Per-iteration records of an environment offering `calculator` (and a `lookup` it always calls)."""
    return [{"iteration": i + 1, "episode/tool_calls/calculator": c, "episode/tool_errors/calculator": e,
             "episode/tool_calls/lookup": 1.0, "episode/tool_errors/lookup": 0.0}
            for i, (c, e) in enumerate(zip(calls, errors))]


def test_tool_unused_fires_when_an_offered_tool_was_never_called_for_the_window():
    assert fires("tool_unused", _tool_records([0, 0, 0], [0, 0, 0]))
    warning = HEALTH_CHECKS.get("tool_unused")(_tool_records([0, 0, 0], [0, 0, 0]), T)
    assert "calculator" in warning.message and "lookup" not in warning.message and "rlvr sft" in warning.advice
    assert not fires("tool_unused", _tool_records([0, 0.05, 0], [0, 0, 0]))  # one call in the window
    assert not fires("tool_unused", _tool_records([0, 0], [0, 0]))  # shorter than the window
    assert not fires("tool_unused", stream("episode/turns", [1, 1, 1]))  # an environment without tools


def test_tool_errors_fires_when_most_calls_of_a_tool_fail_every_iteration():
    assert fires("tool_errors", _tool_records([1.0, 2.0, 1.0], [0.6, 1.5, 0.9]))
    warning = HEALTH_CHECKS.get("tool_errors")(_tool_records([1.0, 2.0, 1.0], [0.6, 1.5, 0.9]), T)
    assert "calculator (90% of its calls)" in warning.message and "lookup" not in warning.message
    assert not fires("tool_errors", _tool_records([1.0, 2.0, 1.0], [0.6, 1.0, 0.9]))  # 50% is not most
    assert not fires("tool_errors", _tool_records([1.0, 0.0, 1.0], [0.6, 0.0, 0.9]))  # no calls: tool_unused's case
    assert not fires("tool_errors", _tool_records([1.0, 1.0, 1.0], [0.6, 0.6, 0.6]), HealthConfig(tool_error_frac=0.7))
