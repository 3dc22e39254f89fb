"""SFT data written by the task (`rlvr.run.sft_data`, `sft.demonstrations`): right episodes, one pair per
turn, and never a question that the SFT run's or any RL seed's held-out eval scores (the eval split moves
with the seed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import Config, load_config
from rlvr.models import load_tokenizer
from rlvr.tasks.reasoning_gym_tasks import ReasoningGymTask
from rlvr.testing import build_tiny_tokenizer, save_tiny_model
from rlvr.run.sft_data import read_pairs

from rlvr.run import sft_data

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = build_tiny_tokenizer()


def test_guess_number_sft_data_leaves_out_every_seeds_held_out_numbers():
    config = load_config(REPO / "configs/guess_number_sft.yaml")
    seeds = (0, 1, 2)
    held_out = sft_data.held_out_keys(config, seeds)
    evals = [{int(e.ground_truth) for e in sft_data.task_for_seed(config, s).iter_eval()} for s in seeds]
    assert evals[0] != evals[1] and len(held_out) == len(evals[0] | evals[1] | evals[2])  # each seed its own split
    task = sft_data.task_for_seed(config, 0)
    rows = sft_data.demonstration_rows(task, TOKENIZER, 30, seed=1, held_out=held_out)
    targets = {int(r["ground_truth"]) for r in rows}
    assert len(targets) == 30 and not targets & (evals[0] | evals[1] | evals[2])
    # Drawn from seed 0's training numbers alone, some would be seed 1's or 2's held-out numbers.
    unfiltered = {int(r["ground_truth"]) for r in sft_data.demonstration_rows(task, TOKENIZER, 30, seed=1)}
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
    config = load_config(REPO / "configs/guess_number_sft.yaml")
    held_out = sft_data.held_out_keys(config, (0, 1, 2))
    task = sft_data.task_for_seed(config, 0)
    free = 100 - len(held_out)
    try:
        sft_data.demonstration_rows(task, TOKENIZER, free + 1, seed=1, held_out=held_out)
    except ValueError as error:
        assert f"only {free} distinct training questions" in str(error)
    else:
        raise AssertionError("expected a ValueError")


def test_calculator_sft_data_is_the_call_then_the_answer_of_questions_no_seed_holds_out():
    config = load_config(REPO / "configs/calculator_sft.yaml")
    held_out = sft_data.held_out_keys(config, (0, 1))
    assert len(held_out) == 200  # two seeds, 100 held-out products each, none shared
    rows = sft_data.demonstration_rows(sft_data.task_for_seed(config, 0), TOKENIZER, 4, seed=1, held_out=held_out)
    assert len(rows) == 8
    for call, answer in zip(rows[::2], rows[1::2]):
        product = int(call["ground_truth"])
        assert call["response"].startswith("<calculator>") and answer["response"].startswith(f"<answer>{product}")
        assert answer["prompt"].startswith(call["prompt"] + call["response"]) and str(product) in answer["prompt"]


def _tiny_config(tmp_path, task: dict, **sft):
    model = save_tiny_model(tmp_path / "tiny")
    return Config(model={"name": str(model), "lora": False}, task=task, sft=sft, train={"seed": 0})


def test_spell_backward_demonstration_spells_the_word_then_reads_the_letters_back():
    task = ReasoningGymTask("spell_backward", seed=0, eval_size=5, use_chat_template=False)
    example = next(e for e in task.examples("train", 20, 0) if len(set(e.ground_truth)) > 3)
    word = example.ground_truth[::-1]
    (text,) = task.demonstration(example)
    letters = list(word)
    # r1_zero's prompt already opened <think>: the text starts inside it
    assert text == f"{' '.join(letters)} -> {' '.join(letters[::-1])}</think>\n<answer>{word[::-1]}</answer>"
    verdict = task.score(text, example)
    assert verdict.correct and verdict.components["format"] == 1.0
    chat = ReasoningGymTask("spell_backward", seed=0, eval_size=5, prompt="question_only")
    chat_example = chat.examples("train", 1, 0)[0]
    assert chat.demonstration(chat_example)[0].startswith(f"<think>{chat_example.ground_truth[-1]} ")


def test_a_dataset_without_a_trace_gets_the_oracle_answer_alone():
    task = ReasoningGymTask("leg_counting", seed=0, eval_size=5, prompt="question_only")
    example = task.examples("train", 1, 0)[0]
    (text,) = task.demonstration(example)
    assert text == f"<think></think>\n<answer>{example.ground_truth}</answer>"
    assert task.score(text, example).correct


def test_sft_demonstrations_are_the_data_and_leave_out_every_named_seeds_eval_questions(tmp_path):
    task = {"name": "guess_number", "options": {"eval_size": 20}}
    config = _tiny_config(tmp_path, task, demonstrations=40, exclude_eval_seeds=[1, 2])
    pairs = read_pairs(config)
    evals = [{e.ground_truth for e in sft_data.task_for_seed(config, s).iter_eval()} for s in (0, 1, 2)]
    numbers = {p["ground_truth"] for p in pairs}
    assert len(numbers) == 40 and not numbers & (evals[0] | evals[1] | evals[2])
    assert pairs[0]["response"].startswith("<guess>50</guess>")
    # without the exclusion seed 0's training numbers include numbers that seeds 1 and 2 hold out
    unexcluded = {p["ground_truth"] for p in read_pairs(_tiny_config(tmp_path / "b", task, demonstrations=40))}
    assert unexcluded & (evals[1] | evals[2]) and not unexcluded & evals[0]


def test_a_warm_up_for_one_other_seed_never_sees_its_held_out_numbers(tmp_path):
    config = _tiny_config(tmp_path, {"name": "guess_number", "options": {"eval_size": 30}}, demonstrations=30,
                          exclude_eval_seeds=[1])
    held_out = {e.ground_truth for s in (0, 1) for e in sft_data.task_for_seed(config, s).iter_eval()}
    numbers = {p["ground_truth"] for p in sft_data.demonstration_data(config)}
    assert len(numbers) == 30 and not numbers & held_out


def test_sft_demonstrations_of_spell_backward_render_the_raw_prompt_and_end_with_eos(tmp_path):
    task = {"name": "reasoning_gym:spell_backward", "use_chat_template": False, "options": {"eval_size": 30}}
    config = _tiny_config(tmp_path, task, demonstrations=12, max_examples=10)
    pairs = read_pairs(config)
    eos = load_tokenizer(config.model.name).eos_token
    assert len(pairs) == 10
    for pair in pairs:
        assert pair["prompt"].endswith("Assistant: <think>") and pair["response"].endswith(eos)
        assert pair["response"].startswith(pair["ground_truth"][-1] + " ")
        assert f"<answer>{pair['ground_truth']}</answer>" in pair["response"]
        forward, backward = pair["response"].split("</think>")[0].split(" -> ")
        assert backward.split() == forward.split()[::-1] and len(forward.split()) == len(pair["ground_truth"])


def test_sft_demonstrations_of_a_task_that_writes_none_is_refused(tmp_path):
    config = _tiny_config(tmp_path, {"name": "format_copy"}, demonstrations=4)
    with pytest.raises(ValueError, match="writes no demonstrations"):
        read_pairs(config)


def test_a_warm_up_writes_its_demonstrations_once_for_the_memory_check_and_the_training(tmp_path, monkeypatch):
    from rlvr.training.sft import train_sft

    calls = []
    build = sft_data.demonstration_data
    monkeypatch.setattr(sft_data, "demonstration_data", lambda config: calls.append(1) or build(config))
    config = Config(model={"name": str(save_tiny_model(tmp_path / "tiny")), "lora": False},
                    task={"name": "guess_number", "options": {"eval_size": 4}},
                    sft={"demonstrations": 6, "batch_size": 6, "microbatch_size": 3, "epochs": 1},
                    train={"seed": 0, "eval_size": 0, "output_dir": str(tmp_path / "runs"), "run_name": "warm",
                           "progress": False})
    run_dir = train_sft(config)
    assert len(calls) == 1
    kept = (run_dir / sft_data.DEMONSTRATIONS_FILE).read_text().splitlines()
    assert len(kept) == len(read_pairs(config)) and len(calls) == 1  # the same config reads the same pairs
    read_pairs(config).clear()
    assert len(read_pairs(config)) == len(kept)
    other = Config.from_dict({**config.as_dict(), "sft": {**config.as_dict()["sft"], "demonstrations": 5}})
    questions = {pair["ground_truth"] for pair in read_pairs(other)}  # one pair per turn: count the questions
    assert len(questions) == 5 and len(calls) == 2  # another config builds its own


def test_reading_the_same_configs_demonstrations_again_builds_nothing_and_gives_equal_pairs(tmp_path, monkeypatch):
    calls = []
    build = sft_data.demonstration_data
    monkeypatch.setattr(sft_data, "demonstration_data", lambda config: calls.append(1) or build(config))
    config = _tiny_config(tmp_path, {"name": "guess_number", "options": {"eval_size": 4}}, demonstrations=5)
    first = read_pairs(config)
    first.clear()  # a caller's list is its own
    again = read_pairs(Config.from_dict(config.as_dict()))
    assert len(calls) == 1 and len({pair["ground_truth"] for pair in again}) == 5


def test_a_share_of_wrong_workings_is_judged_formatted_and_wrong_and_filtering_removes_exactly_them(tmp_path):
    from rlvr.training.sft import filter_correct

    task = {"name": "reasoning_gym:basic_arithmetic", "use_chat_template": False,
            "options": {"eval_size": 10, "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
    config = _tiny_config(tmp_path, task, demonstrations=20, demonstration_slips=0.25)
    pairs = read_pairs(config)
    slipped = [p for p in pairs if p["slip"]]
    assert len(pairs) == 20 and len(slipped) == 5
    built = sft_data.task_for_seed(config, 0)
    eos = load_tokenizer(config.model.name).eos_token
    for pair in pairs:
        working, answer = pair["response"].removesuffix(eos).split("</think>\n<answer>")
        answer = answer.removesuffix("</answer>")
        assert working.endswith(f" = {answer}")  # the working and the answer agree, slip or not
        assert (int(answer) - int(pair["ground_truth"]) in (-1, 1)) if pair["slip"] else answer == pair["ground_truth"]
    kept = filter_correct(pairs, built, eos)
    assert [p["ground_truth"] for p in kept] == [p["ground_truth"] for p in pairs if not p["slip"]]
    again = read_pairs(_tiny_config(tmp_path / "b", task, demonstrations=20, demonstration_slips=0.25))
    assert [p["slip"] for p in again] == [p["slip"] for p in pairs]  # the same questions slip for the same seed


def test_a_spelling_slip_swaps_two_neighbouring_letters_of_the_reversal():
    task = ReasoningGymTask("spell_backward", seed=0, eval_size=5, use_chat_template=False)
    example = next(e for e in task.examples("train", 20, 0) if len(set(e.ground_truth)) > 3)
    (text,) = task.demonstration(example, slip=True)
    written = text.split("<answer>")[1].removesuffix("</answer>")
    differ = [i for i, (a, b) in enumerate(zip(written, example.ground_truth)) if a != b]
    assert sorted(written) == sorted(example.ground_truth) and len(differ) == 2 and differ[1] == differ[0] + 1
    assert text.split("</think>")[0].split(" -> ")[1].replace(" ", "") == written  # the working shows the slip
    verdict = task.score(text, example)
    assert not verdict.correct and verdict.components["format"] == 1.0


def test_slips_are_refused_for_a_task_that_writes_none_and_without_demonstrations(tmp_path):
    from rlvr.config import ConfigError

    config = _tiny_config(tmp_path, {"name": "guess_number", "options": {"eval_size": 4}}, demonstrations=4,
                          demonstration_slips=0.5)
    with pytest.raises(ValueError, match="writes no wrong demonstrations"):
        read_pairs(config)
    with pytest.raises(ConfigError, match="demonstration_slips=0.5 needs sft.demonstrations"):
        Config(sft={"demonstration_slips": 0.5})
    rg = _tiny_config(tmp_path / "c", {"name": "reasoning_gym:leg_counting", "options": {"eval_size": 4}},
                      demonstrations=4, demonstration_slips=0.5)
    with pytest.raises(ValueError, match="leg_counting.*writes no wrong demonstrations.*basic_arithmetic"):
        read_pairs(rg)


def test_filtered_sft_on_demonstrations_with_slips_trains_on_the_right_ones_and_logs_both_sizes(tmp_path):
    from rlvr.training.sft import train_sft
    from rlvr.utils import read_jsonl

    config = Config(model={"name": str(save_tiny_model(tmp_path / "tiny")), "lora": False},
                    task={"name": "reasoning_gym:basic_arithmetic", "use_chat_template": False,
                          "options": {"eval_size": 4, "min_terms": 2, "max_terms": 2, "min_digits": 1,
                                      "max_digits": 1}},
                    sft={"demonstrations": 8, "demonstration_slips": 0.25, "filter_correct": True, "batch_size": 2,
                         "microbatch_size": 2},
                    train={"seed": 0, "eval_size": 0, "output_dir": str(tmp_path / "runs"), "run_name": "filtered",
                           "progress": False})
    run_dir = train_sft(config)
    (first, *_) = read_jsonl(run_dir / "metrics.jsonl")
    assert (first["data/size_before_filter"], first["data/size"]) == (8, 6)
    kept = read_jsonl(run_dir / sft_data.DEMONSTRATIONS_FILE)  # the file holds all 8, slips marked
    assert sum(row["slip"] for row in kept) == 2 and all("example" not in row for row in kept)


def test_a_slip_the_verifier_judges_right_is_refused(tmp_path, monkeypatch):
    from rlvr.tasks import reasoning_gym_demos

    monkeypatch.setitem(reasoning_gym_demos.SLIPS._items, "basic_arithmetic", lambda entry: entry["answer"])
    config = _tiny_config(tmp_path, {"name": "reasoning_gym:basic_arithmetic", "use_chat_template": False,
                                     "options": {"eval_size": 4}}, demonstrations=4, demonstration_slips=0.5)
    with pytest.raises(ValueError, match="wrong demonstration for .* is not judged a formatted wrong answer"):
        read_pairs(config)


def test_code_demonstrations_are_reference_solutions_of_problems_no_named_seed_holds_out(tmp_path):
    # The generated family: each seed holds out its own 8 problems; a warm-up for seeds 0-2 sees none of them.
    task = {"name": "code", "use_chat_template": False, "options": {"eval_size": 8, "train_size": 200}}
    config = _tiny_config(tmp_path, task, demonstrations=24, exclude_eval_seeds=[1, 2])
    pairs = sft_data.demonstration_data(config)
    held_out = {e.metadata["problem"].prompt for s in (0, 1, 2) for e in sft_data.task_for_seed(config, s).iter_eval()}
    assert len(pairs) == 24 and len({p["prompt"] for p in pairs}) == 24 and not {p["prompt"] for p in pairs} & held_out
    code = sft_data.task_for_seed(config, 0)
    by_prompt = {e.prompt: e for e in code.examples("train", 400, 0)}
    for pair in pairs:  # the continuation of the prompt's signature and docstring: the reference's body, then EOS
        problem = by_prompt[pair["prompt"]].metadata["problem"]
        assert pair["prompt"] + pair["response"] == problem.reference + TOKENIZER.eos_token
        assert pair["response"].startswith("    return ")
