"""The memory estimate: its arithmetic on a made-up architecture worked out by hand, the model shape read
from configs and GGUF headers without loading weights, and the check that refuses what cannot fit."""

from __future__ import annotations

import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.models.architecture import Architecture, read_architecture
from rlvr.models.memory_estimate import (RunSizes, estimate_memory, lora_parameter_count, parameter_count)
from rlvr.run import memory_check
from rlvr.run.setup import prepare_task

# Two layers of width 8: two query heads and one KV head of 4, an MLP of 12, a vocabulary of 16.
SMALL = Architecture(hidden_size=8, num_layers=2, num_heads=2, num_kv_heads=1, vocab_size=16,
                     intermediate_size=12, head_dim=4, tie_word_embeddings=True)


def test_parameter_counts_by_hand():
    # Per layer: q 8*8 + k 8*4 + v 8*4 + o 8*8 + gate, up, down 3 * 8*12 = 480, two norms 16 -> 496.
    # Two layers 992, embeddings 16*8 = 128 (tied: no separate head), final norm 8.
    assert parameter_count(SMALL) == 992 + 128 + 8 == 1128
    untied = Architecture(**{**SMALL.__dict__, "tie_word_embeddings": False})
    assert parameter_count(untied) == 1128 + 128
    # LoRA r=2 on q (2 * (8 + 8) = 32) and v (2 * (8 + 4) = 24), in each of the two layers.
    assert lora_parameter_count(SMALL, 2, ("q_proj", "v_proj")) == 2 * (32 + 24) == 112


def test_estimate_with_lora_by_hand():
    sizes = RunSizes(dtype_bytes=4, rollout_rows=6, rollout_tokens=10, microbatch_rows=3, eval_rows=4,
                     eval_tokens=20, lora_rank=2, lora_targets=("q_proj", "v_proj"), reference=True)
    estimate = estimate_memory(SMALL, sizes)
    assert estimate.parts == {
        "weights": 1128 * 4,
        "reference model": 0,  # LoRA: the reference is the policy with its adapter disabled
        "value model": 0,
        "gradients and optimizer state": 112 * 4 * 4,  # the adapter, its gradient and AdamW's two moments
        # The eval's 4 x 20 = 80 tokens outnumber the rollout's 6 x 10; per token 2 layers x (K, V) x 1 head x 4.
        "KV cache": 80 * 2 * 2 * 1 * 4 * 4,
        # Per layer and token 4*8 + 2*8 + 2*4 + 4*12 = 104 values; 3 rows x 10 tokens, two layers.
        "activations": 3 * 10 * 2 * 104 * 4,
        "logits chunks": 2 * 3 * 10 * 16 * 4,  # a chunk of fp32 logits and its probabilities
    }
    # Generation (5120) and the update (24960 + 3840) do not overlap: the larger counts.
    assert estimate.peak == 4512 + 1792 + max(5120, 24960 + 3840) == 35104


def test_estimate_full_fine_tune_with_reference_value_model_and_checkpointing_by_hand():
    sizes = RunSizes(dtype_bytes=8, rollout_rows=6, rollout_tokens=10, microbatch_rows=3, eval_rows=4,
                     eval_tokens=20, reference=True, value_model="separate", gradient_checkpointing=True)
    parts = estimate_memory(SMALL, sizes).parts
    assert parts["reference model"] == parts["value model"] == parts["weights"] == 1128 * 8
    assert parts["gradients and optimizer state"] == 2 * 1128 * 8 * 3  # two models trained, every weight
    # Checkpointing keeps each layer's input (8 a token) and one layer's full set (104), for both models.
    assert parts["activations"] == 2 * 3 * 10 * (2 * 8 + 104) * 8
    assert parts["logits chunks"] == 2 * 3 * 10 * 16 * 8  # float64 logits stay float64
    huge = RunSizes(dtype_bytes=4, rollout_rows=2**20, rollout_tokens=1024, microbatch_rows=2**20)
    assert estimate_memory(SMALL, huge).parts["logits chunks"] == 2 * 2**28  # the log-prob path's chunk bound


