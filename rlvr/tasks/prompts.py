"""Prompt templates shared by the question-answer tasks (`task.options.prompt`).

`r1_zero` is DeepSeek R1-Zero's raw-text template (as in CS336 assignment 5): the prompt ends
in `<think>`, the model reasons, closes the tag and answers in `<answer>` tags; generation stops
at `</answer>` (kept). It is plain text, so it needs `task.use_chat_template=false`.
`question_only` is just the question: chat messages when the task uses the chat template,
raw text otherwise; the answer is then found in the free-form response.
"""

from __future__ import annotations

from typing import Union

from rlvr.tasks.task import Messages

R1_ZERO_TEMPLATE = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with "
    "the answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer "
    "here </answer>.\nUser: {question}\nAssistant: <think>"
)

PROMPTS = ("r1_zero", "question_only")
DEFAULT_PROMPT = "r1_zero"
RAW_TEXT_PROMPTS = ("r1_zero",)  # complete text templates: sent without the chat template
# What each prompt makes the model write after the prompt, and where generation should stop.
STOP_STRINGS = {"r1_zero": ("</answer>",), "question_only": ()}
# Where the answer span must start after, in the completion, to earn a format reward: r1_zero's
# prompt opens `<think>`, so the model must close it first (`rlvr.tasks.verification.answers.produced_answer`).
ANSWER_AFTER = {"r1_zero": "</think>", "question_only": None}


def prompt_uses_chat_template(options: dict) -> bool:
    """Whether `task.options` (its `prompt`, default `DEFAULT_PROMPT`) go through the chat template."""
    return options.get("prompt", DEFAULT_PROMPT) not in RAW_TEXT_PROMPTS


def check_prompt(task_name: str, prompt: str, use_chat_template: bool) -> None:
    if prompt not in PROMPTS:
        raise ValueError(f"{task_name}: unknown prompt {prompt!r}; valid prompts: {', '.join(PROMPTS)}")
    if prompt == "r1_zero" and use_chat_template:
        raise ValueError(
            f"{task_name}: prompt 'r1_zero' is a raw-text template; set task.use_chat_template=false "
            "(or task.options.prompt=question_only to keep the chat template)"
        )


def render_question(prompt: str, question: str, use_chat_template: bool) -> Union[str, Messages]:
    if prompt == "r1_zero":
        return R1_ZERO_TEMPLATE.format(question=question)
    if use_chat_template:
        return [{"role": "user", "content": question}]
    return question
