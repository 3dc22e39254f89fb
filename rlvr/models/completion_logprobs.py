"""Log-probs (and PPO values) of completion tokens only, with the prompt run once per group.

The G completions of a group share one prompt. `compute_completion_logprobs` runs that prompt
through the decoder once, repeats its keys and values G times (inside the autograd graph, since
LoRA changes the prompt's hidden states too), runs only the completion tokens against them, and
applies the LM head only at the positions that score completion tokens (P-1 .. L-2), in row
chunks (`rlvr.core.head_logprobs`). The [B, L, V] logits of the plain path are never built. The
numbers equal `rlvr.core.compute_per_token_logprobs` on the same rows (tested to float
tolerance, values and gradients). The transformers-specific calls (decoder / head split, the
KV cache) are in `rlvr.models.hf_cache`. `compute_completion_scores` also applies a value head
(`rlvr.models.value_model`) to the same hidden states, so a policy and a value head that share the
backbone get log-probs and values from one forward pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from rlvr.core.head_logprobs import head_logprobs
from rlvr.core.masks import prompt_completion_rows
from rlvr.core.logprobs import (
    DEFAULT_MAX_CHUNK_BYTES,
    compute_per_token_logprobs_and_entropy,
    position_ids_from_attention_mask,
)
from rlvr.models.hf_cache import cache_argument_name, decoder_and_head, output_cache


@dataclass(frozen=True)
class CompletionScores:
    """Per completion token, laid out [N, L-1] like `compute_per_token_logprobs` (0 outside the
    completion): log-probs and entropies (None when not asked for) and values (None without a head)."""

    logprobs: torch.Tensor | None
    entropy: torch.Tensor | None
    values: torch.Tensor | None


def compute_completion_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    *,
    group_size: int = 1,
    enable_grad: bool = True,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    with_entropy: bool = True,
    completion_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Completion log-probs and entropies laid out like `compute_per_token_logprobs`.

    input_ids, attention_mask [N, L]: prompt left-padded in columns [0, P), completion from
    column P, rows in prompt-major groups of `group_size` identical prompts (N = B * G).
    Returns (logprobs [N, L-1], entropy [N, L-1]); columns t < P-1 (which score prompt tokens)
    are 0 there, so multiply by the completion mask as usual. With `completion_mask` [N, L-1]
    the LM head runs only where it is 1 (right padding is not scored; those entries are 0).
    Entropy is computed only when `with_entropy` (all zeros otherwise). Falls back to the plain
    full-sequence path for models whose decoder or LM head cannot be separated.
    """
    decoder, _ = decoder_and_head(model)
    if decoder is None:
        _check_layout(input_ids, attention_mask, prompt_len, group_size)
        logprobs, entropy = compute_per_token_logprobs_and_entropy(
            model, input_ids, attention_mask, enable_grad=enable_grad, temperature=temperature,
            max_chunk_bytes=max_chunk_bytes,
        )
        return logprobs, entropy
    scores = compute_completion_scores(
        model, input_ids, attention_mask, prompt_len, group_size=group_size, enable_grad=enable_grad,
        temperature=temperature, max_chunk_bytes=max_chunk_bytes, with_entropy=with_entropy,
        completion_mask=completion_mask,
    )
    return scores.logprobs, scores.entropy


