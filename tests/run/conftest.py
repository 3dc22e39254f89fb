"""The tiny run the checkpoint tests start from (test_checkpoint.py, test_checkpoint_integrity.py): four
iterations with a LoRA adapter and checkpoints at iterations 2 and 4, trained once per test module that
asks for `reference_run`; each test copies it before changing anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlvr.cli import main
from tests.conftest import tiny_overrides

ITERATIONS = 4


def _overrides(model_dir, run_dir, **extra):
    return tiny_overrides(model_dir, run_dir, **{"train.iterations": ITERATIONS, "train.save_every": 2,
                                                 "train.keep_checkpoints": 5, "model.lora_rank": 4,
                                                 "model.lora_alpha": 8, "train.eval_size": 2, **extra})


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir, tmp_path_factory):
    """An uninterrupted run with checkpoints at iterations 2 and 4."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    assert main(["train", *_overrides(tiny_model_dir, run_dir)]) == 0
    return run_dir


def _copy(run_dir: Path, target: Path) -> Path:
    shutil.copytree(run_dir, target)
    return target
