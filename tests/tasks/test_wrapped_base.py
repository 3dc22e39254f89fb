"""One weight rule for the tasks that add a model-given component to a base task (judge:BASE, rm:BASE):
a given weight wins, else the base's own, else 1, whatever the base does with the weights it is given; a
weight that names no component is refused with the components listed."""

from __future__ import annotations

import pytest

from rlvr.tasks.wrapped_base import wrap_base


class IgnoresWeights:
    """A base that takes reward_weights and ignores them, with weights of its own for two of three components."""

    component_names = ("answer", "format", "length")
    weights = {"answer": 1.0, "format": 0.25}

    def __init__(self, **_):
        pass


class NoWeights:
    component_names = ("answer", "format")

    def __init__(self, **_):
        pass


def _wrap(base_class, given, component="judge"):
    built = []

    def build(base, **keywords):
        built.append(keywords["reward_weights"])
        return base_class(**keywords)

    task, weights = wrap_base("judge", component, "some_base", reward_weights=given, base_options={},
                              use_chat_template=True, seed=0, build_base=build, example="judge:integer")
    return weights, built[0]


def test_a_given_weight_wins_over_the_bases_own_even_when_the_base_ignores_it():
    weights, passed = _wrap(IgnoresWeights, {"format": 0.0, "judge": 0.5})
    assert weights == {"answer": 1.0, "format": 0.0, "length": 1.0, "judge": 0.5}
    assert passed == {"format": 0.0}  # the base is given its own components' weights, not the added one's


def test_without_given_weights_the_base_keeps_its_own_and_the_added_component_weighs_1():
    assert _wrap(IgnoresWeights, None, "reward_model")[0] == {"answer": 1.0, "format": 0.25, "length": 1.0,
                                                               "reward_model": 1.0}
    assert _wrap(NoWeights, {"answer": 0})[0] == {"answer": 0.0, "format": 1.0, "judge": 1.0}


def test_a_weight_that_names_no_component_is_refused_listing_them():
    with pytest.raises(ValueError, match=r"no component 'anwser'.*answer, format, length, judge"):
        _wrap(IgnoresWeights, {"anwser": 0.0})


@pytest.mark.parametrize("name", ["judge:integer", "rm:integer"])
def test_judge_and_reward_model_tasks_weigh_the_base_components_by_one_rule(name, tmp_path, monkeypatch):
    from rlvr.tasks import build_task

    monkeypatch.setenv("RLVR_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")  # built, never asked
    monkeypatch.setenv("RLVR_JUDGE_MODEL", "stub-model")

    from rlvr.testing import save_tiny_reward_model

    options = {"path": str(save_tiny_reward_model(tmp_path / "rm")), "device": "cpu"} if name.startswith("rm:") else {}
    component = "judge" if name.startswith("judge:") else "reward_model"
    task = build_task(name, reward_weights={"strict": 0.0, component: 0.5}, options=options)
    base = build_task("integer")
    expected = {**{c: float(base.weights.get(c, 1.0)) for c in base.component_names}, "strict": 0.0, component: 0.5}
    assert task.weights == expected


def test_a_zero_weight_given_silences_a_component_the_base_would_weigh():
    weights, _ = _wrap(IgnoresWeights, {"answer": 0.0, "length": 0.0})
    assert (weights["answer"], weights["format"], weights["length"]) == (0.0, 0.25, 0.0)


def test_a_misspelt_added_component_is_refused_not_taken_for_a_base_weight():
    with pytest.raises(ValueError, match=r"no component 'judg'.*answer, format, judge"):
        _wrap(NoWeights, {"judg": 0.0})
