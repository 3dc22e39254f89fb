"""Resolve every shipped config (no file, configs/*.yaml, examples/*.yaml, each sweep point) to one JSON file.

Run it before and after a change to the config schema and compare the two files with `--compare`:
a shipped config must keep resolving to the same values.

    python scripts/config_snapshot.py OUT.json
    python scripts/config_snapshot.py --compare BEFORE.json AFTER.json [--ignore KEY ...]

`--ignore`: keys left out of the comparison (a key that was removed from the schema on purpose).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def snapshot() -> dict[str, dict]:
    from rlvr.config import flatten, load_config
    from rlvr.sweep import grid_points, load_plan

    resolved = {"(no config)": flatten(dataclasses.asdict(load_config()))}
    for path in sorted(REPO.glob("configs/*.yaml")) + sorted(REPO.glob("examples/*.yaml")):
        resolved[str(path.relative_to(REPO))] = flatten(dataclasses.asdict(load_config(path)))
    for path in sorted(REPO.glob("configs/sweeps/*.yaml")):
        plan = load_plan(str(path), [], [])
        for name, point in grid_points(plan):
            config = load_config(plan.base, plan.overrides + point)
            resolved[f"{path.relative_to(REPO)}:{name}"] = flatten(dataclasses.asdict(config))
    return resolved


def compare(before: dict[str, dict], after: dict[str, dict], ignore: tuple[str, ...] = ()) -> list[str]:
    """One line per config that is missing or whose resolved value of a key changed (keys in `ignore` aside)."""
    lines = []
    for name in sorted(set(before) | set(after)):
        if name not in after or name not in before:
            lines.append(f"{name}: only {'before' if name in before else 'after'}")
            continue
        for key in sorted((set(before[name]) | set(after[name])) - set(ignore)):
            old, new = before[name].get(key, "(absent)"), after[name].get(key, "(absent)")
            if old != new:
                lines.append(f"{name}: {key} {old!r} -> {new!r}")
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        before, after = (json.loads(Path(p).read_text()) for p in argv[1:3])
        ignore = tuple(argv[index + 1] for index, item in enumerate(argv) if item == "--ignore")
        lines = compare(before, after, ignore)
        print("\n".join(lines) if lines else f"identical: {len(before)} configs")
        return 1 if lines else 0
    import os

    os.chdir(REPO)  # examples name their task files relative to the repository root
    Path(argv[0]).write_text(json.dumps(snapshot(), indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
