"""`guess_number`: an environment task. Find a hidden whole number in 1-100 from "higher"/"lower" answers.

Each example hides one number (drawn from the seed; the eval numbers are a fixed set that training
never draws). Each assistant turn is one guess written `<guess>N</guess>` (generation stops at
`</guess>`); the environment answers `higher`, `lower` or `correct` (which ends the episode), and
a turn without a well-formed guess in range gets a reminder of the form and costs the turn. The
episode is judged from its transcript alone (the guesses are re-read from the assistant turns):

    solved = 1 if a guess within the first T turns (T = the turn budget) is the number, else 0
    speed  = (T - t) / (T - 1) when solved at turn t (1 at the first turn, 0 at the last), else 0
    total  = 1.0 * solved + 0.5 * speed       (weights: task.reward_weights)

`valid_guesses` (share of turns with a well-formed guess) is logged with weight 0: the form alone
earns nothing, so a policy cannot farm it. Binary search needs at most 7 turns, the default budget.
"""

from __future__ import annotations

import random
import re

from rlvr.tasks.task import Example, Verdict, check_count_option, resolve_weights, weighted_total
from rlvr.tasks.environment import Episode, EnvReply, Turn

VERSION = "1"
LOW, HIGH = 1, 100
EVAL_SEED = 2_718
GUESS_RE = re.compile(r"<guess>\s*(-?\d{1,6})\s*</guess>")
PROMPT = ("I am thinking of a whole number from {low} to {high}. Find it in at most {turns} guesses. Each turn, "
          "reply with one guess as <guess>N</guess>; I will answer higher, lower or correct.")
REMINDER = f"Reply with one whole number from {LOW} to {HIGH} as <guess>N</guess>."


def read_guess(text: str) -> int | None:
    """The number in the last `<guess>N</guess>` of a turn when it lies in 1-100, else None (malformed)."""
    matches = GUESS_RE.findall(text)
    if not matches:
        return None
    guess = int(matches[-1])
    return guess if LOW <= guess <= HIGH else None


def feedback(guess: int | None, target: int) -> str:
    if guess is None:
        return REMINDER
    if guess == target:
        return "correct"
    return "higher" if target > guess else "lower"


class GuessNumberTask:
    name = "guess_number"
    component_names = ("solved", "speed", "valid_guesses")
    primary_component = "solved"
    default_weights = {"solved": 1.0, "speed": 0.5, "valid_guesses": 0.0}
    stop_strings = ("</guess>",)
    tool_schemas = ()

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, max_turns=7, eval_size=20):
        self.max_turns = check_count_option(self.name, "max_turns", max_turns, minimum=2)
        check_count_option(self.name, "eval_size", eval_size, minimum=1)
        if eval_size > (HIGH - LOW + 1) // 2:
            raise ValueError(f"guess_number: eval_size={eval_size} would hold out more than half of the "
                             f"{HIGH - LOW + 1} numbers; use eval_size <= {(HIGH - LOW + 1) // 2}")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        numbers = list(range(LOW, HIGH + 1))
        random.Random(seed + EVAL_SEED).shuffle(numbers)
        self.eval_numbers = numbers[:eval_size]  # never drawn for training
        self.train_numbers = sorted(numbers[eval_size:])

    def example_for(self, target: int) -> Example:
        text = PROMPT.format(low=LOW, high=HIGH, turns=self.max_turns)
        prompt = [{"role": "user", "content": text}] if self.use_chat_template else text
        return Example(prompt=prompt, ground_truth=str(target), metadata={"target": target})

    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        if split == "eval":
            return [self.example_for(target) for target in self.eval_numbers[:count]]
        if split != "train":
            raise ValueError(f"guess_number: unknown split {split!r}; valid splits: train, eval")
        rng = random.Random(seed)
        return [self.example_for(rng.choice(self.train_numbers)) for _ in range(count)]

    def iter_eval(self):
        return iter(self.examples("eval", len(self.eval_numbers), 0))

    def demonstration(self, example: Example) -> list[str]:
        """The assistant turns of binary search on 1-100 for the example's number: at most 7 guesses.

        Each guess is the midpoint (rounded down) of what the earlier answers leave, so the last
        finds the number. For an SFT warm-up (`rlvr.rollout.episodes.demonstration_pairs` replays
        them against this environment, so the answers between them are its own).
        """
        target, low, high, turns = int(example.ground_truth), LOW, HIGH, []
        while True:
            guess = (low + high) // 2
            turns.append(f"<guess>{guess}</guess>")
            if guess == target:
                return turns
            low, high = (guess + 1, high) if target > guess else (low, guess - 1)

    # ---------------------------------------------------------------- the environment
    def start(self, example: Example) -> dict:
        return {"target": int(example.ground_truth), "guesses": []}

    def respond(self, state: dict, assistant_text: str) -> EnvReply:
        guess = read_guess(assistant_text)
        state["guesses"].append(guess)
        answer = feedback(guess, state["target"])
        return EnvReply(content=answer, role="user", done=answer == "correct")

    def score_episode(self, episode: Episode) -> Verdict:
        target = int(episode.example.ground_truth)
        guesses = [read_guess(text) for text in episode.assistant_turns][: self.max_turns]
        solved_at = next((turn for turn, guess in enumerate(guesses, start=1) if guess == target), None)
        solved = float(solved_at is not None)
        speed = (self.max_turns - solved_at) / (self.max_turns - 1) if solved_at is not None else 0.0
        valid = sum(guess is not None for guess in guesses) / len(guesses) if guesses else 0.0
        components = {"solved": solved, "speed": speed, "valid_guesses": valid}
        detail = f"guesses {guesses}, target {target}" + (f", truncated by {episode.truncated_by}"
                                                          if episode.truncated_by else "")
        return Verdict(components=components, total=weighted_total(components, self.weights), status="ok",
                       verifier=self.name, version=VERSION, correct=bool(solved), detail=detail)

    def score(self, completion: str, example: Example) -> Verdict:
        """A single completion judged as a one-turn episode."""
        return self.score_episode(Episode(example=example, turns=[Turn("assistant", completion)]))
