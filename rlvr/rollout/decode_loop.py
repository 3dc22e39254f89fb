"""Rollout backend `decode_loop`: rlvr's own sampling loop.

The same distribution as `hf_generate` (temperature, top-k, top-p, min-p, min_new_tokens, stop
strings; greedy gives the same tokens), with less work per step:
  - each prompt is prefilled once (the model's forward) and its keys and values repeated G times
    (prompt-major groups);
  - decoding steps run on a cache allocated once for the whole rollout (`kv_cache.py`), layer by
    layer (`decode_step.py`), so a step costs the same at position 1 and 1000; models that path
    does not cover run the model's forward on transformers' growing cache instead;
  - rows that finished (EOS or a stop string) are left out of sampling and of the LM head at
    once, and out of the cache once a quarter of its rows have finished (`COMPACT_FRACTION`);
  - sampling inverts the CDF with one uniform number per row, in two levels (blocks of the
    vocabulary, then tokens in the chosen block) instead of a cumulative sum over all of it;
  - stop strings are checked only for rows whose new token can end one (`stop_strings.py`);
  - an episode's next turn prefills only what it adds, on the keys and values its previous turn
    left (`turn_cache.py`, option `continue_turns`);
  - option `dtype` (e.g. bfloat16) runs the steps on a copy of the weights in that dtype: faster,
    but another policy than the trainer's, so its log-probs are reported (`sampler_logprobs`) and
    the update measures the gap and corrects for it, as for any other engine; so they are when the
    trainer's base products run at a reduced precision (`model.base_product_dtype`);
  - the backend's calls inside one sync block share the copies the steps make of the weights
    (oneDNN-packed, or cast to `dtype`): made at the first call, reused by every later chunk,
    turn and round on the same weights (`weight_copies.py`), dropped when the block closes.
Lengths, truncation and the stop position are known exactly, not re-derived from padded output.
"""

from __future__ import annotations

import torch

from rlvr.models.hf_cache import cache_argument_name, cache_of, full_attention_only, output_cache
from rlvr.models.kernels import weight_major_linears
from rlvr.models.lora_kernel import base_product_dtype
from rlvr.rollout.backend import ROLLOUT_BACKENDS, InProcessBackend
from rlvr.rollout.generation import Generation, SamplingSettings, cut_at_stop, eos_token_ids, length_mask
from rlvr.rollout.decode_step import DecoderWeights, decode_step
from rlvr.rollout.stop_strings import StopStringMatcher
from rlvr.rollout.turn_cache import CachedRow, PrefillPlan, TurnCache
from rlvr.rollout.weight_copies import WeightCopies

