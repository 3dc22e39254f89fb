"""Rollout backends, looked up by name (`rollout.backend`); `hf_generate` is the default."""

from rlvr.registry import Registry
from rlvr.rollout.base import Generation, SamplingSettings, render_prompts
from rlvr.rollout.hf_generate import hf_generate

ROLLOUT_BACKENDS: Registry = Registry("rollout backend")
ROLLOUT_BACKENDS.add("hf_generate", hf_generate)

__all__ = ["ROLLOUT_BACKENDS", "Generation", "SamplingSettings", "render_prompts", "hf_generate"]
