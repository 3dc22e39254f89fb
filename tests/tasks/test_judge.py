"""The model judge (`task.name=judge:BASE`) against a loopback stub server that injects faults.

Each fault gets its own plan on `StubJudge`: a good reply, a slow one beyond the timeout, 429/503/500 with
and without Retry-After, malformed JSON, a reply without a score, a score out of range, a dropped
connection, a server that stops mid-batch, one that is down. Each test checks the verdict's status, that
no 0 is passed off as a judgment (NaN components), the `JudgeCall` counters, and a time bound. Timeouts
and backoffs are a few hundredths of a second, so the whole file runs in a few seconds.
"""

from __future__ import annotations

import math
import time

import pytest

from rlvr.observe.rollout_stats import judge_stats
from rlvr.rollout.sample import score_completions
from rlvr.tasks import build_task
from rlvr.tasks.task import Example, JudgeCall, Verdict
from rlvr.tasks.verification.judging import ScorerUnavailable, judge
from rlvr.tasks.verification.judge_stub import (Drop, Raw, Reply, Slow, Status, StopServer, StubJudge,
                                                 grade_by_integer)

SECRET = "sk-test-0123456789-secret"
QUESTION = Example(prompt="What is 3 + 4?", ground_truth=7)
JUDGE_ONLY = {"answer": 0.0, "strict": 0.0, "format": 0.0, "judge": 1.0}
FAST = {"timeout_seconds": 0.3, "max_retries": 2, "backoff_seconds": 0.01, "max_backoff_seconds": 1.0}


@pytest.fixture
def judge_env(monkeypatch):
    def make(stub_or_url, reward_weights=JUDGE_ONLY, **options):
        url = stub_or_url if isinstance(stub_or_url, str) else stub_or_url.base_url
        monkeypatch.setenv("RLVR_JUDGE_BASE_URL", url)
        monkeypatch.setenv("RLVR_JUDGE_MODEL", "stub-model")
        monkeypatch.setenv("RLVR_JUDGE_API_KEY", SECRET)
        return build_task("judge:integer", reward_weights=reward_weights, options={**FAST, **options})
    return make


def scored(task, completions, example=QUESTION):
    started = time.perf_counter()
    verdicts = task.score_batch(list(completions), [example] * len(completions))
    return verdicts, time.perf_counter() - started


def assert_no_judgment(verdict: Verdict, status: str):
    assert verdict.status == status, verdict
    assert math.isnan(verdict.total) and all(math.isnan(v) for v in verdict.components.values()), verdict
    assert verdict.detail.startswith("judge: ")


def test_a_good_reply_is_read_from_its_last_line_and_scaled(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub)
        verdicts, seconds = scored(task, ["7", "10", "0"])
    # the reply's first line mentions 1 or 2 characters and "3 words": a parser taking the first number gives 0.1-0.3
    assert [v.components["judge"] for v in verdicts] == [0.7, 1.0, 0.0]
    assert [v.total for v in verdicts] == [0.7, 1.0, 0.0]  # judge weight 1, the base's weights 0
    assert [v.status for v in verdicts] == ["ok"] * 3
    assert [v.correct for v in verdicts] == [False, True, False]  # correct_at 1.0: only the top score
    assert verdicts[0].verifier.endswith("+judge:stub-model") and verdicts[0].version.endswith(task.version)
    assert task.version == f"rubric-{task.rubric_hash}" and len(task.rubric_hash) == 12
    assert [v.judge_call.retries for v in verdicts] == [0, 0, 0] and not any(v.judge_call.cached for v in verdicts)
    assert stub.requests == 3 and seconds < 10  # bounded (a loaded machine is slow; a hang is not)


def test_the_judge_is_a_weighted_component_beside_the_base_tasks_own(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub, reward_weights={"judge": 0.5})  # integer's own: answer 1, strict 0.2, format 0
        (right, wrong), _ = scored(task, ["7", "4"])
    assert right.components["answer"] == 1.0 and right.components["judge"] == 0.7
    assert right.total == pytest.approx(1.0 + 0.2 * 1.0 + 0.5 * 0.7)
    assert wrong.total == pytest.approx(0.5 * 0.4) and wrong.correct is False and right.correct is True


@pytest.mark.parametrize("reply, reason", [
    ("The answer looks right to me.", "not 'Score"),
    ("Score: 7\nThanks!", "not 'Score"),  # the score must be the last line
    ("Score: 11", "outside [0, 10]"),
    ("Score: -1", "outside [0, 10]"),
    ("Score: seven", "not a number"),
    ("", "empty reply"),
])
def test_a_reply_without_a_strict_score_is_unjudgeable_not_zero(judge_env, reply, reason):
    with StubJudge(lambda answer, count: Reply(reply)) as stub:
        task = judge_env(stub)
        (verdict,), _ = scored(task, ["7"])
    assert_no_judgment(verdict, "unjudgeable")
    assert reason in verdict.detail and verdict.judge_call.unparsed and stub.requests == 1  # not retried
    assert judge_stats([verdict])["judge/unparsed_frac"] == 1.0


