"""Where a spell_backward completion goes wrong: spelling the word, reversing the letters, or joining them.

The spell_backward working (rlvr/tasks/reasoning_gym_demos.py) writes three steps a program can check
one by one: `<think>s u n -> n u s</think>` then `<answer>nus</answer>`. For each completion of an
eval folder (`rlvr eval ... --output DIR`: its generations.jsonl) this counts, by word length:
- spelled: the letters before `->` are the word's;
- reversed: the letters after `->` are those before, in reverse order (whatever they spell);
- joined: the answer is the letters after `->`, joined;
- right: the answer is the word reversed (the verifier's verdict);
- worked: the completion has the working's shape (a think span with `->` and an answer span).
So the step that limits a model shows as the lowest share, the others close to 1.

    rlvr eval configs/spell_backward_sft.yaml --model RUN_DIR --limit 200 --output runs/eval-spell
    python benchmarks/learning/spell_steps.py runs/eval-spell [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

STEPS = ("worked", "spelled", "reversed", "joined", "right")
LENGTH_BANDS = ((3, 5), (6, 8), (9, 10))
WORKING = re.compile(r"<think>(?P<forward>.*?)->(?P<backward>.*?)</think>.*?<answer>(?P<answer>.*?)</answer>", re.S)


def letters(text: str) -> list[str]:
    return [char for char in text if not char.isspace()]


def steps(completion: str, word: str) -> dict[str, bool]:
    """Which steps of the working `completion` got right for `word` (the word, not its reversal)."""
    found = WORKING.search(completion)
    if found is None:
        return {step: False for step in STEPS}
    forward, backward = letters(found["forward"]), letters(found["backward"])
    answer = found["answer"].strip()
    return {"worked": True, "spelled": "".join(forward) == word, "reversed": backward == forward[::-1],
            "joined": answer == "".join(backward), "right": answer == word[::-1]}


def band(length: int) -> str:
    for low, high in LENGTH_BANDS:
        if low <= length <= high:
            return f"{low}-{high}"
    return f"{length}"


def tally(rows: list[dict]) -> dict[str, dict[str, float]]:
    """{band or 'all': {'n': count, step: share}} over generations.jsonl rows (ground truth = the reversal)."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        word = str(row["ground_truth"])[::-1]
        result = steps(row.get("response") or row.get("completion") or "", word)
        for key in (band(len(word)), "all"):
            slot = counts.setdefault(key, {"n": 0, **{step: 0 for step in STEPS}})
            slot["n"] += 1
            for step in STEPS:
                slot[step] += result[step]
    order = [f"{low}-{high}" for low, high in LENGTH_BANDS] + ["all"]
    return {key: {"n": counts[key]["n"], **{step: counts[key][step] / counts[key]["n"] for step in STEPS}}
            for key in order if key in counts}


def markdown(table: dict[str, dict[str, float]]) -> str:
    lines = ["| letters | n | " + " | ".join(STEPS) + " |", "|---|---|" + "---|" * len(STEPS)]
    for key, row in table.items():
        lines.append(f"| {key} | {row['n']} | " + " | ".join(f"{row[step]:.2f}" for step in STEPS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("eval_dirs", nargs="+", type=Path, help="eval folders (their generations.jsonl)")
    parser.add_argument("--json", type=Path, help="write every table here")
    args = parser.parse_args(argv)
    tables = {}
    for folder in args.eval_dirs:
        path = folder / "generations.jsonl"
        if not path.is_file():
            print(f"{path} does not exist: give an `rlvr eval --output` folder", file=sys.stderr)
            return 2
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        tables[str(folder)] = tally(rows)
        print(f"{folder}\n\n{markdown(tables[str(folder)])}\n")
    if args.json:
        args.json.write_text(json.dumps(tables, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
