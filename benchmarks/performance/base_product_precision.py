"""What `model.base_product_dtype=bfloat16` costs in precision and what it buys in time.

Precision, on SmolLM2-135M-Instruct with LoRA r=16 on all 7 projections (B drawn with std --b-std, so the
adapter is not zero) and fixed texts: the trainer's per-token log-probs with bf16 base products against
fp32 ones (mean and max |difference|, KL(fp32 || bf16) per token), and the importance ratio's noise: after
an Adam-sized step (every adapter weight moved by +-lr), the bf16 log-ratio log pi'(a) - log pi(a) against
the fp32 one. In the first epoch the ratio is exactly 1 either way (the old log-probs are the same forward);
from the second epoch on the rounding noise sits in the ratio the clip acts on, hence the option's
`algorithm.ppo_epochs=1`.

Time: one product of the update's shapes (--rows tokens x SmolLM2's projections and its LM head), forward
and the input's gradient, fp32 against bf16 with the casts, median of 5. The whole update is measured by
`benchmarks/performance/update_speed.py --lora-forward fused fused_bf16`.

    OMP_NUM_THREADS=2 python benchmarks/performance/base_product_precision.py \\
        --json benchmarks/results/base_product_precision.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.comparisons.vs_trl import MODEL, THREADS, matmul_gflops  # noqa: E402

TEXTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
    "clips did Natalia sell altogether in April and May? In April she sold 48 clips. In May she sold 48 / 2 = 24 "
    "clips. Altogether she sold 48 + 24 = 72 clips. </think> <answer>72</answer>",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she "
    "earn? She earns 12 / 60 = 0.2 dollars a minute, so 50 minutes pay 0.2 * 50 = 10 dollars. </think> "
    "<answer>10</answer>",
    "A user asked for a short poem about the sea, and the assistant wrote four lines about waves, salt and the "
    "evening light over the harbour, then stopped.",
]
# SmolLM2-135M's projections (in, out) and its LM head.
SHAPES = {"q/o (576x576)": (576, 576), "k/v (576x192)": (576, 192), "gate/up (576x1536)": (576, 1536),
          "down (1536x576)": (1536, 576), "LM head (576x49152)": (576, 49152)}


def token_logprobs(policy, batch):
    import torch

    with torch.no_grad():
        logits = policy(**batch).logits.float()  # [B, L, V]
    logprobs = torch.log_softmax(logits[:, :-1], -1)  # [B, L-1, V]
    return logprobs, batch["attention_mask"][:, 1:].bool()


def precision(policy, tokenizer, steps: list[float], seed: int) -> dict:
    import torch

    from rlvr.models.lora_kernel import set_base_product_dtype

    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    targets = batch["input_ids"][:, 1:, None]

    def both():
        out = []
        for dtype in (None, torch.bfloat16):
            set_base_product_dtype(policy, dtype)
            logprobs, mask = token_logprobs(policy, batch)
            out.append(logprobs)
        set_base_product_dtype(policy, None)
        return out[0], out[1], mask

    exact, reduced, mask = both()
    chosen_exact, chosen_reduced = exact.gather(-1, targets)[..., 0], reduced.gather(-1, targets)[..., 0]
    gap = (chosen_exact - chosen_reduced).abs()[mask]
    kl = (exact.exp() * (exact - reduced)).sum(-1)[mask]
    result = {"tokens": int(mask.sum()), "logprob_abs_diff_mean": gap.mean().item(),
              "logprob_abs_diff_max": gap.max().item(), "kl_fp32_bf16_mean": kl.mean().item(),
              "kl_fp32_bf16_max": kl.max().item(), "ratio_noise": []}
    params = [p for p in policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    generator = torch.Generator().manual_seed(seed)
    for step in steps:
        with torch.no_grad():
            for p in params:  # an Adam-sized step: every adapter weight moves by +-step
                p.add_(torch.randint(0, 2, p.shape, generator=generator).float().mul_(2).sub_(1) * step)
        moved_exact, moved_reduced, _ = both()
        with torch.no_grad():
            for p, original in zip(params, saved):
                p.copy_(original)
        log_ratio_exact = (moved_exact.gather(-1, targets)[..., 0] - chosen_exact)[mask]
        log_ratio_reduced = (moved_reduced.gather(-1, targets)[..., 0] - chosen_reduced)[mask]
        noise = (log_ratio_reduced - log_ratio_exact).abs()
        result["ratio_noise"].append({"step": step, "log_ratio_abs_mean": log_ratio_exact.abs().mean().item(),
                                      "noise_abs_mean": noise.mean().item(), "noise_abs_max": noise.max().item(),
                                      "share_beyond_0.2": (noise > 0.2).float().mean().item()})
    return result


def product_times(rows: int) -> dict:
    import torch

    def median_ms(fn):
        fn()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return 1e3 * statistics.median(times)

    generator = torch.Generator().manual_seed(0)
    out = {}
    for name, (fan_in, fan_out) in SHAPES.items():
        x = torch.randn(rows, fan_in, generator=generator)
        weight = torch.randn(fan_out, fan_in, generator=generator) * 0.05
        grad = torch.randn(rows, fan_out, generator=generator)
        low = weight.bfloat16()
        out[name] = {
            "fp32_ms": median_ms(lambda: (x @ weight.T, grad @ weight)),
            "bf16_ms": median_ms(lambda: ((x.bfloat16() @ low.T).float(), (grad.bfloat16() @ low).float())),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3],
                        help="sizes of the Adam-like step (each adapter weight moves by +- this)")
    parser.add_argument("--b-std", type=float, default=0.01, help="std of the adapter's B (PEFT starts it at 0)")
    parser.add_argument("--rows", type=int, default=2700, help="tokens per product (W2's packed microbatch)")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()

    import torch

    from rlvr.models import LoraSettings, load_policy
    from rlvr.testing import random_lora_b

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    loaded = load_policy(MODEL, lora=LoraSettings(rank=16, alpha=32, dropout=0.0))
    random_lora_b(loaded.policy, seed=0, std=args.b_std)
    loaded.policy.eval()
    result = {"precision": precision(loaded.policy, loaded.tokenizer, args.steps, seed=1)}
    p = result["precision"]
    print(f"{p['tokens']} tokens: |log-prob fp32 - bf16 base| mean {p['logprob_abs_diff_mean']:.4f}, max "
          f"{p['logprob_abs_diff_max']:.3f}; KL(fp32 || bf16) per token mean {p['kl_fp32_bf16_mean']:.2e}, max "
          f"{p['kl_fp32_bf16_max']:.2e}")
    print(f"{'step':>8}{'|log ratio| fp32':>18}{'noise mean':>12}{'noise max':>11}{'> 0.2':>8}")
    for row in p["ratio_noise"]:
        print(f"{row['step']:>8.0e}{row['log_ratio_abs_mean']:>18.4f}{row['noise_abs_mean']:>12.4f}"
              f"{row['noise_abs_max']:>11.3f}{row['share_beyond_0.2']:>8.3f}")
    result["gflops"] = matmul_gflops()
    result["products"] = product_times(args.rows)
    print(f"\nfp32 matmul {result['gflops']:.0f} GFLOPS; {args.rows} rows, forward + the input's gradient:")
    print(f"{'product':<22}{'fp32 ms':>9}{'bf16 ms':>9}{'bf16 / fp32':>13}")
    for name, t in result["products"].items():
        print(f"{name:<22}{t['fp32_ms']:>9.1f}{t['bf16_ms']:>9.1f}{t['bf16_ms'] / t['fp32_ms']:>13.2f}")
    if args.json:
        from rlvr.utils import atomic_write_text

        atomic_write_text(REPO / args.json, json.dumps({"argv": sys.argv[1:], **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
