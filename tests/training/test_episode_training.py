"""Episodes in training: GAE and the loss over policy tokens only, and `rlvr train` on guess_number.

The environment's tokens sit between policy tokens (holes in the completion mask): GAE must skip
them (no advantage, no value target, the bootstrap passes over them), the value loss must not see
them, and a policy-loss gradient must not change whatever advantage those columns would carry.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.core import POLICY_LOSSES, aggregate_loss, gae_advantages, terminal_token_rewards, value_loss
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings, sample_and_score
from rlvr.tasks.task import Example
from rlvr.testing import build_tiny_model, build_tiny_tokenizer
from rlvr.training.collect import CollectedGroups, rollout_batch, split_groups
from rlvr.observe.rollout_stats import EpisodeCounts, episode_stats
from rlvr.observe.metric_names import EPISODE_TOOL_CALLS_PREFIX, EPISODE_TOOL_ERRORS_PREFIX
from rlvr.utils import read_jsonl
from tests.observe.test_metric_names import PREFIXES, REPO, names_used
from tests.conftest import tiny_overrides
from tests.rollout.test_episodes import CountdownEnv

HOLES = torch.tensor([[1, 1, 0, 0, 1, 1, 0]])  # policy, policy, env, env, policy, policy, padding


def naive_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """GAE over a sequence with no holes, written out: A_t = sum_k (gamma lam)^k delta_{t+k}."""
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < len(values) else 0.0) - values[t]
              for t in range(len(values))]
    return [sum((gamma * lam) ** k * deltas[t + k] for k in range(len(deltas) - t)) for t in range(len(deltas))]


def test_gae_skips_environment_tokens_between_policy_tokens():
    values = torch.tensor([[0.5, -0.2, 9.0, 9.0, 0.3, 0.1, 7.0]])  # huge values on env columns and padding
    rewards = terminal_token_rewards(torch.tensor([1.0]), HOLES)  # [1, 7]
    assert rewards[0].tolist() == [0, 0, 0, 0, 0, 1.0, 0]  # on the last policy token
    advantages, returns = gae_advantages(rewards, values, HOLES, gamma=0.9, lam=0.8)
    policy = [0, 1, 4, 5]
    expected = naive_gae([0, 0, 0, 1.0], [0.5, -0.2, 0.3, 0.1], 0.9, 0.8)
    assert advantages[0, policy].tolist() == pytest.approx(expected)
    assert advantages[0, [2, 3, 6]].tolist() == [0, 0, 0] and returns[0, [2, 3, 6]].tolist() == [0, 0, 0]
    # Bootstrapping through the env columns (as if they were policy tokens) would give another A_1.
    through = naive_gae([0, 0, 0, 0, 0, 1.0], [0.5, -0.2, 9.0, 9.0, 0.3, 0.1], 0.9, 0.8)
    assert abs(through[1] - expected[1]) > 1.0


def test_the_value_loss_ignores_environment_columns():
    values = torch.tensor([[0.5, -0.2, 3.0, 3.0, 0.3, 0.1, 0.0]])
    returns = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]])
    loss, _ = value_loss(values, values.clone(), returns, HOLES, None, "token_mean")
    moved = values.clone()
    moved[0, 2:4] = -50.0  # what the head says on env tokens
    assert float(value_loss(moved, values.clone(), returns, HOLES, None, "token_mean")[0]) == pytest.approx(float(loss))
    by_hand = 0.5 * ((0.5 - 1) ** 2 + (-0.2 - 1) ** 2 + (0.3 - 1) ** 2 + (0.1 - 1) ** 2) / 4
    assert float(loss) == pytest.approx(by_hand)


def _episode_batch():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(seed=5, dtype=torch.float64)
    backend = ROLLOUT_BACKENDS.get("decode_loop")(model, tokenizer)
    task = CountdownEnv(max_turns=3)
    examples = [Example(prompt="say", ground_truth=None, metadata={"turns": 3}),
                Example(prompt="go", ground_truth=None, metadata={"turns": 2})]
    torch.manual_seed(1)
    scored = sample_and_score(backend, task, examples, group_size=2, use_chat_template=True,
                              settings=SamplingSettings(max_new_tokens=6, stop_strings=tuple("aeiou 0123456789"),
                                                        max_episode_tokens=200))
    algo = load_config(None, []).algorithm
    groups = split_groups(scored, algo, 6)
    collected = CollectedGroups(groups=groups, group_size=2, sampled_groups=2, filled_no_contrast=0, rounds=1,
                                generation_seconds=0.0, scoring_seconds=0.0)
    return model, scored, rollout_batch(collected, tokenizer, task.name)


def test_env_token_frac_of_a_real_rollout_is_the_masked_share_of_its_tokens():
    _, scored, _ = _episode_batch()
    generation = scored.generation
    real = generation.attention_mask[:, generation.prompt_len:]  # [N, C]
    env = real * (1 - generation.loss_mask)  # [N, C]
    stats = episode_stats([EpisodeCounts.of(record) for record in scored.episodes])
    assert stats["episode/env_token_frac"] == pytest.approx(float(env.sum() / real.sum()))
    assert stats["episode/turns"] == pytest.approx(sum(r.turns for r in scored.episodes) / len(scored.episodes))


def test_the_batch_loss_mask_is_the_policy_tokens_and_env_advantages_never_reach_the_gradient():
    model, scored, batch = _episode_batch()
    env_columns = torch.zeros_like(batch.completion_mask, dtype=torch.bool)  # [N, L-1]
    start = batch.prompt_len - 1
    for row, record in enumerate(scored.episodes):
        owners = torch.tensor(record.policy_mask)
        assert batch.completion_mask[row, start:start + len(owners)].tolist() == owners.float().tolist()
        env_columns[row, start:start + len(owners)] = owners == 0
    assert int(env_columns.sum()) > 0 and int(batch.completion_mask.sum()) > 0
    assert int((batch.completion_mask.bool() & env_columns).sum()) == 0

    def gradient(advantages):
        model.zero_grad()
        logprobs, _ = compute_completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                                  completion_mask=batch.completion_mask)  # [N, L-1]
        per_token, _ = POLICY_LOSSES.get("grpo_clip")(logprobs, logprobs.detach(), advantages, batch.completion_mask)
        aggregate_loss(per_token, batch.completion_mask, "token_mean").backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    advantages = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(0),
                             dtype=torch.float64)  # per token, as GAE gives them
    base = gradient(advantages)
    on_env = torch.where(env_columns, torch.full_like(advantages, 100.0), advantages)
    assert torch.equal(gradient(on_env), base)
    on_policy = advantages.clone()
    on_policy[batch.completion_mask.bool()] += 1.0  # the same change on policy columns does move it
    assert not torch.allclose(gradient(on_policy), base)


@pytest.mark.parametrize("backend", ["decode_loop", "hf_generate"])
def test_rlvr_train_runs_grpo_on_guess_number(tiny_model_dir, tmp_path, backend):
    run_dir = tmp_path / backend
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "guess_number", "task.use_chat_template": "true", "task.options.max_turns": 3,
        "task.options.eval_size": 2, "train.eval_size": 2, "train.iterations": 2, "rollout.backend": backend,
        "rollout.max_new_tokens": 6, "rollout.max_episode_tokens": 120,
        "rollout.stop_strings": "[a, e, o]"})  # a tiny random model: turns that end, so episodes have several
    assert main(["train", *overrides]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    for record in records:
        assert 1.0 <= record["episode/turns"] <= 3.0
        assert 0.0 < record["episode/env_token_frac"] < 1.0
        shares = [record[f"episode/truncated/{limit}"] for limit in ("max_turns", "turn_tokens", "episode_tokens")]
        assert all(0.0 <= share <= 1.0 for share in shares) and sum(shares) <= 1.0 + 1e-9
        assert math.isfinite(record["loss"])
    assert max(record["episode/turns"] for record in records) > 1.0  # replies were inserted and continued
    # The held-out eval reports its own episodes (greedy): turns within the budget, the replies' share.
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert evals and all(1.0 <= e["eval/episode/turns"] <= 3.0 for e in evals)
    assert all(0.0 <= e["eval/episode/env_token_frac"] < 1.0 for e in evals)  # 0 when greedy never guesses
    # Every episode metric the health checks and the report read is in this run's records (the per-tool
    # ones need an environment with tools: guess_number has none).
    written = {key for record in records for key in record}
    for reader in ("rlvr/observe/health.py", "rlvr/report/figures.py"):
        for name in names_used((REPO / reader).read_text()):
            if name.startswith("episode/") and name not in (EPISODE_TOOL_CALLS_PREFIX, EPISODE_TOOL_ERRORS_PREFIX):
                assert name in written or (name in PREFIXES and any(k.startswith(name) for k in written)), (
                    reader, name)
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert any("⟦user: " in sample["transcript"] for sample in samples)
    assert all(sample["turns"] >= 1 for sample in samples)


def test_rlvr_check_on_guess_number_passes_and_shows_a_marked_transcript(tiny_model_dir, capsys):
    from rlvr.check.one_batch import run_check

    overrides = [f"model.name={tiny_model_dir}", "task.name=guess_number", "task.options.max_turns=3",
                 "rollout.batch_size=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                 "rollout.stop_strings=[a, e, o]", "model.lora_rank=4", "model.lora_alpha=8"]
    rows = {row.name: row for row in run_check(load_config(None, overrides))}
    # (a random policy never finds the number: no reward contrast, so the gradient norm is 0 here)
    for name in ("completion mask", "importance ratio at step 0", "loss finite"):
        assert rows[name].result == "PASS", (name, rows[name])
    assert "environment tokens kept out of the loss" in rows["completion mask"].note
    assert "⟦user: " in capsys.readouterr().err
