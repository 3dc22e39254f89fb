"""Whether a fused forward computes what the forward it replaces does, to that dtype's rounding.

A fused kernel rounds at other points than the module it replaces: in fp32 sums run in another
order (differences far below 1e-5 of the output's scale), in bf16 PEFT rounds the low-rank product
before the add and the fused kernel once, about one bf16 ulp apart. So each compared tensor may
differ by `CHECK_ULPS` units in the last place of its dtype (`torch.finfo(dtype).eps`), and never
less than `CHECK_FLOOR`, relative to its largest magnitude: a few bf16 ulps pass, a wrong scale
(an adapter's alpha/r applied twice changes the output by the whole low-rank term) does not.
`install_forward` logs one line with the result whenever a check fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CHECK_ULPS = 4  # bf16: 4 * 2^-7 = 3% of the tensor's largest magnitude; fp16: 0.4%
CHECK_FLOOR = 1e-5  # fp32 (4 ulps = 5e-7) and fp64: sums in another order, as the fp32 check allowed before


def check_tolerance(dtype: torch.dtype) -> float:
    """The largest difference allowed, relative to the compared tensor's largest magnitude."""
    return max(CHECK_ULPS * torch.finfo(dtype).eps, CHECK_FLOOR)


@dataclass(frozen=True)
class KernelCheck:
    """The result of comparing a fused forward's tensors with the replaced forward's; true when it passed.
    `worst`: the largest difference relative to its tensor's largest magnitude (inf for a non-finite one),
    `what`: which tensor, `tolerance`: what its dtype allowed."""

    passed: bool
    worst: float
    what: str
    tolerance: float
    dtype: torch.dtype

    def __bool__(self) -> bool:
        return self.passed

    @property
    def detail(self) -> str:
        verdict = "within" if self.passed else "above"
        return (f"largest difference {self.worst:.3g} of the {self.what}'s scale, {verdict} the {self.tolerance:.3g} "
                f"allowed in {str(self.dtype).removeprefix('torch.')}")


def compare(pairs: list[tuple[str, torch.Tensor, torch.Tensor]]) -> KernelCheck:
    """(name, fused tensor, replaced forward's tensor) for each pair -> one `KernelCheck` (the worst pair)."""
    passed, worst = True, None
    for name, ours, theirs in pairs:
        scale = theirs.detach().abs().max().double().clamp_min(torch.finfo(theirs.dtype).tiny)
        relative = ((ours.detach().double() - theirs.detach().double()).abs().max() / scale).item()
        relative = math.inf if math.isnan(relative) else relative  # NaN never passes
        tolerance = check_tolerance(theirs.dtype)
        passed = passed and relative <= tolerance
        if worst is None or relative / tolerance > worst.worst / worst.tolerance:
            worst = KernelCheck(True, relative, name, tolerance, theirs.dtype)
    if worst is None:
        raise ValueError("compare needs at least one pair of tensors")
    return KernelCheck(passed, worst.worst, worst.what, worst.tolerance, worst.dtype)
