"""`verifiers:<taskset>`: verifiers 0.4 tasksets written here, scored as verifiers scores them, run as episodes.

Three small taskset packages are written to a folder on the Python path: `rlvr_vf_sum` (single turn,
two rewards with unequal weights, one negative, plus a taskset option and a test split),
`rlvr_vf_counter` (a tool server whose `press` tool changes the episode's state, and a `@vf.stop`),
and `rlvr_vf_guess` (an `Env` whose `run()` answers each guess with `higher` / `lower`). The expected
rewards come from verifiers itself: its `Task.score` on a `Trace` this file builds by hand.
"""

from __future__ import annotations

import asyncio
import math
import sys
import textwrap

import pytest

import verifiers.v1 as vf  # the `test` extra installs it: these tests fail, not skip, without it
from verifiers.v1.graph import MessageNode

from rlvr.tasks import build_task
from rlvr.tasks.environment import Episode, is_environment
from tests.rollout.test_episodes import EOS, TOKENIZER, char_ids, run

SUM = '''
import asyncio
import verifiers.v1 as vf

class SumConfig(vf.TasksetConfig):
    count: int = 12
    split: str = "train"

class SumData(vf.TaskData):
    answer: int

class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        if "boom" in trace.last_reply:
            raise RuntimeError("the reward function failed")
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.reward(weight=-0.5)
    async def rambling(self, trace) -> float:
        await asyncio.sleep(0)  # a coroutine that really awaits
        return min(1.0, len(trace.last_reply) / 20)

class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        offset = 100 if self.config.split == "test" else 0
        for a in range(offset, offset + self.config.count):
            yield SumTask(SumData(prompt=f"what is {a}+{a}?", system_prompt="answer with a number.",
                                  answer=2 * a), self.config.task)

__all__ = ["SumTaskset"]
'''

COUNTER = '''
import verifiers.v1 as vf

class CounterState(vf.State):
    presses: int = 0

class Counter(vf.Toolset):
    @vf.tool
    async def press(self, times: int) -> str:
        """Press the counter button.

        Args:
            times: how many presses
        """
        self.state.presses += times
        return f"count={self.state.presses}"

class CountData(vf.TaskData):
    target: int

class CountTask(vf.Task[CountData, CounterState]):
    @classmethod
    def toolsets(cls, config):
        return [Counter(vf.ToolsetConfig())]

    @vf.reward(weight=2.0)
    async def reached(self, task, trace) -> float:
        return float(trace.state.presses == task.target)

    @vf.reward(weight=0.5)
    async def said_done(self, trace) -> float:
        return float("done" in trace.last_reply)

    @vf.stop
    async def overshoot(self, trace: vf.Trace) -> bool:
        return trace.state.presses > trace.task.data.target

class CountTaskset(vf.Taskset[CountTask]):
    def load(self):
        for target in range(3, 13):
            yield CountTask(CountData(prompt=f"press the counter to {target}.", target=target), self.config.task)

__all__ = ["CountTaskset"]
'''

GUESS = '''
import verifiers.v1 as vf

class GuessData(vf.TaskData):
    secret: int

class GuessTask(vf.Task[GuessData]):
    @vf.reward
    async def found(self, task, trace) -> float:
        return float(trace.last_reply.strip() == str(task.secret))

class GuessTaskset(vf.Taskset[GuessTask]):
    def load(self):
        for secret in range(1, 11):
            yield GuessTask(GuessData(prompt="guess my number from 1 to 10.", secret=secret), self.config.task)

class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=4)
    up_word: str = "higher"

class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            segment = await chat.turn()
            while not segment.terminated:
                guess = segment.last_reply.strip()
                if guess == str(task.data.secret):
                    return
                low = not guess.isdigit() or int(guess) < task.data.secret
                segment = await chat.turn(self.config.up_word if low else "lower")

    async def finalize(self, task, episode):
        for trace in episode.traces:
            trace.record_reward("brevity", 1.0 / trace.num_turns, 0.5)

__all__ = ["GuessTaskset", "GuessEnv"]
'''

