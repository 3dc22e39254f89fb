"""Warn, before the model loads, when a run asks a CPU for bf16 or fp16 products it multiplies slowly.

The reduced-precision keys (`model.dtype`, `model.base_product_dtype`, a rollout backend's own dtype
option, `RolloutBackend.product_dtypes`) are speed options on a CPU with bf16 units and a trap on one
without: there torch's generic loop ran bf16 products about 180 times slower than fp32
(`rlvr.models.product_speed`). Each such dtype's product rate is measured once against fp32 (a few
tens of milliseconds) and a run that would multiply in a slow one gets a warning that names the keys,
the measured rates and the float32 settings. A GPU run is not checked.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import torch

from rlvr.config import Config
from rlvr.models import DTYPES, product_speed
from rlvr.rollout import ROLLOUT_BACKENDS

REDUCED_DTYPES = ("bfloat16", "float16")  # names in rlvr.models.DTYPES


def reduced_product_keys(config: Config) -> dict[str, str]:
    """Config key -> the reduced-precision dtype it makes a CPU run multiply in (empty off the CPU)."""
    if torch.device(config.model.device).type != "cpu":
        return {}
    keys = {"model.dtype": config.model.dtype, "model.base_product_dtype": config.model.base_product_dtype}
    keys.update(ROLLOUT_BACKENDS.get(config.rollout.backend).product_dtypes(config.rollout.backend_options))
    return {key: dtype for key, dtype in keys.items() if dtype in REDUCED_DTYPES}


def check_product_speed(config: Config, rate: Optional[Callable[[torch.dtype], float]] = None) -> Optional[str]:
    """Print (to stderr) and return the warning for keys whose dtype this CPU multiplies more than
    `SLOWDOWN_LIMIT` times slower than fp32; None when there is none. `rate`: dtype -> GFLOPS (by default
    `product_speed.quick_gflops`, measured once per process)."""
    keys = reduced_product_keys(config)
    if not keys:
        return None
    rate = rate or product_speed.quick_gflops
    rates = {name: rate(DTYPES[name]) for name in set(keys.values())}
    message = product_speed.slow_product_message(keys, rates, rate(torch.float32))
    if message:
        print(f"warning: {message}", file=sys.stderr)
    return message
