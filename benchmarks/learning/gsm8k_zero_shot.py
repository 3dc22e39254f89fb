"""Zero-shot GSM8K accuracy of the embedded SmolLM2-135M-Instruct under both prompts.

Evaluates the first `--limit` problems of a local GSM8K test jsonl (default
`../shared/data/gsm8k/test.jsonl` next to the repository) with `r1_zero` (raw text, stop at
`</answer>`) and `question_only` (chat template, answer taken from the free-form response),
CS336 sampling defaults (temperature 1.0, top-p 1.0), and prints one markdown table: accuracy
with its Wilson 95% interval and the count of each outcome. Generations and summaries go to
`runs/bench-gsm8k-<prompt>/`.

    python benchmarks/learning/gsm8k_zero_shot.py                          # 200 problems, 1024 new tokens
    python benchmarks/learning/gsm8k_zero_shot.py --limit 50 --max-new-tokens 256

A 135M model is far too small for GSM8K; the numbers say where the floor is and which outcome
dominates (for r1_zero: unformatted), not how good the model is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="GSM8K test jsonl (question, answer)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompts", nargs="*", default=["r1_zero", "question_only"])
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--json", default="benchmarks/results/gsm8k_zero_shot.json")
    args = parser.parse_args()

    from rlvr.config import load_config
    from rlvr.training.evaluation import CATEGORIES, evaluate

    rows = []
    for prompt in args.prompts:
        started = time.perf_counter()
        config = load_config(None, [
            "task.name=gsm8k", f"task.options.eval_path={args.data}", f"task.options.prompt={prompt}",
            f"model.name={args.model}", f"train.eval_size={args.limit}",
            f"train.eval_max_new_tokens={args.max_new_tokens}", f"train.eval_temperature={args.temperature}",
            f"train.eval_top_p={args.top_p}", f"train.eval_batch_size={args.batch_size}",
        ])
        result = evaluate(config, output_dir=Path(args.runs_dir) / f"bench-gsm8k-{prompt}")
        rows.append({"prompt": prompt, "wall_seconds": time.perf_counter() - started, **result.summary})

    print(f"\nGSM8K test, first {args.limit} problems, {args.model}, temperature {args.temperature}, "
          f"top-p {args.top_p}, max {args.max_new_tokens} new tokens\n")
    print("| prompt | accuracy (95% CI) | " + " | ".join(CATEGORIES) + " | truncated | tokens/completion | minutes |")
    print("|---|---|" + "---|" * (len(CATEGORIES) + 3))
    for row in rows:
        low, high = row["accuracy_ci95"]
        counts = " | ".join(str(row["counts"][c]) for c in CATEGORIES)
        print(f"| `{row['prompt']}` | {row['accuracy']:.3f} ({low:.3f} to {high:.3f}) | {counts} | "
              f"{row['truncated']} | {row['mean_completion_tokens']:.0f} | {row['wall_seconds'] / 60:.1f} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
