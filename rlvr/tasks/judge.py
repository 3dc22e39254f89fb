"""`judge:<base>`: a model grades each completion of a base task, over an endpoint or loaded in this process.

`task.name=judge:BASE` (for example `judge:gsm8k`, `judge:dataset`) takes its examples, prompts and
components from the task BASE (built with `task.options.base_options`) and adds one component, `judge`:
the judge model's score of the completion against a rubric (`rubric` / `rubric_file`, placeholders
`{question}`, `{completion}`, `{reference}`, `{scale}`), scaled to [0, 1]. Weights: `reward_weights.judge`
(default 1) and the base task's own; `{answer: 0, format: 0, judge: 1}` makes the judge the only reward.

Where the replies come from is `backend` (`rlvr.tasks.verification.judge_backends`): `http` (default), an
OpenAI-compatible endpoint whose URL, model and API key come from environment variables (`RLVR_JUDGE_BASE_URL`,
`RLVR_JUDGE_MODEL`, `RLVR_JUDGE_API_KEY`; the options `*_env` rename them; `base_url` and `model` may also
be given as options, the key never is), so the key is never in the config a run saves; or `local`, the causal
LM `model` (a folder, a `.gguf`, an embedded name) loaded in this process, replying greedily in batches of
`batch_size`. A batch is judged at once (`score_batch`): identical requests are asked once, the rest come from
a bounded cache. A reply without a strict `Score: N` last line is
`unjudgeable`; a request that failed is `error` or `timeout`; both have every component NaN and are
left out of the advantages. When every request of a batch failed, the judge is down: the run stops
(`ScorerUnavailable`, naming the URL) unless `on_judge_down: skip`.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable, Optional

from rlvr.tasks.wrapped_base import wrap_base
from rlvr.tasks.task import Example, JudgeCall, Verdict, check_count_option, prompt_text, weighted_total
from rlvr.tasks.verification.judge_backends import build_judge_backend
from rlvr.tasks.verification.judge_client import Reply, ReplyCache
from rlvr.tasks.verification.judge_rubric import DEFAULT_RUBRIC, Scale, check_template, parse_score, \
    render_rubric, rubric_hash
from rlvr.tasks.verification.judging import ScorerUnavailable, judge

NAME = "judge"
COMPONENT = "judge"
ON_JUDGE_DOWN = ("stop", "skip")
FAILED_STATUSES = ("error", "timeout")  # no reply to read: the request itself failed


def _scale(score_range, pass_fail) -> Scale:
    if not isinstance(pass_fail, bool):
        raise ValueError(f"{NAME}: task.options.pass_fail={pass_fail!r} must be true or false")
    if (not isinstance(score_range, (list, tuple)) or len(score_range) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                       for v in score_range)
            or not score_range[0] < score_range[1]):
        raise ValueError(f"{NAME}: task.options.score_range={score_range!r} must be [low, high] with low < high")
    return Scale(float(score_range[0]), float(score_range[1]), pass_fail)


class JudgeTask:
    """A base task's examples and components, plus `judge`: a model's score of each completion."""

    name = NAME

    def __init__(self, base: Optional[str] = None, *, build_base: Callable, reward_weights=None,
                 use_chat_template=True, seed=0, base_options: Optional[dict] = None, rubric: Optional[str] = None,
                 rubric_file: Optional[str] = None,
                 score_range=(0, 10), pass_fail: bool = False, backend: str = "http", model: Optional[str] = None,
                 max_tokens: Optional[int] = None, base_url: Optional[str] = None, base_url_env: Optional[str] = None,
                 model_env: Optional[str] = None, api_key_env: Optional[str] = None, concurrency: Optional[int] = None,
                 timeout_seconds: Optional[float] = None, max_retries: Optional[int] = None,
                 backoff_seconds: Optional[float] = None, max_backoff_seconds: Optional[float] = None,
                 batch_size: Optional[int] = None, device: Optional[str] = None, dtype: Optional[str] = None,
                 cache_size: int = 10_000, on_judge_down: str = "stop", correct_at: float = 1.0):
        self.base, self.weights = wrap_base(
            NAME, COMPONENT, base, reward_weights=reward_weights, base_options=base_options,
            use_chat_template=use_chat_template, seed=seed, build_base=build_base,
            example="judge:gsm8k, judge:dataset with task.options.base_options.path=...")
        if rubric is not None and rubric_file is not None:
            raise ValueError(f"{NAME}: give task.options.rubric or rubric_file, not both")
        template = Path(rubric_file).read_text() if rubric_file is not None else (rubric or DEFAULT_RUBRIC)
        self.template = check_template(template)
        self.scale = _scale(score_range, pass_fail)
        self.rubric_hash = rubric_hash(self.template, self.scale)
        if on_judge_down not in ON_JUDGE_DOWN:
            raise ValueError(f"{NAME}: task.options.on_judge_down={on_judge_down!r}; valid choices: "
                             f"{', '.join(ON_JUDGE_DOWN)}")
        self.on_judge_down = on_judge_down
        if isinstance(correct_at, bool) or not isinstance(correct_at, (int, float)) or not 0 <= correct_at <= 1:
            raise ValueError(f"{NAME}: task.options.correct_at={correct_at!r} must be in [0, 1] (the scaled score)")
        self.correct_at = float(correct_at)
        # the backend's own options, those given (None: not given, the backend's default)
        backend_options = dict(model=model, max_tokens=max_tokens, base_url=base_url, base_url_env=base_url_env,
                               model_env=model_env, api_key_env=api_key_env, concurrency=concurrency,
                               timeout_seconds=timeout_seconds, max_retries=max_retries,
                               backoff_seconds=backoff_seconds, max_backoff_seconds=max_backoff_seconds,
                               batch_size=batch_size, device=device, dtype=dtype)
        self.backend_name = backend
        self.judge_backend = build_judge_backend(backend, {k: v for k, v in backend_options.items() if v is not None})
        self.cache = ReplyCache(check_count_option(NAME, "cache_size", cache_size))
        self.component_names = (*self.base.component_names, COMPONENT)
        self.primary_component = getattr(self.base, "primary_component", None) or (
            "answer" if "answer" in self.base.component_names else self.base.component_names[0])
        self.stop_strings = tuple(getattr(self.base, "stop_strings", ()))
        self.extracts_answers = bool(getattr(self.base, "extracts_answers", False))
        self.verifier = f"judge:{self.judge_backend.model}"
        self.version = f"rubric-{self.rubric_hash}"

    def __repr__(self) -> str:
        # the backend shows no endpoint field beyond URL and model: the key stays out of every log
        return f"JudgeTask(base={self.base.name!r}, judge={self.judge_backend!r})"

    @property
    def endpoint(self):
        """The `http` backend's endpoint (None for another backend)."""
        return getattr(self.judge_backend, "endpoint", None)

    # -- examples come from the base task
    def examples(self, split: str, count: int, seed: int) -> list[Example]:
        return self.base.examples(split, count, seed)

    def iter_eval(self):
        return self.base.iter_eval()

    # -- scoring
    def request_key(self, completion: str, example: Example) -> tuple:
        """What makes two requests identical: the judge model, the rubric (and scale), question,
        completion and reference."""
        return (self.judge_backend.model, self.rubric_hash, prompt_text(example.prompt), completion,
                _reference(example))

    def rendered(self, completion: str, example: Example) -> str:
        return render_rubric(self.template, self.scale, prompt_text(example.prompt), completion, _reference(example))

    def score(self, completion: str, example: Example) -> Verdict:
        return self.score_batch([completion], [example])[0]

    def score_batch(self, completions, examples) -> list[Verdict]:
        """Judge every completion: each distinct request once (cache first), asked of the backend together."""
        keys = [self.request_key(c, e) for c, e in zip(completions, examples)]
        replies: dict = {}  # key -> Reply, from the cache or sent now
        to_send: dict = {}  # key -> the rendered rubric, each distinct request once
        for key, completion, example in zip(keys, completions, examples):
            if key in replies or key in to_send:
                continue
            hit = self.cache.get(key)
            if hit is not None:
                replies[key] = hit
            else:
                to_send[key] = self.rendered(completion, example)
        if to_send:
            sent = dict(zip(to_send, self.judge_backend.reply(list(to_send.values()))))
            for key, reply in sent.items():
                if reply.status == "ok":  # replies to read are kept; failures are asked again next time
                    self.cache.put(key, reply)
            replies.update(sent)
            if all(reply.status in FAILED_STATUSES for reply in sent.values()) and self.on_judge_down == "stop":
                raise ScorerUnavailable(self.judge_backend.down_message(next(iter(sent.values()))))
        first_use: set = set()
        verdicts = []
        for key, completion, example in zip(keys, completions, examples):
            fresh = key in to_send and key not in first_use
            first_use.add(key)
            verdicts.append(self._verdict(judge(self.base, completion, example), replies[key], fresh))
        return verdicts

    def _verdict(self, base: Verdict, reply: Reply, fresh: bool) -> Verdict:
        """The base verdict plus the `judge` component read from `reply` (fresh: this row sent the request)."""
        if reply.status == "ok":
            parsed = parse_score(reply.text, self.scale)
            status, detail = ("ok", "") if parsed.value is not None else ("unjudgeable", f"judge: {parsed.reason}")
        else:
            parsed, status, detail = None, reply.status, f"judge: {reply.detail}"
        call = JudgeCall(seconds=reply.seconds if fresh else 0.0, retries=reply.retries if fresh else 0,
                         cached=not fresh, unparsed=reply.status == "ok" and parsed.value is None)
        score = parsed.value if parsed is not None and parsed.value is not None else math.nan
        components = {**base.components, COMPONENT: score}
        if status != "ok":  # never a judgment passed off as 0: the row is left out, whatever the base said
            components = dict.fromkeys(components, math.nan)
            return Verdict(components=components, total=math.nan, status=status, verifier=self.verifier,
                           version=self.version, detail=detail[:500], judge_call=call)
        total = weighted_total(components, self.weights)
        correct = base.correct if self.base_has_weight() else score >= self.correct_at
        return dataclasses.replace(base, components=components, total=total, correct=correct,
                                   verifier=f"{base.verifier}+{self.verifier}",
                                   version=f"{base.version}+{self.version}", judge_call=call)

    def base_has_weight(self) -> bool:
        return any(self.weights.get(name, 0.0) != 0.0 for name in self.base.component_names)


def judge_factory(build_base: Callable) -> Callable:
    """The `judge` family's factory: `judge:BASE` builds BASE with `build_base` (rlvr.tasks.build_task, passed
    in by the registry, which imports this module)."""
    def judge_task(base: Optional[str] = None, **options) -> JudgeTask:
        return JudgeTask(base, build_base=build_base, **options)
    return judge_task


def _reference(example: Example) -> Optional[str]:
    return None if example.ground_truth is None else str(example.ground_truth)
