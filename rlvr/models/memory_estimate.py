"""Peak memory of a run, estimated from the model's shape and the run's sizes before any weight loads.

`estimate_memory` is arithmetic on numbers (an `Architecture`, `RunSizes`): what stays for the
whole run (the weights, a full fine-tune's frozen reference, a separate PPO value model, the
trainable weights' gradients and AdamW moments) plus the larger of the two phases of an iteration,
generation (the KV cache of the rollout batch, or of the eval batch) and the update (one
microbatch's activations and the completion log-prob path's logits chunks). RL, SFT, expert
iteration and `rlvr eval` (no update) each give it their own `RunSizes`. It counts the tensors it
names and nothing else (allocator slack, the Python process), so a run that fits by a small margin
may still not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rlvr.core.logprobs import DEFAULT_MAX_CHUNK_BYTES
from rlvr.models.architecture import Architecture


@dataclass(frozen=True)
class RunSizes:
    """The sizes of a run that set its memory.

    dtype_bytes: bytes of one weight (4 for float32). lora_rank: 0 trains every weight.
    rollout_rows, rollout_tokens: sequences generated together (B*G) and their length (prompt +
    max_new_tokens); eval_rows, eval_tokens the same for the eval. microbatch_rows: sequences per
    forward/backward pass, each update_tokens long (None: rollout_tokens; SFT trains on its data's
    pairs). training=False (`rlvr eval`): the weights and generation only, no update.
    """

    dtype_bytes: int
    rollout_rows: int
    rollout_tokens: int
    microbatch_rows: int
    eval_rows: int = 0
    eval_tokens: int = 0
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    reference: bool = False  # a KL term: full fine-tuning keeps a frozen copy (LoRA disables its adapter)
    value_model: str = "none"  # none, shared (a head on the policy) or separate (a second model)
    gradient_checkpointing: bool = False
    update_tokens: Optional[int] = None
    training: bool = True


def module_shapes(arch: Architecture) -> dict[str, tuple[int, int]]:
    """(in, out) features of each projection of one decoder layer, by the names LoRA targets."""
    h, i = arch.hidden_size, arch.intermediate_size
    q_dim, kv_dim = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    return {"q_proj": (h, q_dim), "k_proj": (h, kv_dim), "v_proj": (h, kv_dim), "o_proj": (q_dim, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def parameter_count(arch: Architecture) -> int:
    """Embeddings (and an untied LM head), each layer's projections and two norms, the final norm."""
    h, v = arch.hidden_size, arch.vocab_size
    per_layer = sum(fan_in * fan_out for fan_in, fan_out in module_shapes(arch).values()) + 2 * h
    return v * h * (1 if arch.tie_word_embeddings else 2) + arch.num_layers * per_layer + h


def lora_parameter_count(arch: Architecture, rank: int, targets: tuple[str, ...]) -> int:
    """A rank-r adapter (A [r, in], B [out, r]) on each targeted projection of each layer."""
    shapes = module_shapes(arch)
    return arch.num_layers * sum(rank * (fan_in + fan_out) for name, (fan_in, fan_out) in shapes.items()
                                 if name in targets)


def activation_elements_per_token(arch: Architecture) -> int:
    """Values one decoder layer keeps for backward, per token: the two norms' inputs and outputs (4 h),
    the query and the attention output (2 q_dim), keys and values (2 kv_dim), and the gated MLP's
    gate, up, activation and product (4 intermediate). Attention itself is fused (no [L, L] scores)."""
    q_dim, kv_dim = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    return 4 * arch.hidden_size + 2 * q_dim + 2 * kv_dim + 4 * arch.intermediate_size


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by part (`parts`, in a fixed order); `peak` = the persistent parts + the larger phase."""

    parts: dict[str, int]

    @property
    def generation(self) -> int:
        return self.parts["KV cache"]

    @property
    def update(self) -> int:
        return self.parts["activations"] + self.parts["logits chunks"]

    @property
    def peak(self) -> int:
        persistent = sum(v for k, v in self.parts.items() if k not in PHASE_PARTS)
        return persistent + max(self.generation, self.update)


PHASE_PARTS = ("KV cache", "activations", "logits chunks")


def estimate_memory(arch: Architecture, sizes: RunSizes) -> MemoryEstimate:
    """Bytes each part of a run holds at its peak (see the module docstring for what is counted)."""
    b = sizes.dtype_bytes
    weights = parameter_count(arch) * b
    lora = sizes.lora_rank > 0
    trainable = lora_parameter_count(arch, sizes.lora_rank, sizes.lora_targets) if lora else parameter_count(arch)
    separate = sizes.value_model == "separate"
    models_trained = 2 if separate else 1
    # Each trained model: its gradients and AdamW's two moments, in the weights' dtype; a LoRA adapter's
    # own weights besides.
    training_state = models_trained * trainable * b * (3 + (1 if lora else 0)) if sizes.training else 0
    kv_per_token = arch.num_layers * 2 * arch.num_kv_heads * arch.head_dim * b  # keys and values, every layer
    kv_tokens = max(sizes.rollout_rows * sizes.rollout_tokens, sizes.eval_rows * sizes.eval_tokens)
    update_tokens = sizes.rollout_tokens if sizes.update_tokens is None else sizes.update_tokens
    microbatch_tokens = sizes.microbatch_rows * update_tokens if sizes.training else 0
    per_layer = activation_elements_per_token(arch)
    if sizes.gradient_checkpointing:  # each layer's input, and one layer's full set while it is recomputed
        kept = arch.num_layers * arch.hidden_size + per_layer
    else:
        kept = arch.num_layers * per_layer
    logit_bytes = max(b, 4)  # upcast to at least float32 before the softmax
    # A chunk of at most DEFAULT_MAX_CHUNK_BYTES logits and its probabilities are alive at once.
    logits = 2 * min(microbatch_tokens * arch.vocab_size * logit_bytes, DEFAULT_MAX_CHUNK_BYTES)
    return MemoryEstimate(parts={
        "weights": weights,
        "reference model": weights if sizes.reference and not lora else 0,
        "value model": weights if separate else 0,
        "gradients and optimizer state": training_state,
        "KV cache": kv_tokens * kv_per_token,
        "activations": models_trained * microbatch_tokens * kept * b,
        "logits chunks": logits,
    })


def format_bytes(count: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"

