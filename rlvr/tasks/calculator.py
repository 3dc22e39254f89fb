"""`calculator_arithmetic`: 3-digit x 2-digit multiplication with a calculator tool, as an episode.

The questions come from the `integer` task's generator (`operands`, default [[100, 999], [10, 99]],
operation `*`; the eval questions are distinct, from their own stream, and never trained on). The
prompt offers the `calculator` tool in the chosen call format (`call_format`: `tagged`, the default,
`<calculator>12*34</calculator>`; or `chat_template`, the tokenizer's `<tool_call>` JSON) and asks for
the final answer in `<answer></answer>` tags. After each turn, `respond` ends the episode when the
turn holds a complete `<answer>` span or no call; otherwise it runs the calls and sends their results
as a `tool` message. The episode is judged on its last assistant turn only, and only when that turn
is a final answer: an episode that ends on a call (cut by `max_turns`) answered nothing. Components:
`answer` (the integer of that turn's `<answer>` span, else its last integer, is the product; weight 1),
`format` (the answer is a tagged integer and no call failed; weight 0, logged) and `strict` (both;
weight 0.1). Calling the tool earns nothing by itself: a policy could farm that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.tasks.verification.answers import extract_answer_tag
from rlvr.tasks.task import Example, Verdict, check_count_option, resolve_weights
from rlvr.tasks.environment import EnvReply, Episode, Turn, add_counts
from rlvr.tasks.verification.grading import Judgement, judgement_verdict
from rlvr.tasks.integer import ONLY_INTEGER_RE, IntegerTask, judge_integer
from rlvr.tools.execution import run_tool_calls
from rlvr.tools.formats import FORMATS
from rlvr.tools.toolbox import TOOLS

VERSION = "1"
DEFAULT_OPERANDS = ((100, 999), (10, 99))
ANSWER_STOP = "</answer>"
PROMPT = ("What is {a} * {b}? You may use a calculator: write a call such as {call} and stop; its result comes "
          "back. Give the final answer as an integer inside <answer></answer> tags.")
EXAMPLE_EXPRESSION = "12*34"  # the call shown in the prompt: not the question's own


@dataclass
class CalculatorState:
    """What one episode did so far: turns answered and the calls made and failed, per tool."""

    turns: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)


class CalculatorTask:
    name = "calculator_arithmetic"
    component_names = ("answer", "format", "strict")
    primary_component = "answer"
    extracts_answers = True  # Verdict.answer: the final answer's integer (maj@k votes on it)
    default_weights = {"answer": 1.0, "format": 0.0, "strict": 0.1}

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, call_format="tagged", max_turns=3,
                 eval_size=100, operands=DEFAULT_OPERANDS):
        self.max_turns = check_count_option(self.name, "max_turns", max_turns, minimum=1)
        if call_format not in FORMATS:
            raise ValueError(f"{self.name}: task.options.call_format={call_format!r}; valid choices: "
                             f"{', '.join(FORMATS.names())}")
        self.call_format = FORMATS.get(call_format)
        self.questions = IntegerTask(seed=seed, operands=[list(r) for r in operands], operations=("*",),
                                     eval_size=eval_size, use_chat_template=use_chat_template)
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.tools = [TOOLS.get("calculator")]
        self.tool_names = tuple(tool.name for tool in self.tools)
        # What the chat template lists (`tools=`): only where the template's own format is the call format;
        # the tagged format's instructions are in the prompt.
        self.tool_schemas = (tuple(tool.schema for tool in self.tools) if self.call_format.template_lists_tools
                             else ())
        self.stop_strings = self.call_format.stop_strings(self.tools) + (ANSWER_STOP,)
        self._example_call = self.call_format.write_call(self.tools[0], {"expression": EXAMPLE_EXPRESSION})

    # -- examples

    def _episode_example(self, question: Example) -> Example:
        meta = question.metadata
        text = PROMPT.format(a=meta["a"], b=meta["b"], call=self._example_call)
        prompt = [{"role": "user", "content": text}] if self.use_chat_template else text
        return Example(prompt=prompt, ground_truth=question.ground_truth, metadata={**meta, "question": text})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        return [self._episode_example(question) for question in self.questions.examples(split, count, seed)]

    def iter_eval(self):
        return (self._episode_example(question) for question in self.questions.iter_eval())

    # -- the episode

    def check_tokenizer(self, tokenizer) -> None:
        """The `chat_template` call format needs a template with a tool format (Qwen2.5's `<tool_call>`)."""
        self.call_format.check_template(getattr(tokenizer, "chat_template", None))

    def start(self, example: Example) -> CalculatorState:
        return CalculatorState()

    def respond(self, state: CalculatorState, assistant_text: str) -> EnvReply:
        state.turns += 1
        if extract_answer_tag(assistant_text):
            return EnvReply(done=True)  # a final answer: any call beside it is not run
        run = run_tool_calls(assistant_text, self.tools, self.call_format)
        if run.content is None:
            return EnvReply(done=True)  # no call: this turn is the answer
        add_counts(state.tool_calls, run.tool_calls)
        add_counts(state.tool_errors, run.tool_errors)
        return EnvReply(content=run.content, role="tool", tool_calls=run.tool_calls, tool_errors=run.tool_errors)

    def final_answer(self, episode: Episode) -> str | None:
        """The last assistant turn when it is a final answer (an `<answer>` span, or no call), else None."""
        turns = episode.assistant_turns
        if not turns:
            return None
        last = turns[-1]
        if not extract_answer_tag(last) and self.call_format.parse(last, self.tools):
            return None  # the episode ended on a call: the model never answered
        return last

    def score_episode(self, episode: Episode) -> Verdict:
        final = self.final_answer(episode)
        if final is None:
            judgement = Judgement(format=0.0, answer=0.0, detail="no final answer: the episode ended on a tool call"
                                  if episode.assistant_turns else "no assistant turn")
        else:
            judgement = judge_integer(final, episode.example.ground_truth, tagged=True)
            if judgement.status == "unjudgeable":  # a final answer without a number is a wrong answer
                judgement = Judgement(format=0.0, answer=0.0, detail="no integer in the final answer")
        state = episode.state if isinstance(episode.state, CalculatorState) else CalculatorState()
        tagged = final is not None and ONLY_INTEGER_RE.fullmatch(extract_answer_tag(final) or "x") is not None
        judgement.format = float(tagged and not any(state.tool_errors.values()))
        strict = float(judgement.format == 1.0 and judgement.answer == 1.0)
        verdict = judgement_verdict(judgement, self.weights, self.name, VERSION, extra={"strict": strict})
        if episode.truncated_by is not None:
            verdict.detail = f"{verdict.detail}; truncated by {episode.truncated_by}".lstrip("; ")
        return verdict

    def demonstration(self, example: Example) -> list[str]:
        """The assistant turns of a right episode: the call with the question's own operands, then the answer.

        For an SFT warm-up (`rlvr.rollout.episodes.demonstration_pairs` replays them against this
        environment, so the tool's reply between them is the calculator's own output).
        """
        meta = example.metadata
        call = self.call_format.write_call(self.tools[0], {"expression": f"{meta['a']}*{meta['b']}"})
        return [call, f"<answer>{example.ground_truth}</answer>"]

    def score(self, completion: str, example: Example) -> Verdict:
        """A single completion judged as a one-turn episode (no tool was run for it)."""
        return self.score_episode(Episode(example=example, turns=[Turn("assistant", completion)]))