# Finished rows stay in the preallocated cache (computed, then ignored) until this fraction of its
# rows have finished; then the rest are moved to the front. 0 compacts at every finished row.
COMPACT_FRACTION = 0.25
CACHES = ("auto", "preallocated", "dynamic")
# Option `dtype`: the decoding steps' dtype. "model" (the policy's own) samples as the trainer scores;
# any other dtype than the policy's makes the sampler another policy, which reports its log-probs.
STEP_DTYPES = {"model": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def filter_scores(scores: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p masking (-inf). scores [A, V] fp32 -> [A, V]."""
    if settings.temperature != 1.0:
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


def _block_size(vocab: int) -> int:
    """The largest power of two <= 1024 dividing `vocab` (49152 -> 1024, 151936 -> 128), at least 1."""
    size = 1024
    while vocab % size:
        size //= 2
    return size


def draw_from_weights(weights: torch.Tensor) -> torch.Tensor:
    """One index per row with probability weights[i] / sum(weights): weights [A, V] >= 0 -> [A] long.

    Inverse CDF with one uniform number per row, in two levels: fp64 totals of blocks of the
    vocabulary pick a block, a cumulative sum inside that block picks the token. Only tokens of
    positive weight can be chosen: the point is kept strictly below each level's total.
    """
    rows, vocab = weights.shape
    size = _block_size(vocab)
    if size < 64 and vocab > 4096:  # awkward vocabulary size: pad to whole blocks of 1024 with zero weight
        size = 1024
        weights = torch.nn.functional.pad(weights, (0, -vocab % size))
    blocks = weights.view(rows, -1, size)  # [A, nb, s]
    block_totals = blocks.sum(-1, dtype=torch.float64)  # [A, nb]
    block_cdf = block_totals.cumsum(-1)  # [A, nb]
    total = block_cdf[:, -1:]  # [A, 1]
    point = torch.rand(rows, 1, dtype=torch.float64, device=weights.device) * total
    point = torch.minimum(point, torch.nextafter(total, torch.zeros_like(total)))  # [A, 1], < total
    block = torch.searchsorted(block_cdf, point, right=True)  # [A, 1]: first block whose cdf exceeds the point
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), torch.zeros_like(point))
    inside = blocks.gather(1, block[:, :, None].expand(rows, 1, size)).squeeze(1).double()  # [A, s]
    inside_cdf = inside.cumsum(-1)  # [A, s]
    inside_total = inside_cdf[:, -1:]
    # The point's offset into its block, rescaled onto the block's own running sum (rounded differently).
    offset = (point - before) / block_totals.gather(-1, block) * inside_total
    offset = torch.minimum(offset, torch.nextafter(inside_total, torch.zeros_like(inside_total)))
    token = torch.searchsorted(inside_cdf, offset, right=True)  # [A, 1]
    return (block * size + token).squeeze(-1)


def sample_tokens(scores: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """One token per row from last-position scores [A, V]: greedy, or drawn from the filtered softmax."""
    if not settings.do_sample:
        return scores.argmax(dim=-1)
    scores = filter_scores(scores, settings)
    # softmax up to its normaliser, which the inverse CDF does not need; -inf -> weight 0
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # [A, V]
    return draw_from_weights(weights)


def sample_tokens_with_logprobs(scores: torch.Tensor, settings: SamplingSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_tokens`, and each chosen token's log-probability under the distribution it was drawn from
    (the filtered softmax: temperature, top-k, top-p, min-p; greedy takes that distribution's mode).
    scores [A, V] fp32 -> (tokens [A] long, logprobs [A] fp32)."""
    scores = filter_scores(scores, settings)
    top = scores.amax(dim=-1, keepdim=True)  # [A, 1]
    weights = torch.exp(scores - top)  # [A, V], -inf -> 0
    chosen = draw_from_weights(weights) if settings.do_sample else scores.argmax(dim=-1)  # [A]
    log_total = torch.log(weights.sum(dim=-1, dtype=torch.float64))  # [A]
    picked = (scores.gather(-1, chosen[:, None]) - top).squeeze(-1).double()  # [A]
    return chosen, (picked - log_total).float()


class DynamicCacheSteps:
    """Decoding steps through the model's forward on transformers' cache; finished rows leave it at once."""

    def __init__(self, model, cache, attention: torch.Tensor, next_position: torch.Tensor):
        self.model, self.cache = model, cache
        self.cache_name = cache_argument_name(model)
        self.attention = attention  # [A, P + t]
        self.next_position = next_position  # [A]

    def finish(self, done: torch.Tensor) -> None:
        keep = (~done).nonzero().squeeze(-1)  # [A']
        self.cache.batch_select_indices(keep)
        self.attention, self.next_position = self.attention[keep], self.next_position[keep]

    def held(self, index: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Live row `index`'s keys and values at its real positions: per layer [kv_heads, n, head_dim]."""
        real = self.attention[index].bool()  # [T]
        layers = self.cache.layers
        return [layer.keys[index][:, real] for layer in layers], [layer.values[index][:, real] for layer in layers]

    def step(self, chosen: torch.Tensor) -> torch.Tensor:
        self.attention = torch.cat([self.attention, self.attention.new_ones(self.attention.shape[0], 1)], dim=1)
        out = self.model(input_ids=chosen[:, None], attention_mask=self.attention,
                         position_ids=self.next_position[:, None], use_cache=True, **{self.cache_name: self.cache})
        self.cache = output_cache(out)
        self.next_position = self.next_position + 1
        return out.logits[:, -1]


class PreallocatedSteps:
    """Decoding steps of `decode_step` on a `PreallocatedKVCache`.

    The cache's rows are slots. A finished row's slot stays (fed its last token, never sampled)
    until `compact_fraction` of the slots are finished; then each hole below the new row count
    is filled by one live row from above it, so a compaction copies only the rows that move.
    Slots may then hold rows out of order: `sampled` maps the loop's live rows to their slots.
    """

    def __init__(self, weights: DecoderWeights, cache, next_position: torch.Tensor, compact_fraction: float):
        self.weights, self.cache = weights, cache
        self.compact_fraction = compact_fraction
        self.positions = next_position.clone()  # [S] rotary position of each slot's next token
        self.tokens = torch.zeros_like(self.positions)  # [S] each slot's next input token
        self.slots = list(range(self.positions.numel()))  # slot of each live row, in the loop's row order
        self.sampled = None  # torch.tensor(self.slots), or None when that is every slot in order
        self.compactions = 0

    def finish(self, done: torch.Tensor) -> None:
        """done [A] bool over the live rows, in the loop's order (which the loop keeps)."""
        self.slots = [slot for slot, finished in zip(self.slots, done.tolist()) if not finished]
        total, kept = self.positions.numel(), len(self.slots)
        if total - kept and total - kept >= self.compact_fraction * total:
            holes = sorted(set(range(kept)) - set(self.slots))  # [h] free slots below `kept`
            movers = sorted(s for s in self.slots if s >= kept)  # [h] live slots at or above it
            source = list(range(kept))  # new slot i holds old slot source[i]
            for hole, mover in zip(holes, movers):
                source[hole] = mover
            self.cache.compact(source)
            index = torch.tensor(source, dtype=torch.long)
            self.positions, self.tokens = self.positions[index], self.tokens[index]
            new_slot = {old: new for new, old in enumerate(source)}
            self.slots = [new_slot[slot] for slot in self.slots]
            self.compactions += 1
        in_order = self.slots == list(range(self.positions.numel()))
        self.sampled = None if in_order else torch.tensor(self.slots, dtype=torch.long,
                                                          device=self.positions.device)

    def held(self, index: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Live row `index`'s keys and values at its real positions: per layer [kv_heads, n, head_dim]."""
        slot, length = self.slots[index], self.cache.length
        real = self.cache.real[slot, :length]  # [T]
        buffer = self.cache.buffer[:, :, slot, :, :length]  # [layers, 2, kv_heads, T, head_dim]
        return [keys[:, real] for keys in buffer[:, 0]], [values[:, real] for values in buffer[:, 1]]

    def step(self, chosen: torch.Tensor) -> torch.Tensor:
        """chosen [A]: the live rows' new tokens; returns their logits [A, V] in the same order."""
        if self.sampled is None:
            self.tokens = chosen
        else:
            self.tokens[self.sampled] = chosen
        logits = decode_step(self.weights, self.cache, self.tokens, self.positions, self.sampled)
        self.positions = self.positions + 1
        return logits


def start_decoding(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                   weights: DecoderWeights | None, capacity: int, compact_fraction: float = COMPACT_FRACTION,
                   plan: PrefillPlan | None = None):
    """Prefill each prompt once with the model's forward; return the first logits [N, V] (N = B * G,
    prompt-major) and the steps object that continues: `PreallocatedSteps` when `weights` is given
    (a cache of `capacity` positions), else `DynamicCacheSteps`. prompt_ids, prompt_mask [B, P].
    With a `plan` (group_size 1) only its new tokens are prefilled, on top of its held keys and values."""
    if plan is None:
        positions = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P], skips left padding
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                    use_cache=True, logits_to_keep=1)
    else:
        device = prompt_ids.device
        prompt_mask = plan.mask.to(device)  # [B, W + S]: held positions, then the new ones
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [B, W + S]
        held = plan.past_keys[0].shape[2]
        dtype = next(model.parameters()).dtype  # held keys may come from steps in another dtype
        past = cache_of([k.to(device, dtype) for k in plan.past_keys], [v.to(device, dtype) for v in plan.past_values])
        out = model(input_ids=plan.new_ids.to(device), attention_mask=prompt_mask, position_ids=positions[:, held:],
                    use_cache=True, logits_to_keep=1, **{cache_argument_name(model): past})
    logits = out.logits[:, -1].repeat_interleave(group_size, dim=0)  # [N, V]
    next_position = positions[:, -1].repeat_interleave(group_size) + 1  # [N]
    prefill_cache = output_cache(out)
    if weights is not None:
        kv_cache = weights.new_cache(prompt_ids.shape[0] * group_size, capacity)
        layers = prefill_cache.layers
        kv_cache.write_prompt([layer.keys for layer in layers], [layer.values for layer in layers], prompt_mask,
                              group_size)
        return logits, PreallocatedSteps(weights, kv_cache, next_position, compact_fraction)
    if group_size > 1:
        prefill_cache.batch_repeat_interleave(group_size)  # [B, ...] -> [N, ...], prompt-major
    return logits, DynamicCacheSteps(model, prefill_cache, prompt_mask.repeat_interleave(group_size, dim=0),
                                     next_position)


def decode_loop(model, tokenizer, prompts: list[str], group_size: int, settings: SamplingSettings, *,
                cache: str = "auto", compact_fraction: float = COMPACT_FRACTION, dtype: str = "model",
                weight_copies: WeightCopies | None = None) -> Generation:
    """Sample `group_size` completions per prompt. `cache`: "preallocated" (`decode_step`, an error
    where unsupported), "dynamic" (the model's forward on transformers' cache) or "auto" (the first
    where supported, else the second). `dtype` (`STEP_DTYPES`): the decoding steps' dtype; other than the
    model's, the steps run on a copy of the weights in it (the prefill stays the model's forward) and
    `Generation.sampler_logprobs` holds the log-probs of the distribution each token was drawn from.
    `weight_copies`: where the steps' packed and cast copies of the weights are taken from and left, for
    later calls on the same, unchanged weights (`rlvr/rollout/weight_copies.py`); None makes them afresh."""
    if not prompts:
        raise ValueError("decode_loop: no prompts")
    if tokenizer.padding_side != "left":
        raise ValueError("decode_loop needs a left-padding tokenizer (tokenizer.padding_side='left')")
    if settings.do_sample and settings.temperature <= 0:
        raise ValueError(f"decode_loop: temperature={settings.temperature} must be > 0 when sampling")
    _check_cache_and_dtype(cache, dtype)
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return decode_loop_from_ids(model, tokenizer, encoded["input_ids"], encoded["attention_mask"], settings,
                                group_size=group_size, cache=cache, compact_fraction=compact_fraction, dtype=dtype,
                                weight_copies=weight_copies)


def _check_cache_and_dtype(cache: str, dtype: str) -> None:
    if cache not in CACHES:
        raise ValueError(f"decode_loop: unknown cache {cache!r}; choose from {', '.join(CACHES)}")
    _check_dtype(cache, dtype)


def _check_dtype(cache: str, dtype: str) -> None:
    """A ValueError for a dtype the steps do not know, or one the dynamic cache cannot run in (decode_loop's
    arguments and the backend's options at config load alike)."""
    if dtype not in STEP_DTYPES:
        raise ValueError(f"decode_loop: unknown dtype {dtype!r}; choose from {', '.join(STEP_DTYPES)}")
    if cache == "dynamic" and dtype != "model":
        raise ValueError(f"decode_loop: dtype={dtype!r} runs on the preallocated cache; cache='dynamic' runs the "
                         "model's own forward in the model's dtype (use cache='auto' or 'preallocated', "
                         "or dtype='model')")


def decode_loop_from_ids(model, tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                         settings: SamplingSettings, *, group_size: int = 1, cache: str = "auto",
                         compact_fraction: float = COMPACT_FRACTION, turn_cache: TurnCache | None = None,
                         dtype: str = "model", weight_copies: WeightCopies | None = None) -> Generation:
    """`decode_loop` on prompts given as left-padded token ids [B, P] and their mask [B, P].

    With a `turn_cache` (one completion per prompt) a row that continues one the cache holds is
    prefilled from there, and every row's keys and values are left in the cache for the next call."""
    if settings.do_sample and settings.temperature <= 0:
        raise ValueError(f"decode_loop: temperature={settings.temperature} must be > 0 when sampling")
    _check_cache_and_dtype(cache, dtype)
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)  # [B, P] each
    num_prompts, prompt_len = prompt_ids.shape
    num_rows, max_new = num_prompts * group_size, settings.max_new_tokens
    eos_ids = eos_token_ids(tokenizer, model)
    eos = torch.tensor(sorted(eos_ids), device=device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(eos[0])
    stops = tuple(s for s in settings.stop_strings if s)
    if turn_cache is not None and group_size != 1:
        raise ValueError(f"decode_loop: a turn cache continues one completion per prompt, not group_size={group_size}")
    if turn_cache is not None and not full_attention_only(model):
        turn_cache = None  # a sliding window: held keys and values cannot be handed back as a plain cache
    real_prompts = plan = None
    if turn_cache is not None:
        real_prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids.cpu(), prompt_mask.cpu())]
        plan = turn_cache.plan(real_prompts, pad_id)
    kept: list[CachedRow] = []
    # The last sampled token is never fed back: the prompt and max_new - 1 tokens are cached.
    cached_len = prompt_len if plan is None else plan.mask.shape[1]
    capacity = cached_len + max(max_new - 1, 0)
    weights = DecoderWeights.of(model, capacity, weight_copies) if cache != "dynamic" else None
    model_dtype = next(model.parameters()).dtype
    step_dtype = STEP_DTYPES[dtype] or model_dtype
    # The sampler is the trainer: same dtype, and the trainer's base products not at a reduced precision
    # (`model.base_product_dtype`); otherwise the sampler reports the log-probs it drew each token with.
    own_policy = step_dtype == model_dtype and base_product_dtype(model) is None
    if weights is None and (cache == "preallocated" or step_dtype != model_dtype):
        raise ValueError(f"decode_loop: cache={cache!r} with dtype={dtype!r} needs the preallocated cache, which does "
                         f"not support this model ({DecoderWeights.unsupported_reason(model, capacity)})")
    if step_dtype != model_dtype:
        weights = weights.cast(step_dtype)
    # [N, C] the sampler's log-prob of each sampled token, when the sampler is not the trainer
    sampled_logprobs = None if own_policy else torch.zeros(num_rows, max(max_new, 1), device=device)

    tokens = torch.full((num_rows, max(max_new, 1)), pad_id, dtype=torch.long, device=device)  # [N, C]
    lengths = torch.zeros(num_rows, dtype=torch.long, device=device)
    ended = torch.zeros(num_rows, dtype=torch.bool, device=device)  # EOS or stop string (not truncated)
    was_training = model.training
    model.eval()
    with torch.inference_mode(), weight_major_linears(model):
        logits, steps = start_decoding(model, prompt_ids, prompt_mask, group_size, weights, capacity,
                                       compact_fraction, plan)
        matcher = StopStringMatcher(tokenizer, stops, logits.shape[-1], device)
        active = torch.arange(num_rows, device=device)  # rows still generating, in row order
        for step in range(max_new):
            scores = logits.float()  # fp32 before the softmax
            if step < settings.min_new_tokens:
                scores[:, eos] = float("-inf")
            if sampled_logprobs is None:
                chosen = sample_tokens(scores, settings)  # [A]
            else:
                chosen, chosen_logprobs = sample_tokens_with_logprobs(scores, settings)  # [A] each
                sampled_logprobs[active, step] = chosen_logprobs
            tokens[active, step] = chosen
            lengths[active] = step + 1
            done = matcher.finished(tokens, active, chosen, step, torch.isin(chosen, eos))  # [A]
            ended[active[done]] = True
            last = step + 1 == max_new or bool(done.all())
            if turn_cache is not None:  # rows leave their keys and values (step tokens fed) before the cache drops them
                leaving = range(active.numel()) if last else done.nonzero().squeeze(-1).tolist()
                for index in leaving:
                    row = int(active[index])
                    keys, values = steps.held(index)
                    kept.append(CachedRow(tuple(real_prompts[row] + tokens[row, :step].tolist()), keys, values))
            if last:
                break
            if bool(done.any()):
                steps.finish(done)
                keep = (~done).nonzero().squeeze(-1)  # [A']
                active, chosen = active[keep], chosen[keep]
            logits = steps.step(chosen)
    model.train(was_training)
    if turn_cache is not None:
        turn_cache.store(kept)

    lengths, ended = lengths.cpu(), ended.cpu()
    width = int(lengths.max()) if num_rows else 0
    completion_ids = tokens[:, :width].cpu()  # [N, C]
    completion_mask = length_mask(lengths, width)  # [N, C]
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
        loss_mask=completion_mask,
        # None: sampled by the training model itself, the trainer's log-probs are these
        sampler_logprobs=None if sampled_logprobs is None else sampled_logprobs[:, :width].cpu() * completion_mask,
    )


