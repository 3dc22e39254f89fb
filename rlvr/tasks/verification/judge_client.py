"""One chat-completions request to an OpenAI-compatible endpoint, with a timeout, bounded retries and a cache.

Standard library only (urllib). `chat_completion` sends one request and retries at most
`max_retries` times on a dropped connection, a timeout, or HTTP 429/500/502/503/504, waiting
`backoff_seconds * 2**attempt` (capped at `max_backoff_seconds`) or the server's `Retry-After` (same cap);
other HTTP errors and a reply that is not the expected JSON are not retried. It never raises: the outcome
is a `Reply` with status `ok`, `timeout` or `error`. The API key lives only in `Endpoint.api_key`, which
no repr, detail or error message shows. `ReplyCache` is a bounded, thread-safe LRU of replies.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

RETRY_HTTP_STATUSES = (429, 500, 502, 503, 504)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask. `api_key` is never shown (repr=False) and never written anywhere."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 ; requests go to {base_url}/chat/completions
    model: str
    api_key: str = field(default="", repr=False)
    timeout_seconds: float = 60.0  # per socket operation (connect, each read)
    max_retries: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    max_tokens: int = 512
    temperature: float = 0.0

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class Reply:
    """The judge's message text (None unless status is ok), how it ended, and what it took."""

    text: Optional[str]
    status: str  # ok, timeout, error
    detail: str = ""
    seconds: float = 0.0
    retries: int = 0


@dataclass(frozen=True)
class _Attempt:
    text: Optional[str] = None
    status: str = "ok"
    detail: str = ""
    retryable: bool = False
    retry_after: Optional[float] = None


def retry_after_seconds(header: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds a `Retry-After` header asks for (a number, or an HTTP date), None when absent or unreadable."""
    if header is None or not header.strip():
        return None
    try:
        return max(0.0, float(header.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header.strip())
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_delay(attempt: int, endpoint: Endpoint, retry_after: Optional[float]) -> float:
    """Seconds to wait before retry number `attempt + 1`: the server's Retry-After if it gave one, else
    exponential, either capped at `max_backoff_seconds`."""
    wait = retry_after if retry_after is not None else endpoint.backoff_seconds * 2 ** attempt
    return min(wait, endpoint.max_backoff_seconds)


def _open(request: urllib.request.Request, timeout: float):
    host = urllib.parse.urlsplit(request.full_url).hostname or ""
    opener = _NO_PROXY_OPENER if host in LOOPBACK_HOSTS else urllib.request.build_opener()
    return opener.open(request, timeout=timeout)


def _message_text(body: bytes) -> _Attempt:
    try:
        payload = json.loads(body)
        text = payload["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return _Attempt(status="error", detail=f"malformed reply ({type(exc).__name__}): {body[:120]!r}")
    if not isinstance(text, str):
        return _Attempt(status="error", detail=f"malformed reply: message content is {type(text).__name__}")
    return _Attempt(text=text)


def _post_once(endpoint: Endpoint, body: bytes) -> _Attempt:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    request = urllib.request.Request(endpoint.url, data=body, headers=headers, method="POST")
    try:
        with _open(request, endpoint.timeout_seconds) as response:
            return _message_text(response.read())
    except urllib.error.HTTPError as exc:
        retryable = exc.code in RETRY_HTTP_STATUSES
        hint = " (check the API key variable)" if exc.code in (401, 403) else ""
        return _Attempt(status="error", detail=f"HTTP {exc.code}{hint}", retryable=retryable,
                        retry_after=retry_after_seconds(exc.headers.get("Retry-After")) if retryable else None)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (socket.timeout, TimeoutError)):
            return _Attempt(status="timeout", detail=f"no reply within {endpoint.timeout_seconds:g} s", retryable=True)
        return _Attempt(status="error", detail=f"cannot connect: {exc.reason}", retryable=True)
    except (socket.timeout, TimeoutError):
        return _Attempt(status="timeout", detail=f"no reply within {endpoint.timeout_seconds:g} s", retryable=True)
    except (http.client.HTTPException, ConnectionError, OSError) as exc:
        return _Attempt(status="error", detail=f"connection failed: {type(exc).__name__}", retryable=True)


def chat_completion(endpoint: Endpoint, content: str, sleep: Callable[[float], None] = time.sleep) -> Reply:
    """Ask the endpoint about one user message; at most 1 + max_retries requests. Never raises."""
    body = json.dumps({"model": endpoint.model, "messages": [{"role": "user", "content": content}],
                       "temperature": endpoint.temperature, "max_tokens": endpoint.max_tokens}).encode("utf-8")
    started = time.perf_counter()
    retries = 0
    while True:
        attempt = _post_once(endpoint, body)
        if attempt.status == "ok" or not attempt.retryable or retries >= endpoint.max_retries:
            detail = attempt.detail + (f" after {retries} retries" if retries and attempt.status != "ok" else "")
            return Reply(text=attempt.text, status=attempt.status, detail=detail,
                         seconds=time.perf_counter() - started, retries=retries)
        sleep(backoff_delay(retries, endpoint, attempt.retry_after))
        retries += 1


class ReplyCache:
    """A bounded least-recently-used map from a request's key to its `Reply`; safe across threads.
    `max_entries` 0 keeps nothing."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Reply] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[Reply]:
        with self._lock:
            reply = self._entries.get(key)
            if reply is not None:
                self._entries.move_to_end(key)
            return reply

    def put(self, key: Hashable, reply: Reply) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries[key] = reply
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
