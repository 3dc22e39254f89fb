"""`rm:BASE`: a tiny random sequence-classification reward model scores deterministically, in batches exactly as
one at a time, adds a weighted `reward_model` component, and normalises as its option says; expected values are
computed here from the model's own forward on unpadded texts and from the statistics module."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rlvr.cli import main
from rlvr.observe.metric_names import reward_component
from rlvr.tasks import build_task
from rlvr.rollout.sample import score_completions
from rlvr.tasks.task import Example
from rlvr.tasks.verification.judging import judge_batch
from rlvr.tasks.verification.reward_normalization import RunningMoments, merge_moments, normalize_group
from rlvr.testing import IM_END_TOKEN, IM_END_TOKEN_ID, save_tiny_reward_model
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

# Lengths differ so that a batch pads; one completion ends in the pad token (<|im_end|>, also EOS), which the
# model's own pooling skips: the batched path must skip it too.
COMPLETIONS = ["abc", "a much longer completion, with words", "x", f"done{IM_END_TOKEN}", "mmmm mm", "zz top"]


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    return save_tiny_reward_model(tmp_path_factory.mktemp("rm") / "model")


def rm_task(folder, **options):
    weights = options.pop("reward_weights", None)
    return build_task("rm:char_count", use_chat_template=False, reward_weights=weights,
                      options={"path": str(folder), "device": "cpu", **options})


def reference_score(task, text: str) -> float:
    """The model's own forward on one unpadded text (its own pooling: the last token that is not pad)."""
    ids = torch.tensor([task.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return float(task.model(input_ids=ids).logits[0, 0])


def examples_of(groups: int, size: int) -> list[Example]:
    """`groups` distinct examples, each repeated `size` times, prompt-major as the sampler lays them out."""
    distinct = [Example(prompt=f"say {letter} ", ground_truth="abcdefghijklm") for letter in "abcdefgh"[:groups]]
    return [example for example in distinct for _ in range(size)]


def test_scores_are_deterministic_and_match_the_models_own_forward(reward_model_dir):
    task = rm_task(reward_model_dir, batch_size=4)
    examples = examples_of(2, 3)
    first, _ = task.raw_scores(COMPLETIONS, examples)
    second, _ = task.raw_scores(COMPLETIONS, examples)
    assert first == second
    expected = [reference_score(task, e.prompt + c) for c, e in zip(COMPLETIONS, examples)]
    assert first == pytest.approx(expected, abs=1e-5)
    assert max(expected) - min(expected) > 0.1  # the tiny model's score does depend on the text


def test_batched_scores_equal_one_at_a_time(reward_model_dir):
    examples = examples_of(2, 3)
    one_by_one = [rm_task(reward_model_dir, batch_size=1).raw_scores([c], [e])[0][0]
                  for c, e in zip(COMPLETIONS, examples)]
    batched, _ = rm_task(reward_model_dir, batch_size=6).raw_scores(COMPLETIONS, examples)
    assert batched == pytest.approx(one_by_one, abs=1e-5)
    # A plausible wrong batch (right padding, pooled at each row's last column) does move scores: the check can fail.
    task = rm_task(reward_model_dir)
    rows = [task.tokenizer(e.prompt + c)["input_ids"] for c, e in zip(COMPLETIONS, examples)]
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [IM_END_TOKEN_ID] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    with torch.no_grad():
        hidden = task.model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        naive = task.model.score(hidden[:, -1]).float()[:, 0].tolist()
    assert max(abs(a - b) for a, b in zip(naive, one_by_one)) > 1e-2


def test_component_and_total_with_weights(reward_model_dir):
    task = rm_task(reward_model_dir, reward_weights={"share": 0.5, "reward_model": 2.0})
    assert task.component_names == ("share", "reward_model")
    examples = examples_of(2, 3)
    verdicts = judge_batch(task, COMPLETIONS, examples)
    for completion, example, verdict in zip(COMPLETIONS, examples, verdicts):
        share = sum(ch in "abcdefghijklm" for ch in completion) / len(completion)
        score = reference_score(task, example.prompt + completion)
        assert verdict.status == "ok"
        assert verdict.components["share"] == pytest.approx(share)
        assert verdict.components["reward_model"] == pytest.approx(score, abs=1e-5)
        assert verdict.total == pytest.approx(0.5 * share + 2.0 * score, abs=1e-5)
        assert verdict.verifier.endswith(f"+reward_model:{reward_model_dir}")


def test_running_normalization_over_two_batches(reward_model_dir):
    raw_task = rm_task(reward_model_dir)
    task = rm_task(reward_model_dir, normalize="running")
    first_batch, second_batch = examples_of(1, 3), examples_of(3, 1)
    first_raw, _ = raw_task.raw_scores(COMPLETIONS[:3], first_batch)
    second_raw, _ = raw_task.raw_scores(COMPLETIONS[3:], second_batch)
    task.score_batch(COMPLETIONS[:3], first_batch)
    second = [v.components["reward_model"] for v in task.score_batch(COMPLETIONS[3:], second_batch)]
    seen = first_raw + second_raw
    mean, std = statistics.fmean(seen), statistics.pstdev(seen)
    assert second == pytest.approx([(s - mean) / std for s in second_raw], abs=1e-5)
    assert task.moments.count == 6 and task.moments.mean == pytest.approx(mean)
    # Statistics of the second batch alone would give clearly different values.
    alone = [(s - statistics.fmean(second_raw)) / statistics.pstdev(second_raw) for s in second_raw]
    assert max(abs(a - b) for a, b in zip(alone, second)) > 0.1


def test_group_normalization_is_a_z_score_within_each_prompts_completions(reward_model_dir):
    examples = examples_of(2, 3)
    raw, _ = rm_task(reward_model_dir).raw_scores(COMPLETIONS, examples)
    verdicts = rm_task(reward_model_dir, normalize="group").score_batch(COMPLETIONS, examples)
    got = [v.components["reward_model"] for v in verdicts]
    expected = []
    for start in (0, 3):
        group = raw[start:start + 3]
        expected += [(s - statistics.fmean(group)) / statistics.pstdev(group) for s in group]
    assert got == pytest.approx(expected, abs=1e-5)
    whole_batch = [(s - statistics.fmean(raw)) / statistics.pstdev(raw) for s in raw]
    assert max(abs(a - b) for a, b in zip(whole_batch, got)) > 0.1
    # A group of one (an eval with one sample per prompt) has no contrast: exactly 0.
    (single,) = rm_task(reward_model_dir, normalize="group").score_batch(["abc"], examples_of(1, 1))
    assert single.components["reward_model"] == 0.0


def test_group_z_scores_have_mean_0_and_std_1_in_every_group():
    # Three groups of two on very different levels: a z-score over the whole batch would not centre each group.
    scores = [10.0, 12.0, -3.0, -1.0, 0.5, 0.0]
    groups = ["a", "a", "b", "b", "c", "c"]
    got, moments = normalize_group(scores, groups, RunningMoments())
    assert moments == RunningMoments()
    for start in (0, 2, 4):
        assert statistics.fmean(got[start:start + 2]) == pytest.approx(0.0)
        assert statistics.pstdev(got[start:start + 2]) == pytest.approx(1.0)
    assert got == pytest.approx([-1.0, 1.0, -1.0, 1.0, 1.0, -1.0])


def test_groups_are_the_samplers_repeated_examples(reward_model_dir):
    # Laid out as sample_and_score lays out B=3 examples with G=2 (prompt-major): each pair is centred on its own.
    task = rm_task(reward_model_dir, normalize="group")
    examples = task.examples("train", 3, seed=0)
    repeated = [example for example in examples for _ in range(2)]
    verdicts = score_completions(task, COMPLETIONS, repeated)
    got = [v.components["reward_model"] for v in verdicts]
    for start in (0, 2, 4):
        assert statistics.fmean(got[start:start + 2]) == pytest.approx(0.0, abs=1e-6)
        assert statistics.pstdev(got[start:start + 2]) == pytest.approx(1.0, abs=1e-5)


def test_running_moments_merged_batch_by_batch_equal_the_moments_of_all_scores():
    batches = [[1.0, 2.0, 3.0], [100.0, 101.0], [math.nan, -50.0], [7.0]]
    moments = RunningMoments()
    for batch in batches:
        moments = merge_moments(moments, batch)
    seen = [s for batch in batches for s in batch if math.isfinite(s)]
    assert moments.count == len(seen)
    assert moments.mean == pytest.approx(statistics.fmean(seen))
    assert moments.std == pytest.approx(statistics.pstdev(seen))


def test_clip_and_truncation(reward_model_dir):
    examples = examples_of(2, 3)
    raw, _ = rm_task(reward_model_dir).raw_scores(COMPLETIONS, examples)
    clip = sorted(abs(s) for s in raw)[2]  # clips some scores and leaves others
    clipped = rm_task(reward_model_dir, clip=clip).score_batch(COMPLETIONS, examples)
    assert [v.components["reward_model"] for v in clipped] == pytest.approx(
        [min(max(s, -clip), clip) for s in raw], abs=1e-5)
    task = rm_task(reward_model_dir, max_length=5)
    (verdict,) = task.score_batch(["a much longer completion"], examples_of(1, 1))
    assert "cut" in verdict.detail and "max_length=5" in verdict.detail
    ids = task.tokenizer("say a a much longer completion")["input_ids"][-5:]
    with torch.no_grad():
        expected = float(task.model(input_ids=torch.tensor([ids])).logits[0, 0])
    assert verdict.components["reward_model"] == pytest.approx(expected, abs=1e-5)


def test_a_nan_score_is_an_error_not_a_reward(reward_model_dir):
    task = rm_task(reward_model_dir)
    with torch.no_grad():
        task.model.score.weight.fill_(math.nan)
    verdicts = judge_batch(task, COMPLETIONS[:2], examples_of(1, 2))
    assert [v.status for v in verdicts] == ["error", "error"]
    assert all(math.isnan(v.total) for v in verdicts)
    with torch.no_grad():
        task.model.score.weight.fill_(math.inf)
    assert {v.status for v in judge_batch(task, COMPLETIONS[:2], examples_of(1, 2))} == {"error"}


def test_bad_folders_and_options_are_refused_clearly(reward_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        rm_task(tmp_path / "missing")
    two = save_tiny_reward_model(tmp_path / "two", num_labels=2)
    with pytest.raises(ValueError, match="num_labels=2"):
        rm_task(two)
    with pytest.raises(ValueError, match="valid choices: group, none, running"):
        rm_task(reward_model_dir, normalize="batch")
    with pytest.raises(ValueError, match="valid choices: float32, bfloat16, float16"):
        rm_task(reward_model_dir, dtype="fp8")
    with pytest.raises(ValueError, match="task.options.path"):
        build_task("rm:char_count", use_chat_template=False, options={})
    with pytest.raises(ValueError, match="clip"):
        rm_task(reward_model_dir, clip=0)


def test_a_tiny_run_writes_the_reward_model_component(tiny_model_dir, reward_model_dir, tmp_path):
    run_dir = tmp_path / "rm-run"
    overrides = tiny_overrides(tiny_model_dir, run_dir, **{
        "task.name": "rm:char_count", "task.options.path": str(reward_model_dir), "task.options.device": "cpu",
        "task.options.normalize": "group", "train.iterations": 1, "train.eval_size": 2})
    assert main(["train", *overrides]) == 0
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert records and all(math.isfinite(record[reward_component("reward_model")]) for record in records)
    assert all(record["status/error"] == 0 for record in records)


def test_a_chat_run_scores_the_completion_as_the_assistants_turn(reward_model_dir):
    task = build_task("rm:char_count", use_chat_template=True, options={"path": str(reward_model_dir), "device": "cpu"})
    example = Example(prompt=[{"role": "user", "content": "say a"}], ground_truth="abcdefghijklm")
    text = task.text("abc", example)
    assert text == "<|im_start|>user\nsay a<|im_end|>\n<|im_start|>assistant\nabc<|im_end|>\n"
    (verdict,) = task.score_batch(["abc"], [example])
    ids = torch.tensor([task.tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        expected = float(task.model(input_ids=ids).logits[0, 0])
    assert verdict.components["reward_model"] == pytest.approx(expected, abs=1e-5)