def test_pass_fail_scale(judge_env):
    plan = lambda answer, count: Reply({"7": "Score: PASS", "4": "**Score:** FAIL", "5": "Score: 1"}[answer])
    with StubJudge(plan) as stub:
        task = judge_env(stub, pass_fail=True)
        verdicts, _ = scored(task, ["7", "4", "5"])
    assert [v.components["judge"] for v in verdicts[:2]] == [1.0, 0.0] and verdicts[0].correct
    assert_no_judgment(verdicts[2], "unjudgeable")


def test_a_slow_judge_times_out_within_the_bound(judge_env):
    plan = lambda answer, count: Slow(2.0) if answer == "slow" else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, timeout_seconds=0.2, max_retries=1)
        (slow, good), seconds = scored(task, ["slow", "7"])
        assert stub.per_answer["slow"] == 2  # one try and one retry, no more
    assert_no_judgment(slow, "timeout")
    assert slow.judge_call.retries == 1 and good.status == "ok" and good.components["judge"] == 0.7
    assert seconds < 3.5  # 2 x 0.2 s and a 0.01 s backoff, not the server's 2 s per request (4 s)


@pytest.mark.parametrize("code", [429, 503])
def test_retry_after_is_honoured(judge_env, code):
    plan = lambda answer, count: Status(code, "0.4") if count == 0 else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub)  # backoff_seconds 0.01: only Retry-After makes it wait 0.4 s
        (verdict,), seconds = scored(task, ["7"])
    assert verdict.status == "ok" and verdict.components["judge"] == 0.7
    assert verdict.judge_call.retries == 1 and stub.requests == 2
    assert 0.4 <= seconds < 10 and verdict.judge_call.seconds >= 0.4


def test_retry_after_beyond_the_cap_waits_only_the_cap(judge_env):
    plan = lambda answer, count: Status(429, "3600") if count == 0 else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, max_backoff_seconds=0.2)
        (verdict,), seconds = scored(task, ["7"])
    assert verdict.status == "ok" and 0.2 <= seconds < 10  # the cap, not the hour asked for


def test_500_without_retry_after_backs_off_exponentially_and_gives_up(judge_env):
    plan = lambda answer, count: Status(500) if answer == "bad" else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, max_retries=3, backoff_seconds=0.05)
        (bad, good), seconds = scored(task, ["bad", "7"])
        assert stub.per_answer["bad"] == 4  # 1 + max_retries
    assert_no_judgment(bad, "error")
    assert "HTTP 500" in bad.detail and bad.judge_call.retries == 3 and good.status == "ok"
    assert 0.05 + 0.1 + 0.2 <= seconds < 10  # waits 0.05, 0.1, 0.2: exponential, not constant


def test_500_then_success_is_ok_with_its_retries_counted(judge_env):
    plan = lambda answer, count: Status(500) if count < 2 else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub)
        (verdict,), _ = scored(task, ["7"])
    assert verdict.status == "ok" and verdict.judge_call.retries == 2 and stub.requests == 3
    assert judge_stats([verdict])["judge/retries"] == 2


def test_a_client_error_is_not_retried(judge_env):
    plan = lambda answer, count: Status(401) if answer == "bad" else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub)
        (bad, good), _ = scored(task, ["bad", "7"])
        assert stub.per_answer["bad"] == 1
    assert_no_judgment(bad, "error")
    assert "HTTP 401" in bad.detail and "API key" in bad.detail and SECRET not in bad.detail


def test_malformed_json_is_an_error_not_retried(judge_env):
    plan = lambda answer, count: Raw(b"{not json") if answer == "bad" else Raw(b'{"choices": []}')
    with StubJudge(plan) as stub:
        task = judge_env(stub, on_judge_down="skip")
        (bad, empty), _ = scored(task, ["bad", "7"])
        assert stub.requests == 2
    assert_no_judgment(bad, "error")
    assert_no_judgment(empty, "error")
    assert "malformed" in bad.detail and "malformed" in empty.detail and not bad.judge_call.unparsed


def test_a_dropped_connection_is_retried_then_an_error(judge_env):
    plan = lambda answer, count: Drop() if answer == "drop" else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, max_retries=2)
        (dropped, good), seconds = scored(task, ["drop", "7"])
        assert stub.per_answer["drop"] == 3
    assert_no_judgment(dropped, "error")
    assert dropped.judge_call.retries == 2 and good.components["judge"] == 0.7 and seconds < 10


