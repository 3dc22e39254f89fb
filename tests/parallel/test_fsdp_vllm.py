"""`rlvr train --num-processes 2` with `train.fsdp=true` and `rollout.backend=vllm`: each rank's engine samples
the policy's current weights (needs vLLM: `pytest -m vllm`).

Each of the two gloo ranks builds its own colocated engine (vLLM takes the launch's process group as
its world, one engine per rank). At every sync a rank gathers its sharded decoder layers whole and, for
LoRA, merges the adapter into them before the copy. The rewards of this run vary within groups
(DAPO's overlong penalty on completions cut by stop strings), so the first update moves the adapter:
an engine that got the bare base weights would score iteration 2's completions about a nat per token
away from the trainer; a synced one stays within float32 noise.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlvr.utils import read_jsonl
from tests.parallel.test_distributed_cli import REPO
from tests.rollout.engine_checks import save_head32_model

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_fsdp_ranks_engines_sample_the_updated_policy(tmp_path, lora):
    model_dir = save_head32_model(tmp_path / "model")
    run_dir = tmp_path / "run"
    overrides = [
        f"model.name={model_dir}", f"model.lora={str(lora).lower()}", "train.fsdp=true", "task.name=format_copy",
        "task.use_chat_template=false", f"train.output_dir={run_dir.parent}", f"train.run_name={run_dir.name}",
        "train.progress=false", "rollout.batch_size=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
        "train.eval_size=0", "optim.lr=1e-2", "algorithm.name=dapo", "algorithm.overlong_buffer=5",
        "rollout.stop_strings=[' ','e','a','o','1','2','3']", "train.iterations=2",
        "rollout.backend=vllm", "rollout.backend_options.max_model_len=128",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "rlvr", "train", "--num-processes", "2", *overrides], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("fsdp: 2 decoder layers sharded across 2 processes") == 1
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2] and records[0]["grad_norm"] > 0  # the first update moved
    for record in records:
        assert record["num_sequences"] == 8
        assert record["rollout/logprob_abs_diff_mean"] < 1e-4, record["iteration"]
        assert record["rollout/logprob_abs_diff_max"] < 1e-3, record["iteration"]
