"""A task of your own, outside rlvr: write a short word backwards inside <answer></answer> tags.

Train on it without touching rlvr:

    rlvr train examples/reverse_words.yaml
    rlvr train task.name=examples/reverse_words.py:ReverseWords 'task.options={min_letters: 3, max_letters: 4}'

rlvr calls `ReverseWords(**task.options, reward_weights=..., use_chat_template=..., seed=...)`
(the last three only because `__init__` names them) and then uses the interface of
`rlvr/tasks/task.py`: `name`, `component_names`, `examples(split, count, seed)`,
`score(completion, example)` returning a `Verdict`, and `iter_eval()`. `rlvr check --reward`
audits the reward; `format_allowances` tells it which format bonus is meant for a wrong answer.
"""

import random
import re

from rlvr.tasks.task import Example, Verdict, resolve_weights, weighted_total

LETTERS = "abcdefghijklmnopqrstuvwxyz"
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
WORD = re.compile(r"[A-Za-z]+")


class ReverseWords:
    name = "reverse_words"
    component_names = ("answer", "tag")
    default_weights = {"answer": 1.0, "tag": 0.1}
    stop_strings = ("</answer>",)  # generation ends here (kept in the text)
    # Not for an empty pair or the prompt's own `<answer></answer>` echoed: those hold no word.
    format_allowances = {"tag": "0.1 for one word of letters in the first tag pair, against 1.1 for the right one"}

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, min_letters=3, max_letters=5,
                 eval_size=64):
        if not 1 <= min_letters <= max_letters:
            raise ValueError(f"reverse_words: need 1 <= min_letters <= max_letters, got {min_letters}, {max_letters}")
        self.weights = resolve_weights(self.default_weights, reward_weights or {})
        self.use_chat_template = use_chat_template
        self.min_letters, self.max_letters = min_letters, max_letters
        eval_rng = random.Random(seed + 1_000_003)  # held-out words come from their own stream
        self.eval_words = [self.draw(eval_rng) for _ in range(eval_size)]
        self.held_out = set(self.eval_words)

    def draw(self, rng: random.Random) -> str:
        return "".join(rng.choice(LETTERS) for _ in range(rng.randint(self.min_letters, self.max_letters)))

    def make_example(self, word: str) -> Example:
        text = f"Write the word {word} backwards inside <answer></answer> tags."
        prompt = [{"role": "user", "content": text}] if self.use_chat_template else text
        return Example(prompt=prompt, ground_truth=word[::-1], metadata={"word": word})

    def examples(self, split: str, count: int, seed: int) -> list:
        if split == "eval":
            return [self.make_example(word) for word in self.eval_words[:count]]
        if split != "train":
            raise ValueError(f"reverse_words: unknown split {split!r}; valid splits: train, eval")
        rng, words = random.Random(seed), []
        while len(words) < count:
            word = self.draw(rng)
            if word not in self.held_out:
                words.append(word)
        return [self.make_example(word) for word in words]

    def iter_eval(self):
        return iter(self.examples("eval", len(self.eval_words), 0))

    def score(self, completion: str, example: Example) -> Verdict:
        match = ANSWER.search(completion)
        answer = match.group(1).strip() if match else None  # as written: `IBNY` is not `ibny`
        word = answer is not None and WORD.fullmatch(answer) is not None
        components = {"answer": float(answer == example.ground_truth), "tag": float(word)}
        return Verdict(components=components, total=weighted_total(components, self.weights), status="ok",
                       verifier="reverse_words", version="2", correct=answer == example.ground_truth,
                       detail="" if match else "no <answer>...</answer> span")
