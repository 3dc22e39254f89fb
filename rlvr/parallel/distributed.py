"""Data parallelism for `rlvr train`: a small `Dist` object (rank, world size, collectives).

In one process every helper is a no-op, so the training loop reads the same either way. Under
`accelerate launch` (or `rlvr train --num-processes N`) each rank samples and scores its own
whole groups; the update divides by the global sequence / token counts and the gradients are
summed across ranks (not averaged), so one optimizer step equals the one-process step on the
union of the ranks' batches. Metrics are reduced from (sum, weight) pairs gathered from all ranks.
With FSDP (rlvr/parallel/fsdp.py) the decoder layers are sharded and FSDP sums their gradients; the
other parameters stay replicated and are summed here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass

import torch


@dataclass
class Dist:
    """Rank and world size plus the few collectives training needs; no-ops when world_size == 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # Where tensors must live for a collective: cpu for gloo, the rank's GPU for nccl.
    comm_device: str = "cpu"

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum (or max / min) of `tensor` over ranks, returned on the tensor's own device and dtype."""
        if not self.enabled:
            return tensor
        ops = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX,
               "min": torch.distributed.ReduceOp.MIN}
        buffer = tensor.detach().to(self.comm_device, copy=True)
        torch.distributed.all_reduce(buffer, op=ops[op])
        return buffer.to(tensor.device)

    def sum_scalar(self, value: float) -> float:
        return float(self.all_reduce(torch.tensor(float(value), dtype=torch.float64)))

    def max_scalar(self, value: float) -> float:
        return float(self.all_reduce(torch.tensor(float(value), dtype=torch.float64), op="max"))

    def all_true(self, flag: bool) -> bool:
        """True only if `flag` holds on every rank (so skip decisions agree)."""
        return self.all_reduce(torch.tensor(1.0 if flag else 0.0, dtype=torch.float64), op="min").item() > 0

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order (picklable objects; for small data such as metrics)."""
        if not self.enabled:
            return [obj]
        gathered = [None] * self.world_size
        torch.distributed.all_gather_object(gathered, obj)
        return gathered

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        holder = [obj]
        torch.distributed.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    def sum_gradients(self, params) -> None:
        """Replace each parameter's .grad by the sum over ranks (one flat buffer, one all-reduce).

        Each rank's loss already carries the global denominators, so the sum is the full-batch
        gradient; DDP's average would divide it by the world size once more.
        """
        from rlvr.parallel.sharding import is_dtensor

        if not self.enabled:
            return
        # FSDP-sharded parameters (DTensors) had their gradients summed by FSDP's reduce-scatter.
        params = [p for p in params if p.requires_grad and not is_dtensor(p)]
        # A parameter no rank's loss reached keeps grad None (the optimizer skips it, as in one
        # process); one that some rank's loss reached gets a zero gradient on the other ranks.
        reached = self.all_reduce(torch.tensor([float(p.grad is not None) for p in params], dtype=torch.float64),
                                  op="max")  # [num_params]
        params = [p for p, flag in zip(params, reached.tolist()) if flag > 0]
        if not params:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.detach().reshape(-1).to(torch.float64) for p in params])  # [num_params]
        flat = self.all_reduce(flat)
        offset = 0
        for p in params:
            count = p.numel()
            p.grad.copy_(flat[offset : offset + count].view_as(p.grad).to(p.grad.dtype))
            offset += count

    def broadcast_parameters(self, params) -> None:
        """Copy rank 0's values into every rank's parameters (same start everywhere)."""
        if not self.enabled:
            return
        with torch.no_grad():
            for p in params:
                buffer = p.detach().to(self.comm_device, copy=True)
                torch.distributed.broadcast(buffer, src=0)
                p.copy_(buffer.to(p.device))

    def shard_range(self, count: int) -> range:
        """The indices of this rank's contiguous share of `count` items (rank order covers 0 .. count-1)."""
        return range(self.rank * count // self.world_size, (self.rank + 1) * count // self.world_size)

    def shard(self, items: list) -> list:
        """This rank's contiguous slice of `items` (rank order concatenates back to `items`)."""
        share = self.shard_range(len(items))
        return items[share.start : share.stop]


SINGLE = Dist()


def launched_world_size() -> int:
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


def init_distributed(device: str = "cpu") -> Dist:
    """The `Dist` of this process: a no-op one unless launched with several processes.

    Accelerate sets up the process group (gloo for a CPU model, nccl for GPUs) from the
    launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).
    """
    if launched_world_size() <= 1:
        return SINGLE
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        raise ValueError("rlvr train does not support DeepSpeed: launch with configs/accelerate/ddp.yaml "
                         "(replicated weights) or configs/accelerate/fsdp.yaml (decoder layers sharded), "
                         "or rlvr train --num-processes N")
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and \
            os.environ.get("FSDP_VERSION", "2") != "2":
        raise ValueError(f"rlvr shards with FSDP2 (fully_shard); the launch asks for fsdp_version "
                         f"{os.environ['FSDP_VERSION']}: set fsdp_version: 2 (configs/accelerate/fsdp.yaml)")
    try:
        from accelerate import PartialState
    except ImportError:
        raise ValueError("data-parallel training needs Accelerate: pip install 'rlvr[distributed]'") from None
    on_cpu = not device.startswith("cuda")
    state = PartialState(cpu=True, backend="gloo") if on_cpu else PartialState()
    comm_device = "cpu" if state.backend == "gloo" else str(state.device)
    return Dist(rank=state.process_index, world_size=state.num_processes,
                local_rank=state.local_process_index, comm_device=comm_device)


def rank_device(dist: Dist, device: str) -> str:
    """`cuda` / `cuda:0` becomes this rank's GPU (`cuda:<local_rank>`); other devices are kept."""
    if dist.enabled and device.startswith("cuda"):
        return f"cuda:{dist.local_rank}"
    return device


def start_ranks(dist: Dist, params, seed: int) -> None:
    """Every rank starts from rank 0's trainable weights and samples with its own seed (seed + rank)."""
    from rlvr.utils import seed_everything

    if not dist.enabled:
        return
    dist.broadcast_parameters(params)
    seed_everything(seed + dist.rank)


def check_divisible(dist: Dist, batch_size: int) -> int:
    """Prompts per rank; a group never straddles ranks, so B must split evenly."""
    if batch_size % dist.world_size:
        raise ValueError(f"rollout.batch_size={batch_size} prompts cannot be split evenly across "
                         f"{dist.world_size} processes; use a multiple of {dist.world_size}")
    return batch_size // dist.world_size


def reduce_metric_sums(dist: Dist, sums) -> None:
    """Replace a MetricSums' (sum, weight) pairs by their totals over ranks, in place."""
    if not dist.enabled:
        return
    totals_sum: dict[str, float] = {}
    totals_weight: dict[str, float] = {}
    for rank_sums, rank_weights in dist.gather((dict(sums.sums), dict(sums.weights))):
        for name, value in rank_sums.items():
            totals_sum[name] = totals_sum.get(name, 0.0) + value
            totals_weight[name] = totals_weight.get(name, 0.0) + rank_weights[name]
    sums.sums.clear()
    sums.weights.clear()
    sums.sums.update(totals_sum)
    sums.weights.update(totals_weight)


def normalize_advantages_global(dist: Dist, advantages: torch.Tensor, enabled: bool, eps: float = 1e-8) -> torch.Tensor:
    """`maybe_normalize_advantages` with the mean and population std of all ranks' advantages. [n] -> [n]"""
    if not enabled:
        return advantages
    stats = torch.stack([advantages.double().sum(), advantages.double().square().sum(),
                         torch.tensor(float(advantages.numel()), dtype=torch.float64)])  # [3]
    total, total_sq, count = dist.all_reduce(stats).tolist()
    high = dist.max_scalar(float(advantages.max()) if advantages.numel() else -float("inf"))
    low = -dist.max_scalar(-float(advantages.min()) if advantages.numel() else -float("inf"))
    if count == 0 or high == low:
        return torch.zeros_like(advantages)
    mean = total / count
    std = max(total_sq / count - mean * mean, 0.0) ** 0.5
    return (advantages - mean) / (std + eps)


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_extra(dist: Dist) -> dict | None:
    """What a distributed checkpoint adds: the world size and every rank's RNG states (collective)."""
    from rlvr.utils import rng_state

    if not dist.enabled:
        return None
    return {"world_size": dist.world_size, "rng": dist.gather(rng_state())}


def restore_rank_state(dist: Dist, extra: dict | None, checkpoint) -> None:
    """Check the saved world size and restore this rank's RNG states."""
    from rlvr.utils import set_rng_state

    saved = 1 if extra is None else int(extra["world_size"])
    if saved != dist.world_size:
        raise ValueError(f"checkpoint {checkpoint} was written by a run with {saved} process(es); resume it "
                         f"with the same number (this launch has {dist.world_size}): rollouts are split per rank")
    if dist.enabled:
        set_rng_state(extra["rng"][dist.rank])


# ----------------------------------------------------------------------------- launching


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(num_processes: int, rlvr_args: list[str]) -> list[str]:
    """`accelerate launch` of `python -m rlvr <rlvr_args>` with N local processes (torchrun underneath)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
            "--num_processes", str(num_processes), "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(_free_port()), "-m", "rlvr", *rlvr_args]


def launch(num_processes: int, rlvr_args: list[str]) -> int:
    """Run `rlvr <rlvr_args>` in N processes on this machine; returns the launcher's exit status."""
    if num_processes < 1:
        raise ValueError(f"--num-processes must be >= 1, got {num_processes}")
    if launched_world_size() > 1:
        raise ValueError("--num-processes cannot be used inside an already distributed launch")
    try:
        import accelerate  # noqa: F401  (only checking it is installed)
    except ImportError:
        raise ValueError("--num-processes needs Accelerate: pip install 'rlvr[distributed]'") from None
    return subprocess.run(launch_command(num_processes, rlvr_args)).returncode
