"""Rollout: turn prompts into scored groups of completions.

`ROLLOUT_BACKENDS` holds the samplers (`decode_loop`, the default, `hf_generate`, `vllm`, an
engine of its own that needs the vllm extra, and `vllm_server`, a `vllm serve` process over HTTP), each a
`RolloutBackend` built from the loaded model and the rollout config, with a sync / generate / close life
cycle (the contract: `backend.py`). `sample_and_score` is the one path from examples to judged
completions, used by training rollouts, expert iteration, evaluation and `rlvr check` (for an
environment task it runs episodes, `episodes.py`); `SamplingSettings.for_task` builds its settings from
the config's rollout section and the task.
"""

from rlvr.rollout.backend import ROLLOUT_BACKENDS, InProcessBackend, RolloutBackend
from rlvr.rollout.generation import Generation, SamplingSettings, cut_at_stop, render_prompts
from rlvr.rollout.decode_loop import DecodeLoopBackend, decode_loop
from rlvr.rollout.hf_generate import HFGenerateBackend, hf_generate
from rlvr.rollout.sample import ScoredRollout, sample_and_score, score_completions
from rlvr.rollout.vllm_backend import VLLMBackend
from rlvr.rollout.vllm_server import VLLMServerBackend

__all__ = [
    "ROLLOUT_BACKENDS",
    "DecodeLoopBackend",
    "Generation",
    "HFGenerateBackend",
    "InProcessBackend",
    "RolloutBackend",
    "SamplingSettings",
    "VLLMBackend",
    "VLLMServerBackend",
    "ScoredRollout",
    "cut_at_stop",
    "decode_loop",
    "hf_generate",
    "render_prompts",
    "sample_and_score",
    "score_completions",
]
