"""The `vllm` backend's options and LoRA-mode refusals, checked before any engine starts (no vLLM needed)."""

from __future__ import annotations

import os
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.models import LoraSettings, load_policy
from rlvr.rollout import SamplingSettings
from rlvr.rollout.vllm_backend import (VLLMBackend, adapter_rank, engine_lora_rank, policy_weights,
                                      repack_kept_cpu_weights)
from rlvr.testing import random_lora_b, save_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _rollout(model_dir, **options):
    overrides = [f"model.name={model_dir}", "rollout.backend=vllm"]
    overrides += [f"rollout.backend_options.{key}={value}" for key, value in options.items()]
    return load_config(None, overrides).rollout


def test_lora_mode_takes_merged_or_adapter_and_names_both_otherwise(tiny_dir):
    VLLMBackend.check_options({"lora_mode": "merged"})
    VLLMBackend.check_options({"lora_mode": "adapter"})
    for bad in ("unmerged", "Adapter", 1, None):
        with pytest.raises(ValueError, match="lora_mode=.* is not one of merged, adapter"):
            VLLMBackend.check_options({"lora_mode": bad})
    with pytest.raises(ConfigError, match="lora_mode='lora' is not one of merged, adapter"):
        _rollout(tiny_dir, lora_mode="lora")


def test_engine_lora_rank_is_the_smallest_vllm_value_that_holds_the_adapter():
    assert [engine_lora_rank(r) for r in (1, 2, 8, 9, 16, 17, 64, 300, 512)] == [1, 8, 8, 16, 16, 32, 64, 320, 512]
    with pytest.raises(ValueError, match="above vLLM's largest max_lora_rank"):
        engine_lora_rank(513)


def test_adapter_rank_reads_the_largest_rank_including_the_rank_pattern(tiny_dir):
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=4, alpha=8))
    assert adapter_rank(loaded.policy) == 4
    loaded.policy.peft_config["default"].rank_pattern = {"q_proj": 12, "v_proj": 2}
    assert adapter_rank(loaded.policy) == 12


def test_adapter_mode_refuses_full_fine_tuning_before_the_engine_loads(tiny_dir):
    loaded = load_policy(str(tiny_dir))
    with pytest.raises(ValueError, match="lora_mode=adapter serves a LoRA adapter.*model.lora=false"):
        VLLMBackend.build(loaded, _rollout(tiny_dir, lora_mode="adapter"))


def test_adapter_mode_refuses_an_adapter_vllm_cannot_serve(tiny_dir):
    from peft import LoraConfig, get_peft_model

    loaded = load_policy(str(tiny_dir))
    policy = get_peft_model(loaded.policy, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], use_dora=True))
    dora = type(loaded)(**{**vars(loaded), "policy": policy, "is_lora": True})
    with pytest.raises(ValueError, match="plain LoRA only"):
        VLLMBackend.build(dora, _rollout(tiny_dir, lora_mode="adapter"))


class _FakeEngine:
    """The parts of `vllm.LLM` the backend calls, recording what it is given (no vLLM needed)."""

    def __init__(self, **engine_args):
        self.engine_args = engine_args
        self.loras: dict[int, str] = {}  # lora_int_id -> the folder it was loaded from
        self.loaded_configs: list[bool] = []  # per add_lora: the folder held an adapter_config.json then
        self.requested: list[object] = []  # the lora_request of each generate call
        self.reloads: list[dict] = []  # the weights of each reload_weights call
        self.events: list[tuple] = []  # sleep / wake_up / reload / add_lora / generate, in call order
        self.llm_engine = self

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags)))
        return True

    def add_lora(self, request) -> bool:
        self.events.append(("add_lora", request.lora_int_id))
        self.loaded_configs.append(os.path.isfile(os.path.join(request.lora_path, "adapter_config.json")))
        self.loras[request.lora_int_id] = request.lora_path
        return True

    def remove_lora(self, lora_id: int) -> bool:
        return self.loras.pop(lora_id, None) is not None

    def list_loras(self) -> set[int]:
        return set(self.loras)

    def reset_prefix_cache(self) -> None:
        pass

    def collective_rpc(self, method, kwargs):
        assert method == "reload_weights" and kwargs["is_checkpoint_format"]
        self.reloads.append({name: tensor.clone() for name, tensor in kwargs["weights_iterator"]})
        self.events.append(("reload",))

    def apply_model(self, fn) -> None:
        assert fn is repack_kept_cpu_weights

    def generate(self, requests, params, use_tqdm=False, lora_request=None):
        self.requested.append(lora_request)
        self.events.append(("generate",))
        steps = [{7: SimpleNamespace(logprob=-1.0)}, {8: SimpleNamespace(logprob=-2.0)}]
        done = [SimpleNamespace(index=i, token_ids=[7, 8], logprobs=steps, finish_reason="length")
                for i in range(params["n"])]
        return [SimpleNamespace(outputs=done) for _ in requests]


