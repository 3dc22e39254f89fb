"""What the two vLLM backends share: the request they send and how its answer becomes a `Generation`.

The colocated engine (`vllm_backend.py`) and the client of a `vllm serve` process (`vllm_server.py`)
ask for the same thing in two forms (`SamplingParams`, or the JSON body of the completions API, whose
field names are the same): `sampling_fields` builds it once. Whatever the transport, each returned
completion is a `SampledRow` (token ids, the sampler's log-prob of each, whether it stopped), and
`layout_generation` lays the rows out as `decode_loop` does: prompt-major, prompts left-padded,
completions right-filled, texts decoded with rlvr's tokenizer and cut after the first stop string.
`TokenIdEngine` is the part of the backend contract both fill alike: prompts (text or token ids) become
left-padded token-id rows handed to the engine's `_sample`, and only inside `sync()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

from rlvr.rollout.backend import RolloutBackend
from rlvr.rollout.generation import (Generation, SamplingSettings, cut_at_stop, eos_token_ids, fill_token_id,
                                     left_pad_ids, length_mask)


@dataclass(frozen=True)
class SampledRow:
    """One completion as vLLM returns it."""

    token_ids: list[int]  # the sampled tokens, EOS included when it ended on one
    logprobs: list[float]  # the sampler's log-prob of each token (after temperature and top-k / top-p)
    stopped: bool  # ended by EOS or a stop string (finish_reason "stop"), not by the token budget


def sampling_fields(group_size: int, settings: SamplingSettings, stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """vLLM's sampling parameters for `group_size` completions of one prompt under `settings`.

    The keys are both `SamplingParams` keyword arguments and completions-API fields. Greedy decoding
    asks for one completion (vLLM takes n=1 only): `engine_prompts` sends each prompt G times instead.
    Stop strings are kept in the output (the text is cut after them, as `decode_loop` cuts it), and
    every EOS id of the tokenizer and the generation config stops a completion. `logprobs=0`: the
    log-prob of the sampled token itself, no alternatives.
    """
    sample = settings.do_sample
    return dict(
        n=group_size if sample else 1,
        max_tokens=settings.max_new_tokens, min_tokens=settings.min_new_tokens,
        temperature=settings.temperature if sample else 0.0, top_p=settings.top_p if sample else 1.0,
        top_k=settings.top_k if sample else 0, min_p=settings.min_p if sample else 0.0,
        stop=[s for s in settings.stop_strings if s] or None, include_stop_str_in_output=True,
        stop_token_ids=sorted(int(t) for t in stop_token_ids), logprobs=0,
    )


def engine_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                   settings: SamplingSettings) -> list[list[int]]:
    """The unpadded token ids of each left-padded prompt (prompt_ids, prompt_mask [B, P]), one request each;
    greedy: each prompt G times in a row (prompt-major), since a greedy request yields one completion."""
    prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask)]
    if not settings.do_sample:
        prompts = [prompt for prompt in prompts for _ in range(group_size)]
    return prompts


def layout_generation(rows: Sequence[SampledRow], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      group_size: int, settings: SamplingSettings, tokenizer, model=None) -> Generation:
    """The `Generation` of B*G prompt-major rows sampled from the left-padded prompts (prompt_ids, prompt_mask [B, P]).

    `model`: the policy, whose generation config may name more EOS ids (left out of the texts).
    """
    num_rows = len(rows)  # N = B * G, prompt-major
    if num_rows != prompt_ids.shape[0] * group_size:
        raise ValueError(f"vLLM returned {num_rows} completions for {prompt_ids.shape[0]} prompts x {group_size}")
    width = max((len(row.token_ids) for row in rows), default=0)
    completion_ids = torch.full((num_rows, width), fill_token_id(tokenizer), dtype=torch.long)  # [N, C]
    sampler_logprobs = torch.zeros(num_rows, width)  # [N, C]
    lengths = torch.zeros(num_rows, dtype=torch.long)  # [N]
    stopped = torch.zeros(num_rows, dtype=torch.bool)  # [N]
    for index, row in enumerate(rows):
        if len(row.logprobs) != len(row.token_ids):
            raise ValueError(f"vLLM returned {len(row.token_ids)} tokens but {len(row.logprobs)} log-probs")
        length = len(row.token_ids)
        completion_ids[index, :length] = torch.tensor(row.token_ids, dtype=torch.long)
        sampler_logprobs[index, :length] = torch.tensor(row.logprobs, dtype=torch.float32)
        lengths[index] = length
        stopped[index] = row.stopped
    eos_ids = eos_token_ids(tokenizer, model)
    stops = tuple(s for s in settings.stop_strings if s)
    texts = []
    for index in range(num_rows):
        ids = [t for t in completion_ids[index, : int(lengths[index])].tolist() if t not in eos_ids]
        texts.append(cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stops))
    loss_mask = length_mask(lengths, width)  # [N, C]
    return Generation(
        input_ids=torch.cat([prompt_ids.repeat_interleave(group_size, dim=0), completion_ids], dim=1),
        attention_mask=torch.cat([prompt_mask.repeat_interleave(group_size, dim=0), loss_mask], dim=1),
        prompt_len=prompt_ids.shape[1], completion_texts=texts, completion_lengths=lengths,
        truncated=~stopped & (lengths >= settings.max_new_tokens), loss_mask=loss_mask,
        sampler_logprobs=sampler_logprobs * loss_mask,
    )


def write_adapter(policy, folder: str) -> None:
    """The policy's LoRA adapter in PEFT's format (adapter_config.json + safetensors), as vLLM loads one."""
    with torch.no_grad():
        policy.save_pretrained(folder, save_embedding_layers=False)


class TokenIdEngine(RolloutBackend):
    """A backend whose engine takes prompts as token ids: `generate` and `generate_from_ids` for `_sample`."""

    # What a `sync()` gives the engine, for the error when sampling is asked outside one.
    SYNC_GIVES: ClassVar[str] = "the engine holds the policy's current weights"
    NAME: ClassVar[str] = "vllm"  # the registered name, in errors

    def _require_sync(self, method: str) -> None:
        if not self.in_sync:
            raise RuntimeError(f"{type(self).__name__}.{method} called outside `with backend.sync():`; sync first, "
                               f"so {self.SYNC_GIVES}")

    def generate(self, prompts: list[str], group_size: int, settings: SamplingSettings) -> Generation:
        self._require_sync("generate")
        if not prompts:
            raise ValueError(f"{self.NAME}: no prompts")
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return self._sample(encoded["input_ids"], encoded["attention_mask"], group_size, settings)

    def generate_from_ids(self, prompt_ids: list[list[int]], settings: SamplingSettings) -> Generation:
        """One completion per token-id prompt, sent to the engine as token ids (nothing re-tokenized)."""
        self._require_sync("generate_from_ids")
        ids, mask = left_pad_ids(prompt_ids, fill_token_id(self.tokenizer))  # [B, P] each
        return self._sample(ids, mask, 1, settings)

    def _sample(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                settings: SamplingSettings) -> Generation:
        """G completions of each left-padded token-id prompt (prompt_ids, prompt_mask [B, P]), prompt-major."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _sample")