NEEDS_BOX = '''
import verifiers.v1 as vf

class BoxTask(vf.Task):
    @vf.reward
    async def tests_pass(self, trace, runtime) -> float:
        return 1.0

class BoxTaskset(vf.Taskset[BoxTask]):
    def load(self):
        yield from (BoxTask(vf.TaskData(prompt=f"fix bug {i}")) for i in range(5))

__all__ = ["BoxTaskset"]
'''

PACKAGES = {"rlvr_vf_sum": SUM, "rlvr_vf_counter": COUNTER, "rlvr_vf_guess": GUESS, "rlvr_vf_box": NEEDS_BOX}


@pytest.fixture(scope="module", autouse=True)
def taskset_packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vf_packages")
    for name, source in PACKAGES.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in PACKAGES:
        sys.modules.pop(name, None)


def verifiers_own_trace(taskset_id: str, idx: int, turns: list, state=None, **taskset_options):
    """verifiers' own scoring, without rlvr: its taskset loaded by verifiers, a Trace of the task's prompt and
    `turns` (verifiers messages) holding `state`, and `Task.score` run by asyncio."""
    from verifiers.v1.utils.loaders import load_taskset

    config = vf.resolve_env_config({"taskset": {"id": taskset_id, **taskset_options}})
    task = next(t for t in load_taskset(config.taskset) if t.data.idx == idx)
    trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                     agent=vf.AgentInfo(config=vf.AgentConfig()))
    if state is not None:
        trace.state = state
    opening = ([vf.SystemMessage(content=task.data.system_prompt)] if task.data.system_prompt else []) + [
        vf.UserMessage(content=task.data.prompt)]
    for index, message in enumerate(opening + turns):
        trace.nodes.append(MessageNode(parent=index - 1 if index else None, message=message,
                                       sampled=message.role == "assistant"))
    asyncio.run(task.score(trace))
    return task, trace


# -- loading


def test_a_missing_verifiers_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(ImportError, match=r"verifiers:rlvr_vf_sum needs the `verifiers` package.*rlvr\[verifiers\]"):
        build_task("verifiers:rlvr_vf_sum")


def test_an_unknown_environment_lists_the_installed_ones():
    with pytest.raises(KeyError, match=r"no verifiers environment 'no_such_env'.*installed: .*textarena"):
        build_task("verifiers:no_such_env")
    with pytest.raises(ValueError, match="name the taskset"):
        build_task("verifiers")


def test_taskset_options_reach_its_config_and_a_wrong_one_is_named():
    task = build_task("verifiers:rlvr_vf_sum", options={"count": 30, "eval_size": 5})
    assert len(task.train) == 25 and len(task.held_out) == 5
    with pytest.raises(ValueError, match="colour"):
        build_task("verifiers:rlvr_vf_sum", options={"colour": "red"})


def test_what_needs_a_sandbox_is_refused_by_name():
    with pytest.raises(ValueError, match="tests_pass needs a runtime"):
        build_task("verifiers:rlvr_vf_box", options={"eval_size": 1})


# -- single turn


def test_a_single_turn_taskset_is_a_task_with_the_rewards_as_weighted_components():
    task = build_task("verifiers:rlvr_vf_sum", options={"eval_size": 2})
    assert not is_environment(task)
    assert task.component_names == ("correct", "rambling")
    assert task.weights == {"correct": 1.0, "rambling": -0.5}
    assert task.primary_component == "correct"
    example = task.examples("train", 1, 0)[0]
    idx = example.metadata["vf_idx"]
    assert example.prompt == [{"role": "system", "content": "answer with a number."},
                              {"role": "user", "content": f"what is {idx}+{idx}?"}]
    assert example.ground_truth == 2 * idx


