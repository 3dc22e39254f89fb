"""One decoding step of a Llama-family decoder, run layer by layer on a `PreallocatedKVCache`.

Calling the model's forward for one token per row costs more in framework work (mask building,
cache bookkeeping, keyword plumbing, hooks) than the arithmetic of a small model, and its
`DynamicCache` copies the whole cache every step. `DecoderWeights` reads the weights of a
supported decoder once per rollout (Llama, Mistral, Qwen2, Qwen3: RMSNorm, rotary positions,
grouped-query attention, SwiGLU; Qwen2's q/k/v biases and Qwen3's per-head q/k norms), and
`decode_step` computes what the model's forward computes for one new token per row, with the
same operations in the same order (weight-major linears on the CPU, as in `weight_major_linears`),
writing one position of the cache and attending over its filled part.

Anything else (another architecture, an unmerged or non-plain adapter, FSDP-sharded layers, a
sliding window shorter than the rollout, a forward hook on any module) gets `None` from
`DecoderWeights.of` and the caller uses the model's own forward instead;
`DecoderWeights.unsupported_reason` says why.

On a CPU with oneDNN, every fp32 linear and the LM head multiply with a copy of their weight in
oneDNN's packed layout (`torch.ops.mkldnn._reorder_linear_weight`) up to `PACKED_LAYER_ROWS` rows
(layer linears) or `PACKED_HEAD_ROWS` rows (the head): the same product, computed by a GEMM laid out
for that weight. A linear packs its weight at its first call with that few rows, so a rollout whose
steps never get that few rows packs nothing, and with a `WeightCopies` store (the decode_loop
backend holds one for each sync block) the packed copies made by one `decode_loop` call serve the
later calls of the block on the same weights (`rlvr/rollout/weight_copies.py`).
For SmolLM2 on 2 cores that took a pass over the 210 layer linears from 93-104 to 51-57 ms at 4 rows
and the 49k x 576 head from 40-65 to 9-20 ms at 4-16 rows; at 16 rows and more the layer linears
were as fast or faster weight-major, and stay so (benchmarks/performance/decode_compile.py). The copy costs the
weights' size again (538 MB in fp32) for as long as they are held.

`DecoderWeights.cast(dtype)` gives the same step in another dtype (bfloat16 decodes in about half
the time of float32 on a CPU with bf16 units): a sampler that is then not the trainer, whose
log-probs `decode_loop` reports (its option `dtype`). Its copies of the weights are held in the
same store.

Each layer of `decode_step` is `before_attention` (norm, projections, rotary), the attention over
the cache, and `after_attention` (output projection, residuals, the MLP); a caller may pass other
functions for the two (benchmarks/performance/decode_compile.py passes `torch.compile`d ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.models.kernels import WEIGHT_MAJOR_ABOVE_ROWS
from rlvr.rollout.kv_cache import PreallocatedKVCache
from rlvr.rollout.weight_copies import WeightCopies, copy_of

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# RMSNorms whose forward is weight * (x * rsqrt(mean(x^2) + eps)), computed in fp32.
RMS_NORM_CLASSES = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"})
MLP_CLASSES = frozenset({"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP"})
ATTENTION_IMPLEMENTATIONS = frozenset({"sdpa", "sdpa_gqa", "eager"})
# The LM head (49k x 576 for SmolLM2) multiplies as x W^T up to this many rows, weight-major above:
# measured 8.7 against 10.9 ms at 16 rows, 2 threads (benchmarks/performance/decode_speed.py, "linears").
HEAD_WEIGHT_MAJOR_ABOVE_ROWS = 32
# Up to this many rows a linear with a packed weight multiplies with it (see the module docstring):
# layer linears (576 x 576 to 1536 x 576 for SmolLM2) and the LM head. The packing is laid out for
# PACKED_FOR_ROWS rows, which was as fast as packing for each row count (1, 4 or 16).
PACKED_LAYER_ROWS = 12
PACKED_HEAD_ROWS = 32
PACKED_FOR_ROWS = 16


def onednn_packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def packable(weight: torch.Tensor) -> bool:
    """Whether `pack_weight` packs this weight: fp32 on the CPU, with oneDNN."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and onednn_packing_available()


def pack_weight(weight: torch.Tensor) -> Optional[torch.Tensor]:
    """weight [out, in] in oneDNN's packed layout for `torch.ops.mkldnn._linear_pointwise`, or None where
    that does not apply (not `packable`)."""
    if not packable(weight):
        return None
    with torch.inference_mode():
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)


