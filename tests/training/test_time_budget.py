"""train.time_budget_minutes: a run stops after the first iteration that ends past its budget, with the final
eval and a checkpoint there, and the seconds already spent carry over a resume."""

from __future__ import annotations

import torch

from rlvr.config import load_config
from rlvr.training.rl import TRAINING_SECONDS, resume, train
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides


def _state(run_dir, iteration: int) -> dict:
    path = run_dir / "checkpoints" / f"iter_{iteration:06d}" / "trainer_state.pt"
    return torch.load(path, weights_only=False)["state"]


def test_a_spent_budget_ends_the_run_with_its_final_eval_and_checkpoint(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "budget"
    config = load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 5, "train.eval_every": 0, "train.save_every": 100,
        "train.time_budget_minutes": 1e-6}))  # spent by the first iteration
    train(config)
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1]
    assert [r["iteration"] for r in read_jsonl(run_dir / "eval.jsonl")] == [0, 1]  # the final eval ran at 1
    assert _state(run_dir, 1)[TRAINING_SECONDS] > 0


def test_the_seconds_spent_carry_over_a_resume(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "carried"
    config = load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 2, "train.eval_size": 0, "train.save_every": 1}))
    train(config)
    spent = _state(run_dir, 2)[TRAINING_SECONDS]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert spent >= sum(r["time/iteration"] for r in records)  # every iteration's time, and the checkpoints
    # Resumed for 4 more iterations with a budget the first two already spent: it stops after one more.
    resume(run_dir, ["train.iterations=6", f"train.time_budget_minutes={spent / 60 * 0.999}"])
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert _state(run_dir, 3)[TRAINING_SECONDS] > spent
    # Without a budget it runs to train.iterations as before.
    resume(run_dir, ["train.iterations=4", "train.time_budget_minutes=null"])
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]


def test_a_run_resumed_past_its_budget_stops_after_one_iteration_however_short(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "spent"
    train(load_config(None, tiny_overrides(tiny_model_dir, run_dir, **{
        "train.iterations": 1, "train.eval_size": 0, "train.save_every": 1})))
    path = run_dir / "checkpoints" / "iter_000001" / "trainer_state.pt"
    saved = torch.load(path, weights_only=False)
    saved["state"][TRAINING_SECONDS] = 10**6  # as if a long run had spent 278 hours
    torch.save(saved, path)
    from rlvr.models.checkpoints.files import write_manifest

    write_manifest(path.parent, 1)  # the checkpoint's checksums cover the file: written again as the saver does
    resume(run_dir, ["train.iterations=5", "train.time_budget_minutes=100"])  # 6,000 s: far more than an iteration
    assert [r["iteration"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]
