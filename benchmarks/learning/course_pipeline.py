"""The CS336-style pipeline on a reasoning-gym task under the R1-Zero prompt, in one command.

Stages, each a fresh process started from the previous stage's weights (`model.init_from`):

  0. zero-shot      `rlvr eval` on the base model
  1. format SFT     `rlvr sft` on examples built from the task's own generator (below)
  2. expert iter.   `rlvr expert-iter model.init_from=<SFT run>`
  3. GRPO           `rlvr train model.init_from=<expert-iteration run>`

After each stage `rlvr eval CONFIG model.name=<run>` scores the same held-out problems greedily (the
task's eval split, seed `train.seed`; a chained run reads back with its whole chain), and one
table gives each stage's accuracy with its Wilson 95% interval and its outcome counts.

The SFT examples. For every training question drawn from the task (`task.examples("train")`,
which leaves the eval split out; checked again here, question by question) the response is
written by a program from the entry's own metadata, in the form the R1-Zero prompt asks for
(the prompt already ends in `<think>`):

    basic_arithmetic   " -5 * 9 = -45 </think> <answer>-45</answer>"
    spell_backward     " The letters of both are b o t h; backward they are h t o b. </think> <answer>htob</answer>"

followed by the tokenizer's EOS text. Each response is scored by the task before it is written
and must be correct and formatted. So SFT teaches the format and a short working, nothing else.

    python benchmarks/learning/course_pipeline.py                         # configs/course_basic_arithmetic.yaml
    python benchmarks/learning/course_pipeline.py --config my.yaml --sft-examples 512 --override train.iterations=50

Runs go to `runs/course-<stage>` (deleted first); the table to `benchmarks/results/course_pipeline.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.learning.bench_runs import train_in_fresh_process  # noqa: E402

STAGES = ("zero-shot", "sft", "expert-iteration", "grpo")


def arithmetic_working(entry: dict) -> str:
    return f" {entry['metadata']['expression']} = {entry['answer']} </think> <answer>{entry['answer']}</answer>"


def spelling_working(entry: dict) -> str:
    word = entry["metadata"]["word"]
    return (f" The letters of {word} are {' '.join(word)}; backward they are {' '.join(reversed(word))}. "
            f"</think> <answer>{entry['answer']}</answer>")


# dataset name -> the response written for one reasoning-gym entry
WORKING: dict[str, Callable[[dict], str]] = {"basic_arithmetic": arithmetic_working,
                                              "spell_backward": spelling_working}


def sft_rows(config, count: int) -> list[dict]:
    """`count` prompt / response / ground-truth rows from the task's training split, each checked."""
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.rollout import render_prompts, score_completions
    from rlvr.tasks import build_task

    dataset = config.task.name.partition(":")[2]
    if dataset not in WORKING:
        raise SystemExit(f"no SFT working is written for {config.task.name!r}; valid choices: "
                         f"{', '.join('reasoning_gym:' + name for name in WORKING)}")
    task = build_task(config.task.name, reward_weights=config.task.reward_weights, options=config.task.options,
                      use_chat_template=config.task.use_chat_template, seed=config.train.seed)
    held_out = {example.metadata["entry"]["question"] for example in task.iter_eval()}
    examples = task.examples("train", count, config.train.seed + 1)
    leaked = [e.metadata["entry"]["question"] for e in examples if e.metadata["entry"]["question"] in held_out]
    assert not leaked, f"eval questions in the SFT data: {leaked[:3]}"
    responses = [WORKING[dataset](example.metadata["entry"]) for example in examples]
    for verdict, response in zip(score_completions(task, responses, examples), responses):
        assert verdict.correct and verdict.components["format"] == 1.0, (response, verdict)
    path, gguf = resolve_model_path(config.model.name)
    tokenizer = load_tokenizer(path, gguf_file=gguf)
    prompts = render_prompts(tokenizer, examples, config.task.use_chat_template)
    return [{"prompt": prompt, "response": response + tokenizer.eos_token, "ground_truth": example.ground_truth}
            for prompt, response, example in zip(prompts, responses, examples)]


