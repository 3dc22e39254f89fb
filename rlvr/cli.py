"""The `rlvr` command line: parse arguments, build the config, call one function."""

from __future__ import annotations

import argparse
import sys

from rlvr.config import ConfigError, load_config


def _split_config_and_overrides(items: list[str]) -> tuple[str | None, list[str]]:
    if items and "=" not in items[0]:
        return items[0], items[1:]
    return None, items


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.train.rl import resume, train

    config_path, overrides = _split_config_and_overrides(args.items)
    if args.resume:
        if config_path is not None:
            raise ConfigError("with --resume the run's own config.yaml is used; pass only key=value overrides")
        run_dir = resume(args.resume, overrides)
    else:
        run_dir = train(load_config(config_path, overrides))
    print(f"run folder: {run_dir}")
    return 0


def cmd_algorithms(args: argparse.Namespace) -> int:
    from rlvr.algorithms import ALGORITHMS

    for name in ALGORITHMS:
        preset = ALGORITHMS.get(name)
        print(f"{name:24s} {preset.description}")
        print(f"{'':24s} advantages={preset.advantage_estimator} loss={preset.policy_loss} "
              f"aggregation={preset.loss_aggregation} epochs={preset.ppo_epochs} "
              f"clip={preset.clip_low}/{preset.clip_high} kl_coef={preset.kl_coef}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from rlvr.tasks import TASKS

    for name in TASKS:
        doc = (TASKS.get(name).__module__ and sys.modules[TASKS.get(name).__module__].__doc__ or "").strip()
        print(f"{name:24s} {doc.splitlines()[0] if doc else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="RL with verifiable rewards for causal LMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train", help="train a policy (no arguments: GRPO on format_copy with the embedded SmolLM2)",
        description="rlvr train [CONFIG.yaml] [key=value ...]   e.g. rlvr train configs/format_copy_grpo.yaml optim.lr=1e-4",
    )
    train.add_argument("items", nargs="*", help="optional YAML config, then dotted key=value overrides")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    train.set_defaults(func=cmd_train)
    sub.add_parser("algorithms", help="list the algorithm presets").set_defaults(func=cmd_algorithms)
    sub.add_parser("tasks", help="list the registered tasks").set_defaults(func=cmd_tasks)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError, FileExistsError, KeyError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"rlvr {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
