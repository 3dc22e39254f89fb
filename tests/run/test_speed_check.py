"""The start-up warning for bf16/fp16 settings that this CPU multiplies slowly (rlvr.run.speed_check)."""

import math

import pytest
import torch

from rlvr.config import load_config
from rlvr.models.product_speed import SLOWDOWN_LIMIT, quick_gflops, slow_product_message
from rlvr.run.speed_check import check_product_speed, reduced_product_keys

BF16_RUN = ["model.base_product_dtype=bfloat16", "algorithm.ppo_epochs=1", "rollout.backend_options.dtype=bfloat16"]


def rates(**gflops):
    """A `rate` function from fixed GFLOPS by dtype name; it records the dtypes it was asked for."""
    asked = []

    def rate(dtype):
        asked.append(dtype)
        return gflops[str(dtype).removeprefix("torch.")]

    rate.asked = asked
    return rate


def test_the_keys_that_multiply_in_a_reduced_dtype_on_a_cpu():
    assert reduced_product_keys(load_config(None, [])) == {}
    assert reduced_product_keys(load_config(None, BF16_RUN)) == {
        "model.base_product_dtype": "bfloat16", "rollout.backend_options.dtype": "bfloat16"}
    assert reduced_product_keys(load_config(None, ["model.dtype=float16"])) == {"model.dtype": "float16"}
    # float32 steps and another backend's options ask for nothing reduced
    assert reduced_product_keys(load_config(None, ["rollout.backend_options.dtype=float32"])) == {}
    assert reduced_product_keys(load_config(None, ["model.dtype=bfloat16", "rollout.backend=hf_generate"])) == {
        "model.dtype": "bfloat16"}


def test_a_gpu_run_asks_for_no_cpu_products():
    config = load_config(None, BF16_RUN)
    config.model.device = "cuda:0"
    assert reduced_product_keys(config) == {}


def test_a_gpu_run_measures_nothing():
    config = load_config(None, ["model.dtype=bfloat16"])
    config.model.device = "cuda"
    assert check_product_speed(config, rate=rates()) is None  # rates() knows no dtype: any reading would fail


def test_slow_bf16_products_warn_with_the_keys_the_rates_and_the_float32_settings(capsys):
    rate = rates(bfloat16=1.0, float32=177.0)
    message = check_product_speed(load_config(None, BF16_RUN), rate=rate)
    assert capsys.readouterr().err == f"warning: {message}\n"
    assert "bfloat16 1.0 GFLOPS (177x slower), against float32 177.0 GFLOPS, on one thread each" in message
    assert ("model.base_product_dtype=bfloat16, rollout.backend_options.dtype=bfloat16 will make this run slower"
            in message)
    assert "model.base_product_dtype=model, rollout.backend_options.dtype=model" in message
    assert sorted(rate.asked, key=str) == [torch.bfloat16, torch.float32]  # each dtype measured once


def test_fast_bf16_products_do_not_warn(capsys):
    assert check_product_speed(load_config(None, BF16_RUN), rate=rates(bfloat16=350.0, float32=177.0)) is None
    assert capsys.readouterr().err == ""
    assert check_product_speed(load_config(None, []), rate=rates()) is None  # nothing reduced: nothing measured


@pytest.mark.parametrize("reduced, warns", [(177.0 / SLOWDOWN_LIMIT + 0.5, False), (177.0 / SLOWDOWN_LIMIT - 0.5, True),
                                            (177.0, False), (0.9, True)])
def test_the_warning_starts_at_the_slowdown_limit(reduced, warns):
    message = slow_product_message({"model.dtype": "float16"}, {"float16": reduced}, 177.0)
    assert (message is not None) == warns
    if warns:
        assert message.startswith("float16 matrix products are slow on this CPU")


def test_only_the_slow_dtype_is_named():
    message = slow_product_message({"model.dtype": "float16", "rollout.backend_options.dtype": "bfloat16"},
                                   {"float16": 150.0, "bfloat16": 2.0}, 177.0)
    assert "rollout.backend_options.dtype=bfloat16 will" in message
    assert "float16 " not in message.replace("bfloat16", "") and "model.dtype=float16" not in message


def test_the_quick_reading_is_a_rate():
    fp32 = quick_gflops(torch.float32)
    assert math.isfinite(fp32) and fp32 > 0.1
    assert quick_gflops(torch.float32) == fp32  # measured once per process


def test_prepare_task_warns_before_the_model_loads(capsys, monkeypatch):
    from rlvr.models import product_speed
    from rlvr.run.setup import prepare_task

    monkeypatch.setattr(product_speed, "quick_gflops", rates(bfloat16=1.0, float32=177.0))
    prepare_task(load_config(None, BF16_RUN + ["train.memory_check=false"]))
    assert "warning: bfloat16 matrix products are slow on this CPU" in capsys.readouterr().err


def test_an_eval_is_warned_too(capsys, monkeypatch):
    """`rlvr eval` (inference: no memory check by default) samples through the same backend dtype."""
    from rlvr.models import product_speed
    from rlvr.run.setup import prepare_task

    monkeypatch.setattr(product_speed, "quick_gflops", rates(bfloat16=1.0, float32=177.0))
    prepare_task(load_config(None, ["rollout.backend_options.dtype=bfloat16"]), inference=True)
    assert "rollout.backend_options.dtype=bfloat16 will make this run slower" in capsys.readouterr().err


@pytest.fixture
def three_threads():
    """torch on 3 threads for the test (the suite may run on 1, where a reading on "all" threads is on one);
    conftest's autouse fixture gives the count back afterwards."""
    torch.set_num_threads(3)
    return 3


def test_the_quick_reading_runs_on_one_thread_and_restores_the_count(monkeypatch, three_threads):
    from rlvr.models import product_speed

    seen = []
    real_matmul = torch.Tensor.__matmul__

    def matmul(a, b):
        seen.append(torch.get_num_threads())
        return real_matmul(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", matmul)
    product_speed.quick_gflops.__wrapped__(torch.float32, 32)
    assert set(seen) == {1} and torch.get_num_threads() == three_threads


def test_a_failed_reading_leaves_the_thread_count_as_it_was(monkeypatch, three_threads):
    from rlvr.models import product_speed

    seen = []

    def failing_matmul(a, b):
        seen.append(torch.get_num_threads())
        raise RuntimeError("no kernel for this dtype")

    monkeypatch.setattr(torch.Tensor, "__matmul__", failing_matmul)
    with pytest.raises(RuntimeError, match="no kernel"):
        product_speed.quick_gflops.__wrapped__(torch.float16, 32)
    assert seen == [1] and torch.get_num_threads() == three_threads


def test_matmul_gflops_counts_two_flops_a_multiply_add(monkeypatch):
    """On a clock that moves one second a reading, 20 products of 64^3 are 2 * 64^3 * 20 flops a second."""
    from rlvr.models import product_speed

    clock = iter(range(1000))
    monkeypatch.setattr(product_speed.time, "perf_counter", lambda: float(next(clock)))
    assert product_speed.matmul_gflops(torch.float32, size=64, repeats=20) == pytest.approx(2 * 64**3 * 20 / 1e9)


def test_an_eval_of_a_bf16_model_is_warned(capsys, monkeypatch):
    from rlvr.models import product_speed
    from rlvr.run.setup import prepare_task

    monkeypatch.setattr(product_speed, "quick_gflops", rates(bfloat16=1.0, float32=177.0))
    prepare_task(load_config(None, ["model.dtype=bfloat16"]), inference=True)
    assert "model.dtype=bfloat16 will make this run slower" in capsys.readouterr().err
