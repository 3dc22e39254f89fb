"""PPO with a learned value function: per-token rewards, GAE, whitening and the clipped value loss.

All tensors are laid out like the completion log-probs, [B, T] with T = L-1: column t scores token
t+1, and the value at column t is V(s_t), the value of the context up to token t (the state in
which token t+1 is chosen). `mask` is the completion mask: 0 on prompt columns and right padding.

* `terminal_token_rewards` / `per_token_rewards`: the verifier's reward on the last completion
  token, optionally minus a per-token KL penalty beta * k1 (InstructGPT, Ouyang et al. 2022).
* `gae_advantages`: generalized advantage estimation (Schulman et al. 2016), skipping masked
  columns, so padding never feeds a bootstrap and the value after the last token is 0.
* `masked_whiten`: the z-score of the masked entries (population variance).
* `value_loss`: 0.5 * max(unclipped, clipped squared error) (the PPO2 value clip), aggregated
  with a `LOSS_AGGREGATIONS` mode, with its clip fraction and explained variance.
"""

from __future__ import annotations

import math

import torch

from rlvr.core.aggregation import Count, aggregate_loss
from rlvr.core.kl import kl_per_token
from rlvr.core.masks import masked_mean

WHITEN_EPS = 1e-8  # added to the std, as `maybe_normalize_advantages` does


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 2 for s in shapes.values()):
        raise ValueError(f"expected tensors of one [B, T] shape, got {shapes}")


def terminal_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's reward on its last completion token, 0 elsewhere. rewards [B], mask [B, T] -> [B, T].

    A row with an empty completion (all-zero mask) has no token to carry its reward: all 0.
    A NaN reward stays NaN on that one token (the advantage stage reads it as unscorable).
    """
    if rewards.dim() != 1 or mask.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(f"rewards [B] and mask [B, T] expected, got {tuple(rewards.shape)} and {tuple(mask.shape)}")
    keep = mask != 0  # [B, T]
    positions = torch.arange(mask.shape[1], device=mask.device)  # [T]
    last = torch.where(keep, positions, torch.full_like(positions, -1)).amax(dim=1)  # [B]; -1: empty row
    at_last = positions[None, :] == last[:, None]  # [B, T], all False for an empty row
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    return torch.where(at_last, rewards[:, None], zero)  # [B, T]


def per_token_rewards(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_coef: float = 0.0,
    logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
) -> torch.Tensor:
    """The reward on the last token, minus kl_coef * k1 on every completion token. -> [B, T].

    k1 = log pi(x_t) - log pi_ref(x_t) per sampled token (`rlvr.core.kl`): the sum of a
    completion's k1 terms is an unbiased estimate of KL(pi || pi_ref) for that prompt, so the
    return is the KL-regularized reward r - beta * KL (Ziegler et al. 2019; InstructGPT). No gradient
    flows through a reward, so k3's non-negativity (what makes it good as a loss) buys nothing here.
    `logprobs` are the sampling policy's, `ref_logprobs` the reference's, both [B, T].
    """
    token_rewards = terminal_token_rewards(rewards, mask)  # [B, T]
    if kl_coef == 0:
        return token_rewards
    if logprobs is None or ref_logprobs is None:
        raise ValueError("a KL penalty in the reward needs the sampling log-probs and the reference log-probs")
    _check_same_shape(mask=mask, logprobs=logprobs, ref_logprobs=ref_logprobs)
    k1 = kl_per_token(logprobs, ref_logprobs, estimator="k1")  # [B, T]: log pi - log pi_ref
    zero = torch.zeros((), dtype=k1.dtype, device=k1.device)
    return token_rewards - kl_coef * torch.where(mask != 0, k1, zero)  # [B, T]


def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) advantages and lambda-returns. All [B, T] -> (advantages [B, T], returns [B, T]).

    Over the masked-in columns t of a row, from the last to the first, with V_next = 0 after the last:
        delta_t = r_t + gamma * V_next - V_t
        A_t     = delta_t + gamma * lam * A_next
        R_t     = A_t + V_t   (the value target)
    A masked-out column is skipped: it neither reads nor changes V_next and A_next, so right
    padding (whose "values" are whatever the head gave there) never feeds a bootstrap, and prompt
    columns never receive credit. Both outputs are 0 where the mask is 0. No whitening here.
    """
    _check_same_shape(token_rewards=token_rewards, values=values, mask=mask)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must be in [0, 1], got gamma={gamma}, lam={lam}")
    keep = mask != 0  # [B, T]
    values = values.detach()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    next_value = torch.zeros_like(values[:, 0])  # [B]
    next_advantage = torch.zeros_like(values[:, 0])  # [B]
    columns = []
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        advantage = delta + gamma * lam * next_advantage  # [B]
        next_value = torch.where(keep[:, t], values[:, t], next_value)  # [B]
        next_advantage = torch.where(keep[:, t], advantage, next_advantage)  # [B]
        columns.append(torch.where(keep[:, t], advantage, zero))
    advantages = torch.stack(columns[::-1], dim=1)  # [B, T]
    returns = torch.where(keep, advantages + values, zero)  # [B, T]
    return advantages, returns


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  eps: float = WHITEN_EPS) -> torch.Tensor:
    """(x - mean) / (std + eps) over the entries where mask != 0; 0 elsewhere. [B, T] (any shape) -> same.

    The variance is the population (biased, divide by n) one: the same z-score as
    `maybe_normalize_advantages` and the group z-score, so whitening a batch does not depend on
    whether its advantages are per sequence or per token; over hundreds of tokens the n / (n - 1)
    of the unbiased form is invisible anyway, and it would divide by 0 for a single token.
    shift_mean=False adds the mean back: only the spread is scaled (how rewards are whitened).
    When all masked entries are equal the centred part is exactly 0 (no division by a 0 std).
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} differ in shape")
    keep = mask != 0  # [B, T]
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    if not bool(keep.any()):
        return torch.zeros_like(values)
    kept = values[keep]  # [n]
    mean = kept.mean()
    centred = values - mean  # [B, T]
    if kept.max() == kept.min():
        scaled = torch.zeros_like(values)
    else:
        std = (kept - mean).square().mean().sqrt()
        scaled = centred / (std + eps)  # [B, T]
    if not shift_mean:
        scaled = scaled + mean
    return torch.where(keep, scaled, zero)


def explained_variance_sums(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[count, sum R, sum R^2, sum (R - V), sum (R - V)^2] over the masked tokens, float64. -> [5].

    Sums add up across microbatches and data-parallel ranks; `explained_variance_from_sums` finishes.
    """
    _check_same_shape(values=values, returns=returns, mask=mask)
    keep = mask != 0  # [B, T]
    zero = torch.zeros((), dtype=torch.float64, device=mask.device)
    kept_returns = torch.where(keep, returns.detach().double(), zero)  # [B, T]
    errors = torch.where(keep, returns.detach().double() - values.detach().double(), zero)  # [B, T]
    return torch.stack([keep.sum().double(), kept_returns.sum(), kept_returns.square().sum(),
                        errors.sum(), errors.square().sum()])  # [5]


