"""Runs outside rlvr: `rlvr export` folders load in transformers / PEFT with rlvr's log-probs, and
`rlvr eval --model RUN_DIR` reads a run directly. Runs are 1-2 iterations of a tiny model on the
`char_count` task (rewards differ within each group, so the weights really move)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.cli import main
from rlvr.core import compute_per_token_logprobs
from rlvr.models import LoraSettings, load_policy, load_trainable, merged_adapter
from rlvr.models.checkpoints.run_policy import find_checkpoint, is_run_path, load_policy_from_run
from rlvr.models.checkpoints.weights import read_adapter_config
from rlvr.testing import TINY_CHAT_TEMPLATE
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

LORA = {"model.lora_rank": 4, "model.lora_alpha": 8}


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """A LoRA run with checkpoints after iterations 1 and 2, and a full fine-tuning run of 1 iteration."""
    root = tmp_path_factory.mktemp("runs")
    common = {"optim.lr": 0.05, "train.eval_every": 0, "train.eval_size": 2}
    assert main(["train", *tiny_overrides(tiny_model_dir, root / "lora", **common, **LORA, **{
        "train.iterations": 2, "train.save_every": 1, "train.keep_checkpoints": 3})]) == 0
    assert main(["train", *tiny_overrides(tiny_model_dir, root / "full", **common, **{
        "train.iterations": 1, "model.lora": "false"})]) == 0
    return {"lora": root / "lora", "full": root / "full"}


def _logprobs(model):
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(3, 64, (3, 12), generator=generator)  # [N, L]
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :5] = 0  # a left-padded row
    with torch.no_grad():
        return compute_per_token_logprobs(model.eval(), input_ids, attention_mask, enable_grad=False)  # [N, L-1]


def _rlvr_policy(run_dir, tiny_model_dir, checkpoint="iter_000002"):
    """The policy as `rlvr train --resume` rebuilds it (not through the code under test)."""
    kind = json.loads((run_dir / "checkpoints" / checkpoint / "model" / "trainable.json").read_text())["kind"]
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8) if kind == "lora" else None)
    load_trainable(loaded, run_dir / "checkpoints" / checkpoint / "model")
    return loaded.policy


@pytest.mark.parametrize("kind, merge, mode", [("lora", True, "merged"), ("lora", False, "adapter"),
                                               ("full", False, "full")])
def test_export_loads_in_transformers_with_rlvr_logprobs(runs, tiny_model_dir, tmp_path, capsys, kind, merge, mode):
    out = tmp_path / "export"
    assert main(["export", str(runs[kind]), "--out", str(out), *(["--merge"] if merge else [])]) == 0
    assert f"({mode})" in capsys.readouterr().out
    info = json.loads((out / "rlvr_export.json").read_text())
    assert info["mode"] == mode and info["base_model"] == str(tiny_model_dir)

    checkpoint = "iter_000002" if kind == "lora" else "iter_000001"
    policy = _rlvr_policy(runs[kind], tiny_model_dir, checkpoint)
    expected = _logprobs(policy)
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert (_logprobs(exported) - expected).abs().max() < 1e-5
    if mode == "merged":  # the same weights as the policy rlvr samples with (adapter merged): bit for bit
        with merged_adapter(policy):
            assert torch.equal(_logprobs(exported), _logprobs(policy))
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    assert (_logprobs(base) - expected).abs().max() > 0.1  # training moved the weights: the check is not vacuous

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.chat_template == TINY_CHAT_TEMPLATE and tokenizer.eos_token == "<|im_end|>"
    if mode == "adapter":
        from peft import PeftModel

        assert not (out / "config.json").exists()
        config = read_adapter_config(out)
        assert config["base_model_name_or_path"] == str(tiny_model_dir.resolve())
        assert config["target_modules"] == sorted(config["target_modules"]) and config["r"] == 4
        peft_model = PeftModel.from_pretrained(base, str(out))
        assert (_logprobs(peft_model) - expected).abs().max() < 1e-5
    else:
        assert {"config.json", "generation_config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
        assert not (out / "adapter_config.json").exists()
        assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == tokenizer.eos_token_id


def test_export_picks_a_checkpoint_and_lists_the_valid_ones(runs, tiny_model_dir, tmp_path, capsys):
    first, latest = tmp_path / "first", tmp_path / "latest"
    assert main(["export", str(runs["lora"]), "--checkpoint", "iter_1", "--out", str(first), "--merge"]) == 0
    assert main(["export", str(runs["lora"]), "--out", str(latest), "--merge"]) == 0
    first_logprobs = _logprobs(AutoModelForCausalLM.from_pretrained(str(first)))
    assert (first_logprobs - _logprobs(_rlvr_policy(runs["lora"], tiny_model_dir, "iter_000001"))).abs().max() < 1e-5
    assert (first_logprobs - _logprobs(AutoModelForCausalLM.from_pretrained(str(latest)))).abs().max() > 1e-3
    assert main(["export", str(runs["lora"]), "--checkpoint", "iter_7", "--out", str(tmp_path / "x")]) == 2
    assert "no checkpoint 'iter_7'; valid choices: iter_000001, iter_000002" in capsys.readouterr().err


def test_export_is_atomic_and_never_overwrites(runs, tmp_path, capsys, monkeypatch):
    import rlvr.models.export as export_module

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert main(["export", str(runs["full"]), "--out", str(taken)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash while writing")

    monkeypatch.setattr(export_module, "write_verified_model", crash)
    assert main(["export", str(runs["full"]), "--out", str(tmp_path / "new")]) == 130  # a stop, as Ctrl-C
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no output, no work folder left


def test_load_policy_from_run_accepts_run_checkpoint_and_model_folders(runs, tiny_model_dir):
    expected = _logprobs(_rlvr_policy(runs["lora"], tiny_model_dir))
    checkpoint = runs["lora"] / "checkpoints" / "iter_000002"
    for path in (runs["lora"], checkpoint, checkpoint / "model"):
        assert is_run_path(path)
        assert find_checkpoint(path).checkpoint_dir == checkpoint
        assert (_logprobs(load_policy_from_run(path).policy) - expected).abs().max() < 1e-5
    assert not is_run_path(tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="neither a run folder"):
        find_checkpoint(tiny_model_dir)


def test_a_checkpoint_with_the_old_string_target_modules_still_loads_and_resumes(runs, tiny_model_dir, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(runs["lora"], run)
    for config_path in run.glob("checkpoints/iter_*/model/adapter_config.json"):
        data = json.loads(config_path.read_text())
        data["target_modules"] = str(set(data["target_modules"]))  # what rlvr wrote before (json default=str)
        config_path.write_text(json.dumps(data, indent=2))
        (config_path.parents[1] / "manifest.json").unlink()  # checkpoints of that time had no manifest
    (run / "checkpoints" / "format.json").unlink()  # nor the record that the run writes them
    checkpoint = run / "checkpoints" / "iter_000002" / "model"
    assert isinstance(json.loads((checkpoint / "adapter_config.json").read_text())["target_modules"], str)
    assert read_adapter_config(checkpoint)["target_modules"] == sorted(LoraSettings().target_modules)
    expected = _logprobs(_rlvr_policy(runs["lora"], tiny_model_dir))
    assert (_logprobs(load_policy_from_run(run).policy) - expected).abs().max() < 1e-5
    assert main(["train", "--resume", str(run), "train.iterations=3"]) == 0
    assert [r["iteration"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    rewritten = json.loads((run / "checkpoints" / "iter_000003" / "model" / "adapter_config.json").read_text())
    assert isinstance(rewritten["target_modules"], list)


def test_rlvr_eval_reads_a_run_folder_like_its_export(runs, tmp_path):
    merged = tmp_path / "merged"
    assert main(["export", str(runs["lora"]), "--out", str(merged), "--merge"]) == 0
    completions = {}
    for label, model in (("run", runs["lora"]), ("checkpoint", runs["lora"] / "checkpoints" / "iter_000002"),
                         ("export", merged)):
        out = tmp_path / f"eval-{label}"
        assert main(["eval", "--task", "format_copy", "--model", str(model), "--limit", "3", "--max-new-tokens", "6",
                     "--temperature", "0", "--output", str(out)]) == 0
        completions[label] = [r["completion"] for r in read_jsonl(out / "generations.jsonl")]
    assert len(completions["run"]) == 3
    assert completions["run"] == completions["checkpoint"] == completions["export"]
