"""Dynamic sampling (DAPO) in `collect_groups`, with a scripted backend and task: no model needed.

Each round's prompts say which of their groups have reward contrast (`ROUNDS`), so the kept
groups, the set-aside ones and the round count are known in advance and written down by hand.
Data-parallel, every rank must keep sampling until all ranks are full: the round count is the
global one on every rank (rank 0 logs it), not the count of the rank that filled up first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import load_config
from rlvr.rollout.backend import RolloutBackend
from rlvr.rollout.generation import Generation
from rlvr.tasks.task import Example, Verdict
from rlvr.training.collect import collect_groups, rollout_batch, round_seed
from rlvr.parallel.distributed import SINGLE, init_distributed
from rlvr.observe.rollout_stats import gather_rollout, rollout_stats
from tests.parallel.test_distributed import spawn_two_ranks

GROUP = 2
# Round r draws 4 prompts (train.seed 0, iteration 0); "c" has contrast, "f" not.
ROUNDS = ["ccff", "ffcf", "fccc", "ffff"]
COMPLETIONS = {"c": ["1", "0"], "f": ["1", "1"]}  # each completion is its own reward


class ScriptedTask:
    name = "scripted_contrast"
    component_names = ("value",)
    stop_strings = ()

    def examples(self, split, count, seed):
        round_index = seed - round_seed(0, 0)
        kinds = ROUNDS[round_index] if round_index < len(ROUNDS) else "f" * count
        return [Example(prompt=f"{kind} r{round_index} p{index}", ground_truth="")
                for index, kind in enumerate(kinds[:count])]

    def score(self, completion, example):
        value = float(completion)
        return Verdict(components={"value": value}, total=value, status="ok", verifier="scripted", version="1")


class ScriptedBackend(RolloutBackend):
    """Completion texts from the prompt's kind; one prompt token, one completion token per row."""

    def __init__(self):
        super().__init__(policy=None, tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=0))

    def sync(self):
        return contextlib.nullcontext()

    def generate(self, prompts, group_size, settings):
        texts = [text for prompt in prompts for text in COMPLETIONS[prompt[0]]]
        rows = len(texts)
        ones = torch.ones(rows, 2, dtype=torch.long)  # [N, P + C]
        return Generation(input_ids=ones, attention_mask=ones, prompt_len=1, completion_texts=texts,
                          completion_lengths=torch.ones(rows, dtype=torch.long),
                          truncated=torch.zeros(rows, dtype=torch.bool))


def _config(batch_size=4, max_rounds=4, dynamic_sampling=True):
    return load_config(None, [
        "algorithm.name=dapo", f"algorithm.dynamic_sampling={str(dynamic_sampling).lower()}",
        f"algorithm.dynamic_sampling_max_rounds={max_rounds}", "algorithm.overlong_buffer=0",
        f"rollout.batch_size={batch_size}", f"rollout.group_size={GROUP}", "rollout.max_new_tokens=4",
        "train.seed=0", "task.use_chat_template=false",
    ])


def _collect(config, dist=SINGLE):
    return collect_groups(ScriptedBackend(), ScriptedTask(), settings=None, config=config, iteration=0, dist=dist)


def _prompts(collected) -> list[str]:
    return [group.example.prompt for group in collected.groups]


def test_groups_without_contrast_are_set_aside_until_the_batch_is_full():
    collected = _collect(_config())
    # Round 0 keeps p0 and p1, round 1 p2; round 2 has three groups with contrast and needs one.
    assert _prompts(collected) == ["c r0 p0", "c r0 p1", "c r1 p2", "c r2 p1"]
    assert collected.rounds == 3 and collected.sampled_groups == 12 and collected.filled_no_contrast == 0
    assert all(group.rewards.tolist() == [1.0, 0.0] for group in collected.groups)
    assert collected.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_short_batch_is_filled_with_set_aside_groups_in_order_and_counted():
    collected = _collect(_config(max_rounds=2))
    # Two rounds keep three groups; the first group set aside (round 0's p2) fills the fourth place.
    assert _prompts(collected) == ["c r0 p0", "c r0 p1", "c r1 p2", "f r0 p2"]
    assert collected.rounds == 2 and collected.sampled_groups == 8 and collected.filled_no_contrast == 1
    batch = rollout_batch(collected, ScriptedBackend().tokenizer, "scripted_contrast")
    assert len(batch) == 8  # B groups x G, never more
    without = _collect(_config(dynamic_sampling=False))  # the first round as drawn, contrast or not
    assert _prompts(without) == ["c r0 p0", "c r0 p1", "f r0 p2", "f r0 p3"]
    assert without.rounds == 1 and without.filled_no_contrast == 0


def _two_rank_worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist = init_distributed("cpu")
    collected = _collect(_config(), dist)
    batch = rollout_batch(collected, ScriptedBackend().tokenizer, "scripted_contrast")
    batch = batch.replace(advantages=torch.zeros(len(batch)))  # the statistics read them; their values do not matter
    stats = rollout_stats(gather_rollout(collected, batch, dist), dynamic_sampling=True)
    result = {"prompts": _prompts(collected), "rounds": collected.rounds, "sampled": collected.sampled_groups,
              "filled": collected.filled_no_contrast, "stats": stats}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return spawn_two_ranks(_two_rank_worker, "unused", tmp_path_factory.mktemp("collect_ranks"))


