"""The `http` judge against a real `vllm serve` of the embedded model (marked `vllm`: `./run test-vllm`).

The whole round trip: the judge task renders the rubric, sends chat-completions requests over loopback, reads
the replies, parses them strictly and caches them. The same model loaded in this process as the `local` judge
is the independent side: both are greedy in float32 under the model's own chat template, so each reply the
server gives must be the reply the local judge gives (a rubric garbled on the wire, another template, a
sampled reply or a reply read from the wrong field would differ). The server's request counter shows that a
repeated batch is answered from the cache without a request.
"""

from __future__ import annotations

import json
import math
import re
import urllib.request

import pytest

from rlvr.models.conversion import resolve_model_path
from rlvr.observe.rollout_stats import judge_stats
from rlvr.tasks import build_task
from rlvr.tasks.task import Example
from tests.vllm_serve import vllm_serve

SERVED = "smollm2-judge"
EMBEDDED = "smollm2-135m-instruct"
JUDGE_ONLY = {"answer": 0.0, "strict": 0.0, "format": 0.0, "judge": 1.0}
QUESTION = Example(prompt="What is 3 + 4?", ground_truth=7)
COMPLETIONS = ["7", "the answer is 7", "44", "it is seven, because three plus four is seven"]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    model_dir, _ = resolve_model_path(EMBEDDED)  # the embedded GGUF as a model folder (converted once, cached)
    log_path = tmp_path_factory.mktemp("judge_server") / "server.log"
    with vllm_serve(model_dir, SERVED, log_path, ["--max-model-len", "2048", "--no-enable-prefix-caching"]) as url:
        yield url


def _requests_served(url: str) -> float:
    """The server's count of finished requests (its Prometheus /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, flags=re.M)
    assert counts, "no vllm:request_success_total in /metrics"
    return sum(float(count) for count in counts)


def _http_judge(url: str, **options):
    options = {"backend": "http", "base_url": url + "/v1", "model": SERVED, "max_tokens": MAX_TOKENS,
               "timeout_seconds": 120, **options}
    return build_task("judge:integer", reward_weights=JUDGE_ONLY, options=options)


@pytest.mark.vllm
def test_the_served_judge_replies_as_the_same_model_loaded_locally(judge_server):
    served = _http_judge(judge_server)
    local = build_task("judge:integer", reward_weights=JUDGE_ONLY, options={
        "backend": "local", "model": EMBEDDED, "device": "cpu", "dtype": "float32", "max_tokens": MAX_TOKENS})
    contents = [served.rendered(completion, QUESTION) for completion in COMPLETIONS]
    assert contents == [local.rendered(completion, QUESTION) for completion in COMPLETIONS]
    over_http = served.judge_backend.reply(contents)
    in_process = local.judge_backend.reply(contents)
    assert all(reply.status == "ok" and reply.retries == 0 and reply.seconds > 0 for reply in over_http), over_http
    assert len({reply.text for reply in over_http}) > 1  # replies depend on the completion judged
    assert [reply.text.strip() for reply in over_http] == [reply.text.strip() for reply in in_process]


@pytest.mark.vllm
def test_verdicts_through_the_server_are_parsed_strictly_and_a_repeat_comes_from_the_cache(judge_server):
    task = _http_judge(judge_server)
    before = _requests_served(judge_server)
    examples = [QUESTION] * len(COMPLETIONS)
    first = task.score_batch(COMPLETIONS, examples)
    assert _requests_served(judge_server) - before == len(COMPLETIONS)
    for verdict in first:
        assert verdict.status in ("ok", "unjudgeable"), verdict  # whatever the 135M model wrote, never an error
        assert verdict.verifier.endswith(f"+judge:{SERVED}") or verdict.verifier == f"judge:{SERVED}"
        if verdict.status == "ok":
            assert 0.0 <= verdict.components["judge"] <= 1.0
        else:
            assert math.isnan(verdict.total) and verdict.judge_call.unparsed and verdict.detail.startswith("judge: ")
    stats = judge_stats(first)
    assert stats["judge/latency"] > 0 and stats["judge/retries"] == 0 and stats["judge/cache_hit_frac"] == 0.0
    second = task.score_batch(COMPLETIONS, examples)
    assert _requests_served(judge_server) - before == len(COMPLETIONS)  # no request: all four cached
    assert judge_stats(second)["judge/cache_hit_frac"] == 1.0
    assert [json.dumps(v.components, sort_keys=True) for v in second] == \
        [json.dumps(v.components, sort_keys=True) for v in first]
