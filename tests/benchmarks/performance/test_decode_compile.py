"""benchmarks/performance/decode_compile.py on a tiny Llama: its compiled variant is `decode_step` with other functions
around each layer's attention (so it is timed against the same computation), every linear variant is the
same product, the lockstep alternates the order of its variants, and the rollout shapes are the configs'."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.performance.decode_compile import copy_cache, filled_cache, linear_inputs, linear_variants, lockstep_ms
from rlvr.models import load_policy
from rlvr.rollout.decode_step import DecoderWeights, after_attention, before_attention, decode_step


@pytest.fixture(scope="module")
def weights(tiny_model_dir):
    model = load_policy(str(tiny_model_dir)).policy
    with torch.inference_mode():
        yield DecoderWeights.of(model, 32)


def test_decode_step_runs_the_layer_functions_it_is_given(weights):
    """The compiled variant passes compiled `before_attention` / `after_attention` to `decode_step`: the
    step must call what it is given, in every layer (a step that ignored them would time the plain step)."""
    calls = {"before": 0, "after": 0}

    def before(*args):
        calls["before"] += 1
        return before_attention(*args)

    def after(layer, x, attended):
        calls["after"] += 1
        return after_attention(layer, x, attended)

    with torch.inference_mode():
        cache = filled_cache(weights, rows=3, capacity=32, length=5)
        theirs_cache = copy_cache(weights, cache, 32)
        token_ids, positions = torch.tensor([5, 9, 17]), torch.tensor([2, 5, 5])  # row 0 left-padded by 3
        for _ in range(4):
            ours = decode_step(weights, cache, token_ids, positions, before=before, after=after)
            theirs = decode_step(weights, theirs_cache, token_ids, positions)
            assert torch.equal(ours, theirs)  # bitwise: the same functions
            positions = positions + 1
        assert calls == {"before": 4 * len(weights.layers), "after": 4 * len(weights.layers)}
        assert cache.length == theirs_cache.length == 9
        # Power: a layer that drops the MLP's residual gives other logits.
        wrong = decode_step(weights, copy_cache(weights, cache, 32), token_ids, positions,
                            after=lambda layer, x, attended: after_attention(layer, x.clone(), attended) - x)
        right = decode_step(weights, copy_cache(weights, cache, 32), token_ids, positions)
        assert (wrong - right).abs().max() > 1e-2


@pytest.mark.parametrize("rows", [1, 3, 12])
def test_every_linear_variant_is_the_same_product(weights, rows):
    with torch.inference_mode():
        xs = linear_inputs(weights, rows)
        variants = linear_variants(weights, rows)
        assert {"decode_step", "unpacked", "x W^T"} <= set(variants)
        assert ("MKL packed" in variants) == torch._C.has_mkl
        reference = variants["x W^T"](xs)
        assert len(reference) == 7 * len(weights.layers)
        for name, run in variants.items():
            for got, want in zip(run(xs), reference):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_lockstep_alternates_the_order_of_its_variants():
    calls = []
    times = lockstep_ms({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(v) for v in times.values()] == [4, 4] and all(t >= 0 for v in times.values() for t in v)


def test_packing_off_reads_unpacked_weights_and_restores_packing(weights, tiny_model_dir):
    from benchmarks.performance.decode_compile import packing_off

    model = load_policy(str(tiny_model_dir)).policy
    with packing_off():
        assert not DecoderWeights.of(model, 32).head.pack
    assert DecoderWeights.of(model, 32).head.pack


def test_the_rollout_shapes_are_w1s_and_the_times_tables_configs():
    from benchmarks.performance.decode_compile import rollout_shapes
    from rlvr.config import load_config
    config = load_config(Path(__file__).resolve().parents[3] / "configs/integer_mul_2to12.yaml")
    shapes = rollout_shapes()
    (w1_task, w1_group, w1), (mul_task, mul_group, mul) = shapes.values()
    assert (w1_task.name, w1_group, w1.max_new_tokens) == ("format_copy", 4, 24)
    assert (mul_task.name, mul_group, mul.max_new_tokens, mul.stop_strings) == (
        "integer", config.rollout.group_size, config.rollout.max_new_tokens, ("</answer>",))
    assert (mul_group, mul.max_new_tokens, mul.temperature) == (8, 48, 1.0)
    products = [example.ground_truth for example in mul_task.examples("train", 32, 0)]
    assert all(4 <= int(product) <= 144 for product in products)  # 2-12 times 2-12, the config's operands
