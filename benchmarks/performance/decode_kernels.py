"""Variants of the decoding step on the embedded SmolLM2-135M-Instruct (fp32), ms per step at 1-64 rows.

  layered    `rlvr.rollout.decode_step` as it is: one linear per projection, layer by layer
  fused      the same step with q, k, v multiplied as one [in, q+k+v] linear and gate, up as one
             (fewer, wider matrix products for the small-row GEMMs that bound the step)
  compiled   the layered step's dense parts (norm, projections, rotary; output projection, MLP)
             through torch.compile (inductor): one graph per part shared by all layers (weights
             are its inputs), dynamic in the row count; attention and the cache stay eager
  frozen     the same dense parts, one module per layer and part holding that layer's weights as
             constants, compiled with inductor's freezing and max-autotune (its own C++ GEMMs on
             prepacked weights, fused with the elementwise work, where they beat ATen's): one
             graph per layer, part and row count; the weights are baked in, so a policy update
             would have to compile again

Each variant decodes R rows of one prompt from the same cache state; the variants step in lockstep
(A B C C B A ...), so a change in the machine's load falls on each alike. Per row count: the median
ms per step over `--steps` steps after `--warmup`, and the largest |logit difference| to `layered`
at the first step (the fp32 variants must compute the same numbers up to float rounding).

    OMP_NUM_THREADS=2 python benchmarks/performance/decode_kernels.py --rows 1 4 16 64 --steps 60
    OMP_NUM_THREADS=2 python benchmarks/performance/decode_kernels.py --rows 16 --steps 30 --variants layered frozen
        # about 15 minutes on 2 cores, nearly all of it compiling
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(ROOT))

from rlvr.rollout.decode_step import Linear, decode_step, rotate  # noqa: E402


def fused_weights(weights):
    """Per layer: (qkv Linear, gate_up Linear, split sizes)."""
    fused = []
    for layer in weights.layers:
        qkv = torch.cat([layer.q.weight, layer.k.weight, layer.v.weight]).contiguous()
        gate_up = torch.cat([layer.gate.weight, layer.up.weight]).contiguous()
        fused.append((Linear(qkv, None, layer.q.weight_major), Linear(gate_up, None, layer.gate.weight_major),
                      (layer.q.weight.shape[0], layer.k.weight.shape[0], layer.v.weight.shape[0]),
                      layer.gate.weight.shape[0]))
    return fused


def fused_layer_parts(weights, fused):
    """Per layer, (before, after) for `parts_step` that multiply with the fused linears of `fused_weights`."""
    def bound(layer, qkv, gate_up, sizes, inter):
        def before(x, cos, sin):
            rows = x.shape[0]
            q, k, v = qkv(layer.input_norm(x)).split(sizes, dim=-1)
            q = q.reshape(rows, weights.num_heads, weights.head_dim)
            k = k.reshape(rows, weights.num_kv_heads, weights.head_dim)
            v = v.reshape(rows, weights.num_kv_heads, weights.head_dim)
            return rotate(q, cos, sin), rotate(k, cos, sin), v

        def after(x, attended):
            x += layer.o(attended)
            gate, up = gate_up(layer.post_attention_norm(x)).split([inter, inter], dim=-1)
            x += layer.down(F.silu(gate) * up)
            return x
        return before, after
    return [bound(layer, *parts) for layer, parts in zip(weights.layers, fused)]


def _norm(x, weight, eps: float):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def before_attention(x, cos, sin, norm_weight, q_weight, k_weight, v_weight, eps: float, heads: int,
                     kv_heads: int, dim: int):
    """Norm, q / k / v projections and rotary positions of one layer. x [R, H] -> q [R, Hq, D], k, v [R, Hkv, D]."""
    h = _norm(x, norm_weight, eps)
    q = F.linear(h, q_weight).view(-1, heads, dim)
    k = F.linear(h, k_weight).view(-1, kv_heads, dim)
    v = F.linear(h, v_weight).view(-1, kv_heads, dim)
    return rotate(q, cos, sin), rotate(k, cos, sin), v


def after_attention(x, attended, o_weight, norm_weight, gate_weight, up_weight, down_weight, eps: float):
    """Output projection, residual, norm and SwiGLU MLP of one layer. x, attended [R, H] -> [R, H]."""
    x = x + F.linear(attended, o_weight)
    h = _norm(x, norm_weight, eps)
    return x + F.linear(F.silu(F.linear(h, gate_weight)) * F.linear(h, up_weight), down_weight)


class FrozenPart(torch.nn.Module):
    """One layer's `before_attention` or `after_attention` with that layer's weights held as parameters, so
    inductor's freezing can treat them as constants (prepack them for its GEMMs)."""

    def __init__(self, function, weights: dict, constants: dict):
        super().__init__()
        self.function, self.constants = function, constants
        for name, tensor in weights.items():
            self.register_parameter(name, torch.nn.Parameter(tensor.detach().clone(), requires_grad=False))
        self.names = list(weights)

    def forward(self, *inputs):
        return self.function(*inputs, *(getattr(self, name) for name in self.names), **self.constants)


