"""How much of a run's missing group contrast the group size and the success rate explain.

For a group of G completions that are each right with probability p, the chance that all are right
or all wrong (no contrast, zero advantage, zero gradient) is p^G + (1-p)^G. Prompts differ in p, so
a batch with the same mean success rate but spread-out difficulty has more such groups than that.
For each run folder this reads metrics.jsonl and config.yaml and prints the mean over iterations of
the success rate p (`correct_frac`), of the measured share of groups without reward contrast
(`frac_no_contrast_groups`, on the total reward, format included) and of p^G + (1-p)^G at each
iteration's p: measured well above predicted means the prompts' spread in difficulty, not G, is what
leaves groups without contrast; below it, that other components (the format bonus) give contrast.

    python benchmarks/learning/contrast_share.py runs/studies/pg_spell_backward/seed=0 runs/studies/pg_contrast_knobs/*
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml


def shares(records: list[dict], group_size: int) -> dict[str, float]:
    """Means over iterations of p, of the measured no-contrast share and of its binomial prediction."""
    ps = [float(r["correct_frac"]) for r in records]
    measured = [float(r["frac_no_contrast_groups"]) for r in records]
    predicted = [p ** group_size + (1 - p) ** group_size for p in ps]
    n = len(records)
    return {"iterations": n, "group_size": group_size, "p": sum(ps) / n, "measured": sum(measured) / n,
            "predicted": sum(predicted) / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    results = {}
    print("| run | iterations | G | p (mean success) | no contrast, measured | p^G + (1-p)^G |")
    print("|---|---|---|---|---|---|")
    for folder in args.run_dirs:
        if not (folder / "metrics.jsonl").is_file():
            print(f"{folder / 'metrics.jsonl'} does not exist", file=sys.stderr)
            continue
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        group_size = int(yaml.safe_load((folder / "config.yaml").read_text())["rollout"]["group_size"])
        result = shares(records, group_size)
        results[str(folder)] = result
        print(f"| {folder.name} | {result['iterations']} | {group_size} | {result['p']:.3f} | "
              f"{result['measured']:.3f} | {result['predicted']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
