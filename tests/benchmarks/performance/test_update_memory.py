"""benchmarks/performance/update_memory.py: a W2-shaped run on the tiny model marks every microbatch's forward with
the heap and RSS, and each `--leave-out` puts back what the memory change replaced."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.performance.update_memory import leave_out, parse_args, report, run


def _gsm8k(path):
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(12)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_run_marks_each_microbatch_forward(tiny_model_dir, tmp_path, monkeypatch):
    args = parse_args(["--gsm8k-path", str(_gsm8k(tmp_path / "train.jsonl")), "--model", str(tiny_model_dir),
                       "--max-new-tokens", "6", "--microbatch-tokens", "0", "--decode-dtype", "model",
                       "--base-product-dtype", "model", "--saved-tensors"])
    result = run(args, assign=monkeypatch.setattr)
    events = [mark["event"] for mark in result["microbatch_marks"]]
    assert events == ["forward start", "forward end"] * 4  # one group per microbatch, 4 groups
    assert all(mark["heap"] >= mark["in_use"] > 0 for mark in result["microbatch_marks"])
    assert result["peak_rss_bytes"] >= max(mark["rss"] for mark in result["microbatch_marks"]) > 0
    assert len(result["step_seconds"]) == 1 and result["rss_samples"]
    table = report(result)
    assert "leave out: nothing" in table and table.count("\n| ") == 5  # header and 4 forwards
    saved = result["saved_tensor_bytes"]
    assert saved and all(nbytes > 0 for nbytes in saved.values()) and "kept for the first" in table
    assert any(key.endswith("float32") for key in saved)


def test_saved_tensor_bytes_counts_each_storage_once():
    from benchmarks.performance.update_memory import saved_tensor_bytes

    x = torch.randn(4, 6, requires_grad=True)
    weight = torch.randn(6, 6, dtype=torch.float64)
    out, saved = saved_tensor_bytes(lambda: (x * x).sum() + (x.double() @ weight).sum())
    # x is kept twice by the product x * x: one storage, 96 bytes, not 192; the matmul keeps the weight
    # (288 bytes) for x's gradient, and not x.double(), as the weight needs no gradient.
    assert saved == {"6, float64": 6 * 6 * 8, "6, float32": 4 * 6 * 4}
    assert out.requires_grad


def test_leave_out_puts_back_each_replaced_piece(tiny_model_dir, monkeypatch):
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    from rlvr.models import LoraSettings, load_policy
    from rlvr.models.kernels import GQA_ATTENTION
    from rlvr.models.lora_mlp import _swiglu_lora_forward
    from rlvr.training.gradient_buffers import GradientBuffers

    def loaded_mlp_forward():
        policy = load_policy(tiny_model_dir, lora=LoraSettings(rank=4, alpha=8)).policy
        return getattr(vars(policy.get_base_model().model.layers[0].mlp)["forward"], "__func__", None)

    assert loaded_mlp_forward() is _swiglu_lora_forward
    assert ALL_MASK_ATTENTION_FUNCTIONS[GQA_ATTENTION] is not sdpa_mask
    with monkeypatch.context() as patch:
        leave_out(["mask", "mlp", "grad_buffers"], patch.setattr)
        assert loaded_mlp_forward() is not _swiglu_lora_forward
        assert ALL_MASK_ATTENTION_FUNCTIONS[GQA_ATTENTION] is sdpa_mask
        param = torch.zeros(2, requires_grad=True)
        buffers = GradientBuffers([param])
        buffers.allocate()
        assert param.grad is None
        buffers.close()
    assert loaded_mlp_forward() is _swiglu_lora_forward  # undone, and the next load registers the additive mask
    assert ALL_MASK_ATTENTION_FUNCTIONS[GQA_ATTENTION] is not sdpa_mask
    with pytest.raises(ValueError, match="valid: mask, mlp, grad_buffers"):
        leave_out(["masks"])
