"""`rlvr check` on a tiny model: the clean run passes, an injected mask or advantage bug fails
its own row, and `--mechanism` separates good from bad responses."""

from __future__ import annotations

import dataclasses

import torch

import rlvr.training.advantage_stage as advantages_stage
from rlvr.check.one_batch import expected_completion_mask, run_check
from rlvr.check.mechanism import run_mechanism_check
from rlvr.cli import main
from rlvr.config import load_config

EOS = 2


def _overrides(model_dir, **extra):
    base = {"model.name": str(model_dir), "task.name": "char_count", "task.use_chat_template": "false",
            # 24 tokens give the random tiny model room to emit EOS, so some rows end early (and are padded)
            "rollout.batch_size": 2, "rollout.group_size": 4, "rollout.max_new_tokens": 24,
            "model.lora_rank": 4, "model.lora_alpha": 8, "algorithm.kl_coef": 0.04}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def _results(rows):
    return {r.name: r.result for r in rows}


def test_expected_mask_stops_at_the_first_eos_even_when_pad_is_eos():
    # prompt_len 3 (one left pad), completions: "5 6 EOS pad", "7 EOS pad pad", "8 9 4 4" (cut at 4).
    input_ids = torch.tensor([[EOS, 11, 12, 5, 6, EOS, EOS],
                              [13, 11, 12, 7, EOS, EOS, EOS],
                              [13, 11, 12, 8, 9, 4, 4]])
    mask = expected_completion_mask(input_ids, 3, {EOS}, max_new_tokens=4)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 0],
                             [0, 0, 1, 1, 0, 0],
                             [0, 0, 1, 1, 1, 1]]
    assert expected_completion_mask(input_ids, 3, {EOS}, max_new_tokens=2)[2].tolist() == [0, 0, 1, 1, 0, 0]