def compute_completion_scores(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    *,
    value_head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    with_logprobs: bool = True,
    detach_value_input: bool = False,
    group_size: int = 1,
    enable_grad: bool = True,
    temperature: float = 1.0,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    with_entropy: bool = True,
    completion_mask: torch.Tensor | None = None,
) -> CompletionScores:
    """One decoder pass; the LM head (`with_logprobs`) and a value head on the same hidden states.

    Layout and arguments as `compute_completion_logprobs`. `value_head` maps hidden states
    [..., H] to values [...]: the value at column t is read from the hidden state that scores
    token t+1 (the context up to token t). `detach_value_input` trains the head alone: no gradient
    from the values reaches the decoder. Values are 0 outside `completion_mask` when it is given.
    Needs a model whose decoder body and LM head are separate modules (Llama, Qwen, ...).
    """
    num_rows, length = input_ids.shape
    _check_layout(input_ids, attention_mask, prompt_len, group_size)
    decoder, head = decoder_and_head(model)
    if decoder is None:
        raise ValueError(f"{type(model).__name__}: scoring completions with a value head needs a causal LM whose "
                         "decoder body and LM head are separate modules (Llama, Qwen, SmolLM2, ...)")
    grad_context = contextlib.nullcontext() if enable_grad else torch.no_grad()
    logprobs = entropy = values = None
    with grad_context:
        scoring_hidden = _scoring_hidden_states(decoder, input_ids, attention_mask, prompt_len, group_size)  # [N, C, H]
        completion_len = scoring_hidden.shape[1]
        if with_logprobs:
            flat_logprobs, flat_entropy = _head_at_completion_tokens(
                head, scoring_hidden, input_ids[:, prompt_len:], completion_mask, prompt_len, temperature,
                max_chunk_bytes, with_entropy,
            )  # [N*C] each
            logprobs = _completion_columns(flat_logprobs.view(num_rows, completion_len), length, prompt_len)
            entropy = _completion_columns(flat_entropy.view(num_rows, completion_len), length, prompt_len)
        if value_head is not None:
            head_input = scoring_hidden.detach() if detach_value_input else scoring_hidden
            values = _completion_columns(value_head(head_input), length, prompt_len)  # [N, L-1]
            if completion_mask is not None:
                values = torch.where(completion_mask != 0, values, torch.zeros((), dtype=values.dtype,
                                                                               device=values.device))
    return CompletionScores(logprobs=logprobs, entropy=entropy, values=values)


def _check_layout(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int, group_size: int) -> None:
    num_rows, length = input_ids.shape
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} differ")
    if not 1 <= prompt_len < length:
        raise ValueError(f"prompt_len={prompt_len} must be in [1, L={length}): completions start at column prompt_len")
    if group_size < 1 or num_rows % group_size:
        raise ValueError(f"group_size={group_size} must divide the number of rows {num_rows}")


def _scoring_hidden_states(decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                           group_size: int) -> torch.Tensor:
    """The decoder's last hidden states at positions P-1 .. L-2 (those that score tokens P .. L-1). -> [N, C, H]."""
    if group_size > 1:
        prompts = input_ids[:, :prompt_len].view(-1, group_size, prompt_len)
        if not bool((prompts == prompts[:, :1]).all()):
            raise ValueError("rows of a group must share the same prompt (prompt-major order, left-padded)")
    position_ids = position_ids_from_attention_mask(attention_mask)  # [N, L]
    # 1. The prompt, once per group.
    prompt_rows = slice(None, None, group_size)
    prompt_out = decoder(
        input_ids=input_ids[prompt_rows, :prompt_len], attention_mask=attention_mask[prompt_rows, :prompt_len],
        position_ids=position_ids[prompt_rows, :prompt_len], use_cache=True,
    )
    cache = output_cache(prompt_out)
    last_prompt_hidden = prompt_out.last_hidden_state[:, -1:, :]  # [B, 1, H], scores completion token 0
    if group_size > 1:
        cache.batch_repeat_interleave(group_size)  # keys/values [B, ...] -> [N, ...], differentiable
        last_prompt_hidden = last_prompt_hidden.repeat_interleave(group_size, dim=0)  # [N, 1, H]
    # 2. The completions, attending to the shared prompt keys and values.
    completion_hidden = decoder(
        input_ids=input_ids[:, prompt_len:], attention_mask=attention_mask,
        position_ids=position_ids[:, prompt_len:], use_cache=True, **{cache_argument_name(decoder): cache},
    ).last_hidden_state  # [N, C, H]
    # Hidden states at positions P-1 .. L-2 score tokens P .. L-1.
    scoring_hidden = torch.cat([last_prompt_hidden, completion_hidden[:, :-1]], dim=1)  # [N, C, H]
    return scoring_hidden