@ROLLOUT_BACKENDS.register("decode_loop")
class DecodeLoopBackend(InProcessBackend):
    """`decode_loop` on the training model (the default `rollout.backend`)."""

    reports_sampler_logprobs = True

    OPTIONS = {
        "cache": f"decoding cache: {', '.join(CACHES)} (auto: preallocated where the model supports it)",
        "compact_fraction": f"share of finished rows that triggers a cache compaction (default {COMPACT_FRACTION})",
        "continue_turns": "an episode's next turn prefills only its new tokens, on the keys and values its last "
                          "turn left (default true; false prefills the whole conversation every turn)",
        "dtype": f"the decoding steps' dtype: {', '.join(STEP_DTYPES)} (default model: the policy's own). Another "
                 "dtype than the policy's (bfloat16: about half the step time on a CPU with bf16 units) samples "
                 "from a copy of the weights in it: the backend then reports its log-probs, and the update "
                 "logs the gap and corrects for it (rollout.correction)",
    }

    def __init__(self, policy, tokenizer, *, merge_lora: bool = True, **options) -> None:
        super().__init__(policy, tokenizer, merge_lora=merge_lora, **options)
        if self.options.pop("continue_turns", True):
            self.turn_cache = TurnCache()
        self.weight_copies = WeightCopies()

    @classmethod
    def check_options(cls, options) -> None:
        super().check_options(options)
        if "cache" in options and options["cache"] not in CACHES:
            raise ValueError(f"cache={options['cache']!r} is not one of {', '.join(CACHES)}")
        _check_dtype(options.get("cache", "auto"), options.get("dtype", "model"))
        if not isinstance(options.get("continue_turns", True), bool):
            raise ValueError(f"continue_turns={options['continue_turns']!r} must be true or false")
        fraction = options.get("compact_fraction", COMPACT_FRACTION)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"compact_fraction={fraction!r} must be a number in [0, 1]")

    @classmethod
    def product_dtypes(cls, options) -> dict[str, str]:
        dtype = options.get("dtype", "model")
        return {} if dtype in ("model", "float32") else {"rollout.backend_options.dtype": dtype}

    sample_fn = staticmethod(decode_loop)
    ids_fn = staticmethod(decode_loop_from_ids)
