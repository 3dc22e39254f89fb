"""Rollout backend on Hugging Face `generate`: sampling in inference mode, prompt-major groups.

Each prompt is repeated G times consecutively, so the output is prompt-major. With
`share_prompt_prefill` the B prompts (all but their last token) are run once and their KV cache
is repeated G times before `generate` continues from it, instead of prefilling G identical
copies. The completion mask is rebuilt from the first EOS or stop string (see `base`); texts end at the
stop string, kept.
"""

from __future__ import annotations

import torch

from rlvr.models.hf_cache import cache_argument_name, output_cache
from rlvr.rollout.backend import ROLLOUT_BACKENDS, InProcessBackend
from rlvr.rollout.generation import (
    Generation,
    SamplingSettings,
    completion_lengths_from_tokens,
    cut_at_stop,
    eos_token_ids,
    fill_token_id,
    length_mask,
)


def hf_generate(model, tokenizer, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
    if not prompts:
        raise ValueError("hf_generate: no prompts")
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    if tokenizer.padding_side != "left":
        raise ValueError("hf_generate needs a left-padding tokenizer (tokenizer.padding_side='left')")
    return hf_generate_from_ids(model, tokenizer, encoded["input_ids"], encoded["attention_mask"], settings,
                                group_size=group_size)


def hf_generate_from_ids(model, tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                         settings: SamplingSettings, *, group_size: int = 1) -> Generation:
    """`hf_generate` on prompts given as left-padded token ids [B, P] and their mask [B, P]."""
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)  # [B, P] each
    prompt_len = prompt_ids.shape[1]
    kwargs = dict(
        max_new_tokens=settings.max_new_tokens,
        pad_token_id=fill_token_id(tokenizer),
        do_sample=settings.do_sample,
    )
    if settings.do_sample:
        kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k or 0)
        if settings.min_p > 0:
            kwargs["min_p"] = settings.min_p
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    if settings.min_new_tokens > 0:
        kwargs["min_new_tokens"] = settings.min_new_tokens
    if settings.stop_strings:
        kwargs.update(stop_strings=list(settings.stop_strings), tokenizer=tokenizer)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        if settings.share_prompt_prefill and group_size > 1 and prompt_len > 1:
            output = _generate_with_shared_prefill(model, prompt_ids, prompt_mask, group_size, kwargs)
        else:
            output = model.generate(
                input_ids=prompt_ids.repeat_interleave(group_size, dim=0),
                attention_mask=prompt_mask.repeat_interleave(group_size, dim=0), **kwargs,
            )  # [B*G, P+C], prompt-major
    model.train(was_training)
    output = output.clone()  # leave inference mode: these tensors feed autograd later
    completion_ids = output[:, prompt_len:]  # [N, C]
    lengths, truncated = completion_lengths_from_tokens(
        completion_ids.cpu(), eos_token_ids(tokenizer, model), settings.max_new_tokens,
        tokenizer, settings.stop_strings,
    )
    completion_mask = length_mask(lengths, completion_ids.shape[1])  # [N, C]
    attention_mask = torch.cat(
        [prompt_mask.cpu().repeat_interleave(group_size, dim=0), completion_mask], dim=1
    )  # [N, P+C]
    eos_ids = eos_token_ids(tokenizer, model)
    texts = []
    for row in range(completion_ids.shape[0]):
        ids = completion_ids[row, : int(lengths[row])].tolist()
        ids = [t for t in ids if t not in eos_ids]
        # A stop string is kept; text a token carried past it is dropped.
        texts.append(cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), settings.stop_strings))
    return Generation(
        input_ids=output.cpu(),
        attention_mask=attention_mask,
        prompt_len=prompt_len,
        completion_texts=texts,
        completion_lengths=lengths,
        truncated=truncated,
        loss_mask=completion_mask,
        sampler_logprobs=None,  # sampled by the training model itself
    )


def _generate_with_shared_prefill(model, prompt_ids, prompt_mask, group_size, kwargs):
    """Prefill each prompt once, repeat the cache G times, let `generate` go on from there."""
    position_ids = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P]
    prefill = model(
        input_ids=prompt_ids[:, :-1], attention_mask=prompt_mask[:, :-1], position_ids=position_ids[:, :-1],
        use_cache=True, logits_to_keep=1,
    )
    cache = output_cache(prefill)
    cache.batch_repeat_interleave(group_size)  # [B, ...] -> [B*G, ...], prompt-major
    return model.generate(
        input_ids=prompt_ids.repeat_interleave(group_size, dim=0),
        attention_mask=prompt_mask.repeat_interleave(group_size, dim=0),
        **{cache_argument_name(model): cache}, **kwargs,
    )  # [B*G, P+C]


@ROLLOUT_BACKENDS.register("hf_generate")
class HFGenerateBackend(InProcessBackend):
    """transformers' `generate` on the training model."""

    sample_fn = staticmethod(hf_generate)
    ids_fn = staticmethod(hf_generate_from_ids)
