"""Shared fixtures: a tiny random model saved as a local folder, and a toy task with contrast.

Every test gets torch's thread count back as it found it: a run with `model.num_threads` sets it for
the whole process, and the next tests would otherwise multiply on that many threads.

A random tiny model never writes `<answer>` tags, so the training tests use `char_count`, a
task whose reward (the share of letters a-m in the completion) varies within every group.
"""

from __future__ import annotations

import pytest

from rlvr.tasks import TASKS
from rlvr.tasks.task import Example, Verdict


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class CharCountTask:
    name = "char_count"
    component_names = ("share",)
    stop_strings = ()

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, chars="abcdefghijklm"):
        self.chars = chars
        self.use_chat_template = use_chat_template

    def examples(self, split, count, seed):
        offset = 0 if split == "train" else 10_000
        return [Example(prompt=f"say {self.chars[i % 3]} {offset + seed * count + i}", ground_truth=self.chars)
                for i in range(count)]

    def score(self, completion, example):
        share = sum(c in self.chars for c in completion) / max(1, len(completion))
        return Verdict(components={"share": share}, total=share, status="ok", verifier="char_count",
                       version="1", correct=share > 0.5)


if "char_count" not in TASKS:
    TASKS.add("char_count", CharCountTask)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from rlvr.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def tiny_overrides(model_dir, run_dir, **extra) -> list[str]:
    base = {
        "model.name": str(model_dir),
        "task.name": "char_count",
        "task.use_chat_template": "false",
        "train.output_dir": str(run_dir.parent),
        "train.run_name": run_dir.name,
        "train.progress": "false",
        "rollout.batch_size": "2",
        "rollout.group_size": "4",
        "rollout.max_new_tokens": "6",
        "train.eval_size": "4",
        "optim.lr": "1e-2",
    }
    base.update({k: str(v) for k, v in extra.items()})
    return [f"{k}={v}" for k, v in base.items()]
