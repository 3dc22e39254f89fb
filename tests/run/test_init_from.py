"""`model.init_from`: a run starts from another run's trained weights (SFT -> expert iteration -> RL).

The starting policy must be the earlier run's policy (not the base model), the reference policy of
the KL term must be it too, and a run built on another reads back (`rlvr eval --model RUN`,
`load_policy_from_run`) as the whole chain: earlier weights, then its own adapter."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.models import load_policy, load_policy_from_run, load_trainable, reference_context
from rlvr.models.export import export_run
from rlvr.models.checkpoints.run_policy import lora_settings_from_checkpoint, merged_model_from_run
from rlvr.testing import IM_END_TOKEN
from rlvr.run.setup import load_model_and_task
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

IDS = torch.tensor([[5, 9, 14, 3, 22, 7, 11, 2]])


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits.double()


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, tmp_path_factory):
    """A tiny LoRA SFT run whose weights moved well away from the base model."""
    folder = tmp_path_factory.mktemp("init")
    data = folder / "pairs.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}", "response": "abcabc" + IM_END_TOKEN}) + "\n"
                            for i in range(8)))
    run_dir = folder / "sft"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "sft.data_path": str(data), "sft.batch_size": 4, "sft.microbatch_size": 4, "sft.epochs": 3,
        "optim.lr": 5e-2, "model.lora_rank": 4, "model.lora_alpha": 8, "train.eval_size": 0})
    assert main(["sft", *overrides]) == 0
    return run_dir


def test_a_run_starts_from_the_earlier_runs_policy(tiny_model_dir, sft_run, tmp_path):
    base = logits(load_policy(str(tiny_model_dir)).policy)
    trained = logits(load_policy_from_run(sft_run).policy)
    assert (trained - base).abs().max() > 1e-2  # SFT moved the weights, so the checks below can fail
    config = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "rl", **{
        "model.init_from": str(sft_run), "model.lora_rank": 2, "model.lora_alpha": 4, "algorithm.kl_coef": 0.04}))
    loaded, _ = load_model_and_task(config, need_reference=True)
    torch.testing.assert_close(logits(loaded.policy), trained, rtol=0, atol=1e-5)  # fresh adapter: B = 0
    with reference_context(loaded) as reference:  # the KL anchor is the SFT policy, not the base model
        torch.testing.assert_close(logits(reference), trained, rtol=0, atol=1e-5)
    full = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "full", **{
        "model.init_from": str(sft_run), "model.lora": "false", "algorithm.kl_coef": 0.04}))
    loaded_full, _ = load_model_and_task(full, need_reference=True)
    torch.testing.assert_close(logits(loaded_full.policy), trained, rtol=0, atol=1e-5)
    torch.testing.assert_close(logits(loaded_full.reference), trained, rtol=0, atol=1e-5)


def test_a_chained_run_reads_back_with_the_earlier_weights(tiny_model_dir, sft_run, tmp_path):
    rl_dir = tmp_path / "rl"
    assert main(["train", *tiny_overrides(tiny_model_dir, rl_dir, **{
        "model.init_from": str(sft_run), "model.lora_rank": 2, "model.lora_alpha": 4, "train.iterations": 1,
        "train.eval_size": 0})]) == 0
    saved = load_config(rl_dir / "config.yaml")
    assert saved.model.init_from == str(sft_run.resolve())  # recorded absolute
    records = read_jsonl(rl_dir / "metrics.jsonl")
    assert records[0]["iteration"] == 1
    chained = logits(load_policy_from_run(rl_dir).policy)
    # By hand: the SFT weights merged, then the RL run's adapter on top.
    model_dir = sorted((rl_dir / "checkpoints").glob("iter_*"))[-1] / "model"
    by_hand = load_policy(str(tiny_model_dir), lora=lora_settings_from_checkpoint(model_dir),
                          initial_model=merged_model_from_run(sft_run))
    load_trainable(by_hand, model_dir)
    torch.testing.assert_close(chained, logits(by_hand.policy), rtol=0, atol=1e-6)
    # The same adapter on the bare base model is another policy: reading the run without its chain is wrong.
    bare = load_policy(str(tiny_model_dir), lora=lora_settings_from_checkpoint(model_dir))
    load_trainable(bare, model_dir)
    assert (logits(bare.policy) - chained).abs().max() > 1e-2
    with pytest.raises(ValueError, match="export with --merge"):
        export_run(rl_dir, tmp_path / "adapter")
    assert export_run(rl_dir, tmp_path / "merged", merge=True).mode == "merged"


def test_bad_init_from_fails_before_the_run_starts(tiny_model_dir, sft_run, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["train", *tiny_overrides(tiny_model_dir, tmp_path / "a", **{"model.init_from": str(missing)})]) != 0
    assert "nowhere is neither a run folder" in capsys.readouterr().err
    other = tmp_path / "other-model"
    other.symlink_to(tiny_model_dir)
    assert main(["train", *tiny_overrides(other, tmp_path / "b", **{"model.init_from": str(sft_run)})]) != 0
    assert f"was trained from model {str(tiny_model_dir)!r} but model.name is {str(other)!r}" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