FROZEN_INDUCTOR = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}


def frozen_parts(weights, row_counts: int):
    """Per layer, (before, after): `FrozenPart`s compiled with `FROZEN_INDUCTOR` (compiled at first call),
    for up to `row_counts` row counts."""
    import torch._dynamo.config
    import torch._inductor.config

    # Every part shares FrozenPart.forward's code: one compiled entry per part and row count, where dynamo
    # would fall back to eager after 8 (recompile_limit) or 256 in all (accumulated_recompile_limit).
    entries = 2 * len(weights.layers) * row_counts
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, entries)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, entries)
    parts = []
    for layer in weights.layers:
        before = FrozenPart(before_attention,
                            {"n": layer.input_norm.weight, "q": layer.q.weight, "k": layer.k.weight,
                             "v": layer.v.weight},
                            {"eps": layer.input_norm.eps, "heads": weights.num_heads, "kv_heads": weights.num_kv_heads,
                             "dim": weights.head_dim})
        after = FrozenPart(after_attention,
                           {"o": layer.o.weight, "n": layer.post_attention_norm.weight, "g": layer.gate.weight,
                            "u": layer.up.weight, "d": layer.down.weight}, {"eps": layer.post_attention_norm.eps})
        parts.append((with_frozen_config(torch.compile(before.eval(), dynamic=False)),
                      with_frozen_config(torch.compile(after.eval(), dynamic=False))))
    return parts


def with_frozen_config(compiled):
    """`compiled` called under `FROZEN_INDUCTOR` (inductor compiles at a part's first call)."""
    def call(*inputs):
        with torch._inductor.config.patch(FROZEN_INDUCTOR):
            return compiled(*inputs)
    return call


def parts_step(weights, layer_parts, cache, token_ids, positions):
    """`decode_step` with each layer's dense parts given as callables, attention and the cache as there:
    layer_parts[i] = (before(x, cos, sin) -> q [R, Hq, D], k, v [R, Hkv, D]; after(x, attended [R, H]) -> x)."""
    rows = token_ids.shape[0]
    groups = weights.num_heads // weights.num_kv_heads
    x = weights.embed(token_ids)
    cos, sin = weights.rotary(x, positions[:, None])
    mask = cache.attention_mask()
    for index, (before, after) in enumerate(layer_parts):
        q, k, v = before(x, cos, sin)
        keys, values = cache.append(index, k, v)
        query = q.reshape(rows, weights.num_kv_heads, groups, weights.head_dim).contiguous()
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=weights.scaling)
        x = after(x, attended.reshape(rows, weights.num_heads * weights.head_dim))
    cache.advance()
    return weights.head(weights.norm(x)).contiguous()


def compiled_parts(weights):
    """One compiled graph per part, shared by every layer (weights are inputs), dynamic in the row count."""
    return (torch.compile(before_attention, dynamic=True), torch.compile(after_attention, dynamic=True))


def compiled_layer_parts(weights, parts):
    """Per layer, the shared compiled (before, after) of `compiled_parts` bound to that layer's weights."""
    before, after = parts

    def bound(layer):
        return (lambda x, cos, sin: before(x, cos, sin, layer.input_norm.weight, layer.q.weight, layer.k.weight,
                                           layer.v.weight, layer.input_norm.eps, weights.num_heads,
                                           weights.num_kv_heads, weights.head_dim),
                lambda x, attended: after(x, attended, layer.o.weight, layer.post_attention_norm.weight,
                                          layer.gate.weight, layer.up.weight, layer.down.weight,
                                          layer.post_attention_norm.eps))
    return [bound(layer) for layer in weights.layers]


