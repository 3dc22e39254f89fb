"""benchmarks/learning/spell_steps.py: each step of the spell_backward working judged on its own."""

from __future__ import annotations

from benchmarks.learning.spell_steps import steps, tally


def test_each_step_is_judged_on_what_the_step_before_it_wrote():
    word = "lever"
    assert steps("<think>l e v e r -> r e v e l</think>\n<answer>revel</answer>", word) == dict(
        worked=True, spelled=True, reversed=True, joined=True, right=True)
    # misspelt, but that spelling reversed and joined faithfully: only the spelling (and the answer) is wrong
    assert steps("<think>l e v r -> r v e l</think> <answer>rvel</answer>", word) == dict(
        worked=True, spelled=False, reversed=True, joined=True, right=False)
    # spelt right, reversed wrong, joined as reversed
    assert steps("<think>l e v e r -> r e e v l</think><answer>reevl</answer>", word) == dict(
        worked=True, spelled=True, reversed=False, joined=True, right=False)
    # the right answer joined from wrong letters counts as right, not as joined
    assert steps("<think>l e v e r -> r e v l</think><answer>revel</answer>", word) == dict(
        worked=True, spelled=True, reversed=False, joined=False, right=True)
    assert steps("<answer>revel</answer>", word) == dict.fromkeys(("worked", "spelled", "reversed", "joined",
                                                                    "right"), False)


def test_shares_are_per_length_band_and_over_all():
    rows = [{"ground_truth": "nus", "response": "<think>s u n -> n u s</think><answer>nus</answer>"},
            {"ground_truth": "nus", "response": "<think>s u -> u s</think><answer>us</answer>"},
            {"ground_truth": "rotatlas", "response": "<think>s a l -> l a s</think><answer>las</answer>"}]
    table = tally(rows)
    assert list(table) == ["3-5", "6-8", "all"]
    assert table["3-5"]["n"] == 2 and table["3-5"]["spelled"] == 0.5 and table["3-5"]["right"] == 0.5
    assert table["6-8"]["reversed"] == 1.0 and table["6-8"]["right"] == 0.0
    assert table["all"]["n"] == 3 and abs(table["all"]["joined"] - 1.0) < 1e-12
