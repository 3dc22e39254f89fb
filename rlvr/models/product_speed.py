"""How fast this machine multiplies matrices in a dtype, and whether a reduced-precision dtype is worth it.

bf16 and fp16 products are the speed options of a CPU run (`rollout.backend_options.dtype`,
`model.base_product_dtype`) only where the CPU has units for them: with AVX512-BF16 or AMX, oneDNN
multiplies bf16 about twice as fast as fp32; on a CPU with AVX2 only, torch falls back to a generic
loop that ran a 1024 x 1024 bf16 product at 1 GFLOPS against 177 in fp32 on the same cores. A
run asking for bf16 there is slower by two orders of magnitude, so `rlvr.run.speed_check` measures
the rates before the model loads and says so.
"""

from __future__ import annotations

import functools
import time

import torch

# A reduced-precision dtype whose products run this many times slower than fp32 defeats its purpose.
SLOWDOWN_LIMIT = 2.0
# Seconds of products a rate is measured over (the slow generic bf16 loop takes ~30 ms for one 256^3 product).
MEASURE_SECONDS = 0.02


def matmul_gflops(dtype: torch.dtype = torch.float32, size: int = 1024, repeats: int = 20,
                  device: str = "cpu") -> float:
    """GFLOPS of `size` x `size` products in `dtype`: the best of 5 timed runs of `repeats` products
    (after 3 warm-up products), on torch's current thread count."""
    a = torch.randn(size, size, device=device).to(dtype)  # [size, size]
    b = torch.randn(size, size, device=device).to(dtype)  # [size, size]
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 * repeats / best / 1e9


@functools.lru_cache(maxsize=None)
def quick_gflops(dtype: torch.dtype, size: int = 256) -> float:
    """GFLOPS of `size`^3 CPU products in `dtype` on one thread, measured once per process over about
    MEASURE_SECONDS (one warm-up product, then as many as fit, at least 2): a start-up reading for
    comparing dtypes, not a benchmark. One thread, because on cores busy with other work the threads of
    a parallel product wait for each other, which flattens the difference between dtypes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.randn(size, size).to(dtype)  # [size, size]
        b = torch.randn(size, size).to(dtype)  # [size, size]
        a @ b
        products, started = 0, time.perf_counter()
        while products < 2 or time.perf_counter() - started < MEASURE_SECONDS:
            a @ b
            products += 1
        return 2 * size**3 * products / (time.perf_counter() - started) / 1e9
    finally:
        torch.set_num_threads(threads)


def cpu_units() -> str:
    """What torch reports of this CPU's vector units (e.g. AVX2, AVX512), for messages."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # an old torch, or a build without the query
        return "unknown"


def slow_product_message(keys: dict[str, str], rates: dict[str, float], fp32_rate: float) -> str | None:
    """A warning naming each config key (key -> the dtype it asks for) whose dtype multiplies more than
    SLOWDOWN_LIMIT times slower than fp32 (`rates`: dtype name -> GFLOPS), or None when none does."""
    slow = {key: dtype for key, dtype in keys.items() if rates[dtype] * SLOWDOWN_LIMIT < fp32_rate}
    if not slow:
        return None
    dtypes = sorted(set(slow.values()))
    measured = ", ".join(f"{name} {rates[name]:.1f} GFLOPS ({fp32_rate / rates[name]:.0f}x slower)" for name in dtypes)
    settings = ", ".join(f"{key}={dtype}" for key, dtype in slow.items())
    return (f"{' and '.join(dtypes)} matrix products are slow on this CPU ({cpu_units()}): {measured}, against "
            f"float32 {fp32_rate:.1f} GFLOPS, on one thread each. {settings} will make this run slower, not "
            "faster (a CPU multiplies bf16 fast only with AVX512-BF16 or AMX units); on this machine leave them "
            "at float32 (model.dtype=float32, model.base_product_dtype=model, rollout.backend_options.dtype=model)")
