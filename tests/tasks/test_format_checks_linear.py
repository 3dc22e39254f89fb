"""Format checks and answer extraction in the main process run in linear time.

`<answer>(.*?)</answer>` searched over many unclosed `<answer>` tags scans to the end of the text
from each of them: `r1_zero_reward_fn` took 1.6 s at 5,000 tags and 24 s at 20,000 before the
change. The inputs below have 200,000 tags, where that quadratic scan takes about an hour (it did
not finish within this test's 300 s); the subprocess's time limit is only a guard that turns such a
hang into a failure. The results are checked exactly.
The scanner is also checked against the regular expression (a naive second implementation) on
small random texts, where the regex is fast.
"""

import random
import re
import subprocess
import sys
import textwrap

import pytest

from rlvr.tasks.verification.answers import extract_answer_tag, first_answer_tag

TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
PIECES = ["<answer>", "</answer>", "<answer", "answer>", "</", "1", " ", "\n", "x"]


@pytest.mark.parametrize("seed", range(5))
def test_scanner_agrees_with_the_lazy_regex(seed):
    rng = random.Random(seed)
    for _ in range(400):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 14)))
        matches = TAG_RE.findall(text)
        assert extract_answer_tag(text) == (matches[-1].strip() if matches else None), text
        first = TAG_RE.search(text)
        assert first_answer_tag(text) == (first.group(1).strip() if first else None), text


def test_extraction_cases():
    assert extract_answer_tag("<answer>a</answer> <answer>b</answer>") == "b"
    assert extract_answer_tag("<answer>a<answer>b</answer>") == "a<answer>b"  # as the regex pairs them
    assert extract_answer_tag("<answer>a</answer>b</answer>") == "a"
    assert extract_answer_tag("<answer>a</answer><answer>unclosed") == "a"
    assert first_answer_tag("x <answer> 7 </answer><answer>8</answer>") == "7"
    assert extract_answer_tag("<answer>") is None and first_answer_tag("") is None


CHECKS = textwrap.dedent("""
    from rlvr.tasks import build_task
    from rlvr.tasks.verification.answers import extract_answer_tag, first_answer_tag
    from rlvr.tasks.verification.grading import question_only_reward_fn, r1_zero_reward_fn

    repeats = 200_000
    flood = "<answer>" * repeats
    tagged = "</think> <answer>1</answer>" + flood  # 1.6 million characters
    assert extract_answer_tag(tagged) == "1" and first_answer_tag(flood) is None
    assert r1_zero_reward_fn(tagged, "1") == {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
    assert r1_zero_reward_fn(tagged, "2")["reward"] == 0.0
    assert question_only_reward_fn(tagged, "1")["answer_reward"] == 1.0
    assert question_only_reward_fn("1," * repeats + " 5", "5")["answer_reward"] == 1.0

    copy = build_task("format_copy")
    example = copy.make_example(1)
    verdict = copy.score(flood, example)
    assert verdict.components == {"answer": 0.0, "tag": 0.0, "strict": 0.0} and verdict.detail  # tags, no number in them
    assert copy.score("<answer>1</answer>" + flood, example).correct

    integer = build_task("integer")
    example = integer.examples("eval", 1, 0)[0]
    verdict = integer.score(flood + str(example.ground_truth), example)
    assert verdict.correct and verdict.components["format"] == 0.0
    print("checked")
""")  # noqa: E501 (the subprocess's program, kept byte for byte)


def test_format_checks_are_linear_on_huge_inputs():
    result = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "checked", result.stderr[-2000:]