def _head_at_completion_tokens(head, scoring_hidden: torch.Tensor, targets: torch.Tensor,
                               completion_mask: torch.Tensor | None, prompt_len: int, temperature: float,
                               max_chunk_bytes: int, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the completion tokens `targets` [N, C], LM head only where needed. -> [N*C] each."""
    num_rows, completion_len = targets.shape
    flat_hidden = scoring_hidden.reshape(num_rows * completion_len, -1)  # [N*C, H]
    flat_targets = targets.reshape(-1)  # [N*C]
    if completion_mask is None:
        return head_logprobs(head, flat_hidden, flat_targets, temperature, max_chunk_bytes, with_entropy)  # [N*C] each
    keep = completion_mask[:, prompt_len - 1 :].reshape(-1).nonzero().squeeze(-1)  # [M]
    kept_logprobs, kept_entropy = head_logprobs(
        head, flat_hidden[keep], flat_targets[keep], temperature, max_chunk_bytes, with_entropy
    )  # [M] each
    flat_logprobs = kept_logprobs.new_zeros(num_rows * completion_len).index_put((keep,), kept_logprobs)
    flat_entropy = kept_entropy.new_zeros(num_rows * completion_len).index_put((keep,), kept_entropy)
    return flat_logprobs, flat_entropy


def _completion_columns(per_completion_token: torch.Tensor, length: int, prompt_len: int) -> torch.Tensor:
    """[N, C] (completion tokens) -> [N, L-1] with zeros in the P-1 columns that score prompt tokens."""
    num_rows = per_completion_token.shape[0]
    prompt_columns = per_completion_token.new_zeros(num_rows, prompt_len - 1)  # [N, P-1]
    return torch.cat([prompt_columns, per_completion_token], dim=1)  # [N, L-1]


@dataclass(frozen=True)
class ResponseRows:
    """Prompt / response pairs as token rows in the completion layout (`rlvr.core.prompt_completion_rows`)."""

    input_ids: torch.Tensor  # [N, P+C] long, prompts left-padded to P, responses right-padded after them
    attention_mask: torch.Tensor  # [N, P+C] long
    prompt_len: int  # P
    mask: torch.Tensor  # [N, P+C-1] float: 1 at the columns that score a response token


def response_rows(tokenizer: Any, prompts: list[str], responses: list[str]) -> ResponseRows:
    """Prompt and response tokenized apart (no special tokens added) and joined as ids, the response
    right after its prompt."""
    fill_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if fill_id is None:
        raise ValueError("tokenizer has neither a pad token nor an EOS token to pad rows with")
    prompt_ids = [tokenizer.encode(text, add_special_tokens=False) for text in prompts]
    response_ids = [tokenizer.encode(text, add_special_tokens=False) for text in responses]
    return ResponseRows(*prompt_completion_rows(prompt_ids, response_ids, fill_id))


def rows_logprobs(model: Any, rows: ResponseRows, *, enable_grad: bool = True,
                  with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`response_logprobs` on rows already built (SFT counts a batch's response tokens before scoring it)."""
    device = next(model.parameters()).device
    input_ids, attention_mask, mask = rows.input_ids.to(device), rows.attention_mask.to(device), rows.mask.to(device)
    logprobs, entropy = compute_completion_logprobs(
        model, input_ids, attention_mask, rows.prompt_len, enable_grad=enable_grad, with_entropy=with_entropy,
        completion_mask=mask,
    )  # [N, L-1] each
    return logprobs, entropy, mask


def response_logprobs(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    *,
    enable_grad: bool = True,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs (and entropies) of given responses after given prompts, through the completion path.

    SFT's loss and the generation logs' entropy use this, so they score tokens exactly as the RL loop
    does (one decoder pass, the LM head only at response tokens, upcast in chunks). The rows are
    `response_rows`'. -> (logprobs [N, L-1], entropy [N, L-1], response_mask [N, L-1] float), laid out
    like `rlvr.core.compute_per_token_logprobs` (column t scores token t+1), 0 outside the mask.
    """
    return rows_logprobs(model, response_rows(tokenizer, prompts, responses), enable_grad=enable_grad,
                         with_entropy=with_entropy)
