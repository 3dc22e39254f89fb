"""SFT: the loss against a hand-computed masked NLL, the response mask cell by cell, verifier
filtering, and a CLI run that resumes to the same weights and metrics as an uninterrupted one."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlvr.cli import main
from rlvr.compat.cs336 import get_response_log_probs, tokenize_prompt_and_output
from rlvr.core import prompt_completion_rows
from rlvr.models.completion_logprobs import response_logprobs
from rlvr.models import LoraSettings, load_policy, load_trainable
from rlvr.tasks import FormatCopyTask
from rlvr.testing import IM_END_TOKEN, build_tiny_model, build_tiny_tokenizer
from rlvr.training.sft import filter_correct, sft_loss, sft_step
from rlvr.utils import read_jsonl
from tests.conftest import tiny_overrides

PROMPTS = ["say a 1", "q", "count to ten"]
RESPONSES = ["abc" + IM_END_TOKEN, "hello there", "x"]


def _hand_nll(model, tokenizer):
    """Per row: the list of -log p(response token | everything before it), from a manual log-softmax."""
    rows = []
    for prompt, response in zip(PROMPTS, RESPONSES):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        response_ids = tokenizer.encode(response, add_special_tokens=False)
        ids = torch.tensor([prompt_ids + response_ids])  # unpadded, one row at a time
        with torch.no_grad():
            logits = model(ids).logits[0].double()  # [L, V]
        nll = []
        for k, token in enumerate(response_ids):
            position = len(prompt_ids) + k - 1  # the logits that predict response token k
            row = logits[position]
            shifted = row - row.max()
            log_normalizer = math.log(sum(math.exp(v) for v in shifted.tolist()))
            nll.append(-(float(shifted[token]) - log_normalizer))
        rows.append(nll)
    return rows


def test_sft_loss_equals_hand_computed_masked_nll():
    model, tokenizer = build_tiny_model(), build_tiny_tokenizer()
    log_probs, _, mask = response_logprobs(model, tokenizer, PROMPTS, RESPONSES, enable_grad=False)  # [B, L-1]
    rows = _hand_nll(model, tokenizer)
    # token_mean: every response token of the batch weighs the same: sum of all NLLs / number of tokens.
    token_mean = sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    assert float(sft_loss(log_probs, mask, "token_mean")) == pytest.approx(token_mean, rel=1e-5)
    # constant: per-sequence sums over a constant, averaged over sequences.
    constant = sum(sum(r) / 4.0 for r in rows) / len(rows)
    assert float(sft_loss(log_probs, mask, "constant", normalize_constant=4.0)) == pytest.approx(constant, rel=1e-5)
    # The test can fail: the sequence-mean of per-sequence means (responses of 4, 11, 1 tokens) differs,
    # and so does an NLL that also counts prompt tokens.
    seq_mean = sum(sum(r) / len(r) for r in rows) / len(rows)
    assert abs(seq_mean - token_mean) > 1e-3
    everything = float(sft_loss(log_probs, torch.ones_like(mask), "token_mean"))
    assert abs(everything - token_mean) > 1e-3


def test_sft_scores_responses_on_the_rl_path_as_the_full_logits_path_does():
    """SFT's log-probs come from the completion path (left-padded prompts, LM head at response tokens only)
    and equal the course's full-logits path on right-padded rows, token for token, gradients included."""
    tokenizer = build_tiny_tokenizer()
    prompts, responses = PROMPTS + [""], RESPONSES + ["ok"]  # an empty prompt: its first token is unscored
    model = build_tiny_model()
    log_probs, entropy, mask = response_logprobs(model, tokenizer, prompts, responses)
    batch = tokenize_prompt_and_output(prompts, responses, tokenizer)
    full = get_response_log_probs(model, batch["input_ids"], batch["labels"], return_token_entropy=True)
    for row in range(len(prompts)):
        ours = log_probs[row][mask[row] != 0]
        theirs = full["log_probs"][row][batch["response_mask"][row]]
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy[row][mask[row] != 0],
                                   full["token_entropy"][row][batch["response_mask"][row]], rtol=1e-5, atol=1e-5)
    ours_grad = torch.autograd.grad((log_probs * mask).sum(), list(model.parameters()), allow_unused=True)
    theirs_grad = torch.autograd.grad((full["log_probs"] * batch["response_mask"]).sum(), list(model.parameters()),
                                      allow_unused=True)
    for one, two in zip(ours_grad, theirs_grad):
        if one is not None and two is not None:
            torch.testing.assert_close(one, two, rtol=1e-4, atol=1e-5)  # fp32 sums in another order: ~2e-6
    # The layout is the RL one: prompts end at column P, so no response token is scored before P-1 ...
    _, _, prompt_len, expected_mask = prompt_completion_rows(
        [tokenizer.encode(p, add_special_tokens=False) for p in prompts],
        [tokenizer.encode(r, add_special_tokens=False) for r in responses], fill_id=tokenizer.pad_token_id)
    assert torch.equal(mask, expected_mask) and not bool(mask[:, : prompt_len - 1].any())
    # ... and the counts differ from a mask that scored every response token of the empty-prompt row.
    assert int(mask.sum()) == sum(len(tokenizer.encode(r, add_special_tokens=False)) for r in responses) - 1


