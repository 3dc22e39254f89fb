"""pass@k, maj@k, mean@n and their Wilson intervals (rlvr/observe/sampled_accuracy.py) against values worked out
by hand, each beside the value a plausible wrong version gives (c/n, sampling with replacement, the last of
tied answers, a binomial that overflows)."""

from __future__ import annotations

import math

import pytest

from rlvr.observe.sampled_accuracy import (majority_vote, pass_at_k, reported_ks, sampled_accuracy,
                                           wilson_interval)


@pytest.mark.parametrize("n, c, k, expected", [
    # c = 0: no k-subset holds a right one.
    (4, 0, 1, 0.0), (4, 0, 4, 0.0),
    # c = n: every k-subset does.
    (4, 4, 1, 1.0), (4, 4, 3, 1.0),
    # n = 4, c = 1: pass@k = 1 - C(3, k) / C(4, k) = k / 4.
    (4, 1, 1, 0.25),  # 1 - 3/4
    (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 1, 3, 0.75),  # 1 - C(3,3)/C(4,3) = 1 - 1/4
    (4, 1, 4, 1.0),  # k = n: C(3,4) = 0, the one right sample is always drawn
    # n = 4, c = 2.
    (4, 2, 1, 0.5),
    (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (4, 2, 3, 1.0),  # n - c = 2 < 3: no 3-subset avoids both right ones
    # n = 10, c = 3, k = 5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 11/12 (product form: (3/8)(4/9)(5/10) = 1/12).
    (10, 3, 5, 11 / 12),
    # n = 2000, c = 2, k = 1000: C(n-2,k)/C(n,k) = (n-k)(n-k-1)/(n(n-1)) = 1000*999/(2000*1999).
    (2000, 2, 1000, 1 - 999000 / 3998000),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_not_a_plausible_wrong_estimator():
    # n = 4, c = 1, k = 2: unbiased 0.5; c/n gives 0.25; drawing with replacement 1 - (3/4)^2 = 0.4375.
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert abs(pass_at_k(4, 1, 2) - 1 / 4) > 0.2 and abs(pass_at_k(4, 1, 2) - (1 - 0.75 ** 2)) > 0.05
    # k = n = 4, c = 1: unbiased 1 (the right sample is among all four); with replacement 1 - 0.75^4 = 0.684.
    assert pass_at_k(4, 1, 4) == 1.0 and 1 - 0.75 ** 4 == pytest.approx(0.68359375)
    # n = 10, c = 3, k = 5: 11/12 = 0.9167 against 1 - 0.7^5 = 0.8319.
    assert pass_at_k(10, 3, 5) - (1 - 0.7 ** 5) > 0.08


def test_pass_at_k_never_forms_the_binomials():
    # C(2000, 1000) ~ 2e600 has no float: the ratio of binomials cannot even be formed; the product form can.
    with pytest.raises(OverflowError):
        float(math.comb(2000, 1000))
    exact = 1 - math.comb(1998, 1000) / math.comb(2000, 1000)  # Python's big integers, an independent check
    assert pass_at_k(2000, 2, 1000) == pytest.approx(exact, abs=1e-12)


def test_pass_at_1_is_exactly_c_over_n():
    # The product telescopes to (n-c)/n; c/n is computed without its rounding, so pass@1 == mean@n exactly.
    for n in range(1, 12):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == c / n


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 1), (4, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="1 <= k <= n and 0 <= c <= n"):
        pass_at_k(n, c, k)


def test_majority_vote_tie_goes_to_the_answer_that_appears_first():
    answers, correct = ["7", "5", "5", "7"], [False, True, True, False]
    # k = 4: "7" and "5" have two votes each; "7" appears first, and it is wrong. (Breaking the tie by the
    # last appearance, or by sorting the answers, would pick "5" and call it right.)
    vote = majority_vote(answers, correct, 4)
    assert (vote.answer, vote.votes, vote.correct) == ("7", 2, False)
    # k = 3: only the first three vote; "5" has two of them.
    vote = majority_vote(answers, correct, 3)
    assert (vote.answer, vote.votes, vote.correct) == ("5", 2, True)
    # k = 1: the first sample alone.
    assert majority_vote(answers, correct, 1).answer == "7"


def test_majority_vote_no_answer_and_whitespace():
    # No answer is a vote for "no answer", which is wrong: two of them beat one right "3" (skipping them
    # instead would make the lone "3" the majority, and the prompt right).
    vote = majority_vote([None, None, "3"], [False, False, True], 3)
    assert (vote.answer, vote.votes, vote.correct) == (None, 2, False)
    # Surrounding whitespace is not a different answer: "3" has two votes; unstripped, four single votes
    # and None (first) would win.
    vote = majority_vote([None, "4", " 3 ", "3\n"], [False, False, True, True], 4)
    assert (vote.answer, vote.votes, vote.correct) == ("3", 2, True)
    # A tie between "no answer" and an answer goes to the first too.
    assert majority_vote(["3", None], [True, False], 2).correct
    assert not majority_vote([None, "3"], [False, True], 2).correct
    # A verdict wrongly marked right for a sample without an answer does not make "no answer" right.
    assert not majority_vote([None], [True], 1).correct
    with pytest.raises(ValueError, match="maj@k needs"):
        majority_vote(["1"], [True], 2)


def test_reported_ks():
    assert reported_ks(1) == (1,)
    assert reported_ks(4) == (1, 2, 4)
    assert reported_ks(8) == (1, 2, 4, 8)
    assert reported_ks(6) == (1, 2, 4, 6)
    assert reported_ks(100) == (1, 2, 4, 8, 16, 32, 64, 100)


def test_sampled_accuracy_averages_over_prompts():
    correct = [[True, False, False, False],  # c = 1
               [True, True, False, False],  # c = 2
               [False, False, False, False]]  # c = 0
    answers = [["1", "2", "2", "3"],  # "2" wins 2-1-1 and is wrong
               ["9", "9", "8", "8"],  # a tie: "9" appears first, and is right
               [None, None, None, None]]  # no vote: wrong
    result = sampled_accuracy(correct, answers)
    assert (result.prompts, result.samples) == (3, 4)
    assert sorted(result.pass_at) == [1, 2, 4]
    assert result.pass_at[1] == pytest.approx((0.25 + 0.5 + 0) / 3)  # 0.25
    assert result.pass_at[2] == pytest.approx((0.5 + 5 / 6 + 0) / 3)  # 4/9
    assert result.pass_at[4] == pytest.approx((1 + 1 + 0) / 3)
    assert result.mean == result.pass_at[1] == 0.25  # pass@1 is mean@n, the same number
    # Pooling the samples instead (correct pairs / all pairs) would weigh prompts by their samples; here the
    # pooled pass@2 over 12 samples with 3 right is 1 - C(9,2)/C(12,2) = 1 - 36/66 = 0.4545, not 4/9.
    assert abs(result.pass_at[2] - (1 - 36 / 66)) > 0.01
    assert result.majority == pytest.approx(1 / 3)
    assert (result.solved_all, result.solved_some, result.solved_none) == (0, 2, 1)
    # Wilson intervals over the 3 prompts, the sum of their scores as the successes.
    assert result.mean_ci95 == wilson_interval(0.75, 3)
    assert result.majority_ci95 == wilson_interval(1, 3)
    assert result.pass_at_ci95[4] == wilson_interval(2.0, 3)
    # A task without answers: no maj@n.
    assert sampled_accuracy(correct).majority is None and sampled_accuracy(correct).majority_ci95 is None
    with pytest.raises(ValueError, match="same n >= 1 samples"):
        sampled_accuracy([[True, False], [True]])


def test_wilson_interval_of_a_fractional_count():
    # A whole count gives the published value (8/10: 0.4902 to 0.9433); a fractional one lies between its
    # neighbours' intervals, and a score of 0.75 over 3 prompts equals the proportion 0.25 at n = 3.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    low, high = wilson_interval(0.75, 3)
    assert wilson_interval(0, 3)[0] <= low <= wilson_interval(1, 3)[0]
    assert wilson_interval(0, 3)[1] <= high <= wilson_interval(1, 3)[1]
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    # The interval holds its own proportion, at the ends too (where rounding could leave a hair outside).
    for total in range(1, 60):
        assert wilson_interval(0, total)[0] == 0.0 and wilson_interval(total, total)[1] == 1.0
