"""FSDP for `rlvr train`: when it is on, sharding the loaded model, gradient clipping, checkpoint state.

Turned on by `train.fsdp: true` or by an Accelerate FSDP launch (ACCELERATE_USE_FSDP=true, e.g.
configs/accelerate/fsdp.yaml), and only with several processes. The decoder layers of the policy
(and of a full fine-tuning reference copy) are sharded (rlvr/parallel/sharding.py); the step is still
the one-process step on the union of the ranks' batches: layer gradients are reduce-scattered as
sums, replicated ones summed by `Dist.sum_gradients`, and clipping uses the norm over both.
Checkpoints hold full tensors in the same files as without FSDP, so either kind resumes either way
(with the same number of processes).
"""

from __future__ import annotations

import os

import torch

from rlvr.parallel.sharding import full_tensor, is_dtensor, shard_decoder_layers, slice_like
from rlvr.parallel.distributed import SINGLE, Dist


def fsdp_requested(config) -> bool:
    """`train.fsdp` or an Accelerate launch with distributed_type FSDP."""
    return bool(config.train.fsdp) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def device_mesh(dist: Dist):
    """A 1-D mesh over all ranks, on the device type the process group talks on (cpu: gloo, cuda: nccl)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(torch.device(dist.comm_device).type, (dist.world_size,))


def shard_loaded_model(loaded, dist: Dist) -> int:
    """Shard the decoder layers of the policy and of the frozen reference copy (if any); returns the layer count.

    Call after every rank holds rank 0's weights (`start_ranks`), then build the optimizer from the
    new (DTensor) parameters.
    """
    mesh = device_mesh(dist)
    layers = shard_decoder_layers(loaded.policy, mesh)
    if loaded.reference is not None:
        shard_decoder_layers(loaded.reference, mesh)
    return layers


def clip_grad_norm(params, max_norm: float, dist: Dist = SINGLE) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` over sharded and replicated gradients together; returns the norm.

    The squared norm of the DTensor gradients is the sum over ranks of their local shards'; the
    replicated gradients are whole on every rank and are counted once. Without DTensors this is
    torch's own function.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not any(is_dtensor(g) for g in grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    sharded_sq = torch.zeros((), dtype=torch.float64)
    replicated_sq = torch.zeros((), dtype=torch.float64)
    for grad in grads:
        if is_dtensor(grad):
            sharded_sq += grad.to_local().detach().double().square().sum().cpu()
        else:
            replicated_sq += grad.detach().double().square().sum().cpu()
    total_norm = (dist.all_reduce(sharded_sq) + replicated_sq).sqrt()  # []
    # torch's rule: scale by max_norm / (norm + 1e-6), never up.
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for grad in grads:
        local = grad.to_local() if is_dtensor(grad) else grad
        local.mul_(scale.to(local.dtype))
    return total_norm


def full_optimizer_state(optimizer) -> dict:
    """`optimizer.state_dict()` with every DTensor gathered whole (a collective: call on every rank)."""
    state_dict = optimizer.state_dict()
    state = {index: {key: full_tensor(value) if torch.is_tensor(value) else value
                     for key, value in sorted(param_state.items())}
             for index, param_state in sorted(state_dict["state"].items())}
    return {**state_dict, "state": state}


def shard_optimizer_state(optimizer, state_dict: dict) -> dict:
    """A full optimizer state dict (as saved) with each sharded parameter's tensors cut to this rank's slice.

    Every rank reads the whole file and keeps its own slice, so no communication is needed.
    Tensors shaped like their parameter are sharded like it; scalars such as Adam's `step` stay as they are.
    """
    state = dict(state_dict["state"])
    for group, saved_group in zip(optimizer.param_groups, state_dict["param_groups"]):
        for param, index in zip(group["params"], saved_group["params"]):
            if not is_dtensor(param) or index not in state:
                continue
            state[index] = {key: slice_like(value, param) if torch.is_tensor(value) and value.shape == param.shape
                            else value for key, value in state[index].items()}
    return {**state_dict, "state": state}
