"""Several optimizer steps per rollout batch (`optim.minibatch_size * optim.grad_accum_steps` smaller
than the batch): the split the config accepts and refuses, and the update it gives.

The update of k = 2 steps on 8 rows (tiny random model, float64, plain SGD so a wrong loss scale
shows) is built independently as two one-step updates on rows 0-3 and 4-7, each against the
sampling policy's log-probs computed before either step by a plain full-width forward pass. The
learning rate is large enough that the second step's ratio leaves the clip range, so the plausible
wrong version, old log-probs taken at the moved policy (ratio 1 again), ends elsewhere; so does one
that divides each step's loss by the whole batch's counts.
"""

from __future__ import annotations

import pytest
import torch

import rlvr.training.update as update_module
from rlvr.config import ConfigError, load_config
from rlvr.core import compute_per_token_logprobs
from rlvr.models import LoraSettings, load_policy, trainable_parameters
from rlvr.observe.metric_names import CLIP_FRAC_TRUST_REGION, LOSS, RATIO_FIRST_EPOCH_MAX_DEV, SURPRISAL
from rlvr.training.optim import make_scheduler
from rlvr.training.update import update_policy
from tests.training.test_microbatching import _batch

ROWS = 8


def _config(model_dir, minibatch, accum, epochs=1, **extra):
    overrides = {"model.name": str(model_dir), "model.dtype": "float64", "algorithm.name": "grpo",
                 "algorithm.ppo_epochs": epochs, "rollout.batch_size": ROWS // 2, "rollout.group_size": 2,
                 "rollout.max_new_tokens": 10, "optim.minibatch_size": minibatch, "optim.grad_accum_steps": accum,
                 "optim.max_grad_norm": 1e6, **extra}
    return load_config(None, [f"{key}={value}" for key, value in overrides.items()])


def _fresh_policy(model_dir):
    torch.manual_seed(0)
    loaded = load_policy(str(model_dir), dtype="float64", need_reference=False, lora=LoraSettings(rank=4, alpha=8))
    return loaded.policy


def _weights(policy):
    return {name: p.detach().clone() for name, p in policy.named_parameters() if p.requires_grad}


def _sgd_update(policy, batch, config, lr):
    params = trainable_parameters(policy)
    optimizer = torch.optim.SGD(params, lr=lr)
    return update_policy(policy, optimizer, make_scheduler(optimizer, config.optim, 10), batch, config, params)


def _full_width_logprobs(policy, batch):
    with torch.no_grad():
        logprobs = compute_per_token_logprobs(policy, batch.input_ids, batch.attention_mask)  # [N, L-1]
    return logprobs * batch.completion_mask


