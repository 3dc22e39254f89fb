"""A judge without a server: a second causal LM loaded in the training process, replying greedily in batches.

`LocalJudge` is the `local` judge backend (`judge_backends`): the model is named as the policy is (a model
folder, a `.gguf` file, an embedded name such as `smollm2-135m-instruct`, a hub id in the local cache;
`rlvr.models.conversion.resolve_model_path`) and loaded once, frozen, in eval mode, on `device` in `dtype`.
Each rubric is the user message of the judge's own chat template when its tokenizer has one (else the raw
text); replies are Hugging Face `generate` with `do_sample=False`, at most `max_tokens` new tokens, in batches
of `batch_size` prompts of similar length, left-padded with an attention mask, so padding and batch-mates
cannot change a reply. (`rlvr.rollout`'s generation functions sit a layer above the tasks and are not
imported here; this is the same `generate` call `rlvr.rollout.hf_generate` makes, greedy only.)
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from rlvr.tasks.task import check_count_option
from rlvr.tasks.verification.judge_client import Reply

if TYPE_CHECKING:  # the annotations' torch only: nothing is imported at run time
    import torch

# torch (and the model loaders) are imported when a local judge is built: `rlvr.tasks` is imported by the
# verifier worker and the command line's start-up checks, which must not pay for torch.
DTYPE_NAMES = ("float32", "bfloat16", "float16")

NAME = "judge"
ERROR_DETAIL_CHARS = 300


def model_label(spec: str) -> str:
    """The judge's name in verdicts: a folder's or a `.gguf` file's name, else the spec (embedded name, hub id)."""
    path = Path(spec).expanduser()
    return path.resolve().name if path.exists() else spec


def load_judge_model(spec: str, dtype: "torch.dtype", device: "torch.device"):
    """(causal LM, tokenizer) for `spec`, frozen, in eval mode on `device`; the tokenizer pads on the left."""
    from rlvr.models.conversion import resolve_model_path
    from rlvr.models.model_spec import valid_specs
    from rlvr.models.policy import load_causal_lm, load_tokenizer

    path, gguf_file = resolve_model_path(spec)
    try:
        tokenizer = load_tokenizer(path, gguf_file=gguf_file)
        model = load_causal_lm(path, gguf_file, dtype)
    except OSError as error:
        raise OSError(f"{NAME}: could not load the local judge {spec!r} (resolved to {path!r}); valid specs: "
                      f"{valid_specs()}. Cause: {error}") from error
    model.to(device).eval().requires_grad_(False)
    return model, tokenizer


def greedy_replies(model, tokenizer, prompt_ids: Sequence[Sequence[int]], max_tokens: int,
                   eos_ids: set[int]) -> list[str]:
    """One greedy reply per token-id prompt, generated as one left-padded batch; each cut at its first EOS."""
    import torch

    fill = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), int(fill), dtype=torch.long)  # [B, P]
    attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)  # [B, P]
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
        attention_mask[row, width - len(ids):] = 1
    device = next(model.parameters()).device
    with torch.inference_mode():
        output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None,
                                top_k=None, pad_token_id=int(fill))  # [B, P+C]
    replies = []
    for row in output[:, width:].cpu().tolist():  # [B, C]
        end = next((index for index, token in enumerate(row) if token in eos_ids), len(row))
        replies.append(tokenizer.decode(row[:end], skip_special_tokens=True))
    return replies


class LocalJudge:
    """The `local` judge backend: a causal LM in this process. `model` (the spec) is required."""

    OPTIONS = ("model", "max_tokens", "batch_size", "device", "dtype")

    def __init__(self, *, model: Optional[str] = None, max_tokens: int = 512, batch_size: int = 8,
                 device: str = "auto", dtype: str = "float32"):
        if not model:
            raise ValueError(f"{NAME}: backend local needs task.options.model, the judge model to load: a model "
                             "folder, a .gguf file or an embedded name (smollm2-135m-instruct)")
        self.max_tokens = check_count_option(NAME, "max_tokens", max_tokens, minimum=1)
        self.batch_size = check_count_option(NAME, "batch_size", batch_size, minimum=1)
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"{NAME}: task.options.dtype={dtype!r}; valid choices: {', '.join(DTYPE_NAMES)}")
        from rlvr.models.policy import eos_token_ids
        from rlvr.tasks.verification.reward_model_scores import DTYPES, resolve_device

        try:
            self.device = resolve_device(str(device))
        except ValueError as exc:
            raise ValueError(f"{NAME}: task.options.{exc}") from None
        self.spec = os.fspath(model)
        self.model = model_label(self.spec)
        self.lm, self.tokenizer = load_judge_model(self.spec, DTYPES[dtype], self.device)
        self.templated = getattr(self.tokenizer, "chat_template", None) is not None
        self.eos_ids = eos_token_ids(self.tokenizer, self.lm)
        # The positions the model was trained on (None: not declared): a longer prompt is refused as a server
        # refuses it, not run for minutes past what the model can read.
        self.context = getattr(self.lm.config, "max_position_embeddings", None)

    def __repr__(self) -> str:
        return f"LocalJudge(model={self.spec!r}, device={str(self.device)!r})"

    def prompt_ids(self, content: str) -> list[int]:
        """The rubric as the judge reads it: the user message of its chat template, or the text itself."""
        if self.templated:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                      add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(content)["input_ids"]

    def reply(self, contents: Sequence[str]) -> list[Reply]:
        """Greedy replies in batches of `batch_size`, shortest prompts together; a batch whose generation
        fails (out of memory) gives `error` replies, so the task's stop-when-down rule applies, and so does a
        prompt too long for the model's context (never generated)."""
        encoded = [self.prompt_ids(content) for content in contents]
        replies: list[Optional[Reply]] = [None] * len(encoded)
        fits = []
        for row, ids in enumerate(encoded):
            if self.context is not None and len(ids) + self.max_tokens > self.context:
                replies[row] = Reply(text=None, status="error", detail=(
                    f"the prompt's {len(ids)} tokens and max_tokens {self.max_tokens} exceed the local judge's "
                    f"context of {self.context} tokens"))
            else:
                fits.append(row)
        order = sorted(fits, key=lambda index: len(encoded[index]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            started = time.perf_counter()
            try:
                texts = greedy_replies(self.lm, self.tokenizer, [encoded[row] for row in rows], self.max_tokens,
                                       self.eos_ids)
            except RuntimeError as exc:  # torch.OutOfMemoryError is one
                detail = f"local generation failed: {type(exc).__name__}: {str(exc)[:ERROR_DETAIL_CHARS]}"
                texts, status = [None] * len(rows), "error"
            else:
                detail, status = "", "ok"
            seconds = time.perf_counter() - started  # each request waited for its whole batch
            for row, text in zip(rows, texts):
                replies[row] = Reply(text=text, status=status, detail=detail, seconds=seconds, retries=0)
        return replies

    def down_message(self, reply: Reply) -> str:
        return (f"{NAME}: the local judge {self.spec!r} on {self.device} failed every request of this batch "
                f"({reply.detail}). Lower task.options.batch_size or max_tokens, or set "
                "task.options.on_judge_down=skip to leave such batches out of training")