@pytest.fixture
def fake_vllm(monkeypatch):
    """`vllm`, `vllm.inputs` and `vllm.lora.request` as modules of stand-ins; the engine is `_FakeEngine`."""
    engines = []

    def make_engine(**engine_args):
        engines.append(_FakeEngine(**engine_args))
        return engines[-1]

    modules = {"vllm": ModuleType("vllm"), "vllm.inputs": ModuleType("vllm.inputs"),
               "vllm.lora": ModuleType("vllm.lora"), "vllm.lora.request": ModuleType("vllm.lora.request")}
    modules["vllm"].LLM = make_engine
    modules["vllm"].SamplingParams = lambda **fields: fields
    modules["vllm.inputs"].TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    modules["vllm.lora.request"].LoRARequest = lambda lora_name, lora_int_id, lora_path: SimpleNamespace(
        lora_name=lora_name, lora_int_id=lora_int_id, lora_path=lora_path)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # build sets both: restored afterwards
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    return engines


def _adapter_backend(tiny_dir):
    """A LoRA policy of rank 8 with q_proj at 16 (rank_pattern) and an adapter-mode backend on the fake engine."""
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=8, alpha=16))
    loaded.policy.peft_config["default"].rank_pattern = {"q_proj": 16}
    return VLLMBackend.build(loaded, _rollout(tiny_dir, lora_mode="adapter"))


def test_adapter_mode_syncs_each_version_as_a_new_adapter_and_drops_the_last(tiny_dir, fake_vllm):
    backend = _adapter_backend(tiny_dir)
    engine = fake_vllm[0]
    # 16, the adapter's largest rank: not 8 (the rank_pattern missed) or 32 (16 itself not taken)
    assert engine.engine_args["enable_lora"] is True and engine.engine_args["max_loras"] == 1
    assert engine.engine_args["max_lora_rank"] == 16
    try:
        folders = []
        for version in (1, 2, 3):
            with backend.sync():
                backend.generate(["a b"], 2, SamplingSettings(max_new_tokens=2))
            assert engine.requested[-1] is backend.lora_request  # sampled with the adapter just synced
            assert backend.lora_request.lora_int_id == version and engine.list_loras() == {version}
            folders.append(backend.lora_request.lora_path)
            assert os.listdir(backend.adapter_root) == [f"v{version}"]  # the last version's folder deleted
        assert engine.loaded_configs == [True, True, True] and len(set(folders)) == 3
        assert engine.reloads == []  # only the adapter moves
        root = backend.adapter_root
    finally:
        backend.close()
    assert not os.path.exists(root)