def test_shapes_come_from_the_config_and_count_the_real_parameters(tiny_model_dir):
    from rlvr.testing import build_tiny_model

    arch = read_architecture(str(tiny_model_dir))
    assert arch == Architecture(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, vocab_size=64,
                                intermediate_size=64, head_dim=8, tie_word_embeddings=True)
    assert parameter_count(arch) == sum(p.numel() for p in build_tiny_model().parameters())


def test_the_embedded_model_shape_comes_from_its_gguf_header():
    arch = read_architecture("smollm2-135m-instruct")
    assert arch == Architecture(hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, vocab_size=49152,
                                intermediate_size=1536, head_dim=64, tie_word_embeddings=True)
    assert parameter_count(arch) == 134_515_008  # SmolLM2-135M's published count


def test_a_run_with_a_2_to_the_30_token_kv_cache_is_refused_naming_the_keys(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(memory_check, "available_memory", lambda device: 64 * 2**30)
    overrides = [f"model.name={tiny_model_dir}", "task.name=char_count", "task.use_chat_template=false",
                 "rollout.batch_size=1024", "rollout.group_size=1024", "rollout.max_new_tokens=1024",
                 "optim.minibatch_size=1", "optim.grad_accum_steps=null"]
    config = load_config(None, overrides)
    with pytest.raises(ConfigError) as info:
        prepare_task(config)
    message = str(info.value)
    assert message.startswith("train.memory_check: the run needs about 2") and "cpu has 64.0 GiB available" in message
    # The KV cache leads (2**30 tokens x 2 layers x K, V x 2 heads x 8 x 4 bytes = 256 GiB plus the prompts).
    assert "By part, with the keys that make it smaller: KV cache 2" in message
    for key in ("rollout.batch_size", "rollout.group_size", "rollout.max_new_tokens", "train.eval_batch_size",
                "optim.minibatch_size", "train.memory_check=false"):
        assert key in message
    assert prepare_task(load_config(None, overrides + ["train.memory_check=false"])).name == "char_count"


def test_the_default_run_fits(capsys):
    config = load_config(None)
    task = prepare_task(config)
    estimate = memory_check.check_memory(config, task)
    assert estimate is not None and 2**30 < estimate.peak < memory_check.available_memory("cpu")
    assert "memory_check skipped" not in capsys.readouterr().err


def test_sft_update_tokens_and_an_eval_without_training_by_hand():
    # SFT: no rollout; 3 pairs a pass, each 25 tokens (the data's longest), not the rollout's length.
    sft = RunSizes(dtype_bytes=4, rollout_rows=0, rollout_tokens=0, microbatch_rows=3, update_tokens=25,
                   eval_rows=4, eval_tokens=20)
    parts = estimate_memory(SMALL, sft).parts
    assert parts["activations"] == 3 * 25 * 2 * 104 * 4 and parts["logits chunks"] == 2 * 3 * 25 * 16 * 4
    assert parts["KV cache"] == 80 * 2 * 2 * 1 * 4 * 4 and parts["gradients and optimizer state"] == 1128 * 4 * 3
    # eval: the weights and the eval batch's KV cache, nothing trained
    generation_only = RunSizes(dtype_bytes=4, rollout_rows=0, rollout_tokens=0, microbatch_rows=0, eval_rows=4,
                               eval_tokens=20, training=False)
    estimate = estimate_memory(SMALL, generation_only)
    assert estimate.parts == {"weights": 1128 * 4, "reference model": 0, "value model": 0,
                              "gradients and optimizer state": 0, "KV cache": 5120, "activations": 0,
                              "logits chunks": 0}
    assert estimate.peak == 4512 + 5120


def sft_config(tmp_path, tiny_model_dir, *overrides):
    data = tmp_path / "pairs.jsonl"
    rows = [{"prompt": "p" * 30, "response": "r" * 60}, {"prompt": "q" * 300, "response": "s" * 600}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return load_config(None, [f"model.name={tiny_model_dir}", "task.name=char_count", "task.use_chat_template=false",
                              f"sft.data_path={data}", "algorithm.kl_coef=0.1", *overrides])


def test_each_command_gives_the_estimator_its_own_sizes(tmp_path, tiny_model_dir):
    config = sft_config(tmp_path, tiny_model_dir, "sft.batch_size=6", "sft.microbatch_size=3",
                        "expert_iteration.questions_per_step=5", "expert_iteration.samples_per_question=7",
                        "optim.minibatch_size=2", "optim.grad_accum_steps=null", "rollout.max_new_tokens=11")
    prompt_tokens = 10
    rl = memory_check.MEMORY_RUNS.get("rl").sizes(config, prompt_tokens)
    sft = memory_check.MEMORY_RUNS.get("sft").sizes(config, prompt_tokens)
    ei = memory_check.MEMORY_RUNS.get("expert_iteration").sizes(config, prompt_tokens)
    evaluation = memory_check.MEMORY_RUNS.get("eval").sizes(config, prompt_tokens)
    assert (rl.microbatch_rows, rl.rollout_tokens, rl.reference) == (2, 21, True)
    # the longest pair: 300 + 600 characters at 3 a token; SFT keeps no reference model
    assert (sft.rollout_rows, sft.microbatch_rows, sft.update_tokens, sft.reference) == (0, 3, 300, False)
    assert (ei.rollout_rows, ei.rollout_tokens, ei.microbatch_rows, ei.reference) == (35, 21, 3, False)
    assert (evaluation.training, evaluation.rollout_rows, evaluation.eval_tokens) == (False, 0, 21)
    with pytest.raises(KeyError, match="unknown memory estimate run 'ppo'.*eval, expert_iteration, rl, sft"):
        memory_check.check_memory(config, None, "ppo")


def test_sft_and_eval_are_refused_by_their_own_sizes(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(memory_check, "available_memory", lambda device: 2**30)
    big_sft = sft_config(tmp_path, tiny_model_dir, "sft.batch_size=65536", "sft.microbatch_size=65536")
    task = prepare_task(big_sft)  # RL's sizes: this fits, which is all the check used to look at
    # 65536 pairs x 300 tokens x 2 layers x 416 values x 4 bytes: about 60 GiB of activations
    with pytest.raises(ConfigError, match=r"the run needs about [0-9.]+ GiB .* By part, with the keys that make it "
                                          r"smaller: activations [0-9.]+ GiB \(sft.microbatch_size, "):
        memory_check.check_memory(big_sft, task, "sft")
    with pytest.raises(ConfigError, match=r"activations .*\(sft.microbatch_size, "):
        prepare_task(big_sft, run="sft")
    # expert iteration fine-tunes its samples (prompt + rollout.max_new_tokens) sft.microbatch_size at a time
    with pytest.raises(ConfigError, match=r"activations [0-9.]+ GiB \(sft.microbatch_size, rollout.max_new_tokens, "):
        prepare_task(big_sft, run="expert_iteration")
    big_eval = sft_config(tmp_path, tiny_model_dir, "train.eval_batch_size=65536", "train.eval_size=65536",
                          "train.eval_max_new_tokens=65536")
    with pytest.raises(ConfigError, match=r"smaller: KV cache [0-9.]+ TiB "
                                          r"\(train.eval_batch_size, train.eval_max_new_tokens\); "
                                          r"weights [0-9.]+ KiB \(model.name, model.dtype\)\. "):
        prepare_task(big_eval, inference=True, run="eval")
    assert prepare_task(big_eval, inference=True).name == "char_count"  # check --reward: no estimate
