"""`judge`: a raising `score` and absurd or infinite rewards become `error` verdicts and the run goes on."""

import math
import os
import signal
import threading
import time

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.tasks import TASKS, build_task
from rlvr.tasks.task import Example, Verdict
from rlvr.utils import read_jsonl
from tests.conftest import CharCountTask, tiny_overrides


class VerifierQuit(BaseException):
    """A custom BaseException, as a library might define one."""


RAISED = {"exit": SystemExit(3), "keyboard": KeyboardInterrupt("pressed by the verifier"),
          "custom": VerifierQuit("the verifier gave up"), "generator": GeneratorExit()}


class ScriptedTask:
    """The completion says what `score` does: a number becomes the total, `raise` raises."""

    name = "scripted_reward"
    component_names = ("value", "side")

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0):
        pass

    def examples(self, split, count, seed):
        return [Example(prompt="p", ground_truth="") for _ in range(count)]

    def score(self, completion, example):
        if completion == "raise":
            raise ZeroDivisionError("division by zero in the verifier")
        if completion in RAISED:
            raise RAISED[completion]
        if completion == "ctrl-c":  # a real SIGINT, delivered to this (the main) thread while score runs
            signal.raise_signal(signal.SIGINT)
            time.sleep(1.0)  # the handler runs at the next bytecode, well inside this second
        if completion == "ctrl-c from another thread":
            threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT)).start()  # as a terminal does
            time.sleep(5.0)
        if completion == "not a verdict":
            return 1.0
        value, _, side = completion.partition(" side=")
        components = {"value": float(value), "side": float(side or 0.0)}
        return Verdict(components=components, total=float(value), status="ok", verifier="scripted", version="1",
                       correct=True)


class FaultyCharCount(CharCountTask):
    """char_count whose verifier raises on every third call (SystemExit on every sixth) and returns
    1e38 on the next."""

    calls = 0

    def score(self, completion, example):
        FaultyCharCount.calls += 1
        if FaultyCharCount.calls % 6 == 0:
            raise SystemExit(3)  # from user code: contained like any exception
        if FaultyCharCount.calls % 3 == 0:
            raise RuntimeError("verifier bug")
        verdict = super().score(completion, example)
        if FaultyCharCount.calls % 3 == 1:
            verdict.total = 1e38
        return verdict


for family, factory in (("scripted_reward", ScriptedTask), ("faulty_char_count", FaultyCharCount)):
    if family not in TASKS:
        TASKS.add(family, factory)


@pytest.fixture(scope="module")
def task():
    return build_task("scripted_reward")


def judged(task, completion, **kwargs):
    from rlvr.tasks.verification.judging import judge

    return judge(task, completion, Example(prompt="p", ground_truth=""), **kwargs)


def test_a_raising_score_is_an_error_verdict(task):
    verdict = judged(task, "raise")
    assert verdict.status == "error" and not verdict.correct
    assert "ZeroDivisionError: division by zero in the verifier" in verdict.detail
    assert math.isnan(verdict.total) and not verdict.scorable
    assert set(verdict.components) == {"value", "side"} and all(math.isnan(v) for v in verdict.components.values())


