"""Rollout backend `decode_loop`: rlvr's own sampling loop on the model's KV cache.

The same distribution as `hf_generate` (temperature, top-k, top-p, min-p, min_new_tokens, stop
strings; greedy gives the same tokens), with less work per step:
  - each prompt is prefilled once and its KV cache repeated G times (prompt-major groups);
  - rows that finished (EOS or a stop string) leave the batch and the cache, so later steps
    only run the rows still generating;
  - sampling inverts the CDF with one uniform number per row (a cumulative sum and a binary
    search), cheaper on a CPU than `torch.multinomial` or a Gumbel race over the vocabulary;
  - no logits processors or stopping criteria beyond the ones asked for; lengths, truncation
    and the stop position are known exactly, not re-derived from the padded output.
"""

from __future__ import annotations

import torch

from rlvr.models.hf_cache import cache_argument_name, output_cache
from rlvr.models.kernels import weight_major_linears
from rlvr.rollout.backend import ROLLOUT_BACKENDS, InProcessBackend
from rlvr.rollout.base import Generation, SamplingSettings, cut_at_stop, eos_token_ids


def filter_scores(scores: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p masking (-inf). scores [A, V] fp32 -> [A, V]."""
    scores = scores / settings.temperature
    if settings.top_k and settings.top_k < scores.shape[-1]:
        kth = torch.topk(scores, settings.top_k, dim=-1).values[:, -1:]  # [A, 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if settings.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)  # [A, V]
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of strictly better tokens
        drop_sorted = mass_before >= settings.top_p  # the most likely token is always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    if settings.min_p > 0:
        probs = torch.softmax(scores, dim=-1)
        threshold = settings.min_p * probs.amax(dim=-1, keepdim=True)  # [A, 1]
        scores = scores.masked_fill(probs < threshold, float("-inf"))
    return scores


def sample_tokens(scores: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """One token per row from last-position scores [A, V]: greedy, or drawn from the filtered softmax."""
    if not settings.do_sample:
        return scores.argmax(dim=-1)
    probs = torch.softmax(filter_scores(scores, settings), dim=-1)  # [A, V]
    # Inverse CDF: the first token whose cumulative probability exceeds u ~ U[0, total). Zero-probability
    # tokens never increase the CDF, so they are never chosen; fp64 keeps the running sum exact enough.
    cdf = probs.double().cumsum(dim=-1)  # [A, V]
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device) * cdf[:, -1:]  # [A, 1]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)  # [A]


def _hit_stop(tokenizer, row_tokens: torch.Tensor, stop_strings, window: int) -> bool:
    """Did the last token complete a stop string? Only the last `window` tokens are decoded."""
    tail = tokenizer.decode(row_tokens[-window:], skip_special_tokens=True)
    return any(stop in tail for stop in stop_strings)


def decode_loop(model, tokenizer, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
    if not prompts:
        raise ValueError("decode_loop: no prompts")
    if tokenizer.padding_side != "left":
        raise ValueError("decode_loop needs a left-padding tokenizer (tokenizer.padding_side='left')")
    if settings.do_sample and settings.temperature <= 0:
        raise ValueError(f"decode_loop: temperature={settings.temperature} must be > 0 when sampling")
    device = next(model.parameters()).device
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids = encoded["input_ids"].to(device)  # [B, P]
    prompt_mask = encoded["attention_mask"].to(device)  # [B, P]
    num_prompts, prompt_len = prompt_ids.shape
    num_rows, max_new = num_prompts * group_size, settings.max_new_tokens
    eos_ids = eos_token_ids(tokenizer, model)
    eos = torch.tensor(sorted(eos_ids), device=device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(eos[0])
    stops = tuple(s for s in settings.stop_strings if s)
    # A stop string of k characters ends within the last k + 1 tokens (a token decodes to >= 1 character
    # except for pieces of a multi-byte character, hence the slack).
    window = max((len(s) for s in stops), default=0) + 4
    cache_name = cache_argument_name(model)

    tokens = torch.full((num_rows, max(max_new, 1)), pad_id, dtype=torch.long, device=device)  # [N, C]
    lengths = torch.zeros(num_rows, dtype=torch.long)
    ended = torch.zeros(num_rows, dtype=torch.bool)  # EOS or stop string (not truncated)
    was_training = model.training
    model.eval()
    with torch.inference_mode(), weight_major_linears(model):
        positions = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P], skips left padding
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                    use_cache=True, logits_to_keep=1)
        cache = output_cache(out)
        logits = out.logits[:, -1]  # [B, V]
        if group_size > 1:
            cache.batch_repeat_interleave(group_size)  # [B, ...] -> [N, ...], prompt-major
            logits = logits.repeat_interleave(group_size, dim=0)  # [N, V]
        attention = prompt_mask.repeat_interleave(group_size, dim=0)  # [A, P + t]
        next_position = positions[:, -1].repeat_interleave(group_size) + 1  # [A]
        active = torch.arange(num_rows, device=device)  # rows still generating, in row order
        for step in range(max_new):
            scores = logits.float()  # fp32 before the softmax
            if step < settings.min_new_tokens:
                scores[:, eos] = float("-inf")
            chosen = sample_tokens(scores, settings)  # [A]
            tokens[active, step] = chosen
            lengths[active.cpu()] = step + 1
            done = torch.isin(chosen, eos)  # [A]
            if stops:
                for i, row in enumerate(active.tolist()):
                    if not done[i] and _hit_stop(tokenizer, tokens[row, : step + 1].tolist(), stops, window):
                        done[i] = True
            ended[active[done].cpu()] = True
            if step + 1 == max_new or bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(-1)  # [A']
                cache.batch_select_indices(keep)
                active, chosen = active[keep], chosen[keep]
                attention, next_position = attention[keep], next_position[keep]
            attention = torch.cat([attention, attention.new_ones(attention.shape[0], 1)], dim=1)
            out = model(input_ids=chosen[:, None], attention_mask=attention, position_ids=next_position[:, None],
                        use_cache=True, **{cache_name: cache})
            cache = output_cache(out)
            logits = out.logits[:, -1]
            next_position = next_position + 1
    model.train(was_training)

    width = int(lengths.max()) if num_rows else 0
    completion_ids = tokens[:, :width].cpu()  # [N, C]
    columns = torch.arange(width)
    completion_mask = (columns[None, :] < lengths[:, None]).long()  # [N, C]
    truncated = ~ended & (lengths >= max_new)
    texts = []
    for row in range(num_rows):
        ids = [t for t in completion_ids[row, : int(lengths[row])].tolist() if t not in eos_ids]
        texts.append(cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stops))
    return Generation(
        input_ids=torch.cat([prompt_ids.cpu().repeat_interleave(group_size, dim=0), completion_ids], dim=1),
        attention_mask=torch.cat([prompt_mask.cpu().repeat_interleave(group_size, dim=0), completion_mask], dim=1),
        prompt_len=prompt_len,
        completion_texts=texts,
        completion_lengths=lengths,
        truncated=truncated,
    )


@ROLLOUT_BACKENDS.register("decode_loop")
class DecodeLoopBackend(InProcessBackend):
    """`decode_loop` on the training model (the default `rollout.backend`)."""

    sample_fn = staticmethod(decode_loop)
