"""A loopback stand-in for an OpenAI-compatible chat-completions server: a judge with a scripted rule.

The judge's tests use it to inject every fault on purpose; `benchmarks/learning/judge_learning.py` uses it as a judge
with a fixed, known rule, to show a run learning through the whole judge path (requests, parsing, cache).

`StubJudge(plan)` serves on 127.0.0.1 at a free port in a thread. For each request, `plan(answer, count)`
(the text between the rubric's answer tags in the user message, `<answer>` or the default rubric's
`<answer-NONCE>`, and how many requests this answer has had before, 0 first; with `whole_prompt=True` the
whole user message instead, for a judge that reads all of it) returns what to do: `Reply(text)`,
`Status(code, retry_after)`, `Slow(seconds, text)`, `Raw(body)` (a 200 whose body is not the expected JSON),
`Drop()` (close the connection unanswered) or `StopServer()` (drop, then stop serving: later connections are
refused). It counts requests, requests per answer, the most running at once, and the Authorization headers it saw.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

# the nonce closes its own fence
ANSWER_RE = re.compile(r"<answer(-[0-9a-f]+|)>\n(?P<answer>.*?)\n</answer\1>", re.DOTALL)


@dataclass
class Reply:
    text: str


@dataclass
class Status:
    code: int
    retry_after: Optional[str] = None


@dataclass
class Slow:
    seconds: float
    text: str = "Score: 5"


@dataclass
class Raw:
    body: bytes


@dataclass
class Drop:
    pass


@dataclass
class StopServer:
    pass


def grade_by_integer(answer: str, count: int):
    """The default plan: reasoning that mentions other numbers, then `Score: N` with N the answer's integer."""
    return Reply(f"The answer has {len(answer)} characters and 3 words at most.\nScore: {answer.strip()}")


class StubJudge:
    def __init__(self, plan: Callable = grade_by_integer, whole_prompt: bool = False):
        self.plan = plan
        self.whole_prompt = whole_prompt
        self.lock = threading.Lock()
        self.requests = 0
        self.per_answer: dict[str, int] = {}
        self.running = 0
        self.max_running = 0
        self.authorization: list[Optional[str]] = []
        self.bodies: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.stopped = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                content = body["messages"][0]["content"]
                match = ANSWER_RE.search(content)
                answer = content if stub.whole_prompt or not match else match.group("answer")
                with stub.lock:
                    stub.requests += 1
                    count = stub.per_answer.get(answer, 0)
                    stub.per_answer[answer] = count + 1
                    stub.running += 1
                    stub.max_running = max(stub.max_running, stub.running)
                    stub.authorization.append(self.headers.get("Authorization"))
                    stub.bodies.append(body)
                try:
                    self._act(stub.plan(answer, count), body)
                finally:
                    with stub.lock:
                        stub.running -= 1

            def _act(self, action, body):
                if isinstance(action, Slow):
                    time.sleep(action.seconds)
                    action = Reply(action.text)
                if isinstance(action, (Drop, StopServer)):
                    if isinstance(action, StopServer):
                        threading.Thread(target=stub.stop, daemon=True).start()
                    self.close_connection = True
                    self.connection.close()
                    return
                if isinstance(action, Status):
                    self.send_response(action.code)
                    if action.retry_after is not None:
                        self.send_header("Retry-After", action.retry_after)
                    payload = b'{"error": "stub"}'
                else:
                    payload = action.body if isinstance(action, Raw) else json.dumps(
                        {"id": "stub", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": action.text},
                                      "finish_reason": "stop"}]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
