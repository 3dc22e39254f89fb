"""Where a model judge's replies come from: a registry of judge backends, one interface.

A backend turns rendered rubrics (one user message each) into `Reply`s, one per message, in order, and
never raises for a request that failed: that is a reply with status `error` or `timeout`. `JudgeTask`
(`rlvr.tasks.judge`) keeps the cache, the strict parsing, the verdicts, the metrics and the stop-when-down
rule, whatever the backend. `http`: an OpenAI-compatible endpoint (`judge_client`); `local`: a causal LM
loaded in this process (`judge_local`). Each backend declares the task options it takes; an option of the
other backend is an error that says which backend it belongs to.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Optional, Protocol, Sequence

from rlvr.registry import Registry
from rlvr.tasks.task import check_count_option, check_seconds_option
from rlvr.tasks.verification.judge_client import Endpoint, Reply, chat_completion
from rlvr.tasks.verification.judge_local import LocalJudge

NAME = "judge"


class JudgeBackend(Protocol):
    """What `JudgeTask` asks of a backend. `model`: the judge's name in verdicts (`judge:MODEL`) and cache keys."""

    model: str

    def reply(self, contents: Sequence[str]) -> list[Reply]:
        """One reply per user message, in order; never raises for a failed request."""

    def down_message(self, reply: Reply) -> str:
        """Why every request of a batch failed and what to check (`reply`: one of them)."""


def _environment(variable: str, what: str, given: Optional[str]) -> str:
    if given:
        return str(given)
    value = os.environ.get(str(variable), "").strip()
    if not value:
        raise ValueError(f"{NAME}: no judge {what}: set the environment variable {variable} "
                         f"(or task.options.{what})")
    return value


class HttpJudge:
    """The judge behind an OpenAI-compatible chat-completions endpoint, up to `concurrency` requests at a time."""

    OPTIONS = ("model", "max_tokens", "base_url", "base_url_env", "model_env", "api_key_env", "concurrency",
               "timeout_seconds", "max_retries", "backoff_seconds", "max_backoff_seconds")

    def __init__(self, *, model: Optional[str] = None, max_tokens: int = 512, base_url: Optional[str] = None,
                 base_url_env: str = "RLVR_JUDGE_BASE_URL", model_env: str = "RLVR_JUDGE_MODEL",
                 api_key_env: str = "RLVR_JUDGE_API_KEY", concurrency: int = 8, timeout_seconds: float = 60.0,
                 max_retries: int = 3, backoff_seconds: float = 0.5, max_backoff_seconds: float = 30.0):
        url = _environment(base_url_env, "base_url", base_url)
        if "@" in url.partition("://")[2].partition("/")[0]:
            raise ValueError(f"{NAME}: the judge URL must not hold credentials; put the key in ${api_key_env}")
        self.endpoint = Endpoint(
            base_url=url, model=_environment(model_env, "model", model),
            api_key=os.environ.get(str(api_key_env), "").strip(),
            timeout_seconds=check_seconds_option(NAME, "timeout_seconds", timeout_seconds),
            max_retries=check_count_option(NAME, "max_retries", max_retries),
            backoff_seconds=check_seconds_option(NAME, "backoff_seconds", backoff_seconds),
            max_backoff_seconds=check_seconds_option(NAME, "max_backoff_seconds", max_backoff_seconds),
            max_tokens=check_count_option(NAME, "max_tokens", max_tokens, minimum=1))
        self.model = self.endpoint.model
        self.api_key_env, self.base_url_env = api_key_env, base_url_env
        self.concurrency = check_count_option(NAME, "concurrency", concurrency, minimum=1)

    def __repr__(self) -> str:  # the key stays out of every log
        return f"HttpJudge(url={self.endpoint.base_url!r}, model={self.model!r})"

    def reply(self, contents: Sequence[str]) -> list[Reply]:
        if not contents:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(contents)),
                                thread_name_prefix="rlvr-judge") as pool:
            return list(pool.map(lambda content: chat_completion(self.endpoint, content), contents))

    def down_message(self, reply: Reply) -> str:
        return (f"{NAME}: the judge at {self.endpoint.url} (model {self.model!r}) failed every request of "
                f"this batch ({reply.detail}). Check that the server is up and serves that model, the URL "
                f"(${self.base_url_env} or task.options.base_url) and the key in ${self.api_key_env}; "
                "or set task.options.on_judge_down=skip to leave such batches out of training")


JUDGE_BACKENDS: Registry = Registry("judge backend")
JUDGE_BACKENDS.add("http", HttpJudge)
JUDGE_BACKENDS.add("local", LocalJudge)


def build_judge_backend(name: str, options: Mapping[str, Any]) -> JudgeBackend:
    """The backend `name` (task.options.backend) built from the options given; an unknown backend, or an option
    that belongs to another backend, fails naming the valid choices."""
    try:
        backend = JUDGE_BACKENDS.get(str(name))
    except KeyError as exc:
        raise ValueError(f"{NAME}: task.options.backend: {exc.args[0]}") from None
    for key in options:
        if key not in backend.OPTIONS:
            owners = [other for other in JUDGE_BACKENDS if key in JUDGE_BACKENDS.get(other).OPTIONS]
            raise ValueError(f"{NAME}: task.options.{key} is an option of backend {' and '.join(owners)}, not {name}; "
                             f"backend {name} takes: {', '.join(backend.OPTIONS)}")
    return backend(**options)
