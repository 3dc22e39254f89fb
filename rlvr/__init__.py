"""rlvr: reinforcement learning with verifiable rewards for causal language models.

The math lives in `rlvr.core` (pure tensor functions), training loops in `rlvr.train`,
tasks and their verifiers in `rlvr.tasks`, and the command line in `rlvr.cli`.
"""

__version__ = "0.1.0"
