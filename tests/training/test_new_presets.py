"""Each preset added with the 2025-26 losses and estimators trains two iterations end to end on the
default task with a tiny random model, and every metric its loss returns reaches metrics.jsonl.
"""

from __future__ import annotations

import math

import pytest

from rlvr.cli import main
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

# preset -> the loss's own metric (policy_loss/<name>) that must reach the records, or None.
NEW_PRESETS = {
    "cispo": "policy_loss/clipped",
    "sapo": None,
    "gmpo": "policy_loss/clipped",
    "gpg": None,
    "clip_cov": "policy_loss/cov_clipped",
    "kl_cov": "policy_loss/kl_penalized",
    "dual_clip": "policy_loss/dual_clipped",
    "reinforce_plus_plus": None,
    "reinforce_plus_plus_baseline": None,
    "remax": None,
    "opo": None,
    "grpo_passk": None,
}


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(NEW_PRESETS))
def test_new_preset_trains_two_iterations(tiny_model_dir, tmp_path, preset):
    run_dir = tmp_path / preset
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "format_copy", "algorithm.name": preset,
        "train.iterations": 2, "train.eval_size": 0, "model.lora_rank": 4, "model.lora_alpha": 8,
    })
    assert main(["train", *overrides]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["loss"]) and math.isfinite(record["policy_loss_per_token"])
        assert record["skipped_nonfinite_updates"] == 0
        assert "policy_loss/clipped" in record  # every loss's union clip flag is logged now
        own = NEW_PRESETS[preset]
        if own is not None:
            assert own in record and 0.0 <= record[own] <= 1.0, own


@pytest.mark.slow
def test_top_entropy_selection_trains_and_logs_its_share(tiny_model_dir, tmp_path):
    """grpo (2 epochs) with entropy_top_fraction 0.2 and an entropy bonus: later epochs need entropies too."""
    run_dir = tmp_path / "top_entropy"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "format_copy", "algorithm.name": "grpo", "algorithm.entropy_top_fraction": 0.2,
        "algorithm.entropy_coef": 0.01, "train.iterations": 2, "train.eval_size": 0, "model.lora_rank": 4,
        "model.lora_alpha": 8,
    })
    assert main(["train", *overrides]) == 0
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        assert record["optimizer_steps"] == 2
        # At least the top 20% (ties at the threshold are all kept), well short of every token.
        assert 0.2 <= record["entropy/selected_frac"] < 0.5