def explained_variance_from_sums(sums: torch.Tensor) -> torch.Tensor:
    """1 - Var[R - V] / Var[R] (population variances) from `explained_variance_sums`. [5] -> scalar.

    NaN when there are no tokens or the returns do not vary (there is nothing to explain).
    """
    count, sum_returns, sum_sq_returns, sum_errors, sum_sq_errors = sums.unbind()
    safe_count = count.clamp(min=1)
    var_returns = sum_sq_returns / safe_count - (sum_returns / safe_count).square()
    var_errors = (sum_sq_errors / safe_count - (sum_errors / safe_count).square()).clamp(min=0)
    undefined = (count <= 0) | (var_returns <= 0)
    ratio = var_errors / torch.where(undefined, torch.ones_like(var_returns), var_returns)
    return torch.where(undefined, torch.full_like(ratio, math.nan), 1.0 - ratio)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var[R - V] / Var[R] over the masked tokens. [B, T] -> scalar (float64).

    1: the values predict the returns exactly; 0: no better than a constant; below 0: worse than
    predicting the mean return. NaN when the returns do not vary.
    """
    return explained_variance_from_sums(explained_variance_sums(values, returns, mask))


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None,
    mode: str,
    *,
    normalize_constant: float | None = None,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
) -> tuple[torch.Tensor, dict]:
    """PPO's clipped value loss. values, old_values, returns, mask [B, T] -> (scalar loss, metrics).

    per token: 0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clamp(V - V_old, -c, c)
    (the pessimistic bound, as the policy's clip: a value prediction may not gain by moving more
    than c from the one it had when sampling). clip_range None (or 0) drops the clipped term.
    Aggregated by `aggregate_loss(mode, ...)` with the same count arguments as the policy loss.
    metrics (all detached): `per_token_loss` and `clipped` (1 where the clipped term is the
    larger), [B, T], for callers that add up microbatches; `clip_frac`, `explained_variance` and
    `value_mean`, scalars over this call's mask.
    """
    _check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    returns, old_values = returns.detach(), old_values.detach()
    unclipped_error = (values - returns).square()  # [B, T]
    if clip_range:
        clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)  # [B, T]
        clipped_error = (clipped_values - returns).square()  # [B, T]
    else:
        clipped_error = unclipped_error
    per_token = 0.5 * torch.max(unclipped_error, clipped_error)  # [B, T]
    loss = aggregate_loss(per_token, mask, mode, normalize_constant=normalize_constant,
                          num_sequences=num_sequences, num_tokens=num_tokens)
    clipped = (clipped_error > unclipped_error).float()  # [B, T]
    metrics = {
        "per_token_loss": per_token.detach(),
        "clipped": clipped,
        "clip_frac": masked_mean(clipped, mask),
        "explained_variance": explained_variance(values, returns, mask),
        "value_mean": masked_mean(values.detach(), mask),
    }
    return loss, metrics
