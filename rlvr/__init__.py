"""rlvr: reinforcement learning with verifiable rewards for causal language models.

The math lives in `rlvr.core` (pure tensor functions), training loops in `rlvr.training`, the run
around them in `rlvr.run`, what a run logs in `rlvr.observe`, data parallelism in `rlvr.parallel`, tasks and
their verifiers in `rlvr.tasks`, and the command line in `rlvr.cli`. The Python API, imported on
first use (so `import rlvr` alone loads no torch):

    from rlvr import Config, train
    run_dir = train(Config(task={"name": "format_copy"}, train={"iterations": 2}))

`Config` (also `Config.from_dict(data, overrides)`) and `load_config(path, overrides)` build a
checked config; `train`, `sft` and `expert_iteration` run one and return its folder; `evaluate`
judges a model or a run as the in-training eval does; `export` writes a checkpoint as a Hugging
Face folder; `register_task` adds a task family of your own.
"""

__version__ = "0.1.0"

__all__ = ["Config", "load_config", "train", "sft", "expert_iteration", "evaluate", "export", "register_task"]


def _api() -> dict:
    from rlvr.config import Config, load_config
    from rlvr.models.export import export_run
    from rlvr.tasks import register_task
    from rlvr.training.evaluation import evaluate
    from rlvr.training.expert_iteration import expert_iteration
    from rlvr.training.rl import train
    from rlvr.training.sft import train_sft

    return {"Config": Config, "load_config": load_config, "train": train, "sft": train_sft,
            "expert_iteration": expert_iteration, "evaluate": evaluate, "export": export_run,
            "register_task": register_task}


def __getattr__(name: str):
    if name in __all__:
        value = _api()[name]
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