def _halves_update(model_dir, lr, *, old_at_moved_policy=False, whole_batch_counts=False):
    """Two one-step updates (k = 1 configs of 4 rows), rows 0-3 then 4-7."""
    policy = _fresh_policy(model_dir)
    batch = _batch().replace(old_values=None, returns=None, ref_logprobs=None)
    old = _full_width_logprobs(policy, batch)  # the sampling policy, before any step
    half = _config(model_dir, 4, 1, **{"rollout.batch_size": ROWS // 4})
    for rows in (torch.arange(0, 4), torch.arange(4, 8)):
        part = batch.select(rows)
        part_old = _full_width_logprobs(policy, part) if old_at_moved_policy else old[rows]
        scale = 0.5 if whole_batch_counts else 1.0  # seq_mean over 8 rows instead of 4
        _sgd_update(policy, part.replace(old_logprobs=part_old), half, lr * scale)
    return _weights(policy)


LR = 40.0


def test_two_steps_an_epoch_are_two_updates_against_the_sampling_policy(tiny_model_dir):
    config = _config(tiny_model_dir, 2, 2)  # 8 rows, 4 a step: k = 2
    assert config.steps_per_epoch == 2 and config.steps_per_iteration == 2
    policy = _fresh_policy(tiny_model_dir)
    batch = _batch().replace(old_values=None, returns=None, ref_logprobs=None)
    result = _sgd_update(policy, batch, config, LR)
    got = _weights(policy)
    expected = _halves_update(tiny_model_dir, LR)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-8, atol=1e-10, msg=name)
    assert result.optimizer_steps == 2
    assert result.metrics[CLIP_FRAC_TRUST_REGION] > 0.05  # the second step's ratio left the clip range
    # The surprisal is the sampling policy's, over the completion tokens, whichever step the rows fall in.
    old, mask = _full_width_logprobs(_fresh_policy(tiny_model_dir), batch), batch.completion_mask
    assert result.metrics[SURPRISAL] == pytest.approx(float(-(old * mask).sum() / mask.sum()), rel=1e-6)
    assert result.metrics[RATIO_FIRST_EPOCH_MAX_DEV] < 1e-9  # the first step is still on-policy
    # The plausible wrong versions end clearly elsewhere.
    for wrong in (_halves_update(tiny_model_dir, LR, old_at_moved_policy=True),
                  _halves_update(tiny_model_dir, LR, whole_batch_counts=True)):
        gap = max(float((wrong[name] - got[name]).abs().max()) for name in got)
        assert gap > 1e-4


def test_epochs_times_steps_optimizer_steps_and_old_logprobs_once(tiny_model_dir, monkeypatch):
    calls = []
    real = update_module.batch_logprobs

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(update_module, "batch_logprobs", counting)
    batch = _batch().replace(old_values=None, returns=None, ref_logprobs=None)
    config = _config(tiny_model_dir, 2, 1, epochs=2)  # k = 4
    result = _sgd_update(_fresh_policy(tiny_model_dir), batch, config, 0.1)
    assert (config.steps_per_epoch, result.optimizer_steps, len(calls)) == (4, 8, 1)
    # k = 1 is the one-step update as it always was: the first epoch's own log-probs, no extra pass.
    calls.clear()
    config = _config(tiny_model_dir, 2, 4, epochs=2)
    result = _sgd_update(_fresh_policy(tiny_model_dir), batch, config, 0.1)
    assert (config.steps_per_epoch, result.optimizer_steps, len(calls)) == (1, 2, 0)


def test_each_step_divides_by_its_own_rows(tiny_model_dir):
    """At lr 0 both steps are on-policy, so grpo_clip's seq_mean_token_mean loss is -mean(A) over the step's rows:
    A = 1 on rows 0-3 and 2 on rows 4-7 gives step losses -1 and -2, logged as their mean -1.5. Dividing by
    the whole batch's 8 sequences would give -0.5 and -1 (mean -0.75)."""
    batch = _batch().replace(old_values=None, returns=None, ref_logprobs=None,
                             advantages=torch.tensor([1.0] * 4 + [2.0] * 4, dtype=torch.float64))
    result = _sgd_update(_fresh_policy(tiny_model_dir), batch, _config(tiny_model_dir, 4, 1), 0.0)
    assert result.metrics[LOSS] == pytest.approx(-1.5, rel=1e-9)


def test_the_split_must_divide_the_batch(tiny_model_dir):
    homework = load_config(None, ["rollout.batch_size=8", "rollout.group_size=6", "optim.minibatch_size=8",
                                  "optim.grad_accum_steps=1", "algorithm.ppo_epochs=2"])
    assert (homework.steps_per_epoch, homework.steps_per_iteration) == (6, 12)
    default = load_config(None, ["rollout.batch_size=8", "rollout.group_size=6"])
    assert (default.optim.minibatch_size, default.steps_per_epoch) == (48, 1)
    derived = load_config(None, ["rollout.batch_size=8", "rollout.group_size=6", "optim.minibatch_size=8",
                                 "optim.grad_accum_steps=null"])
    assert (derived.optim.grad_accum_steps, derived.steps_per_epoch) == (6, 1)
    for minibatch, accum in ((5, 2), (16, 4)):  # 10 does not divide 48; 64 is more than the batch
        with pytest.raises(ConfigError, match=r"must divide .* = 48 into whole optimizer steps; valid step sizes: "
                                              r"1, 2, 3, 4, 6, 8, 12, 16, 24, 48"):
            load_config(None, ["rollout.batch_size=8", "rollout.group_size=6", f"optim.minibatch_size={minibatch}",
                               f"optim.grad_accum_steps={accum}"])


def test_a_run_schedules_every_optimizer_step(tiny_model_dir, tmp_path):
    """The learning-rate schedule spans iterations x epochs x steps: after the first of two iterations of
    2 epochs x 2 steps, a linear schedule is half-way (lr 1e-2 * (1 - 4/8)); a schedule over iterations x
    epochs only would already be at 0."""
    from rlvr.cli import main
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    run_dir = tmp_path / "k2"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{"train.iterations": 2, "optim.minibatch_size": 2,
                                                           "optim.grad_accum_steps": 2, "optim.schedule": "linear",
                                                           "train.eval_size": 0, "model.lora_rank": 4})
    assert main(["train", *overrides]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["optimizer_steps"] for r in records] == [4, 4]
    assert records[0]["lr"] == pytest.approx(1e-2 * (1 - 4 / 8))
