"""Data-parallel training equals one process: two gloo ranks on CPU against the full batch.

One update over a fixed RolloutBatch (no generation) runs once in this process on all 8 rows and
once in 2 spawned ranks of 4 rows each; parameters and logged metrics must match. The rows of
rank 0 have 1-2 completion tokens and those of rank 1 have 6-8, so a rank that divides by its own
token count (then lets DDP average the gradients) gets a clearly different token-mean step.
The PPO case adds a value head on the shared backbone (replicated, its gradient summed like the
LM head's), per-token advantages, old values and returns, and the explained variance over all ranks.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp

from rlvr.config import load_config
from rlvr.core import RolloutBatch, build_completion_mask, maybe_normalize_advantages
from rlvr.models import LoraSettings, load_policy, trainable_parameters
from rlvr.models.value_model import build_value_model
from rlvr.parallel.distributed import (Dist, _free_port, check_divisible, init_distributed, normalize_advantages_global,
                                    reduce_metric_sums, restore_rank_state)
from rlvr.observe.metrics import MetricSums
from rlvr.training.optim import make_scheduler
from rlvr.training.update import update_policy

PROMPT_LEN, COMPLETION_WIDTH, GROUP = 3, 8, 2
COMPLETION_LENGTHS = [1, 2, 1, 2, 8, 7, 8, 6]  # rows 0-3 go to rank 0, rows 4-7 to rank 1
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, 1.5, -1.5, -0.7, 0.7]
# (preset, LoRA?): grpo divides per sequence, dapo and ppo per token; LoRA and full weights.
CASES = [("grpo", True), ("dapo", False), ("ppo", True)]
LR = 0.5  # SGD, and a clip norm far above the gradient norm: a wrong gradient scale shows in the weights


def _config(preset: str, model_dir: str):
    return load_config(None, [
        f"model.name={model_dir}", "model.dtype=float64", f"algorithm.name={preset}", "algorithm.kl_coef=0.04",
        "rollout.batch_size=4", f"rollout.group_size={GROUP}", f"rollout.max_new_tokens={COMPLETION_WIDTH}",
        "optim.minibatch_size=2", "optim.grad_accum_steps=4", "optim.max_grad_norm=1e6",
    ])


def _full_batch() -> RolloutBatch:
    generator = torch.Generator().manual_seed(7)
    rows = len(COMPLETION_LENGTHS)
    prompts = torch.randint(3, 64, (rows // GROUP, PROMPT_LEN), generator=generator).repeat_interleave(GROUP, 0)
    completions = torch.randint(3, 64, (rows, COMPLETION_WIDTH), generator=generator)
    input_ids = torch.cat([prompts, completions], dim=1)  # [8, P + C]
    attention_mask = torch.ones_like(input_ids)
    for row, length in enumerate(COMPLETION_LENGTHS):
        attention_mask[row, PROMPT_LEN + length:] = 0
    completion_mask = build_completion_mask(input_ids, attention_mask, PROMPT_LEN)  # [8, L-1]
    ref_logprobs = -0.5 - 2 * torch.rand(completion_mask.shape, generator=generator, dtype=torch.float64)
    returns = torch.rand(completion_mask.shape, generator=generator, dtype=torch.float64) * 1.5  # PPO's targets
    return RolloutBatch(
        input_ids=input_ids, attention_mask=attention_mask, prompt_len=PROMPT_LEN,
        completion_mask=completion_mask.double(), old_logprobs=None, ref_logprobs=ref_logprobs * completion_mask,
        rewards=torch.tensor(ADVANTAGES).double(),
        advantages=torch.tensor(ADVANTAGES, dtype=torch.float64), group_ids=torch.arange(rows) // GROUP,
        old_values=torch.zeros(completion_mask.shape, dtype=torch.float64),  # the zero-initialised head's
        returns=returns * completion_mask,
    )


def ppo_inputs(preset: str, loaded, batch: RolloutBatch):
    """PPO: a value head on the policy and per-token advantages; other presets: (None, batch)."""
    if preset != "ppo":
        return None, batch.replace(old_values=None, returns=None)
    column = torch.arange(batch.completion_mask.shape[1], dtype=torch.float64) / 8  # [L-1]
    per_token = (batch.advantages[:, None] + column) * batch.completion_mask  # [N, L-1]
    return build_value_model("shared", loaded), batch.replace(advantages=per_token)


def _one_update(preset: str, lora: bool, model_dir: str, rows, dist) -> tuple[dict, dict]:
    """Trainable weights and metrics after one update_policy call on `rows` of the full batch."""
    config = _config(preset, model_dir)
    torch.manual_seed(0)
    loaded = load_policy(model_dir, dtype="float64", need_reference=False,
                         lora=LoraSettings(rank=4, alpha=8) if lora else None)
    value_model, batch = ppo_inputs(preset, loaded, _full_batch().select(rows))
    params = trainable_parameters(loaded.policy) + ([] if value_model is None else value_model.parameters())
    optimizer = torch.optim.SGD(params, lr=LR)
    scheduler = make_scheduler(optimizer, config.optim, 10)
    update = update_policy(loaded.policy, optimizer, scheduler, batch, config, params, dist=dist,
                           value_model=value_model)
    assert batch.old_logprobs is None  # the update leaves its input batch as it was
    weights = {name: p.detach().clone() for name, p in loaded.policy.named_parameters() if p.requires_grad}
    if value_model is not None:
        weights.update({"value_head.weight": value_model.head.weight.detach().clone(),
                        "value_head.bias": value_model.head.bias.detach().clone()})
    return weights, {**update.metrics, "optimizer_steps": update.optimizer_steps,
                     "skipped_nonfinite_updates": update.skipped_nonfinite_updates}


class NaiveDist(Dist):
    """The plausible wrong version: each rank divides by its own counts, DDP averages gradients."""

    def all_reduce(self, tensor, op="sum"):
        return tensor

    def sum_gradients(self, params):
        for p in params:
            torch.distributed.all_reduce(p.grad)
            p.grad /= self.world_size


def _worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist = init_distributed("cpu")
    assert (dist.rank, dist.world_size, dist.is_main) == (rank, world_size, rank == 0)
    rows = list(range(rank * 4, rank * 4 + 4))
    results = {}
    for preset, lora in CASES:
        results[preset] = _one_update(preset, lora, model_dir, rows, dist)
        naive = NaiveDist(rank=dist.rank, world_size=dist.world_size)
        results[f"{preset}/naive"] = _one_update(preset, lora, model_dir, rows, naive)
    advantages = torch.tensor(ADVANTAGES[rank * 4 : rank * 4 + 4]) + 3.0 * rank  # ranks differ in mean
    results["normalized"] = normalize_advantages_global(dist, advantages, True)
    sums = MetricSums()
    sums.add_masked("x", torch.tensor([[1.0, 2.0, 3.0]]) * (rank + 1), torch.tensor([[1.0, 1.0, float(rank)]]))
    if rank == 1:
        sums.add("only_on_rank_1", 5.0, 2)
    reduce_metric_sums(dist, sums)
    results["metric_sums"] = sums.reduce()
    results["gathered"] = dist.gather(rank * 10)
    results["all_true"] = (dist.all_true(True), dist.all_true(rank == 0))
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


def spawn_two_ranks(worker, model_dir, out_dir) -> list[dict]:
    """Run worker(rank, 2, port, model_dir, out_dir) in 2 processes; return each rank's saved `rank{r}.pt`."""
    mp.spawn(worker, args=(2, _free_port(), str(model_dir), str(out_dir)), nprocs=2, join=True)
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def two_rank_results(tiny_model_dir, tmp_path_factory):
    return spawn_two_ranks(_worker, tiny_model_dir, tmp_path_factory.mktemp("ranks"))


