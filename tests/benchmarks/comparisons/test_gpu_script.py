"""benchmarks/comparisons/gpu.sh --dry-run: the whole GPU benchmark path on the CPU, its found / skipped lines and
its table."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.rollout.vllm_backend import VLLMBackend

REPO = Path(__file__).resolve().parents[3]


def test_vllm_gpu_memory_share_is_checked():
    VLLMBackend.check_options({"gpu_memory_utilization": 0.3})
    VLLMBackend.check_options({"gpu_memory_utilization": 1})
    for bad in (0, 1.5, -0.1, True, "0.3"):
        with pytest.raises(ValueError, match="gpu_memory_utilization"):
            VLLMBackend.check_options({"gpu_memory_utilization": bad})


@pytest.mark.slow
def test_dry_run_prints_found_skipped_and_one_table(tmp_path):
    assert importlib.util.find_spec("vllm") is None, "this test expects the main environment, without vLLM"
    report = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHON": sys.executable, "RLVR_GPU_DRY_RUN": "1"}
    script = REPO / "benchmarks" / "comparisons" / "gpu.sh"
    done = subprocess.run(["bash", str(script), "--json", str(report)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()

    import torch
    import trl

    assert f"found torch: {torch.__version__}" in lines
    assert "found cuda: none" in lines
    assert "found vllm: missing" in lines
    assert f"found trl: {trl.__version__}" in lines
    skipped = sorted(line for line in lines if line.startswith("skipped "))
    assert skipped == sorted([
        "skipped rlvr vllm W1: needs vllm (missing)", "skipped rlvr vllm W2: needs vllm (missing)",
        "skipped trl vllm colocate W1: needs vllm (missing), CUDA (dry run on CPU)",
        "skipped trl vllm colocate W2: needs vllm (missing), CUDA (dry run on CPU)",
    ])
    assert not [line for line in lines if line.startswith("failed ")]

    table = [line for line in lines if line.startswith("|")]
    assert table[0] == ("| side | workload | s/step (median) | spread (min-max) | peak GPU memory (GiB) "
                        "| generation tokens/s |")
    assert table[1] == "|---|---|---|---|---|---|"
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in table[2:]]
    assert [(c[0], c[1]) for c in cells] == [("rlvr decode_loop", "W1"), ("trl generate", "W1"),
                                             ("rlvr decode_loop", "W2"), ("trl generate", "W2")]
    for side, workload, median, spread, peak, rate in cells:
        low, high = re.fullmatch(r"([\d.]+)-([\d.]+) \(1 steps\)", spread).groups()
        assert float(low) == float(median) == float(high) > 0  # one step: its own median and spread
        assert peak == "n/a (cpu)"
        assert float(rate) > 0

    # The table is the JSON's rows; each side generated within the dry run's budget (16 rows x 4 new
    # tokens at most: W1's own 24 or W2's 512 would allow far more).
    data = json.loads(report.read_text())
    assert data["dry_run"] is True and data["found"]["vllm"] is None and len(data["skipped"]) == 4
    for row, cell in zip(data["rows"], cells):
        assert f"{row['median_s']:.3f}" == cell[2]
        assert 0 < row["tokens_per_step"] <= 16 * 4
