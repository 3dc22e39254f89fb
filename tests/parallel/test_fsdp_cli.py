"""`accelerate launch --config_file configs/accelerate/fsdp.yaml -m rlvr train` on a tiny model, 2 CPU processes.

Full fine-tuning with a KL term, so both the policy and the frozen reference copy are sharded.
The run must finish, rank 0 alone must write a checkpoint in the one-process format (full
tensors), and a resume from the first checkpoint (launched with `rlvr train --num-processes 2`,
the saved config turning FSDP on) must reproduce the second one exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from rlvr.parallel.distributed import _free_port
from rlvr.utils import read_jsonl
from tests.parallel.test_distributed_cli import REPO, _rlvr, run_stopped_after


def _overrides(model_dir, run_dir) -> list[str]:
    return [
        f"model.name={model_dir}", "task.name=format_copy", "task.use_chat_template=false",
        f"train.output_dir={run_dir.parent}", f"train.run_name={run_dir.name}", "train.progress=false",
        "rollout.batch_size=2", "rollout.group_size=4", "rollout.max_new_tokens=6", "train.eval_size=3",
        "optim.lr=1e-2", "algorithm.name=dapo", "algorithm.overlong_buffer=5", "algorithm.kl_coef=0.05",
        "model.num_threads=1", "model.lora=false", "rollout.stop_strings=[' ','e','a','o','1','2','3']",
        "train.iterations=2", "train.save_every=1", "train.eval_every=1", "train.keep_checkpoints=5",
    ]


def _fsdp_launch(*rlvr_args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "configs" / "accelerate" / "fsdp.yaml"), "--num_processes", "2",
               "--main_process_port", str(_free_port()), "-m", "rlvr", *rlvr_args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_fsdp_launch_trains_writes_one_checkpoint_format_and_resumes(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    full = tmp_path / "full"
    done = _fsdp_launch("train", *_overrides(tiny_model_dir, full))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run folder:") == 1  # rank 0 alone prints and writes
    assert done.stdout.count("fsdp: 2 decoder layers sharded across 2 processes") == 1  # the launch turned FSDP on
    assert "fsdp: true" in (full / "config.yaml").read_text()  # recorded, so a --num-processes resume shards too
    records = read_jsonl(full / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    assert all(r["num_sequences"] == 8 and r["grad_norm"] > 0 and r["kl"] >= 0 for r in records)
    assert [r["eval/num_examples"] for r in read_jsonl(full / "eval.jsonl")] == [3, 3, 3]  # uneven shards
    checkpoint = full / "checkpoints" / "iter_000002"
    weights = load_file(checkpoint / "model" / "model.safetensors")
    assert weights["model.layers.0.self_attn.q_proj.weight"].shape == (32, 32)  # whole, not a shard
    optimizer = torch.load(checkpoint / "optimizer.pt", weights_only=False)
    assert all(type(v) is torch.Tensor for state in optimizer["state"].values() for v in state.values())

    part = run_stopped_after(full, tmp_path / "part", iteration=1, last=2)
    # Resumed through the other door: `--num-processes 2` (a DDP launch) with the saved `train.fsdp: true`.
    done = _rlvr("train", "--num-processes", "2", "--resume", str(part))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fsdp: 2 decoder layers sharded across 2 processes" in done.stdout
    resumed = read_jsonl(part / "metrics.jsonl")
    for key in ("reward/mean", "loss", "grad_norm", "kl", "completion_len/mean"):
        assert resumed[1][key] == pytest.approx(records[1][key], rel=1e-6, abs=1e-9), key
    resumed_weights = load_file(part / "checkpoints" / "iter_000002" / "model" / "model.safetensors")
    assert resumed_weights.keys() == weights.keys()
    for key, value in weights.items():
        assert torch.equal(resumed_weights[key], value), key
