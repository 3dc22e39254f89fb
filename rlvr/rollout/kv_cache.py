"""A key/value cache allocated once per rollout, so a decoding step costs the same at any position.

transformers' `DynamicCache` concatenates every layer's keys and values with the new token's at
each step: step t copies the whole cache, and a 1024-token completion copies it 1024 times.
`PreallocatedKVCache` holds all layers in one buffer [layers, 2, rows, kv_heads, capacity,
head_dim], sized for the prompt plus every new token; a step writes one position and attends
over a view of the filled part. Every row shares the same filled length (prompts are
left-padded to one width and all rows decode in step), so one integer tracks it and a
[rows, capacity] boolean mask marks the real (non-padding) positions.

Rows that finish are not removed by copying the whole cache: `compact` fills the slots of
finished rows with live rows from the end of the batch (row copies of the filled part only), and
the caller decides when (see `decode_loop`); until then a finished row stays in the batch and is
simply ignored.
"""

from __future__ import annotations

import torch


class PreallocatedKVCache:
    """Keys and values of every layer for `rows` sequences of up to `capacity` positions."""

    def __init__(self, num_layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        # torch.empty: positions are written before they are read (prompt, then one per step).
        self.buffer = torch.empty(num_layers, 2, rows, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.real = torch.zeros(rows, capacity, dtype=torch.bool, device=device)  # [rows, capacity]
        self.rows = rows  # the first `rows` rows of the buffer are in the batch
        self.length = 0  # positions filled, the same for every row
        self.capacity = capacity
        self.padded = False  # some row has a masked (left-padding) position

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def write_prompt(self, layer_keys: list[torch.Tensor], layer_values: list[torch.Tensor],
                     prompt_mask: torch.Tensor, repeats: int) -> None:
        """Fill positions [0, P) from a prefill: per layer [B, kv_heads, P, head_dim], each row repeated
        `repeats` times (prompt-major: rows g*repeats .. g*repeats+repeats-1 are prompt g). prompt_mask [B, P]."""
        prompt_len = prompt_mask.shape[1]
        if prompt_len > self.capacity:
            raise ValueError(f"prompt of {prompt_len} positions does not fit a cache of {self.capacity}")
        for layer, (keys, values) in enumerate(zip(layer_keys, layer_values)):
            self.buffer[layer, 0, : self.rows, :, :prompt_len] = keys.repeat_interleave(repeats, dim=0)
            self.buffer[layer, 1, : self.rows, :, :prompt_len] = values.repeat_interleave(repeats, dim=0)
        real = prompt_mask.bool().repeat_interleave(repeats, dim=0)  # [rows, P]
        self.real[: self.rows, :prompt_len] = real
        self.real[: self.rows, prompt_len:] = True
        self.padded = not bool(real.all())
        self.length = prompt_len

    def append(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new position's key and value [rows, kv_heads, head_dim] for `layer`; return that
        layer's filled keys and values, views [rows, kv_heads, length + 1, head_dim]."""
        if self.length >= self.capacity:
            raise RuntimeError(f"KV cache full: {self.capacity} positions")
        keys = self.buffer[layer, 0, : self.rows]  # [rows, H, capacity, D]
        values = self.buffer[layer, 1, : self.rows]
        keys[:, :, self.length] = key
        values[:, :, self.length] = value
        return keys[:, :, : self.length + 1], values[:, :, : self.length + 1]

    def attention_mask(self) -> torch.Tensor | None:
        """For the next position: [rows, 1, 1, length + 1] bool (True = attend), None when no row is padded."""
        if not self.padded:
            return None
        return self.real[: self.rows, None, None, : self.length + 1]

    def advance(self) -> None:
        """Every layer has appended the current position."""
        self.length += 1

    def compact(self, source: list[int]) -> None:
        """Keep len(source) rows: row i takes old row source[i], copied (filled part only) unless it is i.
        Each source is i itself or a row at or above len(source), so no row is overwritten before it is read."""
        rows = len(source)
        if len(set(source)) != rows or any(row != slot and not rows <= row < self.rows
                                           for slot, row in enumerate(source)):
            raise ValueError(f"compact: row i must come from row i or from a row >= {rows} "
                             f"(below {self.rows}), each once; got {source}")
        for slot, row in enumerate(source):
            if slot != row:
                self.buffer[:, :, slot, :, : self.length].copy_(self.buffer[:, :, row, :, : self.length])
                self.real[slot].copy_(self.real[row])
        self.rows = rows
        self.padded = not bool(self.real[: self.rows, : self.length].all())
