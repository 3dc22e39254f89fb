"""The algorithm tables come from the registries: every preset, estimator, loss and aggregation has a row, a
name registered later appears without an edit, the docs hook fills its markers, and the README's copy of
the preset tables is the one rendered now (`python -m rlvr.algorithm_tables --write-readme` rewrites it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlvr import algorithm_tables
from rlvr.algorithm_tables import (README_END, README_START, fill_markers, marker, preset_tables, readme_with_tables,
                                   registry_table, summary, trait_text)
from rlvr.algorithms import ALGORITHMS, AlgorithmPreset
from rlvr.core import ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES, EstimatorTraits, LossTraits

REPO = Path(__file__).resolve().parents[2]


def _row_names(table: str) -> list[str]:
    """The first cell of every body row ("| `name` | ..."), without its backticks."""
    return [line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")]


def test_the_readme_holds_the_preset_tables_rendered_now():
    readme = (REPO / "README.md").read_text()
    assert readme_with_tables(readme) == readme, (
        "README.md's preset tables differ from the registry's; run: python -m rlvr.algorithm_tables --write-readme")


def test_every_registered_name_has_a_row():
    presets = preset_tables()
    settings, purposes = presets.split("\n\n")
    assert _row_names(settings) == _row_names(purposes) == ALGORITHMS.names() and len(ALGORITHMS) >= 21
    for registry, column, key in ((ADVANTAGE_ESTIMATORS, "estimator", "advantage_estimator"),
                                  (POLICY_LOSSES, "policy loss", "policy_loss"),
                                  (LOSS_AGGREGATIONS, "aggregation", "loss_aggregation")):
        table = registry_table(registry, column, key)
        assert _row_names(table) == registry.names(), column
        summaries = [line.split(" | ")[1] for line in table.splitlines() if line.startswith("| `")]
        assert "-" not in summaries, f"a {column} without a docstring: its first line is the table's description"


def test_a_row_holds_the_summary_the_traits_and_the_presets():
    estimators = registry_table(ADVANTAGE_ESTIMATORS, "estimator", "advantage_estimator")
    (remax,) = [line for line in estimators.splitlines() if line.startswith("| `remax` |")]
    assert remax == ("| `remax` | ReMax (Li et al. 2023, arXiv 2310.10505): r_i minus the reward of the prompt's "
                     "greedy completion | inputs: reward_baselines | `remax` |")
    assert "Retired names, refused with their replacement: `dr_grpo` (now `mean_centered`)" in estimators
    losses = registry_table(POLICY_LOSSES, "policy loss", "policy_loss")
    (gspo,) = [line for line in losses.splitlines() if line.startswith("| `gspo` |")]
    assert gspo.endswith("| sequence_level | `gspo` |")
    (gpg,) = [line for line in losses.splitlines() if line.startswith("| `gpg` |")]
    assert "(the same function as `reinforce`)" in gpg  # registered twice, said once per row
    aggregations = registry_table(LOSS_AGGREGATIONS, "aggregation", "loss_aggregation")
    assert aggregations.splitlines()[0] == "| aggregation | what it computes | presets |"  # no traits: no column
    (dapo,) = [line for line in preset_tables().splitlines() if line.startswith("| `dapo` | `grpo`")]
    assert dapo == ("| `dapo` | `grpo` | `grpo_clip` | `token_mean` | 2 | 0.2 / 0.28 | 0.0 | "
                    "dynamic_sampling=true, overlong_buffer=4, overlong_penalty=1.0 |")


def test_the_summary_is_the_docstrings_first_line_without_its_shapes():
    def loss():
        """A loss (Someone 2030): -A * rho, clipped. [B, T] -> [B, T].

        More that the table leaves out.
        """

    def reduce():
        """mean_i [ x_i ], every row the same. [B, T] -> scalar."""

    assert summary(loss) == "A loss (Someone 2030): -A * rho, clipped"
    assert summary(reduce) == "mean_i [ x_i ], every row the same"
    assert summary(lambda: None) == ""
    assert trait_text(EstimatorTraits()) == "" and trait_text(None) == ""
    assert trait_text(EstimatorTraits(group_baseline=True, inputs=("a", "b"))) == "group_baseline, inputs: a, b"


def test_a_name_registered_later_appears_without_an_edit():
    @ADVANTAGE_ESTIMATORS.register("table_test_estimator", traits=EstimatorTraits(group_baseline=True))
    def table_test_estimator(rewards, group_size=None, group_ids=None, **options):
        """A test-only estimator: r - the group's median. [N] -> [N]."""

    @POLICY_LOSSES.register("table_test_loss", traits=LossTraits(sequence_level=True))
    def table_test_loss(logprobs, old_logprobs, advantages, mask, *, clip_low=0.2, clip_high=None):
        """A test-only loss: -A log pi over the sequence. [B, T] -> [B, T]."""

    ALGORITHMS.add("table_test_preset", AlgorithmPreset(
        "a test-only preset", {"advantage_estimator": "table_test_estimator", "policy_loss": "table_test_loss",
                               "ppo_epochs": 3, "clip_ratio_c": 4.0},
        paper="nobody, 2030", use_when="never"))
    try:
        estimators = registry_table(ADVANTAGE_ESTIMATORS, "estimator", "advantage_estimator")
        assert ("| `table_test_estimator` | A test-only estimator: r - the group's median | group_baseline "
                "| `table_test_preset` |") in estimators
        losses = registry_table(POLICY_LOSSES, "policy loss", "policy_loss")
        assert "| `table_test_loss` | A test-only loss: -A log pi over the sequence | sequence_level " \
               "| `table_test_preset` |" in losses
        presets = preset_tables()
        assert ("| `table_test_preset` | `table_test_estimator` | `table_test_loss` | `seq_mean_token_mean` | 3 "
                "| 0.2 / 0.2 | 0.0 | clip_ratio_c=4.0 |") in presets
        assert "| `table_test_preset` | a test-only preset | nobody, 2030 | never |" in presets
        # The docs page shows it at the next build, and the README is stale until rewritten.
        assert "`table_test_loss`" in fill_markers(f"text\n{marker('losses')}\nmore\n")
        readme = (REPO / "README.md").read_text()
        assert readme_with_tables(readme) != readme and "`table_test_preset`" in readme_with_tables(readme)
    finally:
        ADVANTAGE_ESTIMATORS.remove("table_test_estimator")
        POLICY_LOSSES.remove("table_test_loss")
        ALGORITHMS.remove("table_test_preset")