def test_accumulated_microbatches_give_the_full_batch_loss_and_gradient():
    tokenizer = build_tiny_tokenizer()
    pairs = [{"prompt": p, "response": r} for p, r in zip(PROMPTS, RESPONSES)]
    hand = _hand_nll(build_tiny_model(), tokenizer)
    token_mean = sum(sum(r) for r in hand) / sum(len(r) for r in hand)
    grads = []
    for microbatch_size in (1, 3):
        model = build_tiny_model()
        params = [p for p in model.parameters()]
        optimizer = torch.optim.SGD(params, lr=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        captured = {}
        hook = optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: captured.update(grad=[p.grad.clone() for p in params]))
        metrics = sft_step(model, tokenizer, optimizer, scheduler, params, pairs, microbatch_size=microbatch_size,
                           normalization="token_mean", normalize_constant=1.0, max_grad_norm=1e9)
        hook.remove()
        assert metrics["loss"] == pytest.approx(token_mean, rel=1e-5)
        assert metrics["nll_per_token"] == pytest.approx(token_mean, rel=1e-5)
        assert metrics["response_tokens"] == sum(len(r) for r in hand)
        grads.append(captured["grad"])
    for one, full in zip(*grads):
        torch.testing.assert_close(one, full, rtol=1e-4, atol=1e-6)


def test_response_mask_never_covers_prompt_or_padding():
    tokenizer = build_tiny_tokenizer()
    batch = tokenize_prompt_and_output(PROMPTS, RESPONSES, tokenizer)
    mask, labels = batch["response_mask"], batch["labels"]
    assert mask.dtype == torch.bool
    for row, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES)):
        p = len(tokenizer.encode(prompt, add_special_tokens=False))
        r = len(tokenizer.encode(response, add_special_tokens=False))
        for column in range(mask.shape[1]):
            # Column t holds label token t+1: a response token iff p <= t+1 < p+r.
            expected = p <= column + 1 < p + r
            assert bool(mask[row, column]) == expected, (row, column)
        response_ids = tokenizer.encode(response, add_special_tokens=False)
        assert labels[row][mask[row]].tolist() == response_ids
    # Row 0's response ends with EOS, which is also the pad id: it is in the mask, the padding after it is not.
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    assert int(mask[0].sum()) == len(tokenizer.encode(RESPONSES[0], add_special_tokens=False))
    assert int(mask.sum()) == sum(len(tokenizer.encode(r, add_special_tokens=False)) for r in RESPONSES)


def test_filtering_keeps_exactly_the_verified_examples():
    task = FormatCopyTask()
    eos = "<|im_end|>"
    rows = [
        ("<answer>12</answer>" + eos, "12", True),
        ("<answer>13</answer>", "12", False),  # wrong number
        ("12", "12", False),  # no tags
        ("Sure! <answer>-7</answer>", "-7", True),  # extra text, right answer
        ("<answer></answer>" + eos, "5", False),
        ("<answer>5" + eos, "5", False),  # unclosed tag
    ]
    pairs = [{"prompt": f"p{i}", "response": r, "ground_truth": gt} for i, (r, gt, _) in enumerate(rows)]
    kept = filter_correct(pairs, task, eos)
    assert [p["prompt"] for p in kept] == [f"p{i}" for i, (_, _, ok) in enumerate(rows) if ok]
    with pytest.raises(ValueError, match="ground truth"):
        filter_correct([{"prompt": "p", "response": "x", "ground_truth": None}], task, eos)