def test_a_server_that_stops_mid_batch_then_stops_the_run(judge_env):
    plan = lambda answer, count: StopServer() if answer == "3" else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, concurrency=1, max_retries=1)
        verdicts, seconds = scored(task, ["1", "2", "3", "4"])  # concurrency 1: sent in order
        assert [v.status for v in verdicts] == ["ok", "ok", "error", "error"]
        assert [v.components["judge"] for v in verdicts[:2]] == [0.1, 0.2]
        assert seconds < 10
        with pytest.raises(ScorerUnavailable) as raised:  # the next batch: every request fails
            scored(task, ["5", "6"])
    message = str(raised.value)
    assert stub.base_url + "/chat/completions" in message and "on_judge_down" in message and SECRET not in message


def test_a_judge_down_for_the_whole_batch_stops_the_run_unless_skipped(judge_env):
    with StubJudge() as stub:
        url = stub.base_url
    # the stub is stopped: nothing listens on its port any more
    task = judge_env(url, max_retries=1)
    with pytest.raises(ScorerUnavailable, match="RLVR_JUDGE_API_KEY"):  # through rlvr's one scoring path
        score_completions(task, ["7", "8"], [QUESTION, QUESTION])
    skipping = judge_env(url, max_retries=1, on_judge_down="skip")
    verdicts = score_completions(skipping, ["7", "8"], [QUESTION, QUESTION])
    for verdict in verdicts:
        assert_no_judgment(verdict, "error")
    assert not any(v.scorable for v in verdicts)  # left out of the advantages
    # one completion at a time through `judge` (a caller without the batch path): an error row, no raise
    assert judge(task, "7", QUESTION).status == "error"


def test_identical_requests_are_sent_once_and_then_cached(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub)
        first, _ = scored(task, ["7", "7", "3", "7"])
        assert stub.requests == 2  # "7" once, "3" once
        assert [v.judge_call.cached for v in first] == [False, True, False, True]
        assert judge_stats(first)["judge/cache_hit_frac"] == 0.5
        second, _ = scored(task, ["3", "7"])
        assert stub.requests == 2  # no request at all
        assert [v.components["judge"] for v in second] == [0.3, 0.7]
        assert judge_stats(second) == {"judge/latency": 0.0, "judge/retries": 0, "judge/cache_hit_frac": 1.0,
                                       "judge/unparsed_frac": 0.0}
        # the same completion to another question, or against another reference, is a new request
        scored(task, ["7"], Example(prompt="What is 3 + 4?", ground_truth=8))
        scored(task, ["7"], Example(prompt="What is 2 + 5?", ground_truth=7))
        assert stub.requests == 4


def test_failed_requests_are_not_cached(judge_env):
    plan = lambda answer, count: Status(500) if count == 0 else grade_by_integer(answer, count)
    with StubJudge(plan) as stub:
        task = judge_env(stub, max_retries=0, on_judge_down="skip")
        (failed,), _ = scored(task, ["7"])
        (retried,), _ = scored(task, ["7"])
    assert failed.status == "error" and retried.status == "ok" and stub.requests == 2


def test_the_cache_key_names_the_rubric_and_the_judge_model(judge_env, monkeypatch):
    with StubJudge() as stub:
        plain = judge_env(stub)
        other_rubric = judge_env(stub, rubric="Grade it.\n<answer>\n{completion}\n</answer>\nEnd with Score: N")
        other_scale = judge_env(stub, score_range=[0, 100])
        monkeypatch.setenv("RLVR_JUDGE_MODEL", "another-model")
        other_model = build_task("judge:integer", reward_weights=JUDGE_ONLY, options=FAST)
    keys = [task.request_key("7", QUESTION) for task in (plain, other_rubric, other_scale, other_model)]
    assert len(set(keys)) == 4
    other_reference = Example(prompt=QUESTION.prompt, ground_truth=8)
    assert plain.request_key("7", other_reference) != keys[0] != plain.request_key("8", QUESTION)
    assert plain.request_key("7", Example(prompt=QUESTION.prompt, ground_truth=7)) == keys[0]
    assert plain.rubric_hash != other_rubric.rubric_hash != other_scale.rubric_hash
    assert other_model.verifier == "judge:another-model"


def test_the_cache_is_bounded(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub, cache_size=2)
        scored(task, ["1", "2", "3"])
        assert len(task.cache) == 2
        scored(task, ["1"])  # the oldest was evicted: asked again
        assert stub.requests == 4