@pytest.fixture
def sigint_handler_restored():
    """The tests below let `judge` wrap the SIGINT handler; it is put back afterwards. They start from Python's
    own handler: a process started in the background by a shell without job control inherits SIGINT ignored."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


WHERE = "(tests.tasks.test_judging.ScriptedTask.score)"


def test_a_score_raising_system_exit_is_an_error_verdict_naming_the_function(task, sigint_handler_restored):
    verdict = judged(task, "exit")
    assert verdict.status == "error" and math.isnan(verdict.total)
    assert verdict.detail.startswith(f"score of task 'scripted_reward' {WHERE} raised SystemExit: 3 "
                                     "(at test_judging.py:")


def test_a_custom_base_exception_and_generator_exit_are_contained(task, sigint_handler_restored):
    custom = judged(task, "custom")
    assert custom.status == "error"
    assert f"{WHERE} raised VerifierQuit: the verifier gave up" in custom.detail
    generator = judged(task, "generator")
    assert generator.status == "error" and f"{WHERE} raised GeneratorExit (at " in generator.detail


def test_a_keyboard_interrupt_raised_by_score_itself_is_contained(task, sigint_handler_restored):
    verdict = judged(task, "keyboard")
    assert verdict.status == "error" and "raised KeyboardInterrupt: pressed by the verifier" in verdict.detail
    assert judged(task, "0.5").status == "ok"  # and the next completion is judged as usual


def test_a_real_ctrl_c_during_score_still_stops_the_run(task, sigint_handler_restored):
    with pytest.raises(KeyboardInterrupt):
        judged(task, "ctrl-c")
    assert judged(task, "keyboard").status == "error"  # the delivery was counted once, not remembered


def test_a_real_ctrl_c_sent_to_the_process_still_stops_the_run(task, sigint_handler_restored):
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        judged(task, "ctrl-c from another thread")
    assert time.monotonic() - started < 4.0  # interrupted, not returned after the 5 s sleep


def test_a_keyboard_interrupt_in_a_thread_is_user_code(task, sigint_handler_restored):
    """Signals reach only the main thread: a KeyboardInterrupt in a scoring thread is the verifier's."""
    verdicts = []
    thread = threading.Thread(target=lambda: verdicts.append(judged(task, "keyboard")))
    thread.start()
    thread.join(30)
    assert verdicts and verdicts[0].status == "error" and "raised KeyboardInterrupt" in verdicts[0].detail


@pytest.mark.parametrize("completion, fine", [
    ("0.5", True),
    ("1e6", True),  # the limit itself is allowed
    ("-1e6", True),
    ("1000000.5", False),
    ("1e38", False),  # overflows a float32 sum of a group
    ("-1e38", False),
    ("inf", False),
    ("-inf", False),
    ("nan", True),  # NaN is how a task says "could not be judged"; it stays NaN
    ("0.5 side=inf", False),  # a component, even one that carries no weight
    ("0.5 side=2e6", False),
])
def test_absurd_rewards_are_errors(task, completion, fine):
    verdict = judged(task, completion)
    assert (verdict.status == "ok") is fine, (completion, verdict)
    if not fine:
        assert math.isnan(verdict.total) and "task.max_abs_reward" in verdict.detail
        assert all(math.isnan(v) for v in verdict.components.values())


def test_a_score_that_is_not_a_verdict_is_an_error(task):
    verdict = judged(task, "not a verdict")
    assert verdict.status == "error" and "float, not a Verdict" in verdict.detail


def test_the_limit_comes_from_the_task_or_the_call():
    strict = build_task("scripted_reward", max_abs_reward=10.0)
    assert judged(strict, "10").status == "ok"
    assert judged(strict, "11").status == "error"
    assert judged(strict, "11", max_abs_reward=100.0).status == "ok"


def test_max_abs_reward_is_a_config_key_that_must_be_positive():
    assert load_config(None, []).task.max_abs_reward == 1e6
    assert load_config(None, ["task.max_abs_reward=5"]).task.max_abs_reward == 5.0
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"task.max_abs_reward must be a finite number in \(0, 1e\+30\]"):
            load_config(None, [f"task.max_abs_reward={bad}"])


def test_training_goes_on_and_counts_verifier_errors(tiny_model_dir, tmp_path):
    """One iteration with a verifier that raises or answers 1e38 on two calls in three: the run
    finishes, those completions are counted as errors and unscorable, the reward stats stay sane."""
    run_dir = tmp_path / "faulty"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{"task.name": "faulty_char_count", "train.iterations": 1,
                                                           "model.lora_rank": 4, "model.lora_alpha": 8})
    assert main(["train", *overrides]) == 0
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["status/error"] >= 5  # of any 8 consecutive calls, 5 or 6 misbehave
    assert record["unscorable"] == record["status/error"]
    assert math.isfinite(record["reward/mean"]) and record["reward/max"] <= 1.0
    assert math.isfinite(record["advantage/abs_mean"])