def softmax_kl(reference_logits: torch.Tensor, logits: torch.Tensor) -> float:
    """Mean over rows of KL(softmax(reference) || softmax(logits)), in fp64. [R, V], [R, V] -> float."""
    p_log = torch.log_softmax(reference_logits.double(), dim=-1)
    q_log = torch.log_softmax(logits.double(), dim=-1)
    return float((p_log.exp() * (p_log - q_log)).sum(-1).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=["layered", "fused", "compiled"],
                        choices=["layered", "fused", "compiled", "frozen", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from rlvr.models import load_policy
    from rlvr.rollout.decode_loop import start_decoding
    from rlvr.rollout.decode_step import DecoderWeights

    loaded = load_policy("smollm2-135m-instruct")
    model, tokenizer = loaded.policy, loaded.tokenizer
    encoded = tokenizer(["Hi there, how are"], return_tensors="pt", add_special_tokens=False)
    capacity = encoded["input_ids"].shape[1] + args.steps + args.warmup + 2
    print(f"{'rows':>5}" + "".join(f"{name:>12}" for name in args.variants) + "   max |logit diff| vs layered")
    with torch.inference_mode():
        weights = DecoderWeights.of(model, capacity)
        extra = {"fused": fused_layer_parts(weights, fused_weights(weights)) if "fused" in args.variants else None}
        if "bf16" in args.variants:
            model16 = copy.deepcopy(model).to(torch.bfloat16)
            extra["bf16"] = (model16, DecoderWeights.of(model16, capacity))
        if "compiled" in args.variants:
            started = time.perf_counter()
            extra["compiled"] = compiled_layer_parts(weights, compiled_parts(weights))
            compile_note = time.perf_counter() - started
        if "frozen" in args.variants:
            with torch.inference_mode(False):
                extra["frozen"] = frozen_parts(weights, len(args.rows))
        for rows in args.rows:
            _, steps = start_decoding(model, encoded["input_ids"], encoded["attention_mask"], rows, weights, capacity)
            state = {name: (copy.deepcopy(steps.cache), steps.positions.clone())
                     for name in args.variants if name != "bf16"}
            if "bf16" in args.variants:  # its own prefill and cache, in bf16
                model16, weights16 = extra["bf16"]
                _, steps16 = start_decoding(model16, encoded["input_ids"], encoded["attention_mask"], rows,
                                            weights16, capacity)
                state["bf16"] = (steps16.cache, steps16.positions.clone())
            fns = {"layered": lambda cache, t, p: decode_step(weights, cache, t, p),
                   "fused": lambda cache, t, p: parts_step(weights, extra["fused"], cache, t, p),
                   "compiled": lambda cache, t, p: parts_step(weights, extra["compiled"], cache, t, p),
                   "frozen": lambda cache, t, p: parts_step(weights, extra["frozen"], cache, t, p),
                   "bf16": lambda cache, t, p: decode_step(extra["bf16"][1], cache, t, p)}
            tokens = torch.full((rows,), 42, dtype=torch.long)
            times = {name: [] for name in args.variants}
            first_logits = {}
            compile_seconds = 0.0
            for step in range(args.steps + args.warmup):
                order = args.variants if step % 2 == 0 else list(reversed(args.variants))
                for name in order:
                    cache, positions = state[name]
                    started = time.perf_counter()
                    logits = fns[name](cache, tokens, positions)
                    elapsed = time.perf_counter() - started
                    state[name] = (cache, positions + 1)
                    if step == 0:
                        first_logits[name] = logits
                        if name in ("compiled", "frozen"):
                            compile_seconds = max(compile_seconds, elapsed)
                    if step >= args.warmup:
                        times[name].append(elapsed)
            medians = {name: 1000 * statistics.median(values) for name, values in times.items()}
            diffs = {name: float((first_logits[name].float() - first_logits["layered"]).abs().max())
                     for name in args.variants if name != "layered" and "layered" in first_logits}
            kl = ("" if not {"bf16", "layered"} <= set(first_logits) else
                  f", KL(fp32 || bf16) {softmax_kl(first_logits['layered'], first_logits['bf16'].float()):.1e} nats")
            print(f"{rows:>5}" + "".join(f"{medians[name]:>10.2f}ms" for name in args.variants)
                  + "   " + ", ".join(f"{name} {value:.1e}" for name, value in diffs.items()) + kl
                  + (f"   (first compiled step {compile_seconds:.0f} s)" if compile_seconds > 1 else ""), flush=True)
    if "compiled" in args.variants:
        print(f"compile set-up {compile_note:.1f} s (compilation itself happens at the first step per row count)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