@pytest.mark.parametrize("completion", ["{answer}", " {answer} ", "it is {answer}, surely, i think", "7x", ""])
def test_rewards_are_the_ones_verifiers_gives_the_same_completion(completion):
    task = build_task("verifiers:rlvr_vf_sum", options={"eval_size": 2})
    for example in task.examples("train", 3, 1):
        text = completion.format(answer=example.ground_truth)
        verdict = task.score(text, example)
        _, trace = verifiers_own_trace("rlvr_vf_sum", example.metadata["vf_idx"], [vf.AssistantMessage(content=text)])
        assert verdict.status == "ok"
        assert verdict.components == {name: reward.score for name, reward in trace.rewards.items()}
        assert verdict.total == pytest.approx(trace.reward)
        assert verdict.correct == (trace.rewards["correct"].score == 1.0)
    # The weights matter: a long right answer is worth less than a short one (a plain sum would be 1 + 0.65).
    long = task.score(f"it is {example.ground_truth}", example)
    assert long.components["correct"] == 0.0
    short = task.score(str(example.ground_truth), example)
    assert short.total == pytest.approx(1.0 - 0.5 * len(str(example.ground_truth)) / 20)


def test_reward_weights_override_the_rubric_and_a_wrong_name_lists_the_rewards():
    task = build_task("verifiers:rlvr_vf_sum", options={"eval_size": 2}, reward_weights={"rambling": 0.0})
    example = task.examples("train", 1, 0)[0]
    assert task.score(f"{example.ground_truth} and so on", example).total == 0.0  # wrong; rambling weighs 0 now
    with pytest.raises(ValueError, match="unknown component 'speed'; valid components: correct, rambling"):
        build_task("verifiers:rlvr_vf_sum", options={"eval_size": 2}, reward_weights={"speed": 1.0})


def test_a_reward_that_raises_is_an_error_verdict_not_an_exception():
    task = build_task("verifiers:rlvr_vf_sum", options={"eval_size": 2})
    verdict = task.score("boom", task.examples("train", 1, 0)[0])
    assert verdict.status == "error" and "the reward function failed" in verdict.detail
    assert all(math.isnan(value) for value in verdict.components.values()) and not verdict.scorable


def test_the_held_out_tasks_are_the_last_ones_or_the_eval_taskset():
    task = build_task("verifiers:rlvr_vf_sum", options={"eval_size": 3})
    held_out = [example.metadata["vf_idx"] for example in task.iter_eval()]
    assert held_out == [9, 10, 11]
    trained = {example.metadata["vf_idx"] for example in task.examples("train", 40, 0)}
    assert trained == set(range(9))  # every training task drawn, none held out
    assert task.examples("train", 5, 3) == task.examples("train", 5, 3)
    assert task.examples("train", 5, 3) != task.examples("train", 5, 4)
    default = build_task("verifiers:rlvr_vf_sum", options={"count": 20})
    assert len(default.held_out) == 4  # a fifth of the tasks
    split = build_task("verifiers:rlvr_vf_sum", options={"eval_taskset": {"split": "test"}, "eval_size": 2})
    assert [e.prompt[1]["content"] for e in split.iter_eval()] == ["what is 100+100?", "what is 101+101?"]
    assert len(split.train) == 12
    with pytest.raises(ValueError, match="leaves none to train on"):
        build_task("verifiers:rlvr_vf_sum", options={"eval_size": 12})


# -- tools


def counter_turns(target: int) -> list[str]:
    return ["<counter_press>2</counter_press>", f"<counter_press>{target - 2}</counter_press>", "done"]


def test_a_taskset_with_tools_is_an_environment_offering_them_in_the_call_format():
    task = build_task("verifiers:rlvr_vf_counter", options={"eval_size": 2})
    assert is_environment(task)
    assert task.tool_names == ("counter_press",) and task.stop_strings == ("</counter_press>",)
    assert task.tool_schemas == ()  # the tagged format: the prompt says how to call
    system = task.examples("train", 1, 0)[0].prompt[0]
    assert system["role"] == "system" and "<counter_press>ARGUMENT</counter_press>: Press the counter button." in \
        system["content"]
    listed = build_task("verifiers:rlvr_vf_counter", options={"eval_size": 2, "call_format": "chat_template"})
    (schema,) = listed.tool_schemas
    assert schema["function"]["name"] == "counter_press"
    assert schema["function"]["parameters"]["properties"] == {"times": {"type": "integer",
                                                                        "description": "how many presses"}}


