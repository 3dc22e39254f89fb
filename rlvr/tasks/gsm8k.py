"""`gsm8k`: grade-school math word problems with a numeric final answer (`#### N`).

Data: jsonl records with `question` and `answer` (the worked solution ending in `#### N`), from
`task.options.path` (a seeded slice held out for eval), `train_path` / `eval_path`, or
`dataset=openai/gsm8k dataset_config=main` when the hub or a local cache is reachable. The
answer is compared as an exact rational number: commas, `$`, a trailing `.0` and signs are
handled, so `$1,000.00` equals `1000`. Prompt: `r1_zero` (default) or `question_only`.
"""

from __future__ import annotations

from typing import Optional

from rlvr.tasks.verification.answers import gsm8k_final_answer
from rlvr.tasks.verification.grading import DEFAULT_TIMEOUT_SECONDS, Grader, grade_number
from rlvr.tasks.problems import Problem, ProblemTask, load_splits
from rlvr.tasks.prompts import DEFAULT_PROMPT


def gsm8k_problem(record: dict) -> Optional[Problem]:
    if "question" not in record or "answer" not in record:
        raise ValueError(f"gsm8k: a record needs 'question' and 'answer' fields, got {sorted(record)}")
    return Problem(question=record["question"], ground_truth=gsm8k_final_answer(str(record["answer"])),
                   metadata={"solution": record["answer"]})


class GSM8KTask(ProblemTask):
    name = "gsm8k"
    verifier = "gsm8k_number"
    version = "2"  # 2: with r1_zero the format needs an answer span of the model's own

    def __init__(self, reward_weights=None, use_chat_template=True, seed=0, prompt=DEFAULT_PROMPT,
                 path=None, train_path=None, eval_path=None, dataset=None, dataset_config="main",
                 train_split="train", eval_split="test", eval_size=None, split_seed=0,
                 timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
        train, held_out = load_splits(
            self.name, gsm8k_problem, path=path, train_path=train_path, eval_path=eval_path, dataset=dataset,
            dataset_config=dataset_config, train_split=train_split, eval_split=eval_split,
            eval_size=eval_size, split_seed=split_seed,
        )
        super().__init__(train, held_out, reward_weights=reward_weights, use_chat_template=use_chat_template,
                         prompt=prompt, timeout_seconds=timeout_seconds)

    def grader(self) -> Grader:
        return grade_number
