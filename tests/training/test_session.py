"""The run session shared by RL, SFT and expert iteration: folder naming and the exists check, what
each loop loads (SFT and expert iteration no reference model), each loop's own schedule length,
and an in-training eval that samples with the rollout config (stop strings, adapter merge).
"""

from __future__ import annotations

import re

import pytest

import rlvr.run.setup as run_setup_module
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.models import load_policy
from rlvr.training.evaluation import eval_settings
from rlvr.run.setup import rollout_backend
from rlvr.training.session import EXPERT_ITERATION_RUN, RL_RUN, SFT_RUN, open_run, run_stem
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides
from tests.training.test_sft import _sft_overrides, _write_data


@pytest.fixture
def reference_requests(monkeypatch) -> list[bool]:
    """`need_reference` of every model the run session loads, in order."""
    asked = []

    def recording_load_policy(*args, **kwargs):
        asked.append(kwargs["need_reference"])
        return load_policy(*args, **kwargs)

    monkeypatch.setattr(run_setup_module, "load_policy", recording_load_policy)
    return asked


def test_run_folders_are_named_per_loop(tiny_model_dir, tmp_path):
    config = load_config(None, [f"train.output_dir={tmp_path}", "task.name=reasoning_gym:spell_backward"])
    stems = {kind.name: run_stem(config, kind) for kind in (RL_RUN, SFT_RUN, EXPERT_ITERATION_RUN)}
    assert stems == {"rl": "reasoning_gym_spell_backward-grpo", "sft": "sft-reasoning_gym_spell_backward",
                     "expert_iteration": "ei-reasoning_gym_spell_backward"}
    # A default-named new run: <stem>-<time>-<suffix>, locked until the session closes.
    data = _write_data(tmp_path / "pairs.jsonl", count=2)  # an SFT run's memory check sizes its pairs
    config = load_config(None, _sft_overrides(tiny_model_dir, tmp_path / "unused", data, **{"train.run_name": ""}))
    with open_run(config, SFT_RUN) as session:
        assert re.fullmatch(r"sft-char_count-\d{8}-\d{6}-[0-9a-f]{4}", session.run_dir.name)
        assert (session.run_dir / "config.yaml").exists() and session.folder.lock is not None
        with pytest.raises(Exception, match="in use|held|busy|lock"):
            open_run(config, SFT_RUN, resume_dir=session.run_dir)
    assert session.folder.lock._fd is None  # released on close


@pytest.mark.parametrize("kind, hint", [(RL_RUN, "--resume"), (EXPERT_ITERATION_RUN, "delete it")])
def test_an_existing_run_is_never_overwritten(tiny_model_dir, tmp_path, kind, hint):
    run_dir = tmp_path / "taken"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"iteration": 1}\n')
    config = load_config(None, tiny_overrides(tiny_model_dir, run_dir))
    with pytest.raises(FileExistsError, match=hint):
        open_run(config, kind)
    assert read_jsonl(run_dir / "metrics.jsonl") == [{"iteration": 1}]


def test_sft_loads_no_reference_and_sizes_its_own_schedule(tiny_model_dir, tmp_path, reference_requests):
    data = _write_data(tmp_path / "pairs.jsonl", count=8)  # 9 rows: 2 full steps and one of 1 per epoch
    run_dir = tmp_path / "sft"
    overrides = _sft_overrides(tiny_model_dir, run_dir, data, **{
        "sft.epochs": 2, "optim.warmup_steps": 0, "optim.schedule": "linear", "optim.lr": 0.01,
        # Full fine-tuning with a KL coefficient: RL would keep a frozen copy; SFT has no use for one.
        "model.lora": "false", "algorithm.kl_coef": 0.04, "train.iterations": 50, "sft.log_generations": 0})
    assert main(["sft", *overrides]) == 0
    assert reference_requests == [False]
    records = read_jsonl(run_dir / "metrics.jsonl")
    # 6 steps, linear decay over exactly those 6: lr 0.01 * (1 - k / 6) before step k + 1.
    assert [r["lr"] for r in records] == pytest.approx([0.01 * (1 - k / 6) for k in range(6)])
    # Sized by RL's iterations x epochs (50 x 2) instead, the last step would still run at 0.0095.
    assert records[-1]["lr"] < 0.002


def test_expert_iteration_loads_no_reference(tiny_model_dir, tmp_path, reference_requests):
    overrides = tiny_overrides(tiny_model_dir, tmp_path / "ei", **{
        "model.lora": "false", "algorithm.kl_coef": 0.04, "expert_iteration.n_ei_steps": 1,
        "expert_iteration.questions_per_step": 2, "expert_iteration.samples_per_question": 2,
        "expert_iteration.min_new_tokens": 1, "train.eval_size": 0, "sft.batch_size": 2, "sft.microbatch_size": 2})
    assert main(["expert-iter", *overrides]) == 0
    assert reference_requests == [False]


def test_in_training_eval_samples_with_the_rollout_config(tiny_model_dir, tmp_path):
    config = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "r", **{
        "rollout.stop_strings": "[zz]", "rollout.merge_lora": "false", "train.eval_max_new_tokens": 3}))

    class TaskWithStop:
        stop_strings = ("</answer>",)

    settings = eval_settings(config, TaskWithStop)
    assert (settings.stop_strings, settings.do_sample, settings.max_new_tokens) == (("zz",), False, 3)
    config.rollout.stop_strings = []
    assert eval_settings(config, TaskWithStop).stop_strings == ("</answer>",)
    # Sampled only when asked, with the eval's own temperature and top-p (not the rollout's 1.0 and 1.0).
    sampled = load_config(None, tiny_overrides(tiny_model_dir, tmp_path / "r", **{
        "train.eval_temperature": 0.7, "train.eval_top_p": 0.9}))
    settings = eval_settings(sampled, TaskWithStop)
    assert (settings.do_sample, settings.temperature, settings.top_p, settings.max_new_tokens) == (True, 0.7, 0.9, 6)
    loaded = load_policy(str(tiny_model_dir))
    assert rollout_backend(config, loaded).merge_lora is False
