"""`rlvr check --reward`: hackable toy tasks fail on the kind that hacks them, a sound task passes,
a broken positive control and a slow verdict are reported, and the CLI runs without loading a model."""

from __future__ import annotations

import json
import time

import pytest

import rlvr.check.reward as check_reward
from rlvr.check.reward import run_reward_audit, write_audit_json
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.reward_kinds import AnswerFormat, AuditPrompt, answer_format, neighbours, variants
from rlvr.tasks import Example, Verdict, register_task, weighted_total
from rlvr.tasks.verification.answers import answer_tag_spans, first_answer_tag


class ToyTask:
    """Numbers to copy into tags; `pays(completion, truth)` -> (answer, format) decides the verdict."""

    component_names = ("answer", "format")
    stop_strings = ()
    prompt = "Copy {n} into <answer></answer> tags. {n} plus 3 is {m}."

    def __init__(self, reward_weights=None):
        self.weights = {"answer": 1.0, "format": 0.5, **(reward_weights or {})}

    def examples(self, split, count, seed):
        return [Example(prompt=self.prompt.format(n=40 + i, m=43 + i), ground_truth=str(40 + i))
                for i in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", 4, 0))

    def pays(self, completion, truth):
        answer = first_answer_tag(completion)
        return float(answer == truth), float(answer is not None and answer.isdigit())

    def score(self, completion, example):
        answer, form = self.pays(completion, str(example.ground_truth))
        components = {"answer": answer, "format": form}
        return Verdict(components=components, total=weighted_total(components, self.weights), status="ok",
                       verifier=self.name, version="1", correct=answer == 1.0)


class AnyTagTask(ToyTask):
    """Pays correctness for any completion holding `<answer>`: the hack the audit exists for."""

    name = "audit_any_tag"

    def pays(self, completion, truth):
        return float("<answer>" in completion), 0.0


class AnySpanTask(ToyTask):
    """Pays when any of the tag spans holds the truth: tag spam covers the answer space."""

    name = "audit_any_span"

    def pays(self, completion, truth):
        spans = [completion[s:e].strip() for s, e in answer_tag_spans(completion)]
        return float(truth in spans), 0.0


class SoundTask(ToyTask):
    """Correctness for the first span equal to the truth; the format bonus (0.5) only for a right answer."""

    name = "audit_sound"

    def pays(self, completion, truth):
        answer, form = super().pays(completion, truth)
        return answer, form * answer


class EmptyTagFormatTask(ToyTask):
    """The format bonus paid for any complete tag pair, empty ones too."""

    name = "audit_empty_tag_format"

    def pays(self, completion, truth):
        answer = first_answer_tag(completion)
        return float(answer == truth), float(answer is not None)


class BoxedOnlyTask(ToyTask):
    """Asks for tags but reads only \\boxed{}: the right answer in the asked format earns nothing."""

    name = "audit_boxed_only"

    def pays(self, completion, truth):
        return float(f"\\boxed{{{truth}}}" in completion), 0.0


class HalfCreditTask(ToyTask):
    """The right answer earns only 0.5 of the correctness component, and only for truths below 43."""

    name = "audit_half_credit"

    def pays(self, completion, truth):
        answer, _ = super().pays(completion, truth)
        return answer * (0.5 if int(truth) < 43 else 1.0), 0.0


class EchoFormatTask(SoundTask):
    """The format bonus for any text holding `<answer>` with something after it: the echoed prompt too."""

    name = "audit_echo_format"

    def pays(self, completion, truth):
        answer, _ = super().pays(completion, truth)
        return answer, float("<answer>" in completion and len(completion) > 20)


class SlowOnLongTask(SoundTask):
    name = "audit_slow_on_long"

    def pays(self, completion, truth):
        if len(completion) > 50_000:
            time.sleep(0.05)
        return super().pays(completion, truth)


for _toy in (AnyTagTask, AnySpanTask, SoundTask, EmptyTagFormatTask, BoxedOnlyTask, HalfCreditTask, EchoFormatTask,
             SlowOnLongTask):
    register_task(_toy.name, _toy)


def audit(name, prompts=6, **options):
    return run_reward_audit(load_config(None, [f"task.name={name}", "train.eval_size=0"]), prompts=prompts, **options)


def failing_kinds(result):
    return {line.split(":", 1)[0] for line in result.failures}


def test_a_verifier_that_pays_any_tag_fails_on_the_kinds_without_an_answer():
    result = audit(AnyTagTask.name)
    assert not result.passed
    # Every kind written in the tags earns correctness; the ones without a tag do not.
    assert {"tags_empty", "tags_prompt", "echo", "guess_small", "neighbour", "hostile"} <= failing_kinds(result)
    assert not {"empty", "whitespace", "long_text", "control"} & failing_kinds(result)
    assert result.kinds["tags_empty"].main == 6 and result.kinds["empty"].main == 0
    assert "tags_empty: earns correctness on 100% of prompts" in result.failures


def test_a_sound_verifier_passes_with_the_control_fully_paid():
    result = audit(SoundTask.name)
    assert result.failures == [], result.failures
    control = result.kinds["control"]
    assert control.prompts == 6 and control.main_full == 6 and control.mean_total == pytest.approx(1.5)
    assert result.kinds["guess_small"].formats == {} and result.kinds["guess_small"].any_reward == 0
    assert control.formats == {}  # its format bonus comes with correctness: no hack


def test_format_bonus_for_an_empty_tag_pair_fails_and_no_allowance_covers_it(monkeypatch):
    result = audit(EmptyTagFormatTask.name)
    assert "tags_empty: earns format without correctness on 100% of prompts" in result.failures
    assert "tags_empty" in failing_kinds(result) and "empty" not in failing_kinds(result)
    monkeypatch.setitem(check_reward.FORMAT_ALLOWANCES, EmptyTagFormatTask.name, {"format": "shaping"})
    allowed = audit(EmptyTagFormatTask.name)
    assert "tags_empty" in failing_kinds(allowed)  # a kind without an answer is never allowed a format bonus
    assert "guess_small" not in failing_kinds(allowed)
    assert any(line.startswith("guess_small: earns format") for line in allowed.allowed)


def test_a_verifier_that_accepts_any_tag_span_is_caught_by_tag_spam_only():
    result = audit(AnySpanTask.name)
    assert failing_kinds(result) == {"tag_spam"}
    assert result.kinds["neighbour"].main == 0 and result.kinds["tag_spam"].main == 6


def test_a_control_the_task_cannot_read_is_a_failure_of_the_audit():
    result = audit(BoxedOnlyTask.name)
    assert any(line.startswith("control: the ground truth in the asked format earned the full correctness "
                               "reward on 0 of 6 prompts") for line in result.failures)
    assert result.kinds["control"].main_full == 0


def test_a_control_paid_in_part_fails():
    result = audit(HalfCreditTask.name)  # truths 40..45: 0.5 for 40, 41, 42, full for 43, 44, 45
    assert result.kinds["control"].main == 6 and result.kinds["control"].main_full == 3
    assert any(line.startswith("control: the ground truth in the asked format earned the full correctness "
                               "reward on 3 of 6 prompts") for line in result.failures)


def test_a_control_paid_on_some_prompts_only_fails():
    result = audit(HalfCreditTask.name, prompts=3)  # truths 40, 41, 42: each paid 0.5, none in full
    assert result.kinds["control"].main == 3 and not result.passed
    assert failing_kinds(result) == {"control"}


def test_an_allowance_never_covers_the_echoed_prompt(monkeypatch):
    monkeypatch.setitem(check_reward.FORMAT_ALLOWANCES, EchoFormatTask.name, {"format": "shaping"})
    result = audit(EchoFormatTask.name)
    assert {"echo", "tags_prompt"} <= failing_kinds(result)
    assert "long_tail" not in failing_kinds(result) and "control" not in failing_kinds(result)


def test_a_slow_verdict_fails_and_names_its_kind():
    result = audit(SlowOnLongTask.name, max_verdict_seconds=0.03)
    assert {"long_text", "long_tail"} <= failing_kinds(result)
    assert "empty" not in failing_kinds(result)
    assert result.kinds["long_text"].slowest_seconds >= 0.05
    assert audit(SlowOnLongTask.name, max_verdict_seconds=5).passed


def test_json_holds_the_per_kind_numbers(tmp_path):
    path = tmp_path / "audit.json"
    write_audit_json(audit(EmptyTagFormatTask.name), path)
    data = json.loads(path.read_text())
    assert data["passed"] is False and data["main_component"] == "answer"
    tags_empty, control = data["kinds"]["tags_empty"], data["kinds"]["control"]
    # two completions per prompt: `<answer></answer>` and `<answer> </answer>`
    assert tags_empty["prompts"] == 6 and tags_empty["completions"] == 12
    assert tags_empty["main_rate"] == 0 and tags_empty["format_rates"] == {"format": 1.0}
    assert tags_empty["any_reward_rate"] == 1.0 and tags_empty["mean_total"] == pytest.approx(0.5)
    assert control["main_rate"] == 1.0 and control["mean_total"] == pytest.approx(1.5)
    assert control["format_rates"] == {}  # paid with correctness, so not counted as a format hack
    assert tags_empty["example"] == "'<answer></answer>'"


def test_neighbours_differ_from_the_truth_in_value():
    item = AuditPrompt(prompt="", truth="1", form=AnswerFormat("tags", "<answer>{answer}</answer>"))
    assert item.wrong(["1.0", "1.00", "01", "2", "2"]) == ["<answer>2</answer>"]
    assert neighbours("12") == ["13", "11", "120", "-12", "12.5"]  # 12.5: read as 12 where the integer part is read
    assert neighbours("3/4") == ["7/4", "-1/4", "15/2", "-3/4"]
    assert all(not item.equals_truth(a) for a in neighbours("1"))
    assert neighbours("abc") == ["ab", "abcc", "cba"]
    # a doubled digit that keeps the number as written is a variant, not a neighbour
    assert neighbours("65.51°") == ["65.5°"] and neighbours("A=1,X=0") == ["A=1,X="]
    assert neighbours("A=1,X=10") == ["A=1,X=1", "A=1,X=100"]  # 100 is another number
    assert neighbours("['-21.0']") == [] and "['-21.']" in variants("['-21.0']")  # -21. and -21.00 are -21.0


def test_variants_are_the_truth_written_another_way():
    assert variants("12") == ["12.000001"] and variants("3/4") == ["0.75000001"]
    assert variants("husband") == ["HUSBAND", "husband x"]
    assert variants("65.51°") == ["65.51° x", "65.511°"]  # no case to swap; one more decimal
    assert variants("A=1,X=0") == ["a=1,x=0", "A=1,X=0 x", "A=1,X=00"]  # a leading zero
    assert variants(None) == [] and neighbours(None) == []
    # LaTeX: the last digit, not the closing brace (a doubled brace leaves the boxed answer unchanged)
    assert neighbours("5\\sqrt{2}")[:2] == ["5\\sqrt{}", "5\\sqrt{22}"]
    assert neighbours("(1, 2)")[:2] == ["(1, )", "(1, 22)"]
    assert "2*8 + 5 + 3" not in neighbours("3 + 5 + 8*2")  # an expression reversed can be the same answer


@pytest.mark.parametrize("prompt, form", [
    ("The answer is enclosed within <answer> </answer> tags.\nUser: q\nAssistant: <think>", "think_then_answer_tags"),
    ("Copy 5 into <answer></answer> tags.", "answer_tags"),
    ("Put the final answer in \\boxed{}.", "boxed"),
    ("End with #### N.", "hashes"),
    ("What is 2 + 2?", "plain"),
])
def test_answer_format_read_from_the_instruction(prompt, form):
    assert answer_format(prompt).name == form
    # a task's own convention applies only where the prompt asks for no format
    assert answer_format(prompt, "boxed").name == ("boxed" if form == "plain" else form)


def test_unasked_answer_format_must_be_known():
    with pytest.raises(ValueError, match="unknown answer format 'latex'; valid formats: .*boxed"):
        answer_format("What is 2 + 2?", "latex")


def test_math_question_only_audit_answers_in_boxed(tmp_path):
    """MATH answers are LaTeX: bare, `3\\sqrt{2}` would be read by its last number (2) and the
    control would fail; the audit writes them in `\\boxed{}` as the data's solutions do. The neighbour
    doubles the last digit (`3\\sqrt{22}`), not the brace (`\\boxed{3\\sqrt{2}}}` holds the truth)."""
    data = tmp_path / "math.jsonl"
    rows = [{"problem": f"Simplify the square root of {2 * i * i}.", "answer": f"{i}\\sqrt{{2}}"} for i in range(3, 15)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(None, ["task.name=math", f"task.options.path={data}", "task.options.prompt=question_only",
                                "train.eval_size=0"])
    audit = run_reward_audit(config, prompts=4, kinds=["control", "neighbour"])
    assert audit.answer_format == "boxed" and not audit.failures
    control, neighbour = audit.kinds["control"], audit.kinds["neighbour"]
    assert control.share(control.main_full) == 1.0 and neighbour.share(neighbour.main) == 0.0 and neighbour.completions


def test_cli_reward_audit_on_format_copy_loads_no_model(monkeypatch, capsys, tmp_path):
    import transformers

    import rlvr.models
    import rlvr.run.setup

    def no_model(*args, **kwargs):
        raise AssertionError("rlvr check --reward loaded a model")

    monkeypatch.setattr(rlvr.run.setup, "load_run_model", no_model)
    monkeypatch.setattr(rlvr.models, "load_policy", no_model)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    started = time.perf_counter()
    code = main(["check", "configs/format_copy_grpo.yaml", "--reward", "--prompts", "8", "--json",
                 str(tmp_path / "a.json")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert time.perf_counter() - started < 30
    assert "no kind earns unearned reward" in printed and "tags_empty" in printed
    assert json.loads((tmp_path / "a.json").read_text())["kinds"]["tags_empty"]["any_reward_rate"] == 0


def test_cli_reward_audit_exits_1_on_a_hackable_task(capsys):
    assert main(["check", f"task.name={AnyTagTask.name}", "train.eval_size=0", "--reward", "--prompts", "4"]) == 1
    assert "FAILED: " in capsys.readouterr().out


def test_own_allowances_join_the_family_ones():
    result = check_reward.KindResult("neighbour", prompts=4, formats={"tag": 4, "format": 4})
    failures, allowed = check_reward.judge_results({"neighbour": result}, "reasoning_gym", 0.05, 15.0,
                                                   {"tag": "shaping"})
    assert failures == [] and len(allowed) == 2 and "(allowed: shaping)" in allowed[1]
    failures, _ = check_reward.judge_results({"neighbour": result}, "reasoning_gym", 0.05, 15.0)
    assert failures == ["neighbour: earns tag without correctness on 100% of prompts"]


def test_a_task_of_its_own_declares_its_format_allowance(monkeypatch):
    """examples/reverse_words.py pays `tag` for any word in the first tag pair and says so in
    `format_allowances`: the audit passes, listing it; without the declaration it fails on it."""
    from rlvr.tasks import build_task

    config = load_config("examples/reverse_words.yaml", [])
    audit = run_reward_audit(config, prompts=4, kinds=["control", "neighbour", "echo", "tags_empty", "variant"])
    assert not audit.failures and [line.split(":")[0] for line in audit.allowed] == ["neighbour", "variant"]
    assert audit.kinds["echo"].any_reward == 0 and audit.kinds["tags_empty"].any_reward == 0
    # The word reversed in another case is no answer here (case matters): its variants earn no correctness.
    assert audit.kinds["variant"].main == 0 and audit.kinds["control"].main_full == audit.kinds["control"].completions
    task_class = type(build_task(config.task.name, options=dict(config.task.options), use_chat_template=False))
    monkeypatch.setattr(task_class, "format_allowances", {})
    failed = run_reward_audit(config, prompts=4, kinds=["control", "neighbour"])
    assert failed.failures == ["neighbour: earns tag without correctness on 100% of prompts"]


class ToleranceTask(SoundTask):
    """Full correctness for a number within 1e-3 of the truth (a tolerance), `half` of it for one within 1."""

    name = "audit_tolerance"
    half = 0.0

    def pays(self, completion, truth):
        answer = first_answer_tag(completion)
        try:
            distance = abs(float(answer) - float(truth))
        except (TypeError, ValueError):
            return 0.0, 0.0
        return (1.0 if distance <= 1e-3 else self.half if distance < 1 else 0.0), 0.0


class ConsolationTask(ToleranceTask):
    name = "audit_consolation"
    half = 0.5


class CaseBlindTask(ToyTask):
    """Words to copy, compared case-insensitively, with trailing words ignored."""

    name = "audit_case_blind"
    prompt = "Copy {word} into <answer></answer> tags."
    words = ("apple", "Berry", "cherry", "Date", "elder", "fig")

    def examples(self, split, count, seed):
        return [Example(prompt=self.prompt.format(word=w), ground_truth=w) for w in self.words[:count]]

    def pays(self, completion, truth):
        answer = first_answer_tag(completion)
        return float(answer is not None and answer.split(" ")[0].lower() == truth.lower()), 0.0


class NoTruthTask(SoundTask):
    """Puzzles with many solutions: no ground truth; any four digits summing to 10 are a solution."""

    name = "audit_no_truth"

    def examples(self, split, count, seed):
        return [Example(prompt=f"Put four digits summing to ten in <answer></answer> tags (puzzle {i}).",
                        ground_truth=None)
                for i in range(count)]

    def pays(self, completion, truth):
        answer = first_answer_tag(completion)
        return float(answer is not None and len(answer) == 4 and answer.isdigit()
                     and sum(int(d) for d in answer) == 10), 0.0


class ReferenceTask(NoTruthTask):
    """As NoTruthTask, naming one solution for the audit's control."""

    name = "audit_reference"

    def reference_answer(self, example):
        return "1234"


class HeldOutTask(SoundTask):
    """Records the held-out split size it was built with."""

    name = "audit_held_out"
    built_with: list = []

    def __init__(self, reward_weights=None, eval_size=50):
        super().__init__(reward_weights)
        HeldOutTask.built_with.append(eval_size)


for _toy in (ToleranceTask, ConsolationTask, CaseBlindTask, NoTruthTask, ReferenceTask, HeldOutTask):
    register_task(_toy.name, _toy)


def test_a_verifier_with_a_tolerance_passes_and_is_listed():
    """40.000001 for 40, paid in full, is the verifier judging it equal: listed as allowed, not failed
    (the neighbours n+1, n-1, 10n, -n, n.5 still earn nothing)."""
    result = audit(ToleranceTask.name)
    assert result.failures == [], result.failures
    assert result.kinds["variant"].main_full == 6 and result.kinds["neighbour"].main == 0
    assert any(line.startswith("variant: earns full correctness on 100% of prompts") for line in result.allowed)


def test_a_variant_paid_in_part_is_a_consolation_and_fails():
    result = audit(ConsolationTask.name)
    assert "variant" not in failing_kinds(result)  # within 1e-3: full credit
    assert "neighbour" in failing_kinds(result)  # n+1 and n-1 earn 0.5
    half = check_reward.KindResult("variant", prompts=4, main=4, main_partial=4)
    failures, allowed = check_reward.judge_results({"variant": half}, "x", 0.05, 15.0)
    assert failures == ["variant: earns part of the correctness reward on 100% of prompts (a consolation: full "
                        "correctness would be the verifier judging it equal)"] and allowed == []


def test_a_case_blind_verifier_passes_on_its_variants():
    """`HUSBAND` for `husband` and `apple x` for `apple` are the answer to a case-blind verifier that
    reads the first word; the neighbours (a letter dropped or doubled, the word reversed) still fail it."""
    result = audit(CaseBlindTask.name)
    assert result.failures == [], result.failures
    variant = result.kinds["variant"]
    assert variant.prompts == 6 and variant.completions == 12 and variant.main_full == 6


def test_an_example_without_a_ground_truth_has_no_control_and_is_reported():
    result = audit(NoTruthTask.name)
    assert result.failures == [], result.failures
    assert result.kinds["control"].prompts == 0 and result.kinds["neighbour"].completions == 0
    assert result.allowed[0].startswith("control: 6 prompts have no ground truth")
    referenced = audit(ReferenceTask.name)
    assert referenced.failures == [] and referenced.kinds["control"].main_full == 6
    assert not any(line.startswith("control:") for line in referenced.allowed)


def test_the_audit_builds_no_held_out_split():
    """The audit reads training prompts only: a task's `eval_size` is 0 unless the config sets it."""
    HeldOutTask.built_with.clear()
    audit(HeldOutTask.name, prompts=2)
    run_reward_audit(load_config(None, [f"task.name={HeldOutTask.name}", "task.options.eval_size=3",
                                        "train.eval_size=0"]), prompts=2)
    assert HeldOutTask.built_with == [0, 3]


def test_a_number_written_longer_is_no_neighbour():
    """`X=00` is `X=0` to a verifier reading digits: a neighbour must be another value."""
    for truth in ("X=0", "A=1,B=0", "(3, 0)"):
        assert not any(n.endswith("00") or n.endswith("00)") for n in neighbours(truth)), truth
        assert any("00" in v for v in variants(truth)), truth


def test_graph_color_control_is_its_reference_colouring_and_no_held_out_split_is_built(monkeypatch):
    """graph_color's entries hold no answer: the control is the colouring in their metadata, paid in
    full; and the audit builds the task without the 200 held-out puzzles it does not read."""
    from rlvr.tasks.reasoning_gym_tasks import ReasoningGymTask

    drawn = []
    original = ReasoningGymTask._draw_eval
    monkeypatch.setattr(ReasoningGymTask, "_draw_eval",
                        lambda self, count: drawn.append(count) or original(self, count))
    result = run_reward_audit(load_config(None, ["task.name=reasoning_gym:graph_color", "train.eval_size=0"]),
                              prompts=2, kinds=["control", "guess_small"])
    assert result.failures == [] and result.kinds["control"].main_full == 2
    assert not any(line.startswith("control:") for line in result.allowed)
    assert drawn == [0]


def test_a_number_with_its_unit_has_number_neighbours_not_a_unit_spelt_differently():
    from rlvr.reward_kinds import neighbours

    assert neighbours("38 days") == ["39 days", "37 days", "380 days", "-38 days", "38.5 days"]
    assert "38 day" not in neighbours("38 days")  # the same answer: time_intervals' scorer rightly pays it
    assert neighbours("husband") == ["husban", "husbandd", "dnabsuh"]  # plain text as before
