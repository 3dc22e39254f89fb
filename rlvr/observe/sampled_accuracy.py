"""Accuracy of an evaluation that samples n completions per held-out prompt: pass@k, mean@n, maj@k.

Pure functions over plain numbers (no config, no I/O, no torch): `pass_at_k` is the unbiased
estimator of Chen et al. 2021 in its stable product form, `majority_vote` the self-consistency vote
of Wang et al. 2022 with a stated tie rule, and `sampled_accuracy` averages them over prompts, each
with a Wilson 95% interval over prompts (`wilson_interval`, also the greedy eval's interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson_interval(successes: float, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion successes / total (95% by default); (nan, nan) when total is 0.

    centre = (p + z²/2n) / (1 + z²/n), half-width = z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    Unlike the normal approximation it stays inside [0, 1] and is not zero-width at p = 0 or 1.
    `successes` may be fractional: the sum over prompts of a score in [0, 1] (a prompt's share of
    correct samples, its pass@k). Such a score with mean p has variance at most p(1-p)
    (Bhatia-Davis), so with `total` = the number of prompts the interval is a conservative one.
    """
    if total <= 0:
        return math.nan, math.nan
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(max(0.0, p * (1 - p)) / total + z * z / (4 * total * total)) / denominator
    # p itself always lies inside; at p = 0 or 1 rounding could put an end a hair past it.
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The unbiased pass@k of one prompt from n = `samples` completions of which c = `correct` are right.

    pass@k = 1 - C(n-c, k) / C(n, k): the chance that k of the n completions, drawn without
    replacement, hold at least one right one (Chen et al. 2021, "Evaluating Large Language Models
    Trained on Code", eq. 1). Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the
    binomials (C(200, 100) overflows a float); it is 1 when n - c < k (every k-subset holds a right
    one). Not c/n (that is pass@1 only) and not 1 - (1 - c/n)^k (draws with replacement, biased low).
    """
    if not 1 <= k <= samples or not 0 <= correct <= samples:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n; got n={samples}, c={correct}, k={k}")
    if samples - correct < k:
        return 1.0
    if k == 1:  # the product telescopes to (n-c)/n; c/n is the same number without its rounding
        return correct / samples
    product = 1.0
    for i in range(samples - correct + 1, samples + 1):
        product *= 1.0 - k / i
    return 1.0 - product


@dataclass(frozen=True)
class Vote:
    """A majority vote over one prompt's samples: the winning answer (None: "no answer" won), its votes, and
    whether it is right (the verdict of the first sample that gave it; "no answer" is wrong)."""

    answer: Optional[str]
    votes: int
    correct: bool


def majority_vote(answers: Sequence[Optional[str]], correct: Sequence[bool], k: int) -> Vote:
    """maj@k of one prompt: the most frequent extracted answer among its first k samples.

    Answers are compared as text with surrounding whitespace removed (equivalent forms written
    differently, `0.5` and `1/2`, are different votes). A sample without an answer (None) votes for
    "no answer", which is wrong, as lm-evaluation-harness counts its "[invalid]": one right answer
    among seven samples that answered nothing is not a majority. Ties go to the tied answer that
    appears first among the k samples. The vote is right when that answer's verdict (its first
    sample's) is.
    """
    if not 1 <= k <= len(answers) or len(answers) != len(correct):
        raise ValueError(f"maj@k needs 1 <= k <= n answers with one verdict each; got k={k}, "
                         f"{len(answers)} answers, {len(correct)} verdicts")
    counts: dict[Optional[str], int] = {}  # insertion order = order of first appearance; None: no answer
    first_verdict: dict[Optional[str], bool] = {}
    for answer, right in zip(answers[:k], correct[:k]):
        key = None if answer is None else answer.strip()
        counts[key] = counts.get(key, 0) + 1
        first_verdict.setdefault(key, key is not None and bool(right))
    winner = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts
    return Vote(answer=winner, votes=counts[winner], correct=first_verdict[winner])


def reported_ks(samples: int) -> tuple[int, ...]:
    """The k of the reported pass@k: the powers of two below n, and n (n = 8: 1, 2, 4, 8; n = 6: 1, 2, 4, 6)."""
    if samples < 1:
        raise ValueError(f"samples per prompt must be >= 1, got {samples}")
    ks, k = [], 1
    while k < samples:
        ks.append(k)
        k *= 2
    return (*ks, samples)


@dataclass(frozen=True)
class SampledAccuracy:
    """pass@k, mean@n and maj@n over prompts, each a mean over prompts with a Wilson 95% interval over
    prompts; `majority` is None when the task extracts no answers. `solved_all/some/none`: prompts with
    all, some (not all) and none of their n samples right."""

    prompts: int
    samples: int  # n, completions per prompt
    pass_at: dict[int, float]  # k -> mean over prompts of pass@k; pass@1 == mean (the same number)
    pass_at_ci95: dict[int, tuple[float, float]]
    mean: float  # mean@n: the mean over prompts of each prompt's share of right samples
    mean_ci95: tuple[float, float]
    majority: Optional[float]  # maj@n: the share of prompts whose voted answer is right
    majority_ci95: Optional[tuple[float, float]]
    solved_all: int
    solved_some: int
    solved_none: int


def sampled_accuracy(correct: Sequence[Sequence[bool]], answers: Optional[Sequence[Sequence[Optional[str]]]] = None,
                     ks: Optional[Sequence[int]] = None) -> SampledAccuracy:
    """Average the per-prompt numbers over prompts. `correct[p][j]`: sample j of prompt p is right (every
    prompt has the same n samples); `answers[p][j]`: its extracted answer, or `answers` None for a task
    that extracts none (no maj@n); `ks`: the pass@k to report (default `reported_ks(n)`)."""
    prompts = len(correct)
    sizes = {len(row) for row in correct}
    if prompts == 0 or len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"sampled accuracy needs prompts with the same n >= 1 samples each; got sizes {sorted(sizes)}")
    samples = sizes.pop()
    counts = [sum(bool(right) for right in row) for row in correct]  # [P] right samples per prompt
    pass_at, pass_ci = {}, {}
    for k in ks if ks is not None else reported_ks(samples):
        total = sum(pass_at_k(samples, c, k) for c in counts)
        pass_at[k], pass_ci[k] = total / prompts, wilson_interval(total, prompts)
    shares = sum(c / samples for c in counts)
    majority = majority_ci = None
    if answers is not None:
        if len(answers) != prompts:
            raise ValueError(f"{len(answers)} rows of answers for {prompts} prompts")
        votes = sum(majority_vote(row, right, samples).correct for row, right in zip(answers, correct))
        majority, majority_ci = votes / prompts, wilson_interval(votes, prompts)
    return SampledAccuracy(
        prompts=prompts, samples=samples, pass_at=pass_at, pass_at_ci95=pass_ci, mean=shares / prompts,
        mean_ci95=wilson_interval(shares, prompts), majority=majority, majority_ci95=majority_ci,
        solved_all=sum(c == samples for c in counts), solved_some=sum(0 < c < samples for c in counts),
        solved_none=sum(c == 0 for c in counts))