def test_clean_check_passes_from_the_cli(tiny_model_dir, capsys):
    assert main(["check", *_overrides(tiny_model_dir)]) == 0
    out = capsys.readouterr().out
    for name in ("completion mask", "advantages centred", "importance ratio at step 0", "KL to reference at step 0",
                 "loss finite", "gradient norm", "model dtype"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "PASS" in line, line
    truncation = next(line for line in out.splitlines() if line.startswith("truncated completions"))
    assert "FAIL" not in truncation  # some completions end: at most a warning
    assert "all checks passed" in out


def test_check_with_a_token_budget_uses_the_updates_first_microbatch(tiny_model_dir, capsys):
    """minibatch_size 2 is half a group: with a token budget the update packs whole groups, and so does the
    check's ratio row (2 rows of a group scored as one shared prompt would be an error)."""
    overrides = _overrides(tiny_model_dir, **{"optim.microbatch_tokens": 64, "optim.minibatch_size": 2,
                                              "optim.grad_accum_steps": "null"})
    assert main(["check", *overrides]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("importance ratio at step 0"))
    assert "PASS" in line, line


def test_ppo_check_runs_the_value_stage(tiny_model_dir, capsys):
    """PPO: groups of one, the KL penalty in the reward (a reference pass), the value stage, one update."""
    overrides = _overrides(tiny_model_dir, **{"algorithm.name": "ppo", "algorithm.kl_coef": 0.0,
                                              "algorithm.kl_in_reward": 0.05, "rollout.batch_size": 8,
                                              "rollout.group_size": 1})
    rows = {r.name: r for r in run_check(load_config(None, overrides))}
    for name in ("completion mask", "importance ratio at step 0", "loss finite", "gradient norm", "nonzero advantages"):
        assert rows[name].result == "PASS", name
    assert rows["advantages centred"].value == "n/a"  # GAE advantages need not sum to 0 per group
    # --mechanism compares responses within a group: it refuses a value-model preset in words.
    assert main(["check", "--mechanism", *overrides]) == 2
    assert "has no group baseline" in capsys.readouterr().err


def test_every_completion_truncated_fails_with_exit_code_1(tiny_model_dir, capsys):
    # One token of budget: no sampled completion can end with EOS after its content.
    assert main(["check", *_overrides(tiny_model_dir, **{"rollout.max_new_tokens": 1,
                                                          "expert_iteration.min_new_tokens": 0})]) == 1
    out = capsys.readouterr().out
    assert "FAILED: truncated completions" in out and "no completion ended within max_new_tokens 1" in out


def _check_sees_mask(monkeypatch, make_mask):
    """The batch `rlvr check` inspects gets `make_mask(batch)` as its completion mask (the mask the
    loss would use: attention mask and the backend's loss mask together, here made wrong)."""
    import rlvr.training.iteration as iteration  # the sampling stage `rlvr check` runs, as `rlvr train` does

    real = iteration.rollout_batch

    def with_mask(*args, **kwargs):
        batch = real(*args, **kwargs)
        return dataclasses.replace(batch, completion_mask=make_mask(batch))

    monkeypatch.setattr(iteration, "rollout_batch", with_mask)


def test_mask_including_the_prompts_last_token_fails_the_mask_row(tiny_model_dir, monkeypatch):
    def leaky_mask(batch):
        mask = batch.completion_mask.clone()
        mask[:, batch.prompt_len - 2] = 1.0  # column prompt_len-2 scores the prompt's last token
        return mask

    _check_sees_mask(monkeypatch, leaky_mask)
    results = _results(run_check(load_config(None, _overrides(tiny_model_dir))))
    assert results["completion mask"] == "FAIL"
    assert results["advantages centred"] == "PASS" and results["model dtype"] == "PASS"


def test_mask_covering_padding_fails_the_mask_row(tiny_model_dir, monkeypatch):
    def padded_mask(batch):
        mask = torch.zeros_like(batch.completion_mask)
        mask[:, batch.prompt_len - 1 :] = 1.0  # every column after the prompt, padding included
        return mask

    _check_sees_mask(monkeypatch, padded_mask)
    results = _results(run_check(load_config(None, _overrides(tiny_model_dir))))  # some rows are right-padded
    assert results["completion mask"] == "FAIL"


def test_advantages_without_centring_fail_the_advantage_row(tiny_model_dir, monkeypatch):
    def uncentred(name):
        def scaled_only(rewards, group_ids=None, std="population", **_):
            return rewards / rewards.std().clamp(min=1e-6)  # forgot to subtract the group mean
        return scaled_only

    monkeypatch.setattr(advantages_stage.ADVANTAGE_ESTIMATORS, "get", uncentred)
    results = _results(run_check(load_config(None, _overrides(tiny_model_dir))))
    assert results["advantages centred"] == "FAIL"
    assert results["completion mask"] == "PASS"


def test_mechanism_separates_positive_from_negative_responses(tiny_model_dir):
    config = load_config(None, _overrides(tiny_model_dir, **{"task.name": "format_copy",
                                                             "task.use_chat_template": "true", "optim.lr": 1e-3}))
    candidates, rows = run_mechanism_check(config)
    assert [c.value for c in candidates[:4]] == ["1.3", "0.2", "1.2", "0"]  # correct, wrong, badly formatted, none
    assert all(c.result == "ok" for c in candidates)
    results = _results(rows)
    assert results["policy separation"] == "PASS"
    separation = float(next(r.value for r in rows if r.name == "policy separation"))
    assert separation > 0
    assert results["all-equal group advantages"] == "PASS" and results["updates applied"] == "PASS"


def test_mechanism_fails_when_the_loss_has_the_wrong_sign(tiny_model_dir):
    from rlvr.core import POLICY_LOSSES

    @POLICY_LOSSES.register("test_wrong_sign")
    def wrong_sign(logprobs, old_logprobs, advantages, mask, *, clip_low=0.2, clip_high=None):
        per_token, metrics = POLICY_LOSSES.get("grpo_clip")(logprobs, old_logprobs, advantages, mask,
                                                            clip_low=clip_low, clip_high=clip_high)
        return -per_token, metrics  # gradient ascent on the surrogate loss

    try:  # registered for this test only: other tests list the registry
        config = load_config(None, _overrides(tiny_model_dir, **{"task.name": "format_copy",
                                                                 "task.use_chat_template": "true", "optim.lr": 1e-3,
                                                                 "algorithm.policy_loss": "test_wrong_sign"}))
        _, rows = run_mechanism_check(config)
    finally:
        POLICY_LOSSES.remove("test_wrong_sign")
    separation = next(r for r in rows if r.name == "policy separation")
    assert separation.result == "FAIL" and float(separation.value) < 0


def test_mechanism_check_runs_the_token_weighted_estimators_and_refuses_remax(tiny_model_dir, capsys):
    for preset in ("reinforce_plus_plus_baseline", "opo"):
        _, rows = run_mechanism_check(load_config(None, _overrides(
            tiny_model_dir, **{"algorithm.name": preset, "task.name": "format_copy"})))
        results = _results(rows)
        assert results["all-equal group advantages"] == "PASS" and results["updates applied"] == "PASS", preset
    assert main(["check", "--mechanism", *_overrides(tiny_model_dir, **{"algorithm.name": "remax"})]) == 2
    assert "needs a greedy completion per prompt" in capsys.readouterr().err