def test_adapter_mode_samples_the_adapter_of_the_last_sync(tiny_dir, fake_vllm):
    backend = _adapter_backend(tiny_dir)
    engine = fake_vllm[0]
    settings = SamplingSettings(max_new_tokens=2)
    for _ in range(2):
        with backend.sync():
            generation = backend.generate(["a b", "c"], 2, settings)
            backend.generate_from_ids([[3, 4, 5]], settings)
        assert engine.requested[-2:] == [backend.lora_request] * 2  # both calls name the synced adapter
        assert engine.list_loras() == {backend.lora_request.lora_int_id}  # and it is the only one loaded
    assert backend.lora_request.lora_int_id == 2 and engine.engine_args["max_lora_rank"] == 16
    assert generation.input_ids.shape[0] == 4
    backend.close()


def test_merged_mode_samples_the_engines_own_weights_without_an_adapter(tiny_dir, fake_vllm):
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=4, alpha=8))
    backend = VLLMBackend.build(loaded, _rollout(tiny_dir))
    engine = fake_vllm[0]
    assert "enable_lora" not in engine.engine_args and backend.adapter_root is None
    with backend.sync():
        backend.generate(["a b"], 2, SamplingSettings(max_new_tokens=2))
    assert len(engine.reloads) == 1 and engine.requested == [None] and engine.list_loras() == set()
    backend.close()


@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_a_merged_sync_sends_peft_merged_weights_and_leaves_the_policy_as_it_was(tiny_dir, fake_vllm, dora):
    from peft import LoraConfig, get_peft_model

    plain = load_policy(str(tiny_dir))
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_dora=dora)
    loaded = type(plain)(**{**vars(plain), "policy": get_peft_model(plain.policy, config), "is_lora": True})
    random_lora_b(loaded.policy, seed=3)
    backend = VLLMBackend.build(loaded, _rollout(tiny_dir))
    before = {name: p.detach().clone() for name, p in loaded.policy.named_parameters()}
    with backend.sync():
        pass
    backend.close()
    assert all(torch.equal(p, before[name]) for name, p in loaded.policy.named_parameters())  # restored
    sent = fake_vllm[0].reloads[0]
    expected = loaded.policy.merge_and_unload().state_dict()  # PEFT's own merge
    assert set(sent) <= set(expected) and "model.layers.0.self_attn.q_proj.weight" in sent
    for name, value in sent.items():
        assert torch.allclose(value, expected[name], rtol=0, atol=1e-6), name
    base = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.allclose(sent["model.layers.0.self_attn.q_proj.weight"], base, atol=1e-3)

def test_policy_weights_are_peft_merged_weights_under_hugging_face_names(tiny_dir):
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=4, alpha=8))
    random_lora_b(loaded.policy, seed=3)
    before = {name: p.detach().clone() for name, p in loaded.policy.named_parameters()}
    # cloned: the unmerged tensors are views of the policy's, which merge_and_unload writes into below
    merged = {name: t.clone() for name, t in policy_weights(loaded.policy)}
    bare = {name: t.clone() for name, t in policy_weights(loaded.policy, merge_lora=False)}
    assert {name: p for name, p in loaded.policy.named_parameters()}.keys() == before.keys()
    assert all(torch.equal(p, before[name]) for name, p in loaded.policy.named_parameters())  # nothing written
    expected = loaded.policy.merge_and_unload().state_dict()  # PEFT's own merge, computed independently
    assert merged.keys() == bare.keys() and all("lora_" not in n and "base_layer" not in n for n in merged)
    for name, value in merged.items():
        assert torch.allclose(value, expected[name], rtol=0, atol=1e-6), name
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(merged[name], bare[name], atol=1e-3)  # the adapter is in the merged weights only