def test_two_ranks_keep_sampling_until_every_rank_is_full(two_ranks):
    # Rank 0 draws p0, p1 of each round and rank 1 p2, p3 (quota 2 each). Round 0 fills rank 0;
    # rank 1 keeps p2 in round 1 and p2 again in round 2, where the global count reaches 4.
    rank0, rank1 = two_ranks
    assert rank0["prompts"] == ["c r0 p0", "c r0 p1"] and rank1["prompts"] == ["c r1 p2", "c r2 p2"]
    assert (rank0["sampled"], rank1["sampled"]) == (2, 6) and rank0["filled"] == rank1["filled"] == 0
    # Both ranks ran the global number of rounds. Counting a rank's own groups as if every rank had
    # as many would stop rank 0 after round 0; counting them alone against B, never before the last round.
    assert rank0["rounds"] == rank1["rounds"] == 3


def test_two_ranks_log_the_global_round_and_group_counts(two_ranks):
    stats = two_ranks[0]["stats"]  # rank 0 writes the metrics
    assert stats["dynamic_sampling/rounds"] == 3
    assert stats["dynamic_sampling/sampled_groups"] == 8 and stats["dynamic_sampling/filled_no_contrast"] == 0
    assert stats["num_sequences"] == 8 and stats["frac_no_contrast_groups"] == 0.0


class GreedyAwareBackend(ScriptedBackend):
    """Answers "1" when decoding greedily and "0" when sampling, and records the calls."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def generate(self, prompts, group_size, settings):
        self.calls.append((len(prompts), group_size, settings.do_sample))
        rows = len(prompts) * group_size
        ones = torch.ones(rows, 2, dtype=torch.long)
        texts = ["1" if not settings.do_sample else "0"] * rows
        return Generation(input_ids=ones, attention_mask=ones, prompt_len=1, completion_texts=texts,
                          completion_lengths=torch.ones(rows, dtype=torch.long),
                          truncated=torch.zeros(rows, dtype=torch.bool))


def test_greedy_baselines_decode_one_greedy_completion_per_kept_prompt():
    from rlvr.rollout import SamplingSettings
    from rlvr.training.collect import greedy_baselines

    config = _config(dynamic_sampling=False)
    collected = _collect(config)
    backend = GreedyAwareBackend()
    baselines = greedy_baselines(backend, ScriptedTask(), SamplingSettings(max_new_tokens=4), collected, config)
    assert backend.calls == [(4, 1, False)]  # the 4 kept prompts, once each, greedily
    assert baselines.rewards.tolist() == [1.0] * 4 * GROUP  # repeated over each group, prompt-major


def test_greedy_baselines_keep_the_rollout_settings_otherwise():
    from rlvr.rollout import SamplingSettings
    from rlvr.training.collect import greedy_baselines

    seen = []

    class Recording(GreedyAwareBackend):
        def generate(self, prompts, group_size, settings):
            seen.append(settings)
            return super().generate(prompts, group_size, settings)

    config = _config(dynamic_sampling=False)
    settings = SamplingSettings(max_new_tokens=3, temperature=0.7, stop_strings=("</a>",))
    greedy_baselines(Recording(), ScriptedTask(), settings, _collect(config), config)
    (used,) = seen
    assert (used.do_sample, used.max_new_tokens, used.stop_strings) == (False, 3, ("</a>",))
    assert settings.do_sample  # the rollout's own settings are left as they were


class CorrectnessTask(ScriptedTask):
    """ScriptedTask whose verdicts say a completion is correct when its value is at least 1."""

    def score(self, completion, example):
        verdict = super().score(completion, example)
        return dataclasses.replace(verdict, correct=verdict.total >= 1)


@pytest.mark.parametrize("rule, kept, rounds, sampled", [
    ("reward", ["b r0 p0", "c r0 p1"], 1, 2),  # "b" groups (1.2 and 1, both correct) have reward contrast
    ("correctness", ["c r0 p1", "c r1 p0"], 2, 4),  # ... but no correctness contrast: dropped, one more round
])
def test_the_correctness_filter_drops_groups_that_differ_only_in_a_bonus(monkeypatch, rule, kept, rounds, sampled):
    import tests.training.test_collect as this

    monkeypatch.setattr(this, "ROUNDS", ["bc", "cb"])  # two prompts a round
    monkeypatch.setitem(COMPLETIONS, "b", ["1.2", "1"])
    config = load_config(None, ["algorithm.name=dapo", "algorithm.overlong_buffer=0", "rollout.batch_size=2",
                                f"rollout.group_size={GROUP}", "rollout.max_new_tokens=4", "train.seed=0",
                                "task.use_chat_template=false", f"algorithm.dynamic_sampling_filter={rule}"])
    collected = collect_groups(ScriptedBackend(), CorrectnessTask(), settings=None, config=config, iteration=0)
    assert _prompts(collected) == kept
    assert (collected.rounds, collected.sampled_groups, collected.filled_no_contrast) == (rounds, sampled, 0)


def test_an_unknown_filter_names_the_valid_ones():
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="correctness.*reward|reward.*correctness"):
        load_config(None, ["algorithm.dynamic_sampling_filter=total"])
