"""FSDP for a causal LM: each decoder layer's weights sharded across ranks (FSDP2 `fully_shard`).

Only the decoder layers are sharded; the embeddings, the final norm and the (tied) LM head stay
replicated, because the training code runs the decoder body and the LM head as separate calls
(rlvr/models/completion_logprobs.py). Layer gradients are reduce-scattered as sums, not averages
(the loss already divides by the global counts). While sampling, `unsharded` gathers every layer
once and keeps it whole, so decoding steps need no collectives and ranks may stop at different steps.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

_GATHERED = "_rlvr_fsdp_gathered"  # set on a model while `unsharded` holds its layers whole


def is_dtensor(tensor) -> bool:
    """True for a DTensor (an FSDP-sharded parameter or gradient)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover (torch without distributed support)
        return False
    return isinstance(tensor, DTensor)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from every rank for a DTensor (a collective), as is otherwise."""
    return tensor.full_tensor() if is_dtensor(tensor) else tensor


def slice_like(tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A full `tensor` cut to this rank's slice when `like` is a DTensor (no communication), else as is."""
    if not is_dtensor(like):
        return tensor
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(tensor.to(like.device), like.device_mesh, like.placements, src_data_rank=None)


def decoder_layers(model: nn.Module) -> tuple[nn.Module, nn.ModuleList]:
    """The decoder body of a causal LM (a PEFT wrapper is looked through) and its list of layers."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if callable(getattr(base, "get_decoder", None)) else None
    layers = getattr(decoder, "layers", None)
    if decoder is None or decoder is base or not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"FSDP needs a causal LM whose decoder holds a `.layers` list (Llama, Qwen, ...); "
                         f"{type(base).__name__} has none")
    return decoder, layers


def fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of `model` that `shard_decoder_layers` turned into FSDP modules (layers, then body)."""
    from torch.distributed.fsdp import FSDPModule

    return [module for module in model.modules() if isinstance(module, FSDPModule)]


def shard_decoder_layers(model: nn.Module, mesh) -> int:
    """Shard each decoder layer of `model` over the 1-D device `mesh`, in place; returns the layer count.

    Every rank must hold the same full weights before the call (each keeps its own slice). The
    decoder body becomes the FSDP root with no parameters of its own (embeddings and final norm
    are left out as ignored parameters), so one root drives every layer. Parameters are replaced
    by DTensors: build the optimizer after this call.
    """
    from torch.distributed.fsdp import fully_shard

    decoder, layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    in_layers = {id(p) for p in layers.parameters()}
    outside = {p for p in decoder.parameters() if id(p) not in in_layers}
    fully_shard(decoder, mesh=mesh, reshard_after_forward=True, ignored_params=outside)
    for module in fsdp_modules(model):
        # Sum, never average: each rank's loss already carries the global denominators. Forcing
        # plain SUM collectives also avoids PREMUL_SUM, which gloo does not implement.
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
    return len(layers)


def is_sharded(model: nn.Module) -> bool:
    return bool(fsdp_modules(model))


@contextmanager
def unsharded(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block every FSDP layer of `model` is gathered whole and stays so across forwards.

    A collective on entry (one all-gather per layer) and a local free on exit, so every rank must
    enter it the same number of times; forwards inside it run no collectives, which is what lets
    ranks decode different numbers of steps. Nested use and unsharded models are no-ops. Not for
    training: parameters are not resharded after forward, and writes to them are lost on exit.
    """
    modules = fsdp_modules(model)
    if not modules or getattr(model, _GATHERED, False):
        yield model
        return
    with torch.no_grad():  # outside inference mode, so the gathered buffers stay usable by autograd later
        for module in modules:
            module.unshard()
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
    setattr(model, _GATHERED, True)
    try:
        yield model
    finally:
        setattr(model, _GATHERED, False)
        for module in modules:
            module.set_reshard_after_forward(True, recurse=False)
            module.reshard()
