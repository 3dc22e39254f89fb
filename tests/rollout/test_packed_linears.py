"""decode_step's oneDNN-packed linears: every fp32 CPU linear and the LM head pack their weight at their
first call of up to PACKED_LAYER_ROWS rows (the head: PACKED_HEAD_ROWS), multiply with it up to there
and as before above, and give the product of the weight they were read from."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlvr.models import load_policy
from rlvr.rollout.decode_step import (PACKED_HEAD_ROWS, PACKED_LAYER_ROWS, DecoderWeights, Linear,
                                      onednn_packing_available, pack_weight, packable)


@pytest.fixture(scope="module")
def weights(tiny_model_dir):
    return DecoderWeights.of(load_policy(str(tiny_model_dir)).policy, 32)


def test_this_torch_build_has_onednn_packing():
    assert onednn_packing_available(), "the CPU torch build lacks oneDNN: decode_step multiplies unpacked"


def test_every_fp32_linear_and_the_head_pack_at_their_first_few_row_call_and_bf16_copies_do_not(weights):
    linears = [getattr(layer, name) for layer in weights.layers for name in ("q", "k", "v", "o", "gate", "up", "down")]
    assert all(linear.pack and linear.packed is None for linear in linears + [weights.head])  # nothing packed yet
    assert {linear.packed_up_to_rows for linear in linears} == {PACKED_LAYER_ROWS}
    assert weights.head.packed_up_to_rows == PACKED_HEAD_ROWS
    cast = weights.cast(torch.bfloat16)
    assert not any(getattr(layer, "q").pack for layer in cast.layers) and not cast.head.pack
    assert pack_weight(torch.zeros(4, 4, dtype=torch.bfloat16)) is None and not packable(torch.zeros(4, 4).half())
    q, head = weights.layers[0].q, weights.head
    with torch.inference_mode():
        q(torch.randn(PACKED_LAYER_ROWS + 1, q.weight.shape[1]))  # too many rows: not packed
        head(torch.randn(PACKED_LAYER_ROWS + 1, head.weight.shape[1]))  # the head packs up to 32 rows
        assert q.packed is None and head.packed is not None
        q(torch.randn(2, q.weight.shape[1]))
        assert q.packed is not None
        cast.layers[0].q(torch.randn(2, q.weight.shape[1], dtype=torch.bfloat16))
        assert cast.layers[0].q.packed is None


@pytest.mark.parametrize("rows", [1, 3, PACKED_LAYER_ROWS, PACKED_LAYER_ROWS + 1, PACKED_HEAD_ROWS + 1, 70])
def test_the_packed_product_is_the_weights_product(rows):
    generator = torch.Generator().manual_seed(rows)
    weight, bias = torch.randn(48, 40, generator=generator), torch.randn(48, generator=generator)
    x = torch.randn(rows, 40, generator=generator)
    with torch.inference_mode():
        for with_bias in (None, bias):
            got = Linear(weight, with_bias, True, packed_up_to_rows=PACKED_HEAD_ROWS, pack=True)(x)
            torch.testing.assert_close(got, F.linear(x, weight, with_bias), rtol=1e-5, atol=1e-5)


def test_the_packed_weight_is_used_up_to_the_row_limit_and_not_above():
    # Power: packed from 2 W, so a packed product reads 2 x W^T and an unpacked one x W^T.
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 16, generator=generator)
    linear = Linear(weight, None, True, packed=pack_weight(2 * weight))
    with torch.inference_mode():
        for rows, factor in ((1, 2.0), (PACKED_LAYER_ROWS, 2.0), (PACKED_LAYER_ROWS + 1, 1.0)):
            x = torch.randn(rows, 16, generator=generator)
            torch.testing.assert_close(linear(x), factor * F.linear(x, weight), rtol=1e-5, atol=1e-4)
