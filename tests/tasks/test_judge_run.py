"""A tiny `rlvr train` run whose reward is a model judge (a loopback stub): the judge/* metrics reach
metrics.jsonl, and the API key, sent on every request, is in no file of the run folder."""

from __future__ import annotations

import math

from rlvr.cli import main
from rlvr.observe.metric_names import JUDGE_CACHE_HIT_FRAC, JUDGE_LATENCY, JUDGE_RETRIES, JUDGE_UNPARSED_FRAC
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from rlvr.tasks.verification.judge_stub import Reply, StubJudge

SECRET = "sk-run-folder-secret-42"


def test_a_judged_run_writes_judge_metrics_and_never_the_key(tiny_model_dir, tmp_path, monkeypatch):
    # The stub's rule: score = number of 'a' in the completion (0..10), so rewards vary within a group.
    plan = lambda answer, count: Reply(f"Counting.\nScore: {min(answer.count('a'), 10)}")
    with StubJudge(plan) as stub:
        monkeypatch.setenv("RLVR_JUDGE_BASE_URL", stub.base_url)
        monkeypatch.setenv("RLVR_JUDGE_MODEL", "stub-model")
        monkeypatch.setenv("RLVR_JUDGE_API_KEY", SECRET)
        run_dir = tmp_path / "judged"
        overrides = tiny_overrides(tiny_model_dir, run_dir, **{
            "task.name": "judge:char_count", "task.reward_weights.share": 0, "train.iterations": 2,
            "train.eval_size": 2, "model.lora_rank": 4, "model.lora_alpha": 8, "task.options.timeout_seconds": 5})
        assert main(["train", *overrides]) == 0
        requests = stub.requests
    assert requests > 0 and set(stub.authorization) == {f"Bearer {SECRET}"}
    records = read_jsonl(run_dir / "metrics.jsonl")
    for record in records:
        for name in (JUDGE_LATENCY, JUDGE_RETRIES, JUDGE_CACHE_HIT_FRAC, JUDGE_UNPARSED_FRAC):
            assert name in record and math.isfinite(record[name]), name
        assert record[JUDGE_UNPARSED_FRAC] == 0.0 and record[JUDGE_RETRIES] == 0
        assert record["status/error"] == 0
    files = [path for path in run_dir.rglob("*") if path.is_file()]
    assert any(path.name == "config.yaml" for path in files)
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
