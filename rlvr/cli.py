"""The `rlvr` command line: parse arguments, build the config, call one function."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings

from rlvr import __version__
from rlvr.config import ConfigError, load_config
from rlvr.storage_errors import StorageError

CONFIG_SHOW_HINT = "every key with its type, default and help: rlvr config show [CONFIG.yaml] [key=value ...]"
START_ERRORS_HINT = ("A bad key or value, task, task option, data file or model name stops the command with exit "
                     "status 2 and a message naming it, before the model loads and before any folder is made.")


def quiet_library_deprecations() -> None:
    """Hide transformers' deprecation notices (raised by peft and others on every model load): they
    speak to library authors, not to someone running rlvr. Other warnings still show."""
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=r"transformers(\.|$)")


def _split_config_and_overrides(items: list[str]) -> tuple[str | None, list[str]]:
    if items and "=" not in items[0]:
        return items[0], items[1:]
    return None, items


def _train_or_resume(args: argparse.Namespace, loops, command: str, *, sft: bool = False) -> int:
    """`start(config)` a new run, or `resume(run_dir, overrides)` with `--resume RUN_DIR`; `loops()` imports
    and returns (start, resume) only once the config is known to be good, and the model, task and data
    sources are checked before that config check imports torch, so a bad key or name fails without torch."""
    from rlvr.run.preflight import load_checked_config, load_checked_run_config

    config_path, overrides = _split_config_and_overrides(args.items)
    if args.resume:
        if config_path is not None:
            raise ConfigError("with --resume the run's own config.yaml is used; pass only key=value overrides")
        load_checked_run_config(args.resume, overrides, sft=sft)  # the saved config with the overrides
        _, resume = loops()
        run_dir = resume(args.resume, overrides, force_config_change=args.force_config_change)
    else:
        if args.force_config_change:
            raise ConfigError("--force-config-change only applies with --resume RUN_DIR")
        config = load_checked_config(config_path, overrides, sft=sft)
        start, _ = loops()
        run_dir = start(config)
    print_end_summary(args, run_dir, command)
    return 0


def print_end_summary(args: argparse.Namespace, run_dir, resume_command: str | None) -> None:
    """The run's numbers, checkpoints and next commands; with --json, one JSON object on stdout instead."""
    from rlvr.observe.console import format_summary, summarize_run

    if os.environ.get("RANK", "0") != "0":  # one summary from a data-parallel launch, not one per rank
        return
    print_summary(args, summarize_run(run_dir, resume_command), format_summary)


def print_summary(args: argparse.Namespace, summary, format_text) -> None:
    """An end summary on stdout: `format_text(summary)`, or with --json one JSON object."""
    from rlvr.observe.console import summary_json

    print(summary_json(summary) if getattr(args, "json", False) else format_text(summary), flush=True)


def _rl_loops():
    from rlvr.training.rl import resume, train

    return train, resume


def _sft_loops():
    from rlvr.training.sft import resume_sft, train_sft

    return train_sft, resume_sft


def cmd_train(args: argparse.Namespace) -> int:
    if args.num_processes is not None and args.num_processes != 1:
        return _launch_train(args)
    return _train_or_resume(args, _rl_loops, "rlvr train")


def _launch_train(args: argparse.Namespace) -> int:
    """`rlvr train --num-processes N ...`: the same command under `accelerate launch` with N processes."""
    from rlvr.run.preflight import load_checked_config, load_checked_run_config

    if args.num_processes < 1:
        raise ConfigError(f"--num-processes must be >= 1, got {args.num_processes}")
    config_path, overrides = _split_config_and_overrides(args.items)
    if args.resume and config_path is not None:
        raise ConfigError("with --resume the run's own config.yaml is used; pass only key=value overrides")
    config = (load_checked_run_config(args.resume, overrides) if args.resume
              else load_checked_config(config_path, overrides))
    from rlvr.parallel.distributed import Dist, check_divisible, launch
    from rlvr.run.setup import prepare_task
    from rlvr.observe.sinks import require_sink_packages

    check_divisible(Dist(world_size=args.num_processes), config.rollout.batch_size)  # fail before launching
    require_sink_packages(config)
    prepare_task(config)  # the model source, the task and its data: every process would fail on them
    if args.resume:
        from rlvr.run.resume_policy import plan_resume

        plan_resume(args.resume, config, args.force_config_change)  # a refused config change, before launching
    rlvr_args = ["train", *args.items, *(["--resume", args.resume] if args.resume else []),
                 *(["--force-config-change"] if args.force_config_change else [])]
    return launch(args.num_processes, rlvr_args)


