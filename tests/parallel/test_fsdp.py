"""FSDP training equals one process: two gloo ranks with sharded decoder layers against the full batch.

The fixed batch, config and SGD step of tests/parallel/test_distributed.py (rank 1 holds most completion
tokens), now with every decoder layer sharded by FSDP2 on a CPU mesh. A sharded layer's gradient
that FSDP averaged instead of summed would be half the full-batch one, so the weights would
differ at once (checked in `test_fsdp_two_ranks_equal_one_process`, and on plain gradients in
`test_fsdp_gradients_are_sums_over_ranks`, beside the clip norm over every rank's shards). Also
checked: sampling gathers the layers once, so ranks may decode different numbers of steps; checkpoints of a
sharded model hold the same full tensors as a one-process checkpoint and load back onto shards.
"""

from __future__ import annotations

import os

import pytest
import torch

from rlvr.models import LoraSettings, load_policy, merged_adapter, trainable_parameters
from rlvr.parallel.sharding import full_tensor, is_dtensor, shard_decoder_layers, unsharded
from rlvr.rollout.vllm_backend import policy_weights
from rlvr.rollout import SamplingSettings
from rlvr.rollout.decode_loop import decode_loop
from rlvr.models.checkpoints.training_state import gather_checkpoint_state, load_checkpoint, save_checkpoint
from rlvr.parallel.distributed import Dist, init_distributed
from rlvr.parallel.fsdp import clip_grad_norm, device_mesh, fsdp_requested
from rlvr.testing import random_lora_b
from rlvr.training.optim import make_scheduler
from rlvr.training.update import update_policy
from tests.parallel.test_distributed import LR, _config, _full_batch, ppo_inputs, spawn_two_ranks

# (preset, LoRA?, optim.max_grad_norm): sequence- and token-mean, adapter and full weights; the
# clipping cases need the global norm over sharded and replicated gradients (PPO's value head is
# replicated, outside the sharded layers, like the LM head).
CASES = [("grpo", True, 1e6), ("dapo", False, 1e6), ("dapo", True, 1e6), ("grpo", False, 0.05),
         ("ppo", True, 0.05)]
PROMPTS = ["say a 1", "hello there 22"]  # rank r decodes PROMPTS[r]
MAX_NEW = [3, 9]  # ... for this many greedy steps: the ranks run different numbers of forwards


def _case_name(preset, lora, clip) -> str:
    return f"{preset}/{'lora' if lora else 'full'}/clip={clip:g}"


def _load(model_dir: str, lora: bool, seed: int = 0):
    torch.manual_seed(seed)
    return load_policy(model_dir, dtype="float64", need_reference=False,
                       lora=LoraSettings(rank=4, alpha=8) if lora else None)


def _full_weights(policy) -> dict:
    return {name: full_tensor(p).detach().clone() for name, p in policy.named_parameters() if p.requires_grad}


def _update(preset, lora, clip, model_dir, rows, dist, mesh=None, optimizer_name="sgd"):
    """One update_policy call on `rows` of the full batch; with a `mesh`, the decoder layers sharded first."""
    config = _config(preset, model_dir)
    config.optim.max_grad_norm = clip
    loaded = _load(model_dir, lora)
    if mesh is not None:
        assert shard_decoder_layers(loaded.policy, mesh) == 2
    value_model, batch = ppo_inputs(preset, loaded, _full_batch().select(rows))
    params = trainable_parameters(loaded.policy) + ([] if value_model is None else value_model.parameters())
    assert any(is_dtensor(p) for p in params) == (mesh is not None)
    optimizer = (torch.optim.SGD(params, lr=LR) if optimizer_name == "sgd"
                 else torch.optim.AdamW(params, lr=1e-2, weight_decay=0.0))
    scheduler = make_scheduler(optimizer, config.optim, 10)
    update = update_policy(loaded.policy, optimizer, scheduler, batch, config, params, dist=dist,
                           value_model=value_model)
    metrics = {**update.metrics, "optimizer_steps": update.optimizer_steps,
               "skipped_nonfinite_updates": update.skipped_nonfinite_updates}
    if value_model is not None:  # the replicated head, compared like the metrics
        head = value_model.head
        metrics.update({"value_head/weight_sum": float(head.weight.detach().sum()),
                        "value_head/weight_norm": float(head.weight.detach().norm()),
                        "value_head/bias": float(head.bias.detach())})
    return loaded, optimizer, scheduler, metrics


