"""Learning through a judge: format_copy with a stub judge as the only reward, three seeds.

`configs/studies/judge_format_copy.yaml` is the GRPO homework's format_copy run with `task.name:
judge:format_copy` and every format_copy component weighted 0: the reward is the judge's score alone. The judge
is `rlvr.tasks.verification.judge_stub.StubJudge` on loopback, started here, with one fixed rule
(`format_copy_rule`): `Score: 10` when the graded answer's first `<answer></answer>` span holds exactly the
reference integer, else `Score: 0`. So the judge pays what format_copy's `answer` component pays, through the
whole judge path (rubric, concurrent HTTP requests, strict parsing, the cache, `judge/*` metrics); the
`answer` component, logged at weight 0, checks that what the judge rewards is the task.

    python benchmarks/learning/judge_learning.py --threads 1            # trains what is missing, then the summary
    python benchmarks/learning/judge_learning.py --summary-only

Writes `runs/studies/judge_format_copy/summary.{md,json}` and `docs/figures/judge_format_copy.png` (the
study's), and copies the summary to `benchmarks/results/study_judge_format_copy.{md,json}`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from rlvr.tasks.verification.judge_stub import Reply, StubJudge

STUDY = "judge_format_copy"
REPO = Path(__file__).resolve().parents[2]
REFERENCE_RE = re.compile(r"<reference>\n(?P<reference>.*?)\n</reference>", re.DOTALL)
GRADED_RE = re.compile(r"<answer-(?P<nonce>[0-9a-f]+)>\n(?P<answer>.*?)\n</answer-(?P=nonce)>", re.DOTALL)
FIRST_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def format_copy_rule(prompt: str, count: int) -> Reply:
    """The stub judge's rule on the default rubric's whole message: 10 when the graded answer's first tagged span
    is exactly the reference integer, else 0 (format_copy's `answer` component, scaled to 0-10)."""
    reference, graded = REFERENCE_RE.search(prompt), GRADED_RE.search(prompt)
    if reference is None or graded is None:
        return Reply("The message has no reference or no answer to grade.\nScore: 0")
    answer = graded.group("answer").replace("<\\/", "</")  # the rubric writes the template's closing tags <\/
    first = FIRST_TAG_RE.search(answer)
    right = first is not None and first.group(1).strip() == reference.group("reference").strip()
    return Reply(f"The first tagged answer {'matches' if right else 'does not match'} the reference.\n"
                 f"Score: {10 if right else 0}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="model.num_threads of every run")
    parser.add_argument("--summary-only", action="store_true", help="summarise the runs that exist")
    args = parser.parse_args(argv)
    from rlvr.study import run_study

    os.chdir(REPO)  # the study's output and figure paths are relative to the repository
    with StubJudge(format_copy_rule, whole_prompt=True) as stub:
        os.environ["RLVR_JUDGE_BASE_URL"] = stub.base_url
        os.environ["RLVR_JUDGE_MODEL"] = "stub-format-copy-rule"
        run_study(STUDY, summary_only=args.summary_only, threads=args.threads)
        print(f"judge requests answered: {stub.requests}")
    output = REPO / "runs" / "studies" / STUDY
    for suffix in ("md", "json"):
        shutil.copyfile(output / f"summary.{suffix}", REPO / "benchmarks" / "results" / f"study_{STUDY}.{suffix}")
    print((output / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