def cmd_sft(args: argparse.Namespace) -> int:
    return _train_or_resume(args, _sft_loops, "rlvr sft", sft=True)


def cmd_expert_iter(args: argparse.Namespace) -> int:
    from rlvr.run.preflight import load_checked_config

    config_path, overrides = _split_config_and_overrides(args.items)
    config = load_checked_config(config_path, overrides)
    from rlvr.training.expert_iteration import expert_iteration

    print_end_summary(args, expert_iteration(config), None)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from rlvr.run.preflight import load_checked_config

    if args.record and not args.mechanism:
        raise ConfigError("--record DIR writes the records of the mechanism experiment: use it with --mechanism")
    config_path, overrides = _split_config_and_overrides(args.items)
    config = load_checked_config(config_path, overrides, inference=args.reward)  # --reward loads no model
    from rlvr.check import failed, format_table, run_check, run_mechanism_check

    if args.reward:
        return _reward_audit(args, config, format_table)
    if args.record:
        from rlvr.check import ACCEPT, run_mechanism_experiment

        return 0 if run_mechanism_experiment(config, args.record) == ACCEPT else 1
    if args.mechanism:
        candidates, rows = run_mechanism_check(config)
        print(format_table(candidates, ("response", "reward", "components", "status", "advantage and change")))
        print()
    else:
        rows = run_check(config)
    print(format_table(rows))
    bad = [r.name for r in rows if r.result == "FAIL"]
    print(f"rlvr check: {'FAILED: ' + ', '.join(bad) if failed(rows) else 'all checks passed'}")
    return 1 if failed(rows) else 0


def _reward_audit(args: argparse.Namespace, config, format_table) -> int:
    from rlvr.check import REWARD_HEADER, audit_rows, run_reward_audit, write_audit_json

    audit = run_reward_audit(config, prompts=args.prompts, max_hack_rate=args.max_hack_rate,
                             max_verdict_seconds=args.max_verdict_seconds)
    print(f"reward audit of task {audit.task} ({len(audit.kinds)} kinds, answer format {audit.answer_format}, "
          f"correctness component {audit.main_component!r})")
    print(format_table(audit_rows(audit), REWARD_HEADER))
    for line in audit.allowed:
        print(f"allowed: {line}")
    if args.json:
        write_audit_json(audit, args.json)
        print(f"wrote {args.json}")
    print("rlvr check --reward: "
          f"{'FAILED: ' + '; '.join(audit.failures) if audit.failures else 'no kind earns unearned reward'}")
    return 0 if audit.passed else 1


def cmd_algorithms(args: argparse.Namespace) -> int:
    from rlvr.algorithms import ALGORITHMS

    width = max(24, *(len(name) + 1 for name in ALGORITHMS))
    for name in ALGORITHMS:
        preset = ALGORITHMS.get(name)
        print(f"{name:{width}s} {preset.description}")
        print(f"{'':{width}s} " + " ".join(f"{key}={value}" for key, value in preset.settings.items()))
    return 0


def task_summary(name: str, task_class) -> tuple[str, str]:
    """(name as used in task.name, one plain-text line) from the task module's docstring, whose
    first line reads "`name`: what it is"."""
    doc = (sys.modules[task_class.__module__].__doc__ or "").strip()
    first = doc.splitlines()[0] if doc else ""
    if first.startswith("`") and "`:" in first:
        shown, first = first[1:].split("`:", 1)
        name = shown if shown.split(":")[0] == name else name
    return name, first.strip().replace("`", "")