def _write_data(path, count=12):
    with open(path, "w") as handle:
        for i in range(count):
            handle.write(json.dumps({"q": f"say a {i}", "a": "abc" * (1 + i % 3) + IM_END_TOKEN,
                                     "gt": "abcdefghijklm"}) + "\n")
        handle.write(json.dumps({"q": "say z", "a": "xyz" + IM_END_TOKEN, "gt": "abcdefghijklm"}) + "\n")
    return path


def _sft_overrides(model_dir, run_dir, data, **extra):
    base = {"model.num_threads": 1, "sft.data_path": str(data), "sft.prompt_field": "q", "sft.response_field": "a",
            "sft.ground_truth_field": "gt", "sft.batch_size": 4, "sft.microbatch_size": 2, "sft.save_every": 3,
            "sft.log_generations": 2, "train.eval_size": 2, "model.lora_rank": 4, "model.lora_alpha": 8,
            "optim.warmup_steps": 2, "optim.schedule": "constant", "train.keep_checkpoints": 5}
    return tiny_overrides(model_dir, run_dir, **{**base, **extra})


def _weights(run_dir, model_dir):
    loaded = load_policy(str(model_dir), lora=LoraSettings(rank=4, alpha=8))
    load_trainable(loaded, sorted((run_dir / "checkpoints").glob("iter_*"))[-1] / "model")
    return {k: v.clone() for k, v in loaded.policy.named_parameters() if v.requires_grad}


def test_sft_cli_filters_trains_and_resumes_exactly(tiny_model_dir, tmp_path):
    data = _write_data(tmp_path / "pairs.jsonl")
    full = tmp_path / "full"
    assert main(["sft", *_sft_overrides(tiny_model_dir, full, data, **{"sft.epochs": 2,
                                                                         "sft.filter_correct": "true"})]) == 0
    records = read_jsonl(full / "metrics.jsonl")
    assert [r["iteration"] for r in records] == list(range(1, 7))  # 12 pairs / 4 per step * 2 epochs
    for record in records:
        for key in ("loss", "lr", "grad_norm", "entropy", "nll_per_token", "time/unix", "elapsed_s"):
            assert math.isfinite(record[key]), key
        assert record["data/size"] == 12 and record["data/size_before_filter"] == 13  # 'xyz' is rejected
    assert records[0]["lr"] == pytest.approx(0.5e-2)  # warm-up: step 1 of 2
    assert "eval/accuracy" in records[-1]
    generations = read_jsonl(full / "generations.jsonl")
    assert len(generations) == 4 and {"prompt", "response", "ground_truth", "components", "entropy",
                                      "response_len"} <= set(generations[0])

    part = tmp_path / "part"
    assert main(["sft", *_sft_overrides(tiny_model_dir, part, data, **{"sft.epochs": 1,
                                                                         "sft.filter_correct": "true"})]) == 0
    assert main(["sft", "--resume", str(part), "sft.epochs=2"]) == 0
    part_records = read_jsonl(part / "metrics.jsonl")
    assert [r["iteration"] for r in part_records] == list(range(1, 7))
    for a, b in zip(records, part_records):
        for key in ("loss", "grad_norm", "nll_per_token"):
            assert b[key] == pytest.approx(a[key], rel=1e-5), key
    full_w, part_w = _weights(full, tiny_model_dir), _weights(part, tiny_model_dir)
    for key in full_w:
        torch.testing.assert_close(full_w[key], part_w[key])


def test_sft_and_expert_iteration_config_keys_are_checked():
    from rlvr.config import ConfigError, load_config

    config = load_config(None, ["sft.epochs=2", "expert_iteration.samples_per_question=4"])
    assert config.sft.epochs == 2 and config.expert_iteration.samples_per_question == 4
    with pytest.raises(ConfigError, match="valid keys: .*data_path"):
        load_config(None, ["sft.epochz=2"])
    with pytest.raises(ConfigError, match="must divide sft.batch_size"):
        load_config(None, ["sft.batch_size=6", "sft.microbatch_size=4"])
    with pytest.raises(ConfigError, match="min_new_tokens"):
        load_config(None, ["expert_iteration.min_new_tokens=99"])