@dataclass
class Linear:
    weight: torch.Tensor  # [out, in]
    bias: Optional[torch.Tensor]  # [out] or None
    weight_major: bool  # on the CPU: (W x^T)^T above `rows_for_x_major` rows (see `rlvr.models.kernels`)
    rows_for_x_major: int = WEIGHT_MAJOR_ABOVE_ROWS
    packed: Optional[torch.Tensor] = None  # `weight` in oneDNN's packed layout (`pack_weight`), or None
    packed_up_to_rows: int = PACKED_LAYER_ROWS
    pack: bool = False  # pack `weight` at the first call of up to `packed_up_to_rows` rows (when `packed` is None)
    copies: Optional[WeightCopies] = None  # where packed copies are held across calls, or None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [R, in] -> [R, out]: with the packed weight up to `packed_up_to_rows` rows; else weight-major,
        a transposed view of a contiguous [out, R] product (the next matmul reads it as is; elementwise
        operations do not care about the layout), or x W^T."""
        if x.shape[0] <= self.packed_up_to_rows and (self.packed is not None or self.pack):
            if self.packed is None:
                self.packed = copy_of(self.copies, self.weight, "onednn", pack_weight)
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")
        if not self.weight_major or x.shape[0] <= self.rows_for_x_major:
            return F.linear(x, self.weight, self.bias)
        out = torch.mm(self.weight, x.t()).t()  # [R, out], computed as [out, in] @ [in, R]
        return out if self.bias is None else out + self.bias


@dataclass
class RMSNorm:
    weight: torch.Tensor  # [H]
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The model's RMSNorm on the last dimension, operation for operation. x [..., H] -> [..., H]."""
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


@dataclass
class LayerWeights:
    input_norm: RMSNorm
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    q_norm: Optional[RMSNorm]  # Qwen3: per-head norm of queries and keys before the rotation
    k_norm: Optional[RMSNorm]
    post_attention_norm: RMSNorm
    gate: Linear
    up: Linear
    down: Linear