def test_fsdp_sync_refuses_what_it_cannot_gather_before_the_engine_starts(tiny_dir, fake_vllm, monkeypatch):
    from peft import LoraConfig, get_peft_model

    import rlvr.rollout.vllm_backend as vllm_backend

    monkeypatch.setattr(vllm_backend, "is_sharded", lambda model: True)  # the session shards before the build
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=4, alpha=8))
    with pytest.raises(ValueError, match="lora_mode=adapter does not write an FSDP-sharded adapter"):
        VLLMBackend.build(loaded, _rollout(tiny_dir, lora_mode="adapter"))
    plain = load_policy(str(tiny_dir))
    dora_policy = get_peft_model(plain.policy, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], use_dora=True))
    dora = type(plain)(**{**vars(plain), "policy": dora_policy, "is_lora": True})
    with pytest.raises(ValueError, match="under FSDP merges plain LoRA adapters only"):
        VLLMBackend.build(dora, _rollout(tiny_dir))
    assert fake_vllm == []  # neither started an engine
    VLLMBackend.build(loaded, _rollout(tiny_dir)).close()  # plain LoRA, merged: each rank gathers and merges
    assert len(fake_vllm) == 1


def test_sleep_mode_and_boolean_options_are_checked(tiny_dir):
    VLLMBackend.check_options({"sleep_mode": True, "enforce_eager": False})
    for key in ("sleep_mode", "enforce_eager"):
        for bad in ("yes", 1, None):
            with pytest.raises(ValueError, match=f"{key}=.* must be true or false"):
                VLLMBackend.check_options({key: bad})
    assert _rollout(tiny_dir, sleep_mode="true").backend_options["sleep_mode"] is True  # the CLI's true is a bool


def test_sleep_mode_without_a_gpu_is_refused_before_the_engine_starts(tiny_dir, fake_vllm, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loaded = load_policy(str(tiny_dir))
    with pytest.raises(ValueError, match="sleep_mode frees the engine's GPU memory.*no CUDA device"):
        VLLMBackend.build(loaded, _rollout(tiny_dir, sleep_mode="true"))
    assert fake_vllm == []  # no engine started


def _sleeping_backend(tiny_dir, monkeypatch, lora_mode):
    loaded = load_policy(str(tiny_dir), lora=LoraSettings(rank=4, alpha=8))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU, as far as build can tell
    return VLLMBackend.build(loaded, _rollout(tiny_dir, lora_mode=lora_mode, sleep_mode="true"))


def _one_sync(level: int, lora_mode: str) -> list[tuple]:
    """The calls of one sync block with sleep mode: weights woken, loaded, KV cache woken, ..., asleep again."""
    load = ("reload",) if lora_mode == "merged" else ("add_lora", 1)
    return [("wake_up", ("weights",)), load, ("wake_up", ("kv_cache",))]


SLEEP_CASES = [("merged", 2), ("adapter", 1)]  # level 2 discards the weights a merged sync reloads; 1 keeps the base


@pytest.mark.parametrize("lora_mode,level", SLEEP_CASES)
def test_sleep_mode_sleeps_between_rollouts_and_wakes_the_weights_before_a_sync(tiny_dir, fake_vllm, monkeypatch,
                                                                              lora_mode, level):
    backend = _sleeping_backend(tiny_dir, monkeypatch, lora_mode)
    engine = fake_vllm[0]
    assert engine.engine_args["enable_sleep_mode"] is True and engine.engine_args["gpu_memory_utilization"] == 0.3
    assert engine.events == [("sleep", level)]  # asleep from the start: the trainer has the memory
    with backend.sync():
        backend.generate(["a b"], 2, SamplingSettings(max_new_tokens=2))
        assert engine.events[-1] == ("generate",)  # awake for the whole block
    assert engine.events == [("sleep", level), *_one_sync(level, lora_mode), ("generate",), ("sleep", level)]
    backend.close()


@pytest.mark.parametrize("lora_mode,level", SLEEP_CASES)
def test_sleep_mode_puts_the_engine_back_to_sleep_when_a_rollout_fails(tiny_dir, fake_vllm, monkeypatch,
                                                                      lora_mode, level):
    backend = _sleeping_backend(tiny_dir, monkeypatch, lora_mode)
    engine = fake_vllm[0]
    with pytest.raises(RuntimeError, match="boom"):
        with backend.sync():
            raise RuntimeError("boom")
    assert engine.events == [("sleep", level), *_one_sync(level, lora_mode), ("sleep", level)]
    backend.close()
