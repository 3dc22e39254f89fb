"""The one path from examples to verdicts: rollout backends with an explicit life cycle, sampling
settings built from the config and the task, `sample_and_score`, and the single place rlvr
calls a task's verifier on a completion.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.models import LoraSettings, load_policy
from rlvr.rollout import (
    ROLLOUT_BACKENDS,
    InProcessBackend,
    RolloutBackend,
    SamplingSettings,
    sample_and_score,
)
from rlvr.tasks import TASKS, build_task
from rlvr.tasks.task import Verdict
from rlvr.testing import random_lora_b, save_tiny_reward_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lora_policy(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=4, alpha=8))
    random_lora_b(loaded.policy, seed=0, std=0.5)  # B starts at 0, which would make the merge invisible
    return loaded


def _base_weight(policy):
    layer = next(m for m in policy.modules() if hasattr(m, "lora_A") and hasattr(m, "get_base_layer"))
    return layer.get_base_layer()


def test_backends_are_registered_classes_with_a_life_cycle():
    assert ROLLOUT_BACKENDS.names() == ["decode_loop", "hf_generate", "vllm", "vllm_server"]
    for name in ROLLOUT_BACKENDS.names():
        backend_class = ROLLOUT_BACKENDS.get(name)
        assert issubclass(backend_class, RolloutBackend)
        for method in ("build", "sync", "synced", "generate", "close"):
            assert callable(getattr(backend_class, method))


@pytest.mark.parametrize("name", ["decode_loop", "hf_generate"])
def test_sync_merges_once_nested_and_restores_bit_for_bit(lora_policy, name):
    policy, tokenizer = lora_policy.policy, lora_policy.tokenizer
    base = _base_weight(policy)
    original = base.weight.detach().clone()
    with ROLLOUT_BACKENDS.get(name)(policy, tokenizer, merge_lora=True) as backend:
        with pytest.raises(RuntimeError, match="sync"):
            backend.generate(["a"], 1, SamplingSettings(max_new_tokens=2))
        with backend.sync():
            merged = base.weight.detach().clone()
            assert not torch.equal(merged, original)  # the adapter is in the weight
            with backend.sync():  # nested: no second merge
                assert torch.equal(base.weight, merged)
                generation = backend.generate(["say a", "b"], 2, SamplingSettings(max_new_tokens=3))
            assert torch.equal(base.weight, merged)
        assert generation.input_ids.shape[0] == 4
    assert torch.equal(base.weight, original)
    unmerged = ROLLOUT_BACKENDS.get(name)(policy, tokenizer, merge_lora=False)
    with unmerged.sync():
        assert torch.equal(base.weight, original)


class CountingTask:
    name = "counting"
    component_names = ("length",)
    stop_strings = ()

    def __init__(self):
        self.calls = []

    def score(self, completion, example):
        self.calls.append((completion, example.ground_truth))
        return Verdict(components={"length": float(len(completion))}, total=float(len(completion)), status="ok",
                       verifier="counting", version="1")


def test_sample_and_score_judges_each_completion_once_against_its_own_example(tiny_model_dir):
    from rlvr.tasks.task import Example

    loaded = load_policy(str(tiny_model_dir))
    backend = ROLLOUT_BACKENDS.get("decode_loop")(loaded.policy, loaded.tokenizer)
    task = CountingTask()
    examples = [Example(prompt="say a", ground_truth="first"), Example(prompt="b", ground_truth="second")]
    torch.manual_seed(0)
    scored = sample_and_score(backend, task, examples, group_size=3, settings=SamplingSettings(max_new_tokens=4),
                              use_chat_template=False)
    assert len(scored) == 6 and scored.prompts == ["say a", "b"]
    assert task.calls == [(text, truth) for text, truth in zip(scored.completion_texts, ["first"] * 3 + ["second"] * 3)]
    assert [v.total for v in scored.verdicts] == [float(len(t)) for t in scored.completion_texts]
    assert scored.rows(1) == slice(3, 6) and scored.generation_seconds > 0 and scored.scoring_seconds >= 0


def test_settings_come_from_the_config_and_the_task():
    config = load_config(None, ["rollout.max_new_tokens=9", "rollout.top_k=5", "rollout.temperature=0.7"])

    class R1Task:
        stop_strings = ("</answer>",)

    settings = SamplingSettings.for_task(config.rollout, R1Task)
    assert (settings.max_new_tokens, settings.top_k, settings.temperature, settings.do_sample) == (9, 5, 0.7, True)
    assert settings.stop_strings == ("</answer>",)
    greedy = SamplingSettings.for_task(config.rollout, R1Task, do_sample=False, max_new_tokens=3)
    assert (greedy.do_sample, greedy.max_new_tokens, greedy.stop_strings) == (False, 3, ("</answer>",))
    config.rollout.stop_strings = ["\n\n"]
    assert SamplingSettings.for_task(config.rollout, R1Task).stop_strings == ("\n\n",)


def test_every_task_declares_its_stop_strings(tmp_path, monkeypatch):
    (tmp_path / "rlvr_stops_taskset.py").write_text(
        "import verifiers.v1 as vf\n"
        "class T(vf.Task):\n    @vf.reward\n    async def one(self, trace) -> float:\n        return 1.0\n"
        "class S(vf.Taskset[T]):\n    def load(self):\n"
        "        return [T(vf.TaskData(prompt=str(i))) for i in range(5)]\n"
        "__all__ = ['S']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i} + {i}?", "answer": f"#### {2 * i}", "problem": f"{i}+{i}",
                                        "solution": f"\\boxed{{{2 * i}}}"}) + "\n" for i in range(6)))
    built = {
        "format_copy": build_task("format_copy"),
        "integer": build_task("integer"),
        "gsm8k": build_task("gsm8k", options={"path": str(data)}, use_chat_template=False),
        "math": build_task("math", options={"path": str(data)}, use_chat_template=False),
        "reasoning_gym": build_task("reasoning_gym:spell_backward", use_chat_template=False,
                                    options={"size": 20, "eval_size": 2}),
        "dataset": build_task("dataset", options={"path": str(data), "stop_strings": ["\n\n"]}),
        "guess_number": build_task("guess_number"),
        "calculator_arithmetic": build_task("calculator_arithmetic"),
        "verifiers": build_task("verifiers:rlvr_stops_taskset"),
        "code": build_task("code", options={"train_size": 10, "eval_size": 2}),
        "humaneval": build_task("humaneval", use_chat_template=False),
        # nothing is asked of the judge's endpoint until a completion is scored
        "judge": build_task("judge:integer", options={"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                      "base_options": {"prompt": "show_work"}}),
        "rm": build_task("rm:integer", options={"path": str(save_tiny_reward_model(tmp_path / "rm")), "device": "cpu"}),
    }
    shipped = {name for name in TASKS.names() if TASKS.get(name).__module__.startswith("rlvr.")}  # not the tests' toys
    assert set(built) == shipped
    for name, task in built.items():
        assert isinstance(task.stop_strings, tuple), name
    assert built["format_copy"].stop_strings == () and built["gsm8k"].stop_strings == ("</answer>",)
    assert built["dataset"].stop_strings == ("\n\n",)
    assert built["guess_number"].stop_strings == ("</guess>",)
    assert built["calculator_arithmetic"].stop_strings == ("</calculator>", "</answer>")  # a call's end, an answer's
    assert built["verifiers"].stop_strings == ()  # single turn, no tools
    assert built["code"].stop_strings == ()  # a fenced block: the chat turn ends it
    assert "\ndef " in built["humaneval"].stop_strings  # a raw continuation ends at the next top-level line
    assert built["judge"].stop_strings == ("</answer>",)  # its base task's
    # A task from outside rlvr that names no stop strings gets the protocol's default, ().
    outside = tmp_path / "outside_task.py"
    outside.write_text(
        "from rlvr.tasks.task import Example, Verdict\n"
        "class Plain:\n"
        "    name = 'plain'\n    component_names = ('answer',)\n"
        "    def examples(self, split, count, seed):\n        return [Example(prompt='p', ground_truth='x')] * count\n"
        "    def iter_eval(self):\n        return iter(self.examples('eval', 1, 0))\n"
        "    def score(self, completion, example):\n"
        "        return Verdict(components={'answer': 0.0}, total=0.0, status='ok', verifier='v', version='1')\n")
    assert build_task(f"{outside}:Plain").stop_strings == ()


def _calls(path: Path, name: str) -> list[int]:
    """Lines calling `name(...)` or `<anything>.name(...)`."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) == name or getattr(node.func, "id", None) == name)]


def test_completions_are_judged_in_exactly_one_place():
    outside_tasks = [path for path in sorted((REPO / "rlvr").rglob("*.py")) if "rlvr/tasks" not in path.as_posix()]
    judged = {path.relative_to(REPO).as_posix(): lines for path in outside_tasks
              if (lines := _calls(path, "judge") + _calls(path, "judge_batch"))}
    assert list(judged) == ["rlvr/rollout/sample.py"] and len(judged["rlvr/rollout/sample.py"]) == 1
    # Nothing outside the tasks calls a verifier directly, past judge's guards.
    assert [path for path in outside_tasks if _calls(path, "score")] == []


def test_in_process_backends_share_one_sync():
    assert all(issubclass(ROLLOUT_BACKENDS.get(n), InProcessBackend) for n in ("decode_loop", "hf_generate"))
    assert not issubclass(ROLLOUT_BACKENDS.get("vllm"), InProcessBackend)  # an engine of its own