@dataclass
class CastEmbedding:
    """The model's embedding module with its output cast to `dtype` (equal to looking up a `dtype` copy)."""
    module: nn.Module
    dtype: torch.dtype

    def __call__(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.module(token_ids).to(self.dtype)  # [R] -> [R, H]


def _base_model(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _linear(module: nn.Module, copies: Optional[WeightCopies], rows_for_x_major: int = WEIGHT_MAJOR_ABOVE_ROWS,
            packed_up_to_rows: int = PACKED_LAYER_ROWS) -> Linear:
    """The weight a projection multiplies by: an `nn.Linear`, or a PEFT LoRA layer whose adapter is merged
    into its base layer (or has no adapter active). Anything else raises `_Unsupported`."""
    if type(module) is not nn.Linear:
        base = getattr(module, "base_layer", None)
        if base is None or not hasattr(module, "merged"):
            raise _Unsupported(f"projection {type(module).__name__} is not a linear layer")
        active = [a for a in getattr(module, "active_adapters", []) if a in getattr(module, "lora_A", {})]
        runs_base_only = (module.merged and not module.disable_adapters) or (
            not module.merged and (module.disable_adapters or not active))
        if not runs_base_only:
            raise _Unsupported("an unmerged adapter (its layers add a low-rank product to the base layer)")
        module = base
        if type(module) is not nn.Linear:
            raise _Unsupported(f"adapter base layer {type(module).__name__} is not nn.Linear")
    weight = module.weight
    if type(weight) not in (torch.Tensor, nn.Parameter):
        raise _Unsupported(f"weight of type {type(weight).__name__} (a sharded or quantized tensor)")
    bias = None if module.bias is None else module.bias.detach()
    weight = weight.detach()
    return Linear(weight, bias, weight.device.type == "cpu", rows_for_x_major, None, packed_up_to_rows,
                  packable(weight), copies)


def _rms_norm(module: nn.Module) -> RMSNorm:
    if type(module).__name__ not in RMS_NORM_CLASSES or "forward" in vars(module):
        raise _Unsupported(f"norm {type(module).__name__}")
    return RMSNorm(module.weight.detach(), float(module.variance_epsilon))


class _Unsupported(Exception):
    pass


def _first_hooked_module(model: nn.Module) -> Optional[str]:
    """The name of the first module with a forward (pre-)hook, or None: a hook may change what the
    model computes (steering, logit edits), and `decode_step` does not call the modules' forwards."""
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return name or type(module).__name__
    return None


@dataclass
class DecoderWeights:
    embed: nn.Module | CastEmbedding  # token embedding module, called as is
    rotary: nn.Module  # the model's rotary embedding module: (x, position_ids [R, 1]) -> cos, sin [R, 1, D]
    layers: list[LayerWeights]
    norm: RMSNorm
    head: Linear
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float
    copies: Optional[WeightCopies] = None  # where packed and cast copies are held across calls, or None

    @classmethod
    def of(cls, model, capacity: int, copies: Optional[WeightCopies] = None) -> Optional["DecoderWeights"]:
        """The weights of `model` for `decode_step`, or None when it is not supported (see module docstring).
        With `copies`, the packed and cast copies of the weights are taken from there and left there."""
        try:
            return cls._read(model, capacity, copies)
        except _Unsupported:
            return None

    @classmethod
    def unsupported_reason(cls, model, capacity: int) -> Optional[str]:
        """Why `of` gives None for `model` (None when it is supported)."""
        try:
            cls._read(model, capacity)
        except _Unsupported as reason:
            return str(reason)
        return None

    @classmethod
    def _read(cls, model, capacity: int, copies: Optional[WeightCopies] = None) -> "DecoderWeights":
        from rlvr.parallel.sharding import is_sharded

        base = _base_model(model)
        config = getattr(base, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise _Unsupported(f"model type {model_type!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
        if is_sharded(model):
            raise _Unsupported("FSDP-sharded layers")
        if getattr(config, "_attn_implementation", None) not in ATTENTION_IMPLEMENTATIONS:
            raise _Unsupported(f"attention implementation {getattr(config, '_attn_implementation', None)!r}")
        window = getattr(config, "sliding_window", None)
        windowed = model_type == "mistral" or "sliding_attention" in (getattr(config, "layer_types", None) or ())
        if windowed and window is not None and capacity > window:
            raise _Unsupported(f"sliding window of {window} positions, shorter than the rollout ({capacity})")
        if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
            raise _Unsupported("logits post-processing")
        hooked = _first_hooked_module(model)
        if hooked is not None:
            raise _Unsupported(f"a forward hook on {hooked} (the step would bypass it)")
        decoder = base.get_decoder()
        head = base.get_output_embeddings()
        layers = []
        for layer in decoder.layers:
            attention, mlp = layer.self_attn, layer.mlp
            if type(mlp).__name__ not in MLP_CLASSES or type(mlp.act_fn).__name__ not in ("SiLUActivation", "SiLU"):
                raise _Unsupported(f"MLP {type(mlp).__name__} with {type(mlp.act_fn).__name__}")
            has_qk_norm = hasattr(attention, "q_norm")
            layers.append(LayerWeights(
                input_norm=_rms_norm(layer.input_layernorm),
                q=_linear(attention.q_proj, copies), k=_linear(attention.k_proj, copies),
                v=_linear(attention.v_proj, copies), o=_linear(attention.o_proj, copies),
                q_norm=_rms_norm(attention.q_norm) if has_qk_norm else None,
                k_norm=_rms_norm(attention.k_norm) if has_qk_norm else None,
                post_attention_norm=_rms_norm(layer.post_attention_layernorm),
                gate=_linear(mlp.gate_proj, copies), up=_linear(mlp.up_proj, copies),
                down=_linear(mlp.down_proj, copies),
            ))
        first = decoder.layers[0].self_attn
        num_heads = config.num_attention_heads
        return cls(
            embed=decoder.embed_tokens, rotary=decoder.rotary_emb, layers=layers, norm=_rms_norm(decoder.norm),
            head=_linear(head, copies, HEAD_WEIGHT_MAJOR_ABOVE_ROWS, PACKED_HEAD_ROWS), num_heads=num_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=first.head_dim, scaling=float(first.scaling), copies=copies,
        )

    def cast(self, dtype: torch.dtype) -> "DecoderWeights":
        """A copy that computes in `dtype`, as the model converted to `dtype` would: every linear, norm and
        the head hold copies of their weights in `dtype`, the embedding's output is cast to it, and the
        cache `new_cache` makes holds it. Returns self when the weights already are `dtype`. The copies are
        taken from and left in `self.copies` when there is one."""
        if self.head.weight.dtype == dtype:
            return self

        def to_dtype(tensor: torch.Tensor) -> torch.Tensor:
            return copy_of(self.copies, tensor, str(dtype), lambda source: source.to(dtype))

        def linear(source: Linear) -> Linear:
            weight = to_dtype(source.weight)
            return Linear(weight, None if source.bias is None else to_dtype(source.bias), source.weight_major,
                          source.rows_for_x_major, None, source.packed_up_to_rows, packable(weight), self.copies)

        def norm(n: Optional[RMSNorm]) -> Optional[RMSNorm]:
            return None if n is None else RMSNorm(to_dtype(n.weight), n.eps)

        layers = [LayerWeights(
            input_norm=norm(layer.input_norm), q=linear(layer.q), k=linear(layer.k), v=linear(layer.v),
            o=linear(layer.o), q_norm=norm(layer.q_norm), k_norm=norm(layer.k_norm),
            post_attention_norm=norm(layer.post_attention_norm), gate=linear(layer.gate), up=linear(layer.up),
            down=linear(layer.down)) for layer in self.layers]
        return DecoderWeights(embed=CastEmbedding(self.embed, dtype), rotary=self.rotary, layers=layers,
                              norm=norm(self.norm), head=linear(self.head), num_heads=self.num_heads,
                              num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, scaling=self.scaling,
                              copies=self.copies)

    def new_cache(self, rows: int, capacity: int) -> PreallocatedKVCache:
        weight = self.layers[0].k.weight
        return PreallocatedKVCache(len(self.layers), rows, self.num_kv_heads, capacity, self.head_dim,
                                   weight.dtype, weight.device)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding as transformers applies it: x * cos + rotate_half(x) * sin. x [R, H, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


def before_attention(layer: LayerWeights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int,
                     num_kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's work from its input norm to the rotated query, key and value.
    x [R, H], cos, sin [R, 1, D] -> query [R, Hkv, G, D] (G = num_heads // num_kv_heads), key [R, Hkv, D],
    value [R, Hkv, D]."""
    rows = x.shape[0]
    h = layer.input_norm(x)
    q = layer.q(h).view(rows, num_heads, head_dim)  # [R, Hq, D]
    k = layer.k(h).view(rows, num_kv_heads, head_dim)  # [R, Hkv, D]
    v = layer.v(h).view(rows, num_kv_heads, head_dim)
    if layer.q_norm is not None:
        q, k = layer.q_norm(q), layer.k_norm(k)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    # The G query heads that share a key/value head become G query positions of that head: no
    # copies of keys and values (the query is one token, so there is no causal order among them).
    # contiguous: with a strided last dimension scaled_dot_product_attention takes its slow math path
    return q.reshape(rows, num_kv_heads, num_heads // num_kv_heads, head_dim).contiguous(), k, v


def after_attention(layer: LayerWeights, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """A layer's work from the attention's output to the layer's output: x [R, H] (updated in place and
    returned), attended [R, Hkv, G, D]."""
    x += layer.o(attended.reshape(x.shape[0], -1))  # x stays contiguous
    h = layer.post_attention_norm(x)
    x += layer.down(F.silu(layer.gate(h)) * layer.up(h))
    return x


def decode_step(weights: DecoderWeights, cache: PreallocatedKVCache, token_ids: torch.Tensor,
                positions: torch.Tensor, head_rows: Optional[torch.Tensor] = None, *,
                before: Callable = before_attention, after: Callable = after_attention) -> torch.Tensor:
    """Run one new token per cache row through the decoder; return last-position logits.

    token_ids [R] long, positions [R] long (rotary position of each row's new token; rows are
    left-padded, so it differs from the cache position), R == cache.rows. head_rows [R'] selects
    the rows the LM head runs on (None: all). Writes position `cache.length` and advances it.
    `before` and `after`: each layer's work around its attention, with the arguments and results
    of `before_attention` and `after_attention`. Returns logits [R', V] (R' = R without head_rows).
    """
    x = weights.embed(token_ids)  # [R, H]
    cos, sin = weights.rotary(x, positions[:, None])  # [R, 1, D] each, broadcast over heads
    mask = cache.attention_mask()  # [R, 1, 1, T] or None
    for index, layer in enumerate(weights.layers):
        query, k, v = before(layer, x, cos, sin, weights.num_heads, weights.num_kv_heads, weights.head_dim)
        keys, values = cache.append(index, k, v)  # [R, Hkv, T, D]
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=weights.scaling)
        x = after(layer, x, attended)
    cache.advance()
    x = weights.norm(x)
    if head_rows is not None:
        x = x[head_rows]
    return weights.head(x).contiguous()  # [R', V], rows contiguous for sampling
