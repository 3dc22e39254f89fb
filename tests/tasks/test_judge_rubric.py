"""The judge's strict reading of a reply and its rubric template, as tables (no server)."""

from __future__ import annotations

import pytest

from rlvr.tasks.verification.judge_client import Endpoint, backoff_delay, retry_after_seconds
from rlvr.tasks.verification.judge_rubric import DEFAULT_RUBRIC, Scale, check_template, parse_score, rubric_hash

TEN = Scale(0, 10)
FIVE = Scale(1, 5)
PASS_FAIL = Scale(pass_fail=True)

# (name, reply, scale, expected scaled score or None for no score)
CASES = [
    ("integer", "Score: 7", TEN, 0.7),
    ("top", "Score: 10", TEN, 1.0),
    ("bottom", "Score: 0", TEN, 0.0),
    ("decimal", "Score: 2.5", TEN, 0.25),
    ("reasoning first, other numbers", "There are 3 errors in 12 lines.\nScore: 4", TEN, 0.4),
    ("markdown bold", "**Score:** 8", TEN, 0.8),
    ("lower case, trailing blank lines", "score: 6\n\n  \n", TEN, 0.6),
    ("shifted range", "Score: 3", FIVE, 0.5),
    ("below a shifted range", "Score: 0", FIVE, None),
    ("above the range", "Score: 11", TEN, None),
    ("negative", "Score: -2", TEN, None),
    ("a fraction is not a number", "Score: 7/10", TEN, None),
    ("two numbers", "Score: 7 8", TEN, None),
    ("score not on the last line", "Score: 9\nI am confident.", TEN, None),
    ("no score line", "The answer is 7.", TEN, None),
    ("only a number", "7", TEN, None),
    ("empty", "", TEN, None),
    ("pass", "Looks right.\nScore: PASS", PASS_FAIL, 1.0),
    ("fail", "Score: fail", PASS_FAIL, 0.0),
    ("a number on a pass/fail scale", "Score: 1", PASS_FAIL, None),
]


@pytest.mark.parametrize("name, reply, scale, expected", CASES, ids=[case[0] for case in CASES])
def test_parse_score(name, reply, scale, expected):
    parsed = parse_score(reply, scale)
    if expected is None:
        assert parsed.value is None and parsed.reason, name
    else:
        assert parsed.value == pytest.approx(expected) and parsed.reason == "", name


def test_an_out_of_range_score_is_refused_not_clipped():
    # a parser that clips would give 1.0 and 0.0 here, a judgment the judge never made
    assert parse_score("Score: 11", TEN).value is None and parse_score("Score: -1", TEN).value is None
    assert "outside [0, 10]" in parse_score("Score: 11", TEN).reason


def test_templates():
    assert check_template(DEFAULT_RUBRIC) is DEFAULT_RUBRIC
    with pytest.raises(ValueError, match="completion"):
        check_template("Grade this answer. Score: N")
    assert rubric_hash(DEFAULT_RUBRIC, TEN) != rubric_hash(DEFAULT_RUBRIC, Scale(0, 100))
    assert rubric_hash(DEFAULT_RUBRIC, TEN) != rubric_hash(DEFAULT_RUBRIC + " ", TEN)


def test_retry_after_and_backoff():
    assert retry_after_seconds("2") == 2.0 and retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    endpoint = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", backoff_seconds=0.5, max_backoff_seconds=3)
    assert [backoff_delay(attempt, endpoint, None) for attempt in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_delay(0, endpoint, 2.5) == 2.5 and backoff_delay(0, endpoint, 100.0) == 3.0
    assert "api_key" not in repr(Endpoint(base_url="u", model="m", api_key="secret"))
