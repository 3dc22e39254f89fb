"""`rlvr train --num-processes 2` end to end on a tiny model: rank 0 alone writes, resume is exact.

The random tiny model never writes `<answer>` tags, so format_copy rewards come from DAPO's
overlong penalty; stop strings end completions at different lengths, which gives every group
reward contrast (and exercises dynamic sampling's cross-rank round count).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.utils import atomic_write_text, read_jsonl

REPO = Path(__file__).resolve().parents[2]


def _overrides(model_dir, run_dir, iterations: int) -> list[str]:
    return [
        f"model.name={model_dir}", "task.name=format_copy", "task.use_chat_template=false",
        f"train.output_dir={run_dir.parent}", f"train.run_name={run_dir.name}", "train.progress=false",
        "rollout.batch_size=2", "rollout.group_size=4", "rollout.max_new_tokens=6", "train.eval_size=4",
        "optim.lr=1e-2", "algorithm.name=dapo", "algorithm.overlong_buffer=5", "model.num_threads=1",
        "rollout.stop_strings=[' ','e','a','o','1','2','3']", f"train.iterations={iterations}",
        "train.save_every=2", "train.eval_every=2", "train.keep_checkpoints=5", "model.lora_rank=4",
        "model.lora_alpha=8", "train.samples_per_iteration=3",
    ]


def _rlvr(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rlvr", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def run_stopped_after(run_dir: Path, copy: Path, iteration: int, last: int) -> Path:
    """A copy of `run_dir` as if the run had stopped after checkpoint `iteration` (of `last`)."""
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / f"iter_{last:06d}")
    atomic_write_text(copy / "checkpoints" / "latest", f"iter_{iteration:06d}\n")
    return copy


def _lora_weights(checkpoint: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted((checkpoint / "model").rglob("*.safetensors"))
    assert files, f"no weights in {checkpoint}"
    return {f"{path.name}/{key}": value for path in files for key, value in load_file(path).items()}


@pytest.mark.slow
def test_two_process_train_writes_once_and_resumes_exactly(tiny_model_dir, tmp_path, capsys):
    full = tmp_path / "full"
    done = _rlvr("train", "--num-processes", "2", *_overrides(tiny_model_dir, full, 3))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run folder:") == 1  # one line, from rank 0
    records = read_jsonl(full / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2, 3]  # one line per iteration: no rank 1 copy
    evals = read_jsonl(full / "eval.jsonl")
    assert [r["iteration"] for r in evals] == [0, 2, 3]
    assert all(r["eval/num_examples"] == 4 for r in evals)  # both ranks' shards of the 4 examples
    assert len(read_jsonl(full / "samples.jsonl")) == 3 * 3
    for record in records:
        assert record["num_sequences"] == 8  # both ranks' groups: 2 prompts x 4 completions
        assert record["dynamic_sampling/sampled_groups"] >= 2  # counted over both ranks
        assert record["frac_no_contrast_groups"] < 1.0 and record["grad_norm"] > 0
        assert record["optimizer_steps"] == 2
    assert sorted(p.name for p in full.iterdir()) == ["checkpoints", "config.yaml", "eval.jsonl", "metrics.jsonl",
                                                      "samples.jsonl"]
    state = torch.load(full / "checkpoints" / "iter_000002" / "trainer_state.pt", weights_only=False)
    assert state["distributed"]["world_size"] == 2 and len(state["distributed"]["rng"]) == 2

    # Resume from the iteration-2 checkpoint as if the run had stopped there.
    part = run_stopped_after(full, tmp_path / "part", iteration=2, last=3)
    done = _rlvr("train", "--num-processes", "2", "--resume", str(part))
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = read_jsonl(part / "metrics.jsonl")
    assert [r["iteration"] for r in resumed] == [1, 2, 3]
    for key in ("reward/mean", "loss", "grad_norm", "entropy", "completion_len/mean", "policy_loss_per_token"):
        assert resumed[2][key] == pytest.approx(records[2][key], rel=1e-6, abs=1e-9), key
    full_weights = _lora_weights(full / "checkpoints" / "iter_000003")
    part_weights = _lora_weights(part / "checkpoints" / "iter_000003")
    assert full_weights.keys() == part_weights.keys()
    for key, value in full_weights.items():
        assert torch.equal(value, part_weights[key]), key

    # A different world size is refused with a clear message.
    assert main(["train", "--resume", str(part), "train.iterations=4"]) == 2
    assert "written by a run with 2 process(es)" in capsys.readouterr().err


def test_num_processes_must_divide_the_prompt_batch(tiny_model_dir, tmp_path, capsys):
    run_dir = tmp_path / "uneven"
    overrides = _overrides(tiny_model_dir, run_dir, 1) + ["rollout.batch_size=3"]
    assert main(["train", "--num-processes", "2", *overrides]) == 2
    assert "rollout.batch_size=3 prompts cannot be split evenly across 2 processes" in capsys.readouterr().err
    assert not run_dir.exists()