def _rank_loss(policy, rank: int) -> torch.Tensor:
    """A loss that differs per rank (other tokens, other weight), for the gradient and clipping checks."""
    input_ids = (torch.arange(3, 10) + 5 * rank).view(1, -1)  # [1, 7]
    logits = policy(input_ids=input_ids).logits  # [1, 7, V]
    return (1.0 + rank) * logits.square().mean()


def _gradients(policy) -> dict:
    return {name: full_tensor(p.grad).detach().clone() for name, p in policy.named_parameters() if p.grad is not None}


def _worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist = init_distributed("cpu")
    mesh = device_mesh(dist)
    rows = list(range(rank * 4, rank * 4 + 4))
    results = {}
    for preset, lora, clip in CASES:
        loaded, _, _, metrics = _update(preset, lora, clip, model_dir, rows, dist, mesh)
        results[_case_name(preset, lora, clip)] = (_full_weights(loaded.policy), metrics)

    # Gradients and clipping by themselves: one backward of a per-rank loss, no optimizer.
    loaded = _load(model_dir, lora=False)
    shard_decoder_layers(loaded.policy, mesh)
    params = trainable_parameters(loaded.policy)
    _rank_loss(loaded.policy, rank).backward()
    dist.sum_gradients(params)  # the replicated ones; FSDP summed the layers' during backward
    results["gradients"] = _gradients(loaded.policy)
    # What this rank alone holds: its shards of the layers' gradients and the whole replicated ones.
    results["local_norm"] = float(sum(((p.grad.to_local() if is_dtensor(p.grad) else p.grad).double().square().sum()
                                       for p in params if p.grad is not None)).sqrt())
    results["clip_norm"] = float(clip_grad_norm(params, 1e-3, dist))
    results["clipped"] = _gradients(loaded.policy)

    # Sampling: greedy, each rank its own prompt and length, layers gathered once for the block.
    loaded = _load(model_dir, lora=True)
    shard_decoder_layers(loaded.policy, mesh)
    before = _full_weights(loaded.policy)
    settings = SamplingSettings(max_new_tokens=MAX_NEW[rank], do_sample=False)
    with merged_adapter(loaded.policy):
        generation = decode_loop(loaded.policy, loaded.tokenizer, [PROMPTS[rank]], 1, settings)
    after = _full_weights(loaded.policy)
    results["generation"] = generation.input_ids
    results["resharded"] = all(is_dtensor(p) for layer in loaded.policy.base_model.model.model.layers
                               for p in layer.parameters())
    results["weights_unchanged"] = all(torch.equal(before[n], after[n]) for n in before)

    # The weights a colocated vLLM engine takes at a sync: layers gathered, the adapter merged in.
    loaded = _load(model_dir, lora=True)
    random_lora_b(loaded.policy, seed=5)
    shard_decoder_layers(loaded.policy, mesh)
    with torch.no_grad(), unsharded(loaded.policy):
        results["engine_weights"] = {name: tensor.clone() for name, tensor in policy_weights(loaded.policy)}
    results["engine_weights_resharded"] = all(is_dtensor(p) for layer in loaded.policy.base_model.model.model.layers
                                              for p in layer.parameters())

    # Checkpoints: an AdamW step, rank 0 writes the gathered state, a fresh sharded model loads it.
    for lora in (True, False):
        loaded, optimizer, scheduler, _ = _update("dapo", lora, 1e6, model_dir, rows, dist, mesh, "adamw")
        folder = os.path.join(out_dir, f"fsdp_{'lora' if lora else 'full'}")
        gathered = gather_checkpoint_state(loaded, optimizer)
        if dist.is_main:
            os.makedirs(folder)
            save_checkpoint(folder, 1, loaded, optimizer, scheduler, {}, distributed={"world_size": 2},
                            gathered=gathered)
        dist.barrier()
        fresh = _load(model_dir, lora, seed=1)  # a different LoRA init: loading must overwrite it
        shard_decoder_layers(fresh.policy, mesh)
        fresh_optimizer = torch.optim.AdamW(trainable_parameters(fresh.policy), lr=1e-2, weight_decay=0.0)
        fresh_scheduler = make_scheduler(fresh_optimizer, _config("dapo", model_dir).optim, 10)
        load_checkpoint(os.path.join(folder, "checkpoints", "iter_000001"), fresh, fresh_optimizer, fresh_scheduler)
        results[f"resume/{lora}"] = (_full_weights(loaded.policy), _full_weights(fresh.policy),
                                     gathered["optimizer_state"], gather_checkpoint_state(fresh, fresh_optimizer))
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def fsdp_results(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("fsdp_ranks")
    return out_dir, spawn_two_ranks(_worker, tiny_model_dir, out_dir)


@pytest.mark.parametrize("preset,lora,clip", CASES)
def test_fsdp_two_ranks_equal_one_process(fsdp_results, tiny_model_dir, preset, lora, clip):
    _, ranks = fsdp_results
    loaded, _, _, single_metrics = _update(preset, lora, clip, str(tiny_model_dir), list(range(8)), Dist())
    single_weights = _full_weights(loaded.policy)
    start = _full_weights(_load(str(tiny_model_dir), lora).policy)
    step = max(float((v - start[n]).abs().max()) for n, v in single_weights.items())
    assert step > 1e-3  # the update did move the weights
    if clip < 1.0:
        assert single_metrics["grad_norm"] > 10 * clip  # clipping was active
    if preset == "ppo":
        assert single_metrics["value_head/weight_norm"] > 1e-4  # the head moved (from zero)
    for rank in range(2):
        weights, metrics = ranks[rank][_case_name(preset, lora, clip)]
        assert weights.keys() == single_weights.keys()
        for name, value in single_weights.items():
            assert torch.allclose(weights[name], value, rtol=0, atol=1e-10), (rank, name)
        assert metrics.keys() == single_metrics.keys()
        for key, value in single_metrics.items():
            assert metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (rank, key)


def _one_process_gradients(model_dir: str) -> dict:
    """The gradients of both ranks' losses summed, in one process without sharding."""
    loaded = _load(model_dir, lora=False)
    (_rank_loss(loaded.policy, 0) + _rank_loss(loaded.policy, 1)).backward()
    return _gradients(loaded.policy)


def test_fsdp_gradients_are_sums_over_ranks(fsdp_results, tiny_model_dir):
    """Sharded layers (FSDP's reduce-scatter) and replicated parameters (`Dist.sum_gradients`) alike."""
    _, ranks = fsdp_results
    expected = _one_process_gradients(str(tiny_model_dir))
    assert any(".layers." in name for name in expected) and "model.embed_tokens.weight" in expected
    for rank in range(2):
        gradients = ranks[rank]["gradients"]
        assert gradients.keys() == expected.keys()
        for name, value in expected.items():
            assert value.abs().max() > 1e-6, name  # an average (half the sum) would show
            assert torch.allclose(gradients[name], value, rtol=1e-9, atol=1e-12), (rank, name)


def test_fsdp_clip_norm_counts_every_shard_once(fsdp_results, tiny_model_dir):
    _, ranks = fsdp_results
    expected = _one_process_gradients(str(tiny_model_dir))
    norm = float(torch.sqrt(sum(value.double().square().sum() for value in expected.values())))
    assert norm > 10 * 1e-3  # the max norm of 1e-3 clips
    scale = 1e-3 / (norm + 1e-6)  # torch's rule
    for rank in range(2):
        assert ranks[rank]["clip_norm"] == pytest.approx(norm, rel=1e-9)
        # A norm over this rank's shards alone would be clearly smaller.
        assert ranks[rank]["local_norm"] < 0.95 * norm
        for name, value in expected.items():
            assert torch.allclose(ranks[rank]["clipped"][name], value * scale, rtol=1e-9, atol=1e-15), (rank, name)


def test_fsdp_sampling_gathers_once_and_reshards(fsdp_results, tiny_model_dir):
    _, ranks = fsdp_results
    loaded = _load(str(tiny_model_dir), lora=True)
    for rank in range(2):
        settings = SamplingSettings(max_new_tokens=MAX_NEW[rank], do_sample=False)
        with merged_adapter(loaded.policy):
            expected = decode_loop(loaded.policy, loaded.tokenizer, [PROMPTS[rank]], 1, settings).input_ids
        assert torch.equal(ranks[rank]["generation"], expected)
        assert ranks[rank]["resharded"] and ranks[rank]["weights_unchanged"]


def test_fsdp_engine_sync_sends_the_whole_merged_weights(fsdp_results, tiny_model_dir):
    """`rollout.backend=vllm` under FSDP: each rank sends W + (alpha / r) B A of whole layers, as PEFT's own
    merge of the one-process model gives them, not the bare base weights or a shard."""
    _, ranks = fsdp_results
    loaded = _load(str(tiny_model_dir), lora=True)
    random_lora_b(loaded.policy, seed=5)
    base = {name.replace(".base_layer.", "."): p.detach().clone()
            for name, p in loaded.policy.get_base_model().named_parameters() if "lora_" not in name}
    expected = {name: t.detach() for name, t in loaded.policy.merge_and_unload().state_dict().items()}
    name = "model.layers.1.self_attn.q_proj.weight"
    assert not torch.allclose(expected[name], base[name])  # the adapter moves the weight
    for rank in range(2):
        weights = ranks[rank]["engine_weights"]
        assert set(weights) == set(base) and ranks[rank]["engine_weights_resharded"]
        for key, value in weights.items():
            assert value.shape == expected[key].shape, key
            assert torch.allclose(value, expected[key], rtol=0, atol=1e-12), key


@pytest.mark.parametrize("lora", [True, False])
def test_fsdp_checkpoint_is_the_one_process_format_and_resumes(fsdp_results, tiny_model_dir, tmp_path, lora):
    from safetensors.torch import load_file

    out_dir, ranks = fsdp_results
    fsdp_folder = out_dir / f"fsdp_{'lora' if lora else 'full'}" / "checkpoints" / "iter_000001"
    # The same AdamW step in one process, saved the ordinary way.
    loaded, optimizer, scheduler, _ = _update("dapo", lora, 1e6, str(tiny_model_dir), list(range(8)), Dist(),
                                              optimizer_name="adamw")
    single_folder = save_checkpoint(tmp_path, 1, loaded, optimizer, scheduler, {})
    names = sorted(p.name for p in (single_folder / "model").iterdir())
    assert sorted(p.name for p in (fsdp_folder / "model").iterdir()) == names
    for name in names:
        if name.endswith(".safetensors"):
            single, sharded = load_file(single_folder / "model" / name), load_file(fsdp_folder / "model" / name)
            assert single.keys() == sharded.keys()
            for key, value in single.items():
                assert torch.allclose(sharded[key], value, rtol=0, atol=1e-10), key
    single_optim = torch.load(single_folder / "optimizer.pt", weights_only=False)
    fsdp_optim = torch.load(fsdp_folder / "optimizer.pt", weights_only=False)
    assert single_optim["param_groups"] == fsdp_optim["param_groups"]
    for index, state in single_optim["state"].items():
        for key, value in state.items():
            assert not is_dtensor(fsdp_optim["state"][index][key])
            assert torch.allclose(fsdp_optim["state"][index][key], value, rtol=0, atol=1e-10), (index, key)
    # Loaded onto a fresh sharded model on each rank: the same weights and optimizer state.
    for rank in range(2):
        saved_weights, loaded_weights, saved_optim, reloaded = ranks[rank][f"resume/{lora}"]
        for name, value in saved_weights.items():
            assert torch.equal(loaded_weights[name], value), (rank, name)
        for index, state in saved_optim["state"].items():
            for key, value in state.items():
                assert torch.equal(reloaded["optimizer_state"]["state"][index][key], value), (rank, index, key)


def test_fsdp_is_requested_by_config_or_accelerate_launch(monkeypatch):
    config = _config("grpo", "unused")
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert not fsdp_requested(config)
    config.train.fsdp = True
    assert fsdp_requested(config)
    config.train.fsdp = False
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert fsdp_requested(config)


def test_deepspeed_and_fsdp1_launches_are_refused_with_a_message(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="does not support DeepSpeed.*configs/accelerate/fsdp.yaml"):
        init_distributed("cpu")
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(ValueError, match="FSDP2.*fsdp_version 1"):
        init_distributed("cpu")
