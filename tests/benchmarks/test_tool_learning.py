"""benchmarks/tool_learning.py's SFT data: right episodes, one pair per turn, and never an example that
the SFT run's or any GRPO seed's held-out eval scores (the eval split moves with the seed)."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import load_config
from rlvr.testing import build_tiny_tokenizer

from benchmarks import tool_learning

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = build_tiny_tokenizer()


def test_guess_number_sft_data_leaves_out_every_seeds_held_out_numbers():
    config = load_config(REPO / tool_learning.TASK_RUNS["guess_number"].sft_config)
    seeds = (0, 1, 2)
    held_out = tool_learning.held_out_keys(config, seeds)
    evals = [{int(e.ground_truth) for e in tool_learning.task_for_seed(config, s).iter_eval()} for s in seeds]
    assert evals[0] != evals[1] and len(held_out) == len(evals[0] | evals[1] | evals[2])  # each seed its own split
    task = tool_learning.task_for_seed(config, 0)
    rows = tool_learning.sft_rows(task, TOKENIZER, 30, seed=1, held_out=held_out)
    targets = {int(r["ground_truth"]) for r in rows}
    assert len(targets) == 30 and not targets & (evals[0] | evals[1] | evals[2])
    # Drawn from seed 0's training numbers alone, some would be seed 1's or 2's held-out numbers.
    unfiltered = {int(r["ground_truth"]) for r in tool_learning.sft_rows(task, TOKENIZER, 30, seed=1)}
    assert unfiltered & (evals[1] | evals[2]) and not unfiltered & evals[0]
    # Binary search: one pair per guess, the first always 50, the last the number itself.
    by_target: dict[int, list[dict]] = {}
    for row in rows:
        by_target.setdefault(int(row["ground_truth"]), []).append(row)
    for target, pairs in by_target.items():
        assert pairs[0]["response"].startswith("<guess>50</guess>")  # (the whole episode when the number is 50)
        assert pairs[-1]["response"].startswith(f"<guess>{target}</guess>")
        assert all(later["prompt"].startswith(earlier["prompt"] + earlier["response"])
                   for earlier, later in zip(pairs, pairs[1:]))
        ends = [pair["response"].endswith(TOKENIZER.eos_token) for pair in pairs]
        assert ends == [False] * (len(pairs) - 1) + [True]  # only the turn that ends the episode writes EOS
    assert max(len(pairs) for pairs in by_target.values()) > 1


def test_asking_for_more_examples_than_lie_outside_the_held_out_splits_is_refused():
    config = load_config(REPO / tool_learning.TASK_RUNS["guess_number"].sft_config)
    held_out = tool_learning.held_out_keys(config, (0, 1, 2))
    task = tool_learning.task_for_seed(config, 0)
    free = 100 - len(held_out)
    try:
        tool_learning.sft_rows(task, TOKENIZER, free + 1, seed=1, held_out=held_out)
    except ValueError as error:
        assert f"only {free} distinct training examples" in str(error)
    else:
        raise AssertionError("expected a ValueError")


def test_calculator_sft_data_is_the_call_then_the_answer_of_questions_no_seed_holds_out():
    config = load_config(REPO / tool_learning.TASK_RUNS["calculator_arithmetic"].sft_config)
    held_out = tool_learning.held_out_keys(config, (0, 1))
    assert len(held_out) == 200  # two seeds, 100 held-out products each, none shared
    rows = tool_learning.sft_rows(tool_learning.task_for_seed(config, 0), TOKENIZER, 4, seed=1, held_out=held_out)
    assert len(rows) == 8
    for call, answer in zip(rows[::2], rows[1::2]):
        product = int(call["ground_truth"])
        assert call["response"].startswith("<calculator>") and answer["response"].startswith(f"<answer>{product}")
        assert answer["prompt"].startswith(call["prompt"] + call["response"]) and str(product) in answer["prompt"]
