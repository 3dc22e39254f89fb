"""Training loops, each an explicit function: `rl.train` (GRPO family and PPO), `sft.train_sft`,
`expert_iteration.expert_iteration`; the run around them in `session.py`.

The package itself is callable: `rlvr.train(config)`, which is what `from rlvr import train`
gives, runs `rl.train` and returns the run folder. A function of that name in `rlvr/__init__.py`
would be replaced by this package the moment any `rlvr.train.*` module is imported, so the package
takes the call instead.
"""

from __future__ import annotations

import sys
import types


class _CallableTrainPackage(types.ModuleType):
    def __call__(self, config, resume_dir=None, force_config_change: bool = False):
        """Train according to `config` (a `Config`) and return the run folder: `rlvr.train.rl.train`."""
        from rlvr.train.rl import train

        return train(config, resume_dir=resume_dir, force_config_change=force_config_change)


sys.modules[__name__].__class__ = _CallableTrainPackage