def evaluate(config_path: str, overrides: list[str], run_dir: Path | None, stage: str, runs_dir: Path,
             limit: int) -> dict:
    """`rlvr eval` with the pipeline's config (greedy, its budget and stop strings, seed `train.seed`) on the
    base model or on a stage's run folder; its summary.json, with the stage's name."""
    out = runs_dir / f"course-eval-{stage}"
    shutil.rmtree(out, ignore_errors=True)
    if run_dir is not None:  # the run folder names its own base model
        overrides = [o for o in overrides if not o.startswith("model.name=")] + [f"model.name={run_dir}"]
    command = [sys.executable, "-m", "rlvr", "eval", config_path, *overrides, "--limit", str(limit),
               "--output", str(out)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)
    summary = json.loads((out / "summary.json").read_text())
    return {"stage": stage, "model": str(run_dir) if run_dir else "base", **summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/course_basic_arithmetic.yaml")
    parser.add_argument("--override", action="append", default=[], help="key=value for every stage")
    parser.add_argument("--sft-examples", type=int, default=256, help="generated SFT examples")
    parser.add_argument("--eval-limit", type=int, default=200, help="held-out problems evaluated after each stage")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--json", default="benchmarks/results/course_pipeline.json")
    args = parser.parse_args()

    from rlvr.config import load_config
    from rlvr.utils import atomic_write_text

    config = load_config(args.config, args.override)
    runs_dir = (REPO / args.runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    common = [args.config, f"train.output_dir={runs_dir}", "train.progress=false", *args.override]
    rows, started = [], time.time()

    def stage_run(stage: str, command: str, extra: list[str]) -> Path:
        run_dir = runs_dir / f"course-{stage}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run = train_in_fresh_process([sys.executable, "-m", "rlvr", command, *common, f"train.run_name={run_dir.name}",
                                      *extra], run_dir, label=stage)
        evaluated = evaluate(args.config, args.override, run_dir, stage, runs_dir, args.eval_limit)
        rows.append({**evaluated, "train_seconds": run["total_s"]})
        return run_dir

    rows.append(evaluate(args.config, args.override, None, "zero-shot", runs_dir, args.eval_limit))
    data = runs_dir / "course-sft-data.jsonl"
    pairs = sft_rows(config, args.sft_examples)
    atomic_write_text(data, "".join(json.dumps(row) + "\n" for row in pairs))
    print(f"wrote {len(pairs)} SFT examples to {data}; the first: {pairs[0]['response']!r}")
    sft = stage_run("sft", "sft", [f"sft.data_path={data}"])
    expert = stage_run("expert-iteration", "expert-iter", [f"model.init_from={sft}"])
    stage_run("grpo", "train", [f"model.init_from={expert}"])

    options = yaml.safe_dump(dict(config.task.options), default_flow_style=True, width=1000).strip()
    print(f"\n{config.task.name} ({options}), greedy, {rows[0]['num_examples']} held-out problems, "
          f"{time.time() - started:.0f} s in all\n")
    print("| stage | accuracy (Wilson 95% CI) | correct | formatted, wrong | unformatted | other | training s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        counts = row["counts"]
        other = sum(counts[k] for k in ("unjudgeable", "timeout", "error"))
        low, high = row["accuracy_ci95"]
        seconds = f"{row['train_seconds']:.0f}" if "train_seconds" in row else "-"
        print(f"| {row['stage']} | {row['accuracy']:.3f} ({low:.3f} to {high:.3f}) | {counts['correct']} | "
              f"{counts['formatted_wrong']} | {counts['unformatted']} | {other} | {seconds} |")
    out = REPO / args.json
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps({"argv": sys.argv[1:], "stages": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