def _docs_hook():
    spec = importlib.util.spec_from_file_location("gen_tables", REPO / "docs" / "gen_tables.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_the_docs_hook_fills_every_marker_of_the_algorithms_page():
    hook = _docs_hook()
    page = (REPO / "docs" / "guides" / "algorithms.md").read_text()
    assert all(marker(name) in page for name in ("estimators", "losses", "aggregations"))
    filled = hook.on_page_markdown(page, None, None, None)
    assert "<!-- rlvr table:" not in filled
    assert registry_table(POLICY_LOSSES, "policy loss", "policy_loss") in filled
    assert hook.on_page_markdown("no marker here", None, None, None) == "no marker here"
    with pytest.raises(KeyError, match="unknown table 'nope' in a marker; known: presets, estimators"):
        fill_markers(marker("nope"))


def test_write_readme_rewrites_a_stale_copy_and_keeps_the_rest(tmp_path, capsys):
    stale = tmp_path / "README.md"
    stale.write_text(f"# Title\n\nbefore\n{README_START}\n| old | table |\n{README_END}\nafter\n")
    assert algorithm_tables.main(["--write-readme", str(stale)]) == 0
    text = stale.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{README_END}\nafter\n")
    assert "| old | table |" not in text and preset_tables() in text
    assert capsys.readouterr().out == f"{stale}: rewritten\n"
    assert algorithm_tables.main(["--write-readme", str(stale)]) == 0
    assert capsys.readouterr().out == f"{stale}: already up to date\n"
    stale.write_text("no markers\n")
    with pytest.raises(ValueError, match="must hold the lines"):
        algorithm_tables.main(["--write-readme", str(stale)])


def test_printing_one_table(capsys):
    assert algorithm_tables.main(["aggregations"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| aggregation |") and "`token_mean`" in out and "| preset |" not in out
