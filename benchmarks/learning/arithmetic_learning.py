"""Does RL teach the embedded SmolLM2 arithmetic, and how does rlvr's curve compare with TRL's?

For each seed, `rlvr train CONFIG train.seed=S` runs as a fresh process (timed from the command's
start, model loading included); its greedy evals on the held-out problems (`train.eval_size`, 200
for `configs/integer_add_2digit.yaml`, every `train.eval_every` iterations) are printed as they
land, with Wilson 95% intervals, and summarised as the best and the final eval. With `--trl`,
TRL's GRPOTrainer runs the same budget in its own fresh process (`trl_grpo.py`): same model,
LoRA, prompts per step, completions, token budget, learning rate, clip, epochs and KL; the same
training prompts in the same order; the reward is rlvr's verdict of each completion; and its
evals go through rlvr's own evaluation (`evaluate_in_training`, greedy, same held-out problems,
same stop strings). Differences left: TRL divides advantages by the sample std (rlvr: population,
unless `algorithm.std=sample`) and trains the EOS that pads a row stopped by a stop string.

    python benchmarks/learning/arithmetic_learning.py --config configs/integer_add_2digit.yaml --seeds 0 1 2 --trl
    python benchmarks/learning/arithmetic_learning.py --config configs/integer_add_2digit.yaml --replot

`--trl-only` runs only TRL's side, and `--also JSON` draws and tabulates runs saved earlier beside
the new ones (not rewriting that file), so TRL can be added to rlvr results already measured:

    python benchmarks/learning/arithmetic_learning.py --config configs/integer_mul_2to12.yaml --seeds 0 1 2 --trl-only \
      --also benchmarks/results/arithmetic_mul.json --json benchmarks/results/arithmetic_mul_trl.json \
      --out docs/figures/arithmetic_mul_vs_trl.png

Runs go to `runs/bench-arith-<config>-<side>-s<seed>` (deleted first); the summary to
`benchmarks/results/arithmetic_learning.json` and the curves (accuracy with intervals, and rollout
reward, against seconds) to `docs/arithmetic_learning.png`. Numbers are for the machine it runs on.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.learning.bench_runs import (accuracy_ci, best_and_final, save_figure,  # noqa: E402
                                            train_in_fresh_process)
from rlvr.observe.metric_names import (CORRECT_FRAC, DISTINCT_COMPLETIONS_FRAC, ELAPSED_S, ENTROPY,  # noqa: E402
                                       HEALTH_WARNINGS, ITERATION, REWARD_MEAN, REWARD_PREFIX, TIME_ITERATION,
                                       UNIX_TIME, reward_component)

SIDES = ("rlvr", "trl")
# rlvr aggregation -> TRL loss_type, and rlvr estimator -> TRL scale_rewards (the GRPO family only).
TRL_LOSS = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo"}
TRL_SCALE = {"grpo": "group", "mean_centered": "none"}


def run_name(config: str, side: str, seed: int) -> str:
    return f"bench-arith-{Path(config).stem}-{side}-s{seed}"


# ----------------------------------------------------------------------------------------- TRL side
def run_trl_side(config_path: str, overrides: list[str], seed: int, run_dir: Path) -> None:
    """TRL's GRPOTrainer on the config's task and budget, writing metrics.jsonl and eval.jsonl as rlvr does."""
    import torch
    from transformers import TrainerCallback

    from rlvr.config import load_config
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.rollout import ROLLOUT_BACKENDS, render_prompts
    from rlvr.training.collect import round_seed
    from rlvr.training.evaluation import evaluate_in_training, held_out_examples
    from rlvr.run.setup import prepare_task
    from rlvr.utils import append_jsonl
    from benchmarks.comparisons.trl_grpo import TrlSettings, build_trainer, task_reward

    started = time.time()
    config = load_config(config_path, [*overrides, f"train.seed={seed}"])
    algo, rollout, train = config.algorithm, config.rollout, config.train
    if algo.loss_aggregation not in TRL_LOSS or algo.advantage_estimator not in TRL_SCALE or algo.dynamic_sampling:
        raise SystemExit(f"--trl runs the GRPO family (grpo, dr_grpo, dapo without dynamic sampling); "
                         f"{algo.name!r} uses {algo.advantage_estimator} / {algo.loss_aggregation}")
    if config.model.init_from:
        raise SystemExit("--trl does not start from model.init_from")
    task = prepare_task(config)  # as rlvr train builds it: every check, threads, seeds
    run_dir.mkdir(parents=True, exist_ok=True)
    model_path, gguf = resolve_model_path(config.model.name)
    tokenizer = load_tokenizer(model_path, gguf_file=gguf)
    # rlvr's prompts, iteration by iteration, rendered by rlvr: TRL sees the same text in the same order.
    examples = [e for it in range(train.iterations) for e in task.examples("train", rollout.batch_size,
                                                                          round_seed(train.seed, it))]
    rows = [{"prompt": text, "example_index": i}
            for i, text in enumerate(render_prompts(tokenizer, examples, config.task.use_chat_template))]
    eval_examples = held_out_examples(task, config)
    metrics_path, eval_path = run_dir / "metrics.jsonl", run_dir / "eval.jsonl"
    rounds = {"done": 0}

    def log_rewards(verdicts) -> None:
        rounds["done"] += 1
        totals = [v.total for v in verdicts if math.isfinite(v.total)]
        record = {ITERATION: rounds["done"], REWARD_MEAN: statistics.mean(totals) if totals else math.nan,
                  CORRECT_FRAC: sum(v.correct for v in verdicts) / len(verdicts)}
        for name in verdicts[0].components:
            values = [v.components[name] for v in verdicts if math.isfinite(v.components[name])]
            record[reward_component(name)] = statistics.mean(values) if values else math.nan
        append_jsonl(metrics_path, [{**record, ELAPSED_S: time.time() - started, UNIX_TIME: time.time()}])

    def evaluate(model, iteration: int) -> None:
        was_training = model.training
        model.eval()
        backend = ROLLOUT_BACKENDS.get(rollout.backend)(model, tokenizer, merge_lora=rollout.merge_lora)
        with torch.no_grad():
            metrics, _ = evaluate_in_training(backend, task, eval_examples, config)
        model.train(was_training)
        append_jsonl(eval_path, [{ITERATION: iteration, **metrics, ELAPSED_S: time.time() - started,
                                  UNIX_TIME: time.time()}])

    epochs = algo.ppo_epochs

    class Evaluate(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if train.eval_size:
                evaluate(kwargs["model"], 0)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % epochs or not train.eval_size:
                return
            iteration = state.global_step // epochs
            if iteration == train.iterations or (train.eval_every and iteration % train.eval_every == 0):
                evaluate(kwargs["model"], iteration)

    settings = TrlSettings(
        model_path=model_path, prompts_per_step=rollout.batch_size, group_size=rollout.group_size,
        max_new_tokens=rollout.max_new_tokens, lr=config.optim.lr, steps=train.iterations * epochs,
        lora_rank=config.model.lora_rank, lora_alpha=config.model.lora_alpha,
        lora_targets=tuple(config.model.lora_target_modules), temperature=rollout.temperature, top_p=rollout.top_p,
        top_k=rollout.top_k, clip_low=algo.clip_low, clip_high=algo.clip_high, beta=algo.kl_coef,
        num_iterations=epochs, loss_type=TRL_LOSS[algo.loss_aggregation],
        scale_rewards=TRL_SCALE[algo.advantage_estimator], max_grad_norm=config.optim.max_grad_norm,
        weight_decay=config.optim.weight_decay, lr_scheduler=config.optim.schedule,
        warmup_steps=config.optim.warmup_steps,
        stop_strings=tuple(rollout.stop_strings) or tuple(task.stop_strings), seed=train.seed)
    trainer, _ = build_trainer(settings, rows, [task_reward(task, examples, on_scored=log_rewards)], [Evaluate()],
                               dtype=config.model.dtype)
    trainer.train()


# ------------------------------------------------------------------------------------------ parent
def run_side(side: str, config: str, overrides: list[str], seed: int, runs_dir: Path) -> dict:
    name = run_name(config, side, seed)
    run_dir = runs_dir / name
    shutil.rmtree(run_dir, ignore_errors=True)
    if side == "rlvr":
        command = [sys.executable, "-m", "rlvr", "train", config, f"train.seed={seed}", f"train.output_dir={runs_dir}",
                   f"train.run_name={name}", "train.progress=false", *overrides]
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "--side", "trl", "--config", config, "--seed",
                   str(seed), "--run-dir", str(run_dir), *[f"--override={o}" for o in overrides]]
    run = train_in_fresh_process(command, run_dir, label=f"{side} seed {seed}")
    started = run["started"]
    evals = [{ITERATION: e[ITERATION], "seconds": e[UNIX_TIME] - started, **accuracy_ci(e)} for e in run["evals"]]
    kept = (CORRECT_FRAC, ENTROPY, DISTINCT_COMPLETIONS_FRAC, HEALTH_WARNINGS, TIME_ITERATION)
    metrics = [{ITERATION: m[ITERATION], "seconds": m[UNIX_TIME] - started,
                **{k: v for k, v in m.items() if k.startswith(REWARD_PREFIX) or k in kept}} for m in run["metrics"]]
    return {"side": side, "seed": seed, "config": config, "overrides": overrides, "total_s": run["total_s"],
            "metrics": metrics, "evals": evals, **best_and_final(run["evals"], started)}


def print_table(results: list[dict]) -> None:
    def cell(point):
        return "-" if point is None else (f"{point['accuracy']:.3f} ({point['low']:.3f}-{point['high']:.3f}) "
                                          f"it {point['iteration']}, {point['seconds']:.0f} s")
    print(f"\n{'side':5s} {'seed':>4s}  {'step-0 eval':24s} {'best eval (95% CI)':42s} {'final eval (95% CI)':42s} "
          f"{'total s':>8s}")
    for r in results:
        first = r["evals"][0] if r["evals"] else None
        first_text = "-" if first is None else f"{first['accuracy']:.3f} ({first['low']:.3f}-{first['high']:.3f})"
        print(f"{r['side']:5s} {r['seed']:4d}  {first_text:24s} {cell(r['best']):42s} {cell(r['final']):42s} "
              f"{r['total_s']:8.0f}")


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_eval, ax_reward) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"rlvr": "#1f77b4", "trl": "#d62728"}
    styles = ["-", "--", ":", "-."]
    for r in results:
        label, color, style = f"{r['side']} seed {r['seed']}", colors[r["side"]], styles[r["seed"] % len(styles)]
        xs = [e["seconds"] for e in r["evals"]]
        ax_eval.plot(xs, [e["accuracy"] for e in r["evals"]], style, marker="o", color=color, label=label)
        ax_eval.fill_between(xs, [e["low"] for e in r["evals"]], [e["high"] for e in r["evals"]], color=color,
                             alpha=0.08)
        ax_reward.plot([m["seconds"] for m in r["metrics"]], [m.get(REWARD_MEAN) for m in r["metrics"]], style,
                       color=color, label=label)
    n = next((e["n"] for r in results for e in r["evals"]), "?")
    ax_eval.set(xlabel="seconds since the command started", ylabel=f"greedy accuracy, {n} held-out (Wilson 95%)",
                title="held-out accuracy", ylim=(-0.02, 1.02))
    ax_reward.set(xlabel="seconds since the command started", ylabel="mean rollout reward", title="rollout reward")
    for ax in (ax_eval, ax_reward):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(Path(results[0]["config"]).name if results else "")
    save_figure(fig, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/integer_add_2digit.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--trl", action="store_true", help="also run TRL's GRPOTrainer on the same budget")
    parser.add_argument("--trl-only", action="store_true", help="run only TRL's side")
    parser.add_argument("--also", action="append", default=[],
                        help="a results JSON saved earlier: its runs are drawn and tabulated beside these")
    parser.add_argument("--override", action="append", default=[], help="key=value passed to every run (both sides)")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--json", default="benchmarks/results/arithmetic_learning.json")
    parser.add_argument("--out", default="docs/arithmetic_learning.png")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot and table from --json")
    parser.add_argument("--side", choices=["trl"], help="(internal) run the TRL side in this process")
    parser.add_argument("--seed", type=int, default=0, help="(internal) the TRL side's seed")
    parser.add_argument("--run-dir", help="(internal) where the TRL side writes")
    args = parser.parse_args()
    if args.side == "trl":
        run_trl_side(args.config, args.override, args.seed, Path(args.run_dir))
        return 0
    out_json = REPO / args.json
    if args.replot:
        results = json.loads(out_json.read_text())["runs"]
    else:
        runs_dir = (REPO / args.runs_dir).resolve()
        sides = ("trl",) if args.trl_only else SIDES if args.trl else ("rlvr",)
        results = [run_side(side, args.config, args.override, seed, runs_dir) for seed in args.seeds for side in sides]
        from rlvr.utils import atomic_write_text

        out_json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_json, json.dumps({"argv": sys.argv[1:], "runs": results}, indent=1) + "\n")
        print(f"wrote {out_json}")
    earlier = [run for path in args.also for run in json.loads((REPO / path).read_text())["runs"]]
    print_table(earlier + results)
    plot(earlier + results, REPO / args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
