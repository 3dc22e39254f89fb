"""What a rollout backend returns, and the helpers every backend shares.

A backend turns B rendered prompts into B*G sequences in prompt-major order (a group's G
completions are contiguous): the prompt left-padded to a common width P, the completion
right-padded after its EOS, and an attention mask that is 1 exactly on real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from rlvr.models.policy import eos_token_ids  # noqa: F401 - the rollout's name for it (backends import it here)
from rlvr.tasks.task import Example


@dataclass
class Generation:
    input_ids: torch.Tensor  # [N, P+C] long, N = B*G, prompt-major
    attention_mask: torch.Tensor  # [N, P+C] long, 0 on left prompt padding and right completion padding
    prompt_len: int  # P: completions start at column P
    completion_texts: list[str]  # decoded without special tokens
    completion_lengths: torch.Tensor  # [N] generated tokens counted in the loss (EOS included)
    truncated: torch.Tensor  # [N] bool: hit max_new_tokens without EOS or a stop string
    # [N, C] long, C = completion columns: 1 where the token is the policy's own and enters the loss.
    # None: every generated token (the first completion_lengths[i] columns of row i).
    loss_mask: torch.Tensor | None = None
    # [N, C] float: the sampler's log-probability of each sampled token (0 where loss_mask is 0), or
    # None when the backend does not report them. Never used as the trainer's own log-probs.
    sampler_logprobs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        num_rows, width = self.input_ids.shape
        completion_columns = width - self.prompt_len
        if self.loss_mask is None:
            self.loss_mask = length_mask(self.completion_lengths, completion_columns)
        for name in ("loss_mask", "sampler_logprobs"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (num_rows, completion_columns):
                raise ValueError(f"Generation.{name} must be [N, C] = [{num_rows}, {completion_columns}] (the "
                                 f"completion columns of input_ids), got {tuple(value.shape)}")


def length_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """1 on the first lengths[i] columns of row i: lengths [N] -> [N, width] long."""
    columns = torch.arange(width)  # [C]
    return (columns[None, :] < lengths.cpu()[:, None]).long()  # [N, C]


@dataclass
class SamplingSettings:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    stop_strings: tuple[str, ...] = ()
    do_sample: bool = True
    # Run each prompt once and repeat its KV cache G times, instead of prefilling G copies.
    share_prompt_prefill: bool = True
    # EOS is suppressed until this many tokens are generated (0: no minimum).
    min_new_tokens: int = 0
    # Episodes (environment tasks) only: assistant turns before an episode is cut (None: the
    # environment's `max_turns`), and tokens after the prompt, policy's and environment's together
    # (None: no limit beyond max_turns * max_new_tokens and the replies). `max_new_tokens` is per turn.
    max_turns: int | None = None
    max_episode_tokens: int | None = None

    @classmethod
    def for_task(cls, rollout, task, **overrides) -> "SamplingSettings":
        """The sampling settings of a config's rollout section (a `RolloutConfig`) for `task`.

        Stop strings are `rollout.stop_strings` when set, else the task's own (`task.stop_strings`,
        e.g. `</answer>` for the r1_zero prompt). `overrides` replace single fields: greedy
        evaluation passes do_sample=False and its token budget, expert iteration min_new_tokens.
        """
        fields = dict(
            max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
            top_k=rollout.top_k, min_p=rollout.min_p,
            stop_strings=tuple(rollout.stop_strings) or tuple(task.stop_strings),
            share_prompt_prefill=rollout.share_prompt_prefill,
            max_turns=rollout.max_turns, max_episode_tokens=rollout.max_episode_tokens,
        )
        fields.update(overrides)
        return cls(**fields)


def render_prompts(tokenizer, examples: Sequence[Example], use_chat_template: bool,
                   tools: Sequence[dict] = ()) -> list[str]:
    """Chat messages through the tokenizer's template (generation prompt added), or raw text. `tools`:
    JSON schemas of the tools an environment offers, passed to the template as `tools=` (its own tool
    format lists them in the prompt); () passes none."""
    rendered = []
    for example in examples:
        prompt = example.prompt
        if isinstance(prompt, str):
            if use_chat_template:
                prompt = [{"role": "user", "content": prompt}]
            else:
                rendered.append(prompt)
                continue
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "task.use_chat_template is true but the tokenizer has no chat template; "
                "set task.use_chat_template=false for a base model"
            )
        extra = {"tools": list(tools)} if tools else {}
        rendered.append(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **extra))
    return rendered


def left_pad_ids(prompt_ids: Sequence[Sequence[int]], fill_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id prompts of any lengths, left-padded to one width P: (ids [B, P] long, mask [B, P] long)."""
    if not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise ValueError("generate_from_ids needs at least one prompt and no empty prompt")
    width = max(len(ids) for ids in prompt_ids)
    ids = torch.full((len(prompt_ids), width), int(fill_id), dtype=torch.long)  # [B, P]
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)  # [B, P]
    for row, tokens in enumerate(prompt_ids):
        ids[row, width - len(tokens):] = torch.tensor([int(t) for t in tokens], dtype=torch.long)
        mask[row, width - len(tokens):] = 1
    return ids, mask


def fill_token_id(tokenizer) -> int:
    """The id that pads batches: the pad token, or EOS when there is none (they may be equal)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id




def completion_lengths_from_tokens(
    completion_ids: torch.Tensor,  # [N, C] generated tokens, right-filled with pad after a stop
    eos_ids: set[int],
    max_new_tokens: int,
    tokenizer=None,
    stop_strings: Sequence[str] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: how many tokens were really generated (EOS included), and whether it was cut off.

    The pad id may equal the EOS id (SmolLM2), so padding is located from the first EOS, never
    from the pad id. A row ended by a stop string is filled with pad right after the token that
    completed it: when the text before the first EOS already holds a stop string (at its end, or
    inside a last token that runs past it), that EOS is filler, not generated.
    """
    num_rows, width = completion_ids.shape
    is_eos = torch.zeros_like(completion_ids, dtype=torch.bool)
    for eos in eos_ids:
        is_eos |= completion_ids == eos
    has_eos = is_eos.any(dim=1)  # [N]
    first_eos = torch.where(has_eos, is_eos.int().argmax(dim=1), torch.full((num_rows,), width))
    lengths = torch.where(has_eos, first_eos + 1, torch.full((num_rows,), width))  # [N]
    stopped = torch.zeros(num_rows, dtype=torch.bool)
    if stop_strings and tokenizer is not None:
        for row in range(num_rows):
            end = int(first_eos[row])
            text = tokenizer.decode(completion_ids[row, :end], skip_special_tokens=True)
            if any(s and s in text for s in stop_strings):
                stopped[row] = True
                lengths[row] = end
    truncated = ~has_eos & ~stopped & (lengths >= max_new_tokens)
    return lengths, truncated


def cut_at_stop(text: str, stop_strings: Sequence[str]) -> str:
    """The text up to and including the earliest stop string (a token may run past it)."""
    ends = [text.find(s) + len(s) for s in stop_strings if s and s in text]
    return text[: min(ends)] if ends else text