def test_a_tool_episode_through_the_driver_runs_the_calls_masks_their_results_and_scores_as_verifiers_does():
    task = build_task("verifiers:rlvr_vf_counter", options={"eval_size": 2})
    example = task.examples("train", 1, 0)[0]
    target = task.task_of(example).data.target
    script = [char_ids(text) for text in counter_turns(target)]
    _, _, result = run(lambda k, r, p: script[k] + ([] if k < 2 else [EOS]), task, [example], 1,
                       max_new_tokens=40, stop_strings=task.stop_strings)
    record = result.records[0]
    assert [t.role for t in record.episode.turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [t.content for t in record.episode.turns if t.role == "tool"] == ["count=2", f"count={target}"]
    assert record.tool_calls == {"counter_press": 2} and record.tool_errors == {"counter_press": 0}
    row = result.generation.input_ids[0, result.generation.prompt_len:].tolist()
    mask = result.generation.loss_mask[0].tolist()[:len(row)]
    masked = TOKENIZER.decode([t for t, m in zip(row, mask) if m == 0 and t != EOS])
    policy = TOKENIZER.decode([t for t, m in zip(row, mask) if m == 1])
    assert "count=2" in masked and f"count={target}" in masked and "count=" not in policy
    assert policy.startswith("<counter_press>2</counter_press>") and "done" in policy
    verdict = result.verdicts[0]
    assert verdict.components == {"reached": 1.0, "said_done": 1.0} and verdict.total == 2.5 and verdict.correct
    # verifiers' own scoring of the same conversation, with the state the two presses leave
    state = sys.modules["rlvr_vf_counter"].CounterState(presses=target)
    _, trace = verifiers_own_trace("rlvr_vf_counter", example.metadata["vf_idx"], [
        vf.AssistantMessage(content=text) for text in counter_turns(target)], state=state)
    assert record.episode.state.trace.state.presses == target  # the tools ran on the episode's state
    assert verdict.total == pytest.approx(trace.reward)


def test_each_episode_has_its_own_tool_state_and_a_stop_predicate_ends_it():
    task = build_task("verifiers:rlvr_vf_counter", options={"eval_size": 2})
    example = task.examples("train", 1, 0)[0]
    target = task.task_of(example).data.target
    first, second = task.start(example), task.start(example)
    reply = task.respond(first, "<counter_press>2</counter_press>")
    assert (reply.role, reply.content, reply.done) == ("tool", "count=2", False)
    assert task.respond(second, "<counter_press>1</counter_press>").content == "count=1"  # not 3
    over = task.respond(first, f"<counter_press>{target}</counter_press>")
    assert over.done and over.content == f"count={target + 2}"  # overshot: @vf.stop ends the episode
    verdict = task.score_episode(Episode(example=example, turns=[], state=first))
    assert verdict.components["reached"] == 0.0 and "stop: overshoot" in verdict.detail
    bad = task.respond(second, "<counter_press>lots</counter_press>")
    assert bad.tool_errors == {"counter_press": 1} and "error" in bad.content and not bad.done


def test_a_stop_predicate_ends_a_driven_episode_before_its_turn_limit():
    task = build_task("verifiers:rlvr_vf_counter", options={"eval_size": 2})
    example = task.examples("train", 1, 0)[0]
    target = task.task_of(example).data.target
    overshoot = char_ids(f"<counter_press>{target + 1}</counter_press>")
    _, _, result = run(lambda k, r, p: overshoot, task, [example], 2, max_new_tokens=40,
                       stop_strings=task.stop_strings, max_turns=5)
    for record, verdict in zip(result.records, result.verdicts):
        assert record.turns == 1 and record.episode.truncated_by is None  # @vf.stop ended it, not a limit
        assert verdict.components == {"reached": 0.0, "said_done": 0.0} and "stop: overshoot" in verdict.detail


# -- an Env of its own


def guess_script(guesses: list[str]):
    return lambda k, r, p: char_ids(guesses[min(k, len(guesses) - 1)]) + [EOS]


def test_an_env_run_replies_to_each_turn_through_the_driver_masked_and_ends_the_episode():
    task = build_task("verifiers:rlvr_vf_guess", options={"eval_size": 2, "env": {"up_word": "up"}})
    assert is_environment(task) and task.seat == "player" and task.max_turns == 4  # the seat's own max_turns
    example = task.examples("train", 1, 0)[0]
    secret = task.task_of(example).data.secret
    low, high = str(secret - 1) if secret > 1 else "x", "11"
    _, _, result = run(guess_script([low, high, str(secret)]), task, [example], 1, max_new_tokens=10)
    record = result.records[0]
    assert [(t.role, t.content) for t in record.episode.turns] == [
        ("assistant", low), ("user", "up"), ("assistant", high), ("user", "lower"), ("assistant", str(secret))]
    assert record.episode.truncated_by is None  # run() returned: the env ended it
    masked = TOKENIZER.decode([t for t, m in zip(result.generation.input_ids[0, result.generation.prompt_len:].tolist(),
                                                 result.generation.loss_mask[0].tolist()) if m == 0])
    assert "up" in masked and "lower" in masked
    verdict = result.verdicts[0]
    # the task's reward, and what the env's finalize() recorded (brevity 1/3 at weight 0.5) as `finalize`
    assert verdict.components == {"found": 1.0, "finalize": pytest.approx(0.5 / 3)} and verdict.correct
    assert verdict.status == "ok" and task.weights == {"found": 1.0, "finalize": 1.0}
    _, trace = verifiers_own_trace("rlvr_vf_guess", example.metadata["vf_idx"], [
        vf.AssistantMessage(content=str(secret))])
    trace.record_reward("brevity", 1.0 / 3, 0.5)  # what finalize records after three turns
    assert verdict.total == pytest.approx(trace.reward) == pytest.approx(1.0 + 0.5 / 3)


def test_an_env_episode_cut_by_max_turns_is_terminated_for_the_env_and_scored():
    task = build_task("verifiers:rlvr_vf_guess", options={"eval_size": 2, "max_turns": 2})
    example = task.examples("train", 1, 0)[0]
    _, _, result = run(guess_script(["x"]), task, [example], 2, max_new_tokens=10)
    for record, verdict in zip(result.records, result.verdicts):
        assert record.episode.truncated_by == "max_turns" and record.turns == 2
        assert verdict.components["found"] == 0.0
        assert record.episode.state.exchange.finished  # run() saw a terminated segment and returned


# -- training


@pytest.mark.slow
def test_rlvr_train_runs_one_iteration_on_a_verifiers_taskset_with_tools(tiny_model_dir, tmp_path):
    from rlvr.cli import main
    from rlvr.observe.metric_names import EPISODE_TOOL_CALLS_PREFIX
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    run_dir = tmp_path / "counter"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "verifiers:rlvr_vf_counter", "task.use_chat_template": "true", "task.options.eval_size": 2,
        "task.options.max_turns": 2, "train.eval_size": 2, "train.iterations": 1, "rollout.max_new_tokens": 6,
        "rollout.max_episode_tokens": 120, "rollout.stop_strings": "[a, e, o]"})
    assert main(["train", *overrides]) == 0
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["iteration"] == 1 and math.isfinite(record["loss"])
    assert 1.0 <= record["episode/turns"] <= 2.0
    assert record[f"{EPISODE_TOOL_CALLS_PREFIX}counter_press"] >= 0.0  # the offered tool is counted, from 0
    assert record["reward/reached"] >= 0.0 and record["reward/said_done"] >= 0.0  # the components, logged
