"""Would int8 decoding steps help where bf16 is slow? The speed of fbgemm's dynamic int8 linears at the
decoding step's shapes, and how far an int8 copy of the model samples from the fp32 policy.

On a CPU without bf16 units (AVX2 only) the bf16 decoding step is 7x slower than fp32 at 16 rows
(`docs/results/performance.md`, "On a CPU without bf16 units"), so the reduced-precision sampler would
have to be int8 there. Two readings, same process:

  speed  ms for one decoding step's linears (the layers' 7 products x layers, and the LM head) at each
         --rows: fp32 `F.linear`; `torch.ops.quantized.linear_dynamic` on per-channel int8 weights
         (the rows quantized to int8 too: "int8"); `aten::_weight_int8pack_mm` on the same int8 weights
         with the rows kept in fp32 ("weight-only int8")
  drift  the model's next-token distributions over a few fixed texts: KL(fp32 || copy) per token and
         the share of positions whose argmax agrees, for the int8 copy, a weight-only int8 copy (its
         weights rounded to the int8 grid, computed in fp32) and a bf16 copy

    python benchmarks/performance/int8_sampler.py
    python benchmarks/performance/int8_sampler.py --rows 16 --model path/to/model
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

TEXTS = [
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "The quick brown fox jumps over the lazy dog. Write a short poem about it:",
]


def milliseconds(fn, repeats: int) -> float:
    for _ in range(min(repeats, 5)):
        fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats * 1e3


def channel_scales(weight):
    """Symmetric per-channel int8 scales of `weight` [out, in]: each row's largest |value| / 127. -> [out]"""
    return (weight.abs().amax(dim=1) / 127).clamp_min(1e-8)


def int8_weight(weight):
    """fbgemm's packed per-channel symmetric int8 copy of `weight` [out, in]."""
    import torch

    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    quantized = torch.quantize_per_channel(weight, channel_scales(weight).double(), zero_points, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, None)


def weight_only_int8(weight):
    """Per-channel symmetric int8 copy of `weight` [out, in] and its scales [out] (fp32), as
    `aten::_weight_int8pack_mm` takes them: weight ~= int8 * scales[:, None]."""
    import torch

    scales = channel_scales(weight)  # [out]
    return torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8), scales


def weight_only_int8_copy(model):
    """A copy of `model` whose every nn.Linear weight (the LM head's too, untied from the embedding) is
    rounded to its int8 grid: what weight-only int8 products compute, up to summation order."""
    import torch

    other = copy.deepcopy(model)
    for module in other.modules():
        if isinstance(module, torch.nn.Linear):
            quantized, scales = weight_only_int8(module.weight.detach())
            module.weight = torch.nn.Parameter(quantized.float() * scales[:, None], requires_grad=False)
    return other


def linear_speed(model, rows: int, repeats: int) -> dict[str, float]:
    """ms of one step's linears at `rows` rows: every nn.Linear of the layers, then the LM head."""
    import torch
    import torch.nn.functional as F

    head = model.get_output_embeddings()
    layer_weights = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    result = {}
    for part, weights in (("layers", layer_weights), ("head", [head.weight.detach()])):
        packed = [int8_weight(w) for w in weights]
        inputs = [torch.randn(rows, w.shape[1]) for w in weights]  # [rows, in] each
        result[f"{part}_fp32_ms"] = milliseconds(lambda: [F.linear(x, w) for x, w in zip(inputs, weights)], repeats)
        result[f"{part}_int8_ms"] = milliseconds(
            lambda: [torch.ops.quantized.linear_dynamic(x, p, True) for x, p in zip(inputs, packed)], repeats)
        weight_only = [weight_only_int8(w) for w in weights]
        result[f"{part}_weight_only_int8_ms"] = milliseconds(
            lambda: [torch.ops.aten._weight_int8pack_mm(x, q, s) for x, (q, s) in zip(inputs, weight_only)], repeats)
    return result


def drift(model, tokenizer) -> dict[str, dict[str, float]]:
    """KL(fp32 || copy) per real token (mean, max) and argmax agreement, for an int8, a weight-only int8
    and a bf16 copy."""
    import torch

    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    real = batch["attention_mask"].bool()  # [B, L]
    int8 = torch.ao.quantization.quantize_dynamic(
        copy.deepcopy(model), {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8)
    result = {}
    with torch.no_grad():
        exact = model(**batch).logits.float().log_softmax(-1)  # [B, L, V]
        copies = (("int8", int8), ("weight-only int8", weight_only_int8_copy(model)),
                  ("bf16", copy.deepcopy(model).bfloat16()))
        for name, other in copies:
            approx = other(**batch).logits.float().log_softmax(-1)  # [B, L, V]
            kl = (exact.exp() * (exact - approx)).sum(-1)[real]  # [tokens]
            agree = (exact.argmax(-1) == approx.argmax(-1))[real].float().mean()
            result[name] = {"kl_mean": kl.mean().item(), "kl_max": kl.max().item(), "argmax_agree": agree.item()}
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from rlvr.models import load_policy
    from rlvr.models.product_speed import cpu_units

    warnings.filterwarnings("ignore", message=".*quantiz.*deprecated")
    torch.set_num_threads(args.threads)
    torch.backends.quantized.engine = "fbgemm"
    loaded = load_policy(args.model, lora=None)
    model = loaded.policy.eval()
    loaded.tokenizer.padding_side = "left"
    speeds = {rows: linear_speed(model, rows, args.repeats) for rows in args.rows}
    drifts = drift(model, loaded.tokenizer)
    print(f"{cpu_units()}, {args.threads} threads; one decoding step's linears, ms (fp32 / int8 / weight-only int8):")
    print(f"{'rows':>5}{'layers':>28}{'LM head':>28}")
    for rows, s in speeds.items():
        print(f"{rows:>5}" + "".join(f"{s[part + '_fp32_ms']:>11.1f} / {s[part + '_int8_ms']:<6.1f} / "
                                     f"{s[part + '_weight_only_int8_ms']:<7.1f}" for part in ("layers", "head")))
    for name, d in drifts.items():
        print(f"{name} copy: KL(fp32 || {name}) {d['kl_mean']:.2e} nats a token (max {d['kl_max']:.2e}), "
              f"argmax agrees at {d['argmax_agree']:.1%} of positions")
    return {"speeds": speeds, "drift": drifts}


if __name__ == "__main__":
    main()
