"""A study's numbers on run folders written by hand (tests/report/study_runs.py): where a threshold is first
reached, the completions and seconds spent by then, the metric summaries and the pooled spread. Each expected
value is worked out in the comments, with what the plausible wrong version would give instead."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from rlvr.report.run_data import load_run
from rlvr.report.study_numbers import (
    Crossing,
    cumulative_completions,
    first_crossing,
    metric_stats,
    pool_condition,
    resume_iterations,
    run_numbers,
    spread,
)
from rlvr.report.study_spec import Threshold
from tests.report.study_runs import write_run

REWARD, ACCURACY = "reward/mean", "eval/accuracy"


def test_a_threshold_is_reached_at_the_first_iteration_that_meets_it_with_every_completion_through_it(tmp_path):
    # 2 prompts x 4 completions = 8 per iteration; reward/mean 0.1, 0.3, 0.5, 0.7. ">= 0.5" first holds at iteration
    # 3 (exactly 0.5: a strict ">" says 4), after 3 x 8 = 24 completions (iterations 1-3; leaving out the crossing
    # iteration gives 16, counting prompts instead of completions 6), at 30 s (its elapsed_s).
    run = load_run(write_run(tmp_path / "r", rewards=[0.1, 0.3, 0.5, 0.7]))
    crossing = first_crossing(run, Threshold(REWARD, 0.5))
    assert crossing == Crossing(True, 3, 24, 30.0)
    assert crossing.completions not in (16, 6) and crossing.iteration != 4
    assert first_crossing(run, Threshold(REWARD, 0.71)) == Crossing(False)  # never reached: no numbers at all
    assert cumulative_completions(run) == {0: 0, 1: 8, 2: 16, 3: 24, 4: 32}


def test_dynamic_sampling_counts_every_sampled_group_times_the_group_size(tmp_path):
    # DAPO sampled 4, 6 and 2 groups of 4 in iterations 1-3 and kept 2 groups each time (num_sequences 8).
    # reward/mean >= 0.5 first at iteration 2: (4 + 6) x 4 = 40 completions. The kept sequences alone give
    # 2 x 8 = 16; the sampled groups without the group size (prompts) 10.
    run = load_run(write_run(tmp_path / "dapo", algorithm="dapo", rewards=[0.2, 0.5, 0.6], sampled_groups=[4, 6, 2]))
    crossing = first_crossing(run, Threshold(REWARD, 0.5))
    assert crossing == Crossing(True, 2, 40, 20.0)
    assert crossing.completions not in (16, 10)
    assert cumulative_completions(run) == {0: 0, 1: 16, 2: 40, 3: 48}


def test_remax_adds_its_greedy_completion_per_prompt(tmp_path):
    # ReMax decodes one greedy completion per prompt besides the 2 x 4 sampled: 10 per iteration, 20 by iteration 2.
    run = load_run(write_run(tmp_path / "remax", algorithm="remax", rewards=[0.1, 0.6]))
    assert first_crossing(run, Threshold(REWARD, 0.5)) == Crossing(True, 2, 20, 20.0)


def test_an_eval_threshold_reads_eval_jsonl_with_step_zero(tmp_path):
    # Evals at iterations 0, 2, 4 (at 5, 25, 45 s): accuracy 0.5, 0.25, 0.75. ">= 0.5" holds at step 0, before any
    # completion was sampled; ">= 0.6" first at iteration 4, after 4 x 8 = 32 completions, at 45 s (the eval's own
    # elapsed_s, not the iteration's 40 s). metrics.jsonl has no step-0 eval: read there, 0.5 would be reached at 4.
    run = load_run(write_run(tmp_path / "r", rewards=[0.1] * 4, evals={0: 0.5, 2: 0.25, 4: 0.75}))
    assert first_crossing(run, Threshold(ACCURACY, 0.5)) == Crossing(True, 0, 0, 5.0)
    assert first_crossing(run, Threshold(ACCURACY, 0.6)) == Crossing(True, 4, 32, 45.0)


def test_a_resume_restarts_the_clock_and_the_seconds_are_added_up(tmp_path):
    # Resumed from the checkpoint of iteration 2: elapsed_s 10, 20, then 8, 16 (the clock starts again). The run's
    # seconds at iteration 4 are 20 + 16 = 36, not 16.
    folder = write_run(tmp_path / "r", rewards=[0.1, 0.2, 0.3, 0.6], elapsed=[10.0, 20.0, 8.0, 16.0], resumed_from=[2])
    run = load_run(folder)
    assert resume_iterations(folder) == (2,)
    assert first_crossing(run, Threshold(REWARD, 0.5), resume_iterations(folder)) == Crossing(True, 4, 32, 36.0)
    numbers = run_numbers(run, "r", "all", 0, 4, (REWARD,), (), 10, resume_iterations(folder))
    assert numbers.seconds == 36.0 and numbers.completions == 32 and numbers.finished


def test_metric_summaries_final_last_k_max_and_mean(tmp_path):
    run = load_run(write_run(tmp_path / "r", rewards=[0.1, 0.3, 0.5, 0.7, 0.5], evals={0: 0.2, 2: 0.4, 4: 0.9}))
    # reward/mean, last 2 iterations: final 0.5, (0.7 + 0.5) / 2 = 0.6, max 0.7, mean 2.1 / 5 = 0.42.
    stats = metric_stats(run, REWARD, last=2)
    assert (stats.final, stats.max, stats.points) == (0.5, 0.7, 5)
    assert stats.last_mean == pytest.approx(0.6) and stats.mean == pytest.approx(0.42)
    # eval/accuracy from eval.jsonl, over the last 3 iterations of its series (after 4 - 3 = 1: the evals at 2 and
    # 4): (0.4 + 0.9) / 2 = 0.65; the last 3 evals would give 0.5. Mean over all three, step 0 included: 0.5 (read
    # from metrics.jsonl, without step 0: 0.65).
    stats = metric_stats(run, ACCURACY, last=3)
    assert stats.last_mean == pytest.approx(0.65) and stats.mean == pytest.approx(0.5) and stats.final == 0.9
    assert metric_stats(run, "kl", last=3) is None  # never logged


def test_unreached_runs_are_counted_and_kept_out_of_the_means(tmp_path):
    thresholds = (Threshold(REWARD, 0.5),)
    runs = [write_run(tmp_path / "s0", seed=0, rewards=[0.1, 0.5, 0.6, 0.7]),   # reached at 2: 16 completions, 20 s
            write_run(tmp_path / "s1", seed=1, rewards=[0.1, 0.2, 0.3, 0.5]),   # reached at 4: 32 completions, 40 s
            write_run(tmp_path / "s2", seed=2, rewards=[0.1, 0.2, 0.3, 0.4])]   # never
    numbers = [run_numbers(load_run(f), f.name, "c", i, 4, (REWARD,), thresholds, 2) for i, f in enumerate(runs)]
    pool = pool_condition("c", numbers, ["s3"], (REWARD,), thresholds)
    reached = pool.thresholds[0]
    # Mean over the two that reached it: iteration (2 + 4) / 2 = 3, completions 24, seconds 30. Counting the
    # unreached run as 0 would give 2, 16 and 20.
    assert (reached.reached, reached.runs) == (2, 3)
    assert (reached.iteration.mean, reached.completions.mean, reached.seconds.mean) == (3.0, 24.0, 30.0)
    assert (reached.iteration.low, reached.iteration.high, reached.iteration.count) == (2.0, 4.0, 2)
    # The final reward over the three seeds, 0.7, 0.5, 0.4: mean 1.6 / 3, sample std sqrt(0.04667 / 2) = 0.15275.
    final = pool.metrics[REWARD]["final"]
    assert final.mean == pytest.approx(1.6 / 3) and (final.low, final.high, final.count) == (0.4, 0.7, 3)
    assert final.std == pytest.approx(0.15275, abs=1e-5)
    assert pool.missing == ("s3",) and pool.seeds == (0, 1, 2)
    assert spread([None, math.nan]).mean is None and spread([2.0]).std is None  # one run has no spread


def test_the_numbers_are_plain_json(tmp_path):
    run = load_run(write_run(tmp_path / "r", rewards=[0.1, 0.6], evals={0: 0.5}))
    numbers = run_numbers(run, "r", "all", 0, None, (REWARD, ACCURACY, "kl"), (Threshold(REWARD, 0.9),), 10)
    text = json.dumps(dataclasses.asdict(numbers), allow_nan=False)  # no NaN sneaks in
    assert json.loads(text)["crossings"] == [
        {"reached": False, "iteration": None, "completions": None, "seconds": None}]
    assert numbers.finished  # 2 of 2 planned iterations logged, though no sweep_done.json is given here