def cmd_tasks(args: argparse.Namespace) -> int:
    from rlvr.tasks import TASKS

    for name in TASKS:
        shown, summary = task_summary(name, TASKS.get(name))
        print(f"{shown:24s} {summary}")
    print(f"{'FILE.py:NAME':24s} your own task class or factory (or package.module:NAME; see rlvr/tasks/task.py)")
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    from rlvr.config import format_config

    config_path, overrides = _split_config_and_overrides(args.items)
    print(format_config(load_config(config_path, overrides)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rlvr.report import build_report, figures_dir

    from rlvr.report.interactive import plotly_available

    output = build_report(args.run_dirs, args.output, x=args.x)
    if not plotly_available():
        print("rlvr report: plotly is not installed; the page shows static PNGs (pip install plotly for zoom and "
              "hover)", file=sys.stderr)
    print(f"report: {output} (figures in {figures_dir(output)})")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from rlvr.sweep import sweep
    from rlvr.observe.console import format_sweep_summary

    config_path, overrides = _split_config_and_overrides(args.items)
    print_summary(args, sweep(config_path, overrides, args.grid, args.output), format_sweep_summary)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    from rlvr.observe.console import format_sweep_summary
    from rlvr.report.study_tables import summary_markdown
    from rlvr.study import run_study

    result = run_study(args.study, args.output, summary_only=args.summary_only, threads=args.threads)
    if result.sweep is not None:
        print(format_sweep_summary(result.sweep), end="\n\n")
    print(summary_markdown(result.summary))
    print("\n".join(f"wrote {path}" for path in result.written), flush=True)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlvr.models.export import export_run

    result = export_run(args.run, args.out, checkpoint=args.checkpoint, merge=args.merge, base_model=args.base_model,
                        fallback=args.fallback)
    print(f"exported {result.checkpoint} ({result.mode}) to {result.folder}")
    if result.mode == "adapter":
        print(f"load it: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({result.base_model!r}), "
              f"{str(result.folder)!r})")
    else:
        print(f"load it: AutoModelForCausalLM.from_pretrained({str(result.folder)!r})")
    return 0


# `rlvr eval`'s flags are shorthands for config keys (flag attribute -> key).
EVAL_FLAG_KEYS = {
    "task": "task.name", "model": "model.name", "prompt": "task.options.prompt", "limit": "train.eval_size",
    "max_new_tokens": "train.eval_max_new_tokens", "temperature": "train.eval_temperature",
    "top_p": "train.eval_top_p", "batch_size": "train.eval_batch_size", "dtype": "model.dtype", "seed": "train.seed",
    "samples": "train.eval_samples",
}
CHAT_TEMPLATE_VALUES = {"auto": "null", "on": "true", "off": "false"}  # --chat-template -> task.use_chat_template


def _override_key(item: str) -> str:
    return item.split("=", 1)[0].strip()


def _overlaps(key: str, other: str) -> bool:
    """The same key, or one inside the other (`task.options` and `task.options.path`)."""
    return key == other or key.startswith(other + ".") or other.startswith(key + ".")


def eval_flag_overrides(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """`rlvr eval`'s flags as `key=value` overrides; a key set twice (by two flags, or a flag and an override) is
    an error, so it is never a question of which one wins."""
    from rlvr.config import yaml_value

    given = [(f"--{flag.replace('_', '-')}", f"{key}={yaml_value(getattr(args, flag))}")
             for flag, key in EVAL_FLAG_KEYS.items() if getattr(args, flag) is not None]
    if args.chat_template is not None:
        given.append(("--chat-template", f"task.use_chat_template={CHAT_TEMPLATE_VALUES[args.chat_template]}"))
    for item in args.task_option:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ConfigError(f"--task-option {item!r} is not of the form key=value (e.g. eval_path=data/test.jsonl)")
        given.append(("--task-option", f"task.options.{item.strip()}"))
    seen = [(item, _override_key(item)) for item in overrides]
    for flag, item in given:
        key = _override_key(item)
        for earlier, other in seen:
            if _overlaps(key, other):
                raise ConfigError(f"{flag} sets {key}, and so does {earlier!r}: give it once")
        seen.append((f"{flag} ({item})", key))
    return [item for _, item in given]


def cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.run.preflight import load_checked_config

    config_path, overrides = _split_config_and_overrides(args.items)
    config = load_checked_config(config_path, overrides + eval_flag_overrides(args, overrides), inference=True)
    from rlvr.observe.console import format_eval_summary, summarize_eval
    from rlvr.training.evaluation import evaluate

    result = evaluate(config, output_dir=args.output, log=lambda line: print(line, file=sys.stderr, flush=True))
    print_summary(args, summarize_eval(result.folder), format_eval_summary)
    return 0


FORCE_HELP = ("with --resume: accept overrides that change more than the run's length, cadences and logging "
              "(refused otherwise; see RESUME_MUTABLE_KEYS); the change is recorded in RUN_DIR/resumes.jsonl")


JSON_HELP = "print the end summary as one JSON object on stdout (the progress lines stay on stderr)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr", description="RL with verifiable rewards for causal LMs.",
        epilog="rlvr COMMAND --help tells more. train, sft, expert-iter, check, sweep, eval and config show take "
               "[CONFIG.yaml] [key=value ...]; rlvr config show lists every key. From Python: from rlvr import "
               "Config, train, evaluate, register_task (docs/guides/python-api.md).",
    )
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train", help="train a policy (no arguments: GRPO on format_copy with the embedded SmolLM2)",
        description="rlvr train [CONFIG.yaml] [key=value ...]   "
                    "e.g. rlvr train configs/format_copy_grpo.yaml optim.lr=1e-4",
    )
    train.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last intact checkpoint")
    train.add_argument("--force-config-change", action="store_true", help=FORCE_HELP)
    train.add_argument("--num-processes", type=int, default=None, metavar="N",
                       help="data-parallel over N local processes (runs `accelerate launch`; one per GPU, "
                            "or CPU processes with gloo); rollout.batch_size must be a multiple of N")
    train.add_argument("--json", action="store_true", help=JSON_HELP)
    train.set_defaults(func=cmd_train)
    sft = sub.add_parser(
        "sft", help="supervised fine-tuning on a jsonl of prompt / response pairs",
        description="rlvr sft [CONFIG.yaml] [key=value ...]   e.g. rlvr sft configs/format_copy_sft.yaml "
                    "sft.data_path=data/pairs.jsonl sft.filter_correct=true",
    )
    sft.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    sft.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last intact checkpoint")
    sft.add_argument("--force-config-change", action="store_true", help=FORCE_HELP)
    sft.add_argument("--json", action="store_true", help=JSON_HELP)
    sft.set_defaults(func=cmd_sft)
    expert = sub.add_parser(
        "expert-iter", help="expert iteration: sample, keep verified answers, fine-tune on them, repeat",
        description="rlvr expert-iter [CONFIG.yaml] [key=value ...]   e.g. rlvr expert-iter "
                    "configs/format_copy_expert_iter.yaml expert_iteration.n_ei_steps=5",
    )
    expert.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    expert.add_argument("--json", action="store_true", help=JSON_HELP)
    expert.set_defaults(func=cmd_expert_iter)
    check = sub.add_parser(
        "check", help="preflight: one rollout batch and one update, verified quantity by quantity",
        description="rlvr check [CONFIG.yaml] [key=value ...]   prints a pass/fail table and exits 1 on any "
                    "failure; --mechanism runs fixed candidate responses through scoring, advantages and "
                    "4 updates of a fresh LoRA adapter instead of sampling; --reward audits the task's verifier "
                    "on degenerate completions without a model",
    )
    check.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    check.add_argument("--mechanism", action="store_true",
                       help="fixed candidates, no sampling: does the update raise good and lower bad responses?")
    check.add_argument("--record", metavar="DIR", default=None,
                       help="--mechanism: run two conditions, minimal_pair (correct and wrong per prompt) and "
                            "expanded_group (all four), write DIR/<condition>.json with the decision; exit 1 unless "
                            "both are accepted")
    check.add_argument("--reward", action="store_true",
                       help="reward audit, no model: score degenerate completions (empty, echoed prompt, empty tags, "
                            "guesses, tag spam, hostile payloads; prompt injections for a model judge) with the task's "
                            "verifier; exit 1 when one earns reward")
    check.add_argument("--prompts", type=int, default=32,
                       help="--reward: prompts to build completions from (default 32)")
    check.add_argument("--max-hack-rate", type=float, default=0.05,
                       help="--reward: fail when a kind earns correctness, or format without correctness, on more "
                            "than this share of prompts (default 0.05)")
    check.add_argument("--max-verdict-seconds", type=float, default=15.0,
                       help="--reward: fail when one verdict takes longer (default 15)")
    check.add_argument("--json", metavar="PATH", default=None, help="--reward: also write the per-kind numbers here")
    check.set_defaults(func=cmd_check)
    report = sub.add_parser(
        "report", help="one self-contained HTML report (figures, config differences, samples) for runs",
        description="rlvr report RUN_DIR [RUN_DIR ...] [-o report.html]   several runs are overlaid",
    )
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (with metrics.jsonl)")
    report.add_argument("-o", "--output", default=None,
                        help="the HTML file (default: RUN_DIR/report.html for one run, ./report.html for several)")
    report.add_argument("--x", choices=("iteration", "seconds"), default="iteration",
                        help="x axis shown first: iterations or wall-clock seconds since the run started (the page "
                             "switches between them; the PNGs use this one)")
    report.set_defaults(func=cmd_report)
    sweep = sub.add_parser(
        "sweep", help="train every point of a grid of overrides one after another, then write one report",
        description="rlvr sweep [CONFIG.yaml | SWEEP.yaml] [key=value ...] --grid key=v1,v2 [--grid ...]   e.g. "
                    "rlvr sweep configs/format_copy_grpo.yaml --grid algorithm.name=grpo,rloo train.iterations=6. "
                    "Rerunning skips finished runs and resumes unfinished ones from their checkpoint.",
    )
    sweep.add_argument("items", nargs="*", help="optional config or sweep file (configs/sweeps/), then key=value "
                                                "overrides for every run")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                       help="a grid axis, repeatable (runs = cartesian product); KEY_A+KEY_B=V1,V2 sets both keys")
    sweep.add_argument("--output", default=None, metavar="DIR",
                       help="folder for the runs and report.html (default: <train.output_dir>/sweep-<config name>)")
    sweep.add_argument("--json", action="store_true", help="print the end table as one JSON object on stdout (the "
                                                           "progress lines stay on stderr)")
    sweep.set_defaults(func=cmd_sweep)
    study = sub.add_parser(
        "study", help="run a study (a sweep file with a study: section), then write its summary tables and figures",
        description="rlvr study NAME_OR_FILE [--summary-only] [--output DIR] [--threads N]   e.g. rlvr study NAME runs "
                    "configs/studies/NAME.yaml as rlvr sweep does (finished runs skipped, unfinished ones resumed), "
                    "then writes DIR/summary.md, DIR/summary.json and the study's figures.",
    )
    study.add_argument("study", metavar="NAME_OR_FILE", help="a study name (configs/studies/NAME.yaml) or a study file")
    study.add_argument("--summary-only", action="store_true",
                       help="train nothing: summarise the runs that exist (the missing ones are named)")
    study.add_argument("--output", default=None, metavar="DIR",
                       help="the study's run folder (default: its study.output, e.g. runs/studies/NAME)")
    study.add_argument("--threads", type=int, default=None, metavar="N",
                       help="[model.num_threads] CPU threads of every run (default: the config's); 1 when two "
                            "studies share a 2-core machine, where two threads each run several times slower")
    study.set_defaults(func=cmd_study)
    config = sub.add_parser("config", help="show the resolved config", description=CONFIG_SHOW_HINT)
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser(
        "show", help="the resolved config: each key = value, its type, default and one line of help",
        description="rlvr config show [CONFIG.yaml] [key=value ...]   "
                    "e.g. rlvr config show configs/format_copy_dapo.yaml optim.lr=3e-4 "
                    "(a * marks a value that differs from its default)",
    )
    show.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    show.set_defaults(func=cmd_config_show)
    sub.add_parser("algorithms", help="list the algorithm presets").set_defaults(func=cmd_algorithms)
    sub.add_parser("tasks", help="list the registered tasks").set_defaults(func=cmd_tasks)
    ev = sub.add_parser(
        "eval", help="judge a model or a run on a task's held-out examples, as the in-training eval does",
        description="rlvr eval [CONFIG.yaml] [key=value ...] [--flags]   e.g. rlvr eval --model runs/RUN "
                    "--task gsm8k --task-option eval_path=test.jsonl --limit 200 --max-new-tokens 256. "
                    "It evaluates what the config describes, on the config's model (or a run folder), with the "
                    "in-training eval's settings: greedy, train.eval_size examples, train.eval_max_new_tokens "
                    "(default rollout.max_new_tokens), the rollout's stop strings. Each flag is a shorthand for "
                    "the key in brackets; setting a key both by a flag and by key=value is an error.",
    )
    ev.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    ev.add_argument("--task", metavar="NAME",
                    help="[task.name] a registered task (gsm8k, math, dataset, reasoning_gym:NAME, ...) or your own "
                         "as path/to/file.py:Name or package.module:Name")
    ev.add_argument("--model", metavar="SPEC",
                    help="[model.name] embedded name, model folder, .gguf, cached hub id, or a run folder (its latest "
                         "checkpoint) or checkpoint folder")
    ev.add_argument("--prompt", choices=("r1_zero", "question_only"),
                    help="[task.options.prompt] prompt template (default: the task's own, r1_zero for "
                         "gsm8k/math/reasoning_gym)")
    ev.add_argument("--limit", type=int, metavar="N",
                    help="[train.eval_size] judge the first N held-out examples (32 unless the config sets it)")
    ev.add_argument("--max-new-tokens", type=int, metavar="N",
                    help="[train.eval_max_new_tokens] generation budget (default: rollout.max_new_tokens, 24 unless "
                         "the config sets it)")
    ev.add_argument("--temperature", type=float, metavar="T",
                    help="[train.eval_temperature] 0 (the default) decodes greedily, as the in-training eval does; "
                         "above 0 samples")
    ev.add_argument("--top-p", type=float, metavar="P",
                    help="[train.eval_top_p] nucleus threshold when sampling (default 1)")
    ev.add_argument("--samples", type=int, metavar="N",
                    help="[train.eval_samples] completions per prompt (default 1); N > 1 needs --temperature > 0 and "
                         "adds pass@k, mean@N (then the accuracy) and maj@N, at N times the decoding")
    ev.add_argument("--batch-size", type=int, metavar="N",
                    help="[train.eval_batch_size] prompts generated together (default 32)")
    ev.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                    help="[task.options.KEY] a task option, repeatable (values parsed as YAML), e.g. "
                         "eval_path=test.jsonl")
    ev.add_argument("--chat-template", choices=tuple(CHAT_TEMPLATE_VALUES),
                    help="[task.use_chat_template] auto (null, the default): raw text for the r1_zero prompt, the "
                         "chat template otherwise")
    ev.add_argument("--dtype", metavar="DTYPE", help="[model.dtype] float32 (the default), bfloat16, float16, float64")
    ev.add_argument("--seed", type=int, metavar="N", help="[train.seed] the seed (default 0)")
    ev.add_argument("--output", default=None, metavar="DIR",
                    help="folder for config.yaml, generations.jsonl and summary.json (default: a new "
                         "<train.output_dir>/eval-<task>-<time>-<4 hex digits>)")
    ev.add_argument("--json", action="store_true", help="print the end summary as one JSON object on stdout (the "
                                                        "progress lines and the examples of each category stay on "
                                                        "stderr)")
    ev.set_defaults(func=cmd_eval)
    export = sub.add_parser(
        "export", help="write a run's checkpoint as a Hugging Face folder (a merged model or a PEFT adapter)",
        description="rlvr export RUN_DIR --out DIR [--checkpoint iter_N] [--merge]   LoRA runs give a PEFT adapter "
                    "folder unless --merge folds the adapter into the weights; full fine-tuning gives the model. "
                    "DIR has config.json, generation_config.json, safetensors and the tokenizer with its chat "
                    "template.",
    )
    export.add_argument("run", metavar="RUN_DIR", help="a run folder, or one of its checkpoint folders")
    export.add_argument("--out", required=True, metavar="DIR", help="the new folder (must not exist, or be empty)")
    export.add_argument("--checkpoint", default=None, metavar="iter_N", help="which checkpoint (default: the latest)")
    export.add_argument("--merge", action="store_true", help="merge a LoRA adapter into the weights")
    export.add_argument("--fallback", action="store_true",
                        help="if the checkpoint fails verification, export the newest intact one before it "
                             "(default: refuse and name it)")
    export.add_argument("--base-model", default=None, metavar="SPEC",
                        help="load the base model from here instead of the run's model.name (if it moved)")
    export.set_defaults(func=cmd_export)
    for name in ("train", "sft", "expert-iter", "check", "sweep", "eval"):  # the commands that take key=value overrides
        sub.choices[name].epilog = f"{CONFIG_SHOW_HINT}. {START_ERRORS_HINT}"
    return parser


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    quiet_library_deprecations()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `rlvr sweep CONFIG --grid k=a,b more=overrides`: overrides may follow the options
        if not hasattr(args, "items") or any(item.startswith("-") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items += extra
    signal.signal(signal.SIGTERM, _interrupt)  # a stopped run cleans up as after Ctrl-C
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: stopped", file=sys.stderr)
        return 130
    except (ConfigError, FileNotFoundError, FileExistsError, KeyError, ValueError, StorageError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"rlvr {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
