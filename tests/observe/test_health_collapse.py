"""The warnings for a collapsing run: `reward_divergence` (the total reward rises while the primary
component or eval accuracy falls), `identical_completions` (groups write one text) and
`entropy_collapse` (at any iteration, against the run's running maximum). Each is run on small
metrics.jsonl files written here, values just above and just below each threshold, and on two
recorded-like histories: GRPO on 10-99 addition that collapsed to one bare integer for every
prompt, and a healthy run that solves its task (where none of them may fire)."""

from __future__ import annotations

import io
import json

import pytest

from rlvr.config import HealthConfig, load_config
from rlvr.observe.health import HEALTH_CHECKS, HealthMonitor
from rlvr.observe.rollout_stats import distinct_completions_fraction
from rlvr.utils import read_jsonl

T = HealthConfig(primary_component="answer")  # divergence: window 6, rise 0.05, fall 0.03; distinct 0.3; solved 0.9
NEW_WARNINGS = ("reward_divergence", "identical_completions", "entropy_collapse")


def recorded(tmp_path, records: list[dict]) -> list[dict]:
    """Write the records as a run's metrics.jsonl and read them back, as a resumed run or a report would."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"iteration": i + 1, **r}) + "\n" for i, r in enumerate(records)))
    return read_jsonl(path)


def fires(name, history, thresholds=T):
    return HEALTH_CHECKS.get(name)(history, thresholds) is not None


def rewards(totals, answers, **extra):
    return [{"reward/mean": t, "reward/answer": a, **extra} for t, a in zip(totals, answers)]


# ----------------------------------------------------------------------------- reward_divergence


def test_divergence_needs_the_reward_to_rise_and_the_primary_to_fall(tmp_path):
    rising = [0.1, 0.1, 0.1, 0.16, 0.16, 0.16]  # half means 0.10 -> 0.16: rise 0.06 > 0.05
    assert fires("reward_divergence", recorded(tmp_path, rewards(rising, [0.1] * 3 + [0.06] * 3)))  # fall 0.04
    assert not fires("reward_divergence", recorded(tmp_path, rewards(rising, [0.1] * 3 + [0.08] * 3)))  # 0.02
    flatter = [0.1, 0.1, 0.1, 0.14, 0.14, 0.14]  # rise 0.04: quiet however far the answer falls
    assert not fires("reward_divergence", recorded(tmp_path, rewards(flatter, [0.1] * 3 + [0.0] * 3)))
    assert not fires("reward_divergence", recorded(tmp_path, rewards(rising[1:], [0.1] * 2 + [0.0] * 3)))  # < window
    # The primary component is a setting: with `format` primary, the same history is quiet.
    formats = [{"reward/format": 0.0}] * 3 + [{"reward/format": 0.3}] * 3
    history = [{**r, **f} for r, f in zip(rewards(rising, [0.1] * 3 + [0.06] * 3), formats)]
    assert not fires("reward_divergence", recorded(tmp_path, history), HealthConfig(primary_component="format"))


def test_divergence_on_eval_accuracy(tmp_path):
    rising = [0.1, 0.1, 0.1, 0.16, 0.16, 0.16]
    flat = [0.1] * 6  # the primary component does not move: only the evals can say it
    def with_evals(first, last):
        history = rewards(rising, flat)
        history[1]["eval/accuracy"], history[5]["eval/accuracy"] = first, last
        return history
    assert fires("reward_divergence", recorded(tmp_path, with_evals(0.10, 0.06)))  # fell 0.04
    assert not fires("reward_divergence", recorded(tmp_path, with_evals(0.10, 0.08)))  # fell 0.02
    # The eval just before the window is the baseline: 8 records, window = the last 6 (iterations 3-8).
    history = [{"reward/mean": 0.1, "reward/answer": 0.1, "eval/accuracy": 0.094}, {"reward/mean": 0.1,
               "reward/answer": 0.1}] + rewards(rising, flat)
    history[-1]["eval/accuracy"] = 0.0
    assert fires("reward_divergence", recorded(tmp_path, history))
    warning = HEALTH_CHECKS.get("reward_divergence")(history, T)
    assert "eval accuracy fell from 0.094 to 0.000" in warning.message and "reward/mean rose" in warning.message


# ----------------------------------------------------------------------------- identical_completions


def test_identical_completions_threshold_window_and_solved_tasks(tmp_path):
    def history(values, correct):
        return recorded(tmp_path, [{"distinct_completions_frac": v, "correct_frac": correct} for v in values])
    assert fires("identical_completions", history([0.25, 0.29, 0.125], 0.0))
    assert not fires("identical_completions", history([0.25, 0.31, 0.125], 0.0))  # one above 0.3 breaks the window
    assert not fires("identical_completions", history([0.125, 0.125], 0.0))  # shorter than the window (3)
    assert fires("identical_completions", history([0.125] * 3, 0.89))
    assert not fires("identical_completions", history([0.125] * 3, 0.9))  # solved: one right answer per prompt


def test_distinct_completions_fraction():
    # Two groups of 4: all different (4/4), and "109" three times with one " 109 " (whitespace) = 1/4.
    texts = ["59 + 63 = 122", "122", "121", "The sum is 122", "109", "109", "109", " 109 "]
    assert distinct_completions_fraction(texts, 4) == pytest.approx((1.0 + 0.25) / 2)
    assert distinct_completions_fraction(texts, 8) == pytest.approx(5 / 8)  # one group of 8: a wrong split differs
    assert distinct_completions_fraction(["a"] * 8, 8) == pytest.approx(1 / 8)


# ----------------------------------------------------------------------------- entropy_collapse


def test_entropy_collapse_stays_quiet_on_a_solved_task(tmp_path):
    def history(correct):
        return recorded(tmp_path, [{"entropy": 2.0, "correct_frac": 0.1}, {"entropy": 0.1, "correct_frac": correct}])
    assert fires("entropy_collapse", history(0.85))
    assert not fires("entropy_collapse", history(0.95))


# ----------------------------------------------------------------------------- whole runs


def collapsed_addition_run() -> list[dict]:
    """GRPO on 10-99 addition, format weight 0.2: reward 0.07 -> 0.2 while the answers went to 0, every
    prompt answered `109` (entropy 1.9 -> 0.14); greedy eval 9.4% at iteration 4, 0% at 8."""
    totals = [0.07, 0.08, 0.09, 0.10, 0.11, 0.15, 0.18, 0.19, 0.20, 0.20]
    answers = [0.07, 0.07, 0.06, 0.05, 0.03, 0.02, 0.01, 0.00, 0.00, 0.00]
    entropy = [1.9, 1.8, 1.6, 1.3, 0.9, 0.6, 0.4, 0.25, 0.18, 0.14]
    distinct = [0.95, 0.9, 0.8, 0.6, 0.45, 0.35, 0.25, 0.15, 0.125, 0.125]
    records = []
    for i in range(10):
        record = {"reward/mean": totals[i], "reward/answer": answers[i],
                  "reward/format": (totals[i] - answers[i]) / 0.2, "entropy": entropy[i],
                  "distinct_completions_frac": distinct[i], "correct_frac": answers[i]}
        if i + 1 in (4, 8):
            record["eval/accuracy"] = {4: 0.094, 8: 0.0}[i + 1]
        records.append(record)
    return records


def solving_run() -> list[dict]:
    """format_copy learning: the answer carries the reward up, entropy falls to 0.01 once it is solved."""
    answers = [0.05, 0.15, 0.4, 0.6, 0.8, 0.95, 1.0, 1.0, 1.0, 1.0]
    entropy = [1.6, 1.4, 1.0, 0.7, 0.5, 0.2, 0.05, 0.02, 0.01, 0.01]  # below 0.4 only once correct_frac >= 0.95
    distinct = [0.9, 0.8, 0.6, 0.4, 0.3, 0.2, 0.125, 0.125, 0.125, 0.125]
    return [{"reward/mean": 1.3 * a, "reward/answer": a, "entropy": e, "distinct_completions_frac": d,
             "correct_frac": a} for a, e, d in zip(answers, entropy, distinct)]


def active_per_iteration(history: list[dict]) -> list[list[str]]:
    config = load_config(None, ["task.name=integer"])
    monitor = HealthMonitor.from_config(config, task_components=("answer", "format", "strict"), task_primary="answer")
    monitor.stream = io.StringIO()
    return [[name for name in monitor.observe(record) if name in NEW_WARNINGS] for record in history]


def test_the_recorded_collapse_warns_and_a_solved_run_does_not(tmp_path):
    active = active_per_iteration(recorded(tmp_path, collapsed_addition_run()))
    first = {name: next(i + 1 for i, names in enumerate(active) if name in names) for name in NEW_WARNINGS}
    # Iteration 6: halves (0.07 0.08 0.09 | 0.10 0.11 0.15) rise 0.04, quiet; iteration 7: (0.08 0.09 0.10 |
    # 0.11 0.15 0.18) rise 0.057 while the answers' halves fall 0.06 -> 0.02. Entropy 0.4 < 0.25 * 1.9 at 7;
    # distinct below 0.3 for 3 iterations (0.25 0.15 0.125) at 9.
    assert first == {"reward_divergence": 7, "entropy_collapse": 7, "identical_completions": 9}
    assert active_per_iteration(recorded(tmp_path, solving_run())) == [[]] * 10


def test_monitor_takes_the_task_primary_and_refuses_an_unknown_one():
    config = load_config(None, ["task.name=integer"])
    monitor = HealthMonitor.from_config(config, task_components=("share",), task_primary="share")
    assert monitor.thresholds.primary_component == "share" and config.health.primary_component == ""
    chosen = load_config(None, ["task.name=integer", "health.primary_component=format"])
    monitor = HealthMonitor.from_config(chosen, task_components=("answer", "format"))
    assert monitor.thresholds.primary_component == "format"
    wrong = load_config(None, ["health.primary_component=answr"])
    with pytest.raises(ValueError, match="'answr' is not a component of task 'format_copy'; valid choices: answer"):
        HealthMonitor.from_config(wrong, task_components=("answer", "tag", "strict"))


def test_tasks_name_their_primary_component():
    from rlvr.tasks import build_task, check_task_interface
    from rlvr.tasks.task import Example, primary_component

    assert primary_component(build_task("integer")) == "answer"
    assert primary_component(build_task("format_copy")) == "answer"

    class Shares:  # no declaration and no `answer`: its first component
        name, component_names = "shares", ("share", "length")

    class Declared(Shares):
        primary_component = "length"

    class Wrong(Shares):
        primary_component = "answer"

        def examples(self, split, count, seed):
            return [Example(prompt="p", ground_truth="g")]

        def score(self, completion, example):
            raise NotImplementedError

        def iter_eval(self):
            return iter(())

    assert primary_component(Shares()) == "share" and primary_component(Declared()) == "length"
    with pytest.raises(ValueError, match="primary_component 'answer' is not one of its components"):
        primary_component(Wrong())
    with pytest.raises(ValueError, match=r"`primary_component` among its component_names \(got 'answer'\)"):
        check_task_interface(Wrong(), "my.py:Wrong")