@pytest.mark.parametrize("preset,lora", CASES)
def test_two_ranks_equal_one_process(two_rank_results, tiny_model_dir, preset, lora):
    single_weights, single_metrics = _one_update(preset, lora, str(tiny_model_dir), list(range(8)), Dist())
    for rank in range(2):
        weights, metrics = two_rank_results[rank][preset]
        for name, value in single_weights.items():
            assert torch.allclose(weights[name], value, rtol=0, atol=1e-10), (rank, name)
        assert metrics.keys() == single_metrics.keys()
        for key, value in single_metrics.items():
            assert metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (rank, key)
    assert single_metrics["optimizer_steps"] == 2 and single_metrics["grad_norm"] > 0
    assert single_metrics["kl"] > 0
    if preset == "ppo":  # the value head learned
        assert single_weights["value_head.weight"].abs().max() > 1e-3 and single_metrics["value/loss_per_token"] > 0
        assert single_metrics["value/explained_variance"] == pytest.approx(0.0)  # old values all 0
    torch.manual_seed(0)
    start = load_policy(str(tiny_model_dir), dtype="float64", lora=LoraSettings(rank=4, alpha=8) if lora else None)
    start_weights = {n: p.detach() for n, p in start.policy.named_parameters() if p.requires_grad}
    step = max(float((v - start_weights.get(n, torch.zeros_like(v))).abs().max())  # the value head starts at 0
               for n, v in single_weights.items())
    assert step > 1e-3  # the update did move the weights
    # The naive version: per-rank denominators and averaged gradients.
    naive_weights, _ = two_rank_results[0][f"{preset}/naive"]
    gap = max(float((naive_weights[n] - v).abs().max()) for n, v in single_weights.items())
    if preset in ("dapo", "ppo"):  # token-mean: rank 1 holds 27 of the 35 tokens, not half of them
        assert gap > 0.1 * step
    else:  # sequence-mean with equal shares: averaging the per-rank means is already right
        assert gap < 1e-10