def test_concurrent_requests_stay_within_the_limit(judge_env):
    # Each reply takes 0.5 s, long enough for three requests to overlap on a loaded machine; no wall-clock
    # assertion (the stub's own count of requests in flight is the evidence of concurrency).
    plan = lambda answer, count: Slow(0.5, f"Score: {answer}")
    with StubJudge(plan) as stub:
        task = judge_env(stub, concurrency=3, timeout_seconds=5)
        verdicts, _ = scored(task, [str(i) for i in range(9)])
    assert stub.max_running == 3  # concurrent (not 1) and never above the limit (not 9)
    assert [v.components["judge"] for v in verdicts] == [i / 10 for i in range(9)]  # rows kept in order


def test_the_api_key_is_sent_but_never_shown(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub)
        verdicts, _ = scored(task, ["7"])
    assert stub.authorization == [f"Bearer {SECRET}"]
    assert task.endpoint.api_key == SECRET  # held, to be sent
    for shown in (repr(task), repr(task.endpoint), str(vars(task)), repr(verdicts)):
        assert SECRET not in shown
    assert stub.bodies[0]["model"] == "stub-model" and stub.bodies[0]["temperature"] == 0.0


def test_the_rubric_is_filled_in_one_pass(judge_env):
    with StubJudge() as stub:
        task = judge_env(stub)
    text = task.rendered("my answer is {reference} and {question}", QUESTION)
    assert "my answer is {reference} and {question}" in text  # the completion's braces are not filled
    assert "What is 3 + 4?" in text and "\n7\n" in text and "a number from 0 (worst) to 10 (best)" in text


@pytest.mark.parametrize("options, message", [
    ({"rubric": "no placeholder"}, "{completion}"),
    ({"score_range": [10, 0]}, "low < high"),
    ({"on_judge_down": "ignore"}, "valid choices: stop, skip"),
    ({"concurrency": 0}, "concurrency"),
    ({"api_key": "x"}, "api_key"),
])
def test_bad_options_fail_when_the_task_is_built(judge_env, options, message):
    with pytest.raises(ValueError) as raised:
        judge_env("http://127.0.0.1:9/v1", **options)
    assert message in str(raised.value)


def test_no_url_names_the_variable(monkeypatch):
    monkeypatch.delenv("RLVR_JUDGE_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="RLVR_JUDGE_BASE_URL"):
        build_task("judge:integer", options={"model": "m"})
    with pytest.raises(ValueError, match="judge:BASE"):
        build_task("judge", options={"base_url": "http://127.0.0.1:9/v1", "model": "m"})


def test_judge_stats_by_hand():
    def verdict(call):
        return Verdict(components={"judge": 0.5}, total=0.5, status="ok", verifier="j", version="1", judge_call=call)
    calls = [JudgeCall(0.2, 1, False, False), JudgeCall(0.4, 0, False, True), JudgeCall(0.0, 0, True, False),
             None]  # the last verdict is not a judge's: left out
    stats = judge_stats([verdict(call) for call in calls])
    # latency over the two requests sent (0.3), not over the three judged rows (0.2)
    assert stats == {"judge/latency": pytest.approx(0.3), "judge/retries": 1,
                     "judge/cache_hit_frac": pytest.approx(1 / 3), "judge/unparsed_frac": pytest.approx(1 / 3)}
    assert judge_stats([verdict(None)]) == {}


class BatchTask:
    """A task with its own score_batch that misbehaves as told."""

    name = "batchy"
    component_names = ("x",)
    stop_strings = ()

    def __init__(self, behaviour):
        self.behaviour = behaviour

    def score(self, completion, example):
        return Verdict(components={"x": 1.0}, total=1.0, status="ok", verifier="one", version="1")

    def score_batch(self, completions, examples):
        return self.behaviour(completions)


def good(value):
    return Verdict(components={"x": value}, total=value, status="ok", verifier="batch", version="1")


@pytest.mark.parametrize("behaviour, detail", [
    (lambda completions: [good(0.5) for _ in completions], None),
    (lambda completions: 1 / 0, "raised ZeroDivisionError"),
    (lambda completions: [good(0.5)], "returned 1 verdicts for 3 completions"),
    (lambda completions: [good(0.5), good(math.inf), "x"], "beyond the limit"),
])
def test_score_completions_guards_a_batch_scorer(behaviour, detail):
    verdicts = score_completions(BatchTask(behaviour), ["a", "b", "c"], [QUESTION] * 3)
    assert len(verdicts) == 3
    if detail is None:
        assert [v.verifier for v in verdicts] == ["batch"] * 3  # the batch path, not score one by one
        return
    bad = [v for v in verdicts if v.status == "error"]
    assert bad and all(math.isnan(v.total) for v in bad) and any(detail in v.detail for v in bad)
