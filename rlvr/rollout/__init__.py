"""Rollout backends, looked up by name (`rollout.backend`): `decode_loop` (default) and `hf_generate`."""

from rlvr.registry import Registry
from rlvr.rollout.base import Generation, SamplingSettings, cut_at_stop, render_prompts
from rlvr.rollout.decode_loop import decode_loop
from rlvr.rollout.hf_generate import hf_generate

ROLLOUT_BACKENDS: Registry = Registry("rollout backend")
ROLLOUT_BACKENDS.add("decode_loop", decode_loop)
ROLLOUT_BACKENDS.add("hf_generate", hf_generate)

__all__ = ["ROLLOUT_BACKENDS", "Generation", "SamplingSettings", "cut_at_stop", "render_prompts", "decode_loop", "hf_generate"]