def test_metric_and_advantage_reductions(two_rank_results):
    for rank in range(2):
        result = two_rank_results[rank]
        expected = maybe_normalize_advantages(torch.tensor(ADVANTAGES[:4] + [a + 3.0 for a in ADVANTAGES[4:]]), True)
        assert torch.allclose(result["normalized"], expected[rank * 4 : rank * 4 + 4], atol=1e-6)
        # x: rank 0 contributes (1 + 2) over 2 tokens, rank 1 (2 + 4 + 6) over 3 tokens.
        assert result["metric_sums"]["x"] == pytest.approx(15 / 5)
        assert result["metric_sums"]["only_on_rank_1"] == pytest.approx(5.0)
        assert result["gathered"] == [0, 10]
        assert result["all_true"] == (True, False)


def test_one_process_dist_is_a_no_op():
    dist = init_distributed("cpu")
    assert (dist.rank, dist.world_size, dist.is_main, dist.enabled) == (0, 1, True, False)
    tensor = torch.tensor([1.0, 2.0])
    assert dist.all_reduce(tensor) is tensor and dist.gather(3) == [3] and dist.shard([1, 2, 3]) == [1, 2, 3]


def test_uneven_split_and_world_size_mismatch_are_clear_errors(tmp_path):
    assert check_divisible(Dist(rank=1, world_size=2), 4) == 2
    with pytest.raises(ValueError, match="rollout.batch_size=3 .* 2 processes"):
        check_divisible(Dist(rank=0, world_size=2), 3)
    with pytest.raises(ValueError, match="written by a run with 2 process.*this launch has 1"):
        restore_rank_state(Dist(), {"world_size": 2, "rng": [None, None]}, tmp_path)
    with pytest.raises(ValueError, match="written by a run with 1 process.*this launch has 2"):
        restore_rank_state(Dist(rank=0, world_size=2), None, tmp_path)
