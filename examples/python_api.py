"""rlvr from Python: a task of your own, a config from keyword arguments, one iteration, an eval.

python examples/python_api.py [OUTPUT_DIR]   (a tiny random model from rlvr.testing: seconds, no download)
"""

import sys
from pathlib import Path

from rlvr import Config, evaluate, register_task, train
from rlvr.tasks import Example, Verdict
from rlvr.testing import save_tiny_model


@register_task("say_a")  # task.name=say_a from now on, in this process
class SayA:
    """Reward: the share of the letter a in the completion."""

    name = "say_a"
    component_names = ("share",)

    def examples(self, split, count, seed):
        start = 0 if split == "train" else 10_000  # held-out prompts never appear in training
        return [Example(prompt=f"say a {start + seed * count + i}", ground_truth="a") for i in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 8, 0))

    def score(self, completion, example):
        share = completion.count("a") / max(1, len(completion))
        return Verdict(components={"share": share}, total=share, status="ok", verifier="say_a", version="1",
                       correct=share > 0.5)


output = Path(sys.argv[1] if len(sys.argv) > 1 else "runs")
model = save_tiny_model(output / "tiny-model")  # leave model.name out to train the embedded SmolLM2

config = Config(
    model={"name": str(model), "lora_rank": 4, "lora_alpha": 8},
    task={"name": "say_a"},
    rollout={"batch_size": 2, "group_size": 4, "max_new_tokens": 8},
    train={"iterations": 1, "eval_size": 4, "output_dir": str(output), "progress": False},
)
run_dir = train(config)  # checked before the model loads; returns the run folder
print(f"run folder: {run_dir}")

# The run's own checkpoint, judged as the in-training eval judged it (greedy, the same 4 prompts).
result = evaluate(Config.from_dict(config.as_dict(), [f"model.name={run_dir}"]))
print(f"accuracy {result.accuracy:.2f}, mean share {result.summary['metrics']['eval/reward_mean']:.2f}, "
      f"written to {result.folder}")
