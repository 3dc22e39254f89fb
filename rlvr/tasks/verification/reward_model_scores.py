"""A sequence-classification reward model: load it from a folder, turn (prompt, completion) into token ids,
score them in padded batches.

The score of a text is the model's one output logit at the last real token that is not the pad token,
the rule `*ForSequenceClassification.forward` itself follows on an unpadded text. Batches are padded on
the right and pooled by the attention mask, never by comparing ids with `pad_token_id` over the padded
row, so padding (and which other texts share the batch) cannot change a score. Decoder models with a
`score` head (Llama, Qwen2, Mistral, Gemma...) are pooled here; any other model (an encoder such as
DeBERTa pooling its first token) is run through its own forward with an attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("auto", "cpu", "cuda", "cuda:N")


@dataclass(frozen=True)
class Encoded:
    """One (prompt, completion) as the reward model reads it."""

    ids: list[int]
    truncated: int  # tokens cut from the left (the start of the prompt) to fit max_length


def resolve_device(device: str) -> torch.device:
    """`auto`: the first GPU when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return torch.device(device)
    raise ValueError(f"device={device!r}; valid choices: {', '.join(DEVICES)}")


def load_reward_model(path: str, dtype: str, device: str, *, who: str):
    """(model, tokenizer) from a local folder, in eval mode; refuses a folder without a one-output
    sequence-classification model, naming what is wrong."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    if dtype not in DTYPES:
        raise ValueError(f"{who}: task.options.dtype={dtype!r}; valid choices: {', '.join(DTYPES)}")
    folder = Path(str(path)).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{who}: task.options.path={str(path)!r} is not a model folder (no config.json "
                                "there); give the folder of a sequence-classification reward model")
    config = AutoConfig.from_pretrained(folder)
    if int(getattr(config, "num_labels", 0)) != 1:
        raise ValueError(f"{who}: the model in {str(folder)!r} has num_labels={config.num_labels}; a reward model "
                         "gives one score per text (num_labels=1)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=DTYPES[dtype])
    model.to(resolve_device(device)).eval()
    return model, tokenizer


def encode(tokenizer, text: str, *, templated: bool, max_length: int) -> Encoded:
    """Token ids of `text` (special tokens added unless a chat template already put them in), cut to the
    last `max_length` tokens: the start of the prompt goes first, the completion is kept whole while it fits."""
    ids = list(tokenizer(text, add_special_tokens=not templated)["input_ids"])
    cut = max(0, len(ids) - max_length)
    return Encoded(ids=ids[cut:], truncated=cut)


def _pool_index(ids: torch.Tensor, mask: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """[B] the index of each row's last real token that is not `pad_id` (its last real token if all are).
    ids, mask: [B, L], right-padded."""
    positions = torch.arange(ids.shape[1], device=ids.device)  # [L]
    real = mask.bool()  # [B, L]
    last_real = (positions * real).amax(dim=1)  # [B]
    wanted = real & (ids != pad_id) if pad_id is not None else real  # [B, L]
    last_wanted = torch.where(wanted, positions, -1).amax(dim=1)  # [B], -1 when none
    return torch.where(last_wanted >= 0, last_wanted, last_real)


@torch.no_grad()
def score_batch(model, rows: Sequence[Sequence[int]], pad_id: int) -> list[float]:
    """One float32 score per row of token ids (one batch, right-padded with `pad_id`)."""
    device = next(model.parameters()).device
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)  # [B, L]
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)  # [B, L]
    for index, row in enumerate(rows):
        ids[index, :len(row)] = torch.tensor(list(row), dtype=torch.long)
        mask[index, :len(row)] = 1
    backbone = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = getattr(model, "score", None)
    if backbone is None or not isinstance(head, torch.nn.Module):  # a model that pools by itself
        return model(input_ids=ids, attention_mask=mask).logits.float()[:, 0].tolist()
    hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H]
    index = _pool_index(ids, mask, getattr(model.config, "pad_token_id", None))  # [B]
    pooled = hidden[torch.arange(len(rows), device=device), index]  # [B, H]
    return head(pooled).float()[:, 0].tolist()  # [B]


def score_rows(model, rows: Sequence[Sequence[int]], *, batch_size: int, pad_id: int) -> list[float]:
    """Scores of every row, `batch_size` rows per forward pass, in the rows' order."""
    scores: list[float] = []
    for start in range(0, len(rows), batch_size):
        scores += score_batch(model, rows[start:start + batch_size], pad_id)
    return scores
