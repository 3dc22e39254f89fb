"""`rm:<base>`: a sequence-classification reward model scores each completion of a base task.

`task.name=rm:BASE` (for example `rm:gsm8k`, `rm:dataset`) takes its examples, prompts and components from
the task BASE (built with `task.options.base_options`) and adds one component, `reward_model`: the model's
one output logit for (prompt, completion), raw (no sigmoid: a Bradley-Terry logit keeps its scale, a sigmoid
flattens the scores a policy most needs told apart), normalised by `normalize` (`none`, `running`, `group`;
see `rlvr.tasks.verification.reward_normalization`) and clipped to [-clip, clip] when `clip` is set.
Weights: `reward_weights.reward_model` (default 1) and the base task's own.

The model (`path`: a local folder, `AutoModelForSequenceClassification` with num_labels=1) is loaded when
the task is built, on `device` in `dtype`; every batch (`score_batch`) is scored in forward passes of
`batch_size`, in eval mode without gradients, the scores read in float32. The text is the prompt and the
completion, through the reward model's own chat template when the run uses one (else the prompt's text and
the completion joined as they are), cut from the left to `max_length` tokens (the verdict's detail says so).

Groups for `group`: the rows that share one Example object, as the sampler repeats each example G times
(`rollout.group_size`), so a group is exactly one prompt's completions. Running moments for `running` live
on the task object (`moments`): every batch scored updates them, evaluation batches included, and they
start again from nothing when a run resumes (they are not in the checkpoint).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

from rlvr.tasks.wrapped_base import wrap_base
from rlvr.tasks.task import Example, Verdict, check_count_option, prompt_text, weighted_total
from rlvr.tasks.verification.judging import judge
from rlvr.tasks.verification.reward_normalization import NORMALIZATIONS, RunningMoments, clip_scores

NAME = "rm"
COMPONENT = "reward_model"


def _clip(clip) -> Optional[float]:
    if clip is None:
        return None
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 < clip < math.inf:
        raise ValueError(f"{NAME}: task.options.clip={clip!r} must be a finite number > 0, or null for no clip")
    return float(clip)


class RewardModelTask:
    """A base task's examples and components, plus `reward_model`: a reward model's score of each completion."""

    name = NAME

    def __init__(self, base: Optional[str] = None, *, build_base: Callable, reward_weights=None,
                 use_chat_template=True, seed=0, base_options: Optional[dict] = None, path: Optional[str] = None,
                 batch_size: int = 8, max_length: int = 1024, normalize: str = "none", clip=None,
                 device: str = "auto", dtype: str = "float32"):
        self.base, self.weights = wrap_base(
            NAME, COMPONENT, base, reward_weights=reward_weights, base_options=base_options,
            use_chat_template=use_chat_template, seed=seed, build_base=build_base,
            example="rm:gsm8k, rm:dataset with task.options.base_options.path=...")
        if not path:
            raise ValueError(f"{NAME}: task.options.path must name the reward model's folder")
        try:
            self.normalization = NORMALIZATIONS.get(normalize)
        except KeyError as exc:
            raise ValueError(f"{NAME}: task.options.normalize: {exc.args[0]}") from None
        self.normalize = normalize
        self.clip = _clip(clip)
        self.batch_size = check_count_option(NAME, "batch_size", batch_size, minimum=1)
        self.max_length = check_count_option(NAME, "max_length", max_length, minimum=1)
        from rlvr.tasks.verification.reward_model_scores import load_reward_model  # torch: only when one is built

        self.model, self.tokenizer = load_reward_model(str(path), str(dtype), str(device), who=NAME)
        self.templated = bool(use_chat_template) and getattr(self.tokenizer, "chat_template", None) is not None
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (getattr(self.model.config, "pad_token_id", None) or 0)
        self.moments = RunningMoments()  # the `running` normalisation's state, over every batch scored
        self.component_names = (*self.base.component_names, COMPONENT)
        self.primary_component = getattr(self.base, "primary_component", None) or (
            "answer" if "answer" in self.base.component_names else self.base.component_names[0])
        self.stop_strings = tuple(getattr(self.base, "stop_strings", ()))
        self.extracts_answers = bool(getattr(self.base, "extracts_answers", False))
        model_name = getattr(self.model.config, "_name_or_path", "") or str(path)
        self.verifier = f"reward_model:{model_name}"
        self.version = f"{normalize}" + (f"-clip{self.clip:g}" if self.clip is not None else "")

    # A score means something only beside another completion of the same prompt: the reward audit (`rlvr check
    # --reward`) asks whether a hack scores at least as high as the right answer there, on raw scores (these
    # options set so for the audit).
    relative_components = (COMPONENT,)
    audit_options = {"normalize": "none", "clip": None}

    def __repr__(self) -> str:
        return f"RewardModelTask(base={self.base.name!r}, normalize={self.normalize!r})"

    # -- examples come from the base task
    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        return self.base.examples(split, count, seed)

    def iter_eval(self):
        return self.base.iter_eval()

    # -- scoring
    def text(self, completion: str, example: Example) -> str:
        """What the reward model reads: the chat with the completion as the assistant's turn, or prompt + completion."""
        if not self.templated:
            return prompt_text(example.prompt) + completion
        messages = ([{"role": "user", "content": example.prompt}] if isinstance(example.prompt, str)
                    else list(example.prompt))
        return self.tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": completion}],
                                                  tokenize=False)

    def raw_scores(self, completions, examples) -> tuple[list[float], list[int]]:
        """The model's logit for each (completion, example), unnormalised (NaN for a text with no tokens), and
        how many tokens each text lost from its left to fit `max_length`."""
        from rlvr.tasks.verification.reward_model_scores import encode, score_rows

        encoded = [encode(self.tokenizer, self.text(c, e), templated=self.templated, max_length=self.max_length)
                   for c, e in zip(completions, examples)]
        rows = [item.ids for item in encoded if item.ids]
        scores = iter(score_rows(self.model, rows, batch_size=self.batch_size, pad_id=self.pad_id) if rows else [])
        return ([next(scores) if item.ids else math.nan for item in encoded],
                [item.truncated for item in encoded])

    def score(self, completion: str, example: Example) -> Verdict:
        return self.score_batch([completion], [example])[0]

    def score_batch(self, completions, examples) -> list[Verdict]:
        """Score the batch in forward passes of `batch_size`, normalise, clip, and add each to its base verdict."""
        completions, examples = list(completions), list(examples)
        raw, truncated = self.raw_scores(completions, examples)
        groups = [id(example) for example in examples]  # one group per Example object: one prompt's completions
        normalized, self.moments = self.normalization(raw, groups, self.moments)
        scores = clip_scores(normalized, self.clip)
        return [self._verdict(judge(self.base, c, e), raw_score, score, cut)
                for c, e, raw_score, score, cut in zip(completions, examples, raw, scores, truncated)]

    def _verdict(self, base: Verdict, raw: float, score: float, truncated: int) -> Verdict:
        components = {**base.components, COMPONENT: score}
        if math.isnan(score):  # the model gave no number: the row is left out, whatever the base said
            return Verdict(components=dict.fromkeys(components, math.nan), total=math.nan, status="error",
                           verifier=self.verifier, version=self.version,
                           detail=f"{COMPONENT}: the score is {raw} (no tokens to read, or a NaN logit)")
        detail = base.detail
        if truncated:
            detail = f"{detail}; " if detail else ""
            detail += f"{COMPONENT}: cut {truncated} tokens from the left to fit max_length={self.max_length}"
        return dataclasses.replace(base, components=components, total=weighted_total(components, self.weights),
                                   verifier=f"{base.verifier}+{self.verifier}",
                                   version=f"{base.version}+{self.version}", detail=detail[:500])


def reward_model_factory(build_base: Callable) -> Callable:
    """The `rm` family's factory: `rm:BASE` builds BASE with `build_base` (rlvr.tasks.build_task, passed in by
    the registry, which imports this module)."""
    def reward_model_task(base: Optional[str] = None, **options) -> RewardModelTask:
        return RewardModelTask(base, build_base=build_base, **options)
    return reward_model_task
