"""rlvr vs TRL's GRPOTrainer on one workload (W1 or W2), each side in its own process, alternating.

W1: format_copy prompts as chat messages through SmolLM2's chat template (its default system
prompt included), n from `random.Random(0)` in [-9999, 9999]; the format_copy reward (1.0 exact,
+0.2 tag, +0.1 strict); SmolLM2-135M-Instruct in fp32; LoRA r=16, alpha=32, dropout 0 on
q,k,v,o,gate,up,down; 4 prompts x 4 completions per step; 24 new tokens at most; temperature
1.0, top-p 1.0, no top-k; no KL; one epoch, one optimizer step per rollout batch; AdamW lr 2e-4
constant, gradient clipping 1.0; group-std advantages (sample std, as TRL); clip 0.2; no
gradient checkpointing; 2 torch threads. `--groups-per-microbatch 1` makes rlvr run its one
optimizer step as 4 accumulated microbatches of one group each (the same gradient as one pass
over the 16 rows, as its loss divides by the batch's global counts), and TRL the same (4 rows
per device batch, 4 accumulation steps, one generation round of 16): less memory, more time.

W2 (`--workload w2 --gsm8k-path TRAIN.jsonl`), long completions: the first GSM8K training
problems of that file, in file order, as `r1_zero` raw-text prompts (no chat template, as the
prompt is a template of its own); the gsm8k reward (1.0 for the right number in a well-formed
`</think> <answer>...</answer>`); up to 512 new tokens, stopping at EOS or at `</answer>` (kept,
as rlvr's task does; TRL's `generate` gets the stop string and the tokenizer); everything else as
W1 (SmolLM2-135M-Instruct fp32, LoRA r=16 alpha 32 on all 7 projections, 4 x 4, temperature 1.0,
one epoch, AdamW 2e-4 constant, clip 0.2, no KL, 2 threads), except that by default each side
runs its one optimizer step as 4 accumulated passes of one group (4 rows): in one 16-row pass
the rlvr side peaked at 19.6 GiB and TRL's was killed for memory on a 24 GiB machine. A step
costs a minute or more here, so `--steps 3 --warmup 1` is the usual W2 run.

The parent runs `--rounds` rounds of (rlvr, TRL) or (TRL, rlvr), alternating the order, so
machine drift hits both sides alike. Per side it prints the median seconds per step over
steps 3..N of every run (the first two are warm-up), the split (generation / log-probs /
update), peak resident memory, the rlvr / TRL ratios, a FLOP lower bound of the step from a
measured fp32 matmul rate, and rlvr's measured / bound.

    pip install -e ".[bench]"                      # TRL and datasets
    python benchmarks/comparisons/vs_trl.py --steps 8 --rounds 2
    python benchmarks/comparisons/vs_trl.py --workload w2 --gsm8k-path data/gsm8k/train.jsonl --steps 3 --warmup 1

`--microbatch-tokens N` packs rlvr's microbatches by token budget (`optim.microbatch_tokens`; TRL
keeps its split). `--decode-dtype bfloat16` runs rlvr's decoding steps on a bf16 copy of the
weights (`decode_loop`'s option `dtype`; TRL keeps fp32), and prints the sampler's gap to the trainer.
`--base-product-dtype bfloat16` runs the frozen base products of rlvr's update in bf16
(`model.base_product_dtype`; one epoch, as W1 and W2 are; TRL keeps fp32).
Results go to benchmarks/results/vs_trl.json (W2: vs_trl_w2.json). Numbers are for the machine it runs on.
`--model --device --dtype --backend --max-new-tokens --trl-vllm` change the setting of both sides (a CUDA
device, bf16, rlvr's `vllm` backend, TRL's colocated vLLM engine): `benchmarks/comparisons/gpu.sh` runs each
side that way and prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/comparisons/vs_trl.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))
MODEL = "smollm2-135m-instruct"
PROMPTS_PER_STEP, GROUP, LR, THREADS = 4, 4, 2e-4, 2
MAX_NEW_TOKENS = {"w1": 24, "w2": 512}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


SAMPLER_GAP_KEYS = ("logprob_abs_diff_mean", "mismatch_kl", "is_weight_mean")
VLLM_GPU_SHARE = 0.3  # the colocated vLLM engine's share of GPU memory, both sides (TRL's default)


@dataclass(frozen=True)
class Setup:
    """Where and how both sides run; the defaults are the CPU setting the docstring describes."""

    model: str = MODEL
    device: str = "cpu"  # cpu or cuda
    dtype: str = "float32"
    backend: str = "decode_loop"  # rlvr's rollout backend
    max_new_tokens: int = 0  # 0: the workload's own budget
    trl_vllm: bool = False  # TRL: use_vllm=True, vllm_mode="colocate"

    def new_tokens(self, workload: str) -> int:
        return self.max_new_tokens or MAX_NEW_TOKENS[workload]


@contextmanager
def gpu_memory_peak(result: dict, every_s: float = 0.05):
    """result["peak_gpu_bytes"]: the most device memory in use (all of it: CUDA context, allocator, a
    vLLM engine's KV cache) polled while the block ran; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        result["peak_gpu_bytes"] = None
        yield
        return
    peak, done = [0], threading.Event()

    def poll():
        while True:
            free, total = torch.cuda.mem_get_info()
            peak[0] = max(peak[0], total - free)
            if done.wait(every_s):
                return

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield
    finally:
        done.set()
        poller.join()
        result["peak_gpu_bytes"] = peak[0]


def w1_numbers(count: int) -> list[int]:
    rng = random.Random(0)
    return [rng.randint(-9999, 9999) for _ in range(count)]


def w2_task(gsm8k_path: str):
    """The gsm8k task W2 reads its problems from (r1_zero, raw text); its `train` list is in file order
    (the whole file: no held-out slice)."""
    from rlvr.tasks.gsm8k import GSM8KTask

    return GSM8KTask(train_path=gsm8k_path, eval_path=gsm8k_path, eval_size=0, prompt="r1_zero",
                     use_chat_template=False)


def w2_examples(gsm8k_path: str, count: int) -> list:
    task = w2_task(gsm8k_path)
    return [task.make_example(problem, i, "train") for i, problem in enumerate(task.train[:count])]


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# ----------------------------------------------------------------------------------------- rlvr
def run_rlvr(steps: int, out: Path, groups_per_microbatch: int = PROMPTS_PER_STEP, workload: str = "w1",
             gsm8k_path: str | None = None, setup: Setup = Setup(), microbatch_tokens: int = 0,
             decode_dtype: str = "model", base_product_dtype: str = "model") -> dict:
    import torch

    from rlvr.config import load_config
    from rlvr.tasks import TASKS
    from rlvr.tasks.format_copy import FormatCopyTask
    from rlvr.training.rl import train
    from rlvr.utils import read_jsonl

    class W1Task(FormatCopyTask):
        """format_copy whose training prompts are the W1 stream, in order."""

        name = "w1_format_copy"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._stream = iter(w1_numbers(10_000))

        def examples(self, split, count, seed):
            if split == "eval":
                return super().examples(split, count, seed)
            return [self.make_example(next(self._stream)) for _ in range(count)]

    from rlvr.tasks.gsm8k import GSM8KTask

    class W2Task(GSM8KTask):
        """gsm8k (r1_zero, raw text) whose training prompts are the file's problems, in order."""

        name = "w2_gsm8k"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._stream = iter(range(len(self.train)))

        def examples(self, split, count, seed):
            if split == "eval":
                return super().examples(split, count, seed)
            return [self.make_example(self.train[i], i, "train") for i in (next(self._stream) for _ in range(count))]

    for name, factory in (("w1_format_copy", W1Task), ("w2_gsm8k", W2Task)):
        if name not in TASKS:
            TASKS.add(name, factory)
    task_overrides = {"task.name": "w1_format_copy"}
    if workload == "w2":
        task_overrides = {"task.name": "w2_gsm8k", "task.use_chat_template": "false",
                          "task.options": json.dumps({"train_path": gsm8k_path, "eval_path": gsm8k_path,
                                                      "eval_size": 0, "prompt": "r1_zero"})}
    torch.set_num_threads(THREADS)
    backend_options = ({"dtype": setup.dtype, "gpu_memory_utilization": VLLM_GPU_SHARE}
                       if setup.backend == "vllm" else {})
    if decode_dtype != "model":
        if setup.backend != "decode_loop":
            raise ValueError(f"--decode-dtype is decode_loop's option, not {setup.backend}'s")
        backend_options = {"dtype": decode_dtype}
    memory: dict = {}
    with tempfile.TemporaryDirectory() as folder, gpu_memory_peak(memory):
        overrides = {
            "model.name": setup.model, "model.dtype": setup.dtype, "model.device": setup.device,
            "rollout.backend": setup.backend, "rollout.backend_options": json.dumps(backend_options),
            "model.lora": "true", "model.lora_rank": 16,
            "model.lora_alpha": 32, "model.lora_dropout": 0.0, "model.num_threads": THREADS,
            "model.gradient_checkpointing": "false", "model.base_product_dtype": base_product_dtype,
            **task_overrides, "rollout.batch_size": PROMPTS_PER_STEP, "rollout.group_size": GROUP,
            "rollout.max_new_tokens": setup.new_tokens(workload), "rollout.temperature": 1.0, "rollout.top_p": 1.0,
            "rollout.top_k": 0, "algorithm.name": "grpo", "algorithm.kl_coef": 0.0, "algorithm.ppo_epochs": 1,
            "algorithm.clip_low": 0.2, "algorithm.clip_high": 0.2, "algorithm.std": "sample",
            "optim.lr": LR, "optim.schedule": "constant", "optim.max_grad_norm": 1.0,
            # One optimizer step per iteration; with groups_per_microbatch < 4 its gradient is
            # accumulated over several microbatches (the same step: the loss divides by the batch's
            # global sequence / token counts), fewer activations alive at once.
            "optim.grad_accum_steps": PROMPTS_PER_STEP // groups_per_microbatch,
            # With a token budget the microbatches are whole groups packed longest first instead.
            **({"optim.microbatch_tokens": microbatch_tokens} if microbatch_tokens > 0 else {}),
            "train.iterations": steps, "train.eval_size": 0,
            "train.save_every": 10_000, "train.keep_checkpoints": 1, "train.progress": "false",
            "train.output_dir": folder, "train.run_name": "w1", "train.samples_every": 0,
        }
        config = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
        run_dir = train(config)
        records = read_jsonl(run_dir / "metrics.jsonl")
    result = {
        "side": "rlvr",
        "step_seconds": [r["time/iteration"] for r in records],
        "generation_seconds": [r.get("time/generation", 0.0) for r in records],
        "logprob_seconds": [r.get("time/logprobs", 0.0) for r in records],
        "update_seconds": [r.get("time/update", 0.0) for r in records],
        "reward_mean": [r["reward/mean"] for r in records],
        "completion_tokens": [r.get("completion_len/mean") for r in records],
        # The sampler against the trainer (present when the sampler is not the trainer, e.g. bf16 decoding steps).
        **{key: [r.get(f"rollout/{key}") for r in records] for key in SAMPLER_GAP_KEYS},
        "peak_rss_bytes": peak_rss(), **memory, "setup": asdict(setup), "decode_dtype": decode_dtype,
        "base_product_dtype": base_product_dtype,
    }
    out.write_text(json.dumps(result))
    return result


# ------------------------------------------------------------------------------------------ TRL
def run_trl(steps: int, out: Path, workload: str = "w1", gsm8k_path: str | None = None,
            groups_per_microbatch: int = PROMPTS_PER_STEP, setup: Setup = Setup()) -> dict:
    import torch

    from rlvr.models import resolve_model_path
    from rlvr.tasks.format_copy import FormatCopyTask
    from benchmarks.comparisons.trl_grpo import TrlSettings, build_trainer, task_reward

    torch.set_num_threads(THREADS)
    count = PROMPTS_PER_STEP * (steps + 2)
    if workload == "w2":
        task = w2_task(gsm8k_path)
        examples = w2_examples(gsm8k_path, count)
    else:
        task = FormatCopyTask()
        examples = [task.make_example(n) for n in w1_numbers(count)]
    rows = [{"prompt": example.prompt, "example_index": i} for i, example in enumerate(examples)]
    settings = TrlSettings(
        model_path=resolve_model_path(setup.model)[0], prompts_per_step=PROMPTS_PER_STEP, group_size=GROUP,
        max_new_tokens=setup.new_tokens(workload), lr=LR, steps=steps, lora_rank=16, lora_alpha=32,
        lora_targets=tuple(LORA_TARGETS), clip_low=0.2, clip_high=0.2, loss_type="grpo", seed=0,
        stop_strings=tuple(task.stop_strings), microbatches=PROMPTS_PER_STEP // groups_per_microbatch)
    extra_args = {"bf16": setup.dtype == "bfloat16" and setup.device == "cuda"}
    if setup.trl_vllm:
        extra_args.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=VLLM_GPU_SHARE)
    memory: dict = {}
    with gpu_memory_peak(memory):
        trainer, times = build_trainer(settings, rows, [task_reward(task, examples)], dtype=setup.dtype,
                                       extra_args=extra_args)
        trainer.train()
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    lengths = [r.get("completions/mean_length") for r in trainer.state.log_history if "reward" in r]
    result = {
        "side": "trl",
        "step_seconds": times.step,
        "generation_seconds": times.generation,
        "logprob_seconds": times.logprobs,
        "update_seconds": times.update,
        "reward_mean": rewards,
        "completion_tokens": lengths,
        "peak_rss_bytes": peak_rss(), **memory, "setup": asdict(setup),
    }
    out.write_text(json.dumps(result))
    return result


# ------------------------------------------------------------------------------------ FLOP bound
def matmul_gflops(size: int = 1024, repeats: int = 20) -> float:
    """The day's fp32 matmul rate on THREADS threads (`rlvr.models.product_speed.matmul_gflops`)."""
    import torch

    from rlvr.models.product_speed import matmul_gflops as measure

    torch.set_num_threads(THREADS)
    return measure(torch.float32, size, repeats)


def matmul_parameters() -> tuple[int, int]:
    """(decoder-body, LM-head) weights that every token multiplies by, from the embedded model's config."""
    from transformers import AutoConfig

    from rlvr.models import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(MODEL)[0])
    h, layers, inter, vocab = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    kv = h * config.num_key_value_heads // config.num_attention_heads
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * inter)  # attention + MLP weights
    return body, h * vocab


def flop_bounds(prompt_tokens: float, completion_tokens: float) -> dict:
    """FLOPs of one step (completion_tokens: per row, on average): `simple` = 2N per generated or prefilled
    token + 6N per trained token; `lora` = the same with 4N per trained token (frozen weights need no weight
    gradient) and the LM head only at completion positions. N = all parameters (embedding used as LM head)."""
    body, head = matmul_parameters()
    rows = PROMPTS_PER_STEP * GROUP
    completion = rows * completion_tokens
    prompt = rows * prompt_tokens
    gen = 2 * (body + head) * (prompt + completion)
    simple = gen + 6 * (body + head) * (prompt + completion)
    lora = gen + 4 * body * (prompt + completion) + 4 * head * completion
    return {"simple_flops": simple, "lora_flops": lora, "parameters_matmul": body + head}


# --------------------------------------------------------------------------------------- parent
def median_after_warmup(values: list[float], warmup: int = 2) -> float:
    return statistics.median(values[warmup:] if len(values) > warmup else values)


def mean_prompt_tokens(workload: str, gsm8k_path: str | None) -> float:
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.rollout import render_prompts
    from rlvr.tasks.format_copy import FormatCopyTask

    path, gguf = resolve_model_path(MODEL)
    tokenizer = load_tokenizer(path, gguf_file=gguf)
    if workload == "w2":
        rendered = [example.prompt for example in w2_examples(gsm8k_path, 64)]
    else:
        task = FormatCopyTask()
        rendered = render_prompts(tokenizer, [task.make_example(n) for n in w1_numbers(64)], use_chat_template=True)
    return statistics.mean(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in rendered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=["w1", "w2"], default="w1", help="w1: format_copy, 24 tokens; "
                        "w2: GSM8K r1_zero, up to 512 tokens (needs --gsm8k-path)")
    parser.add_argument("--gsm8k-path", help="W2: a GSM8K jsonl file (question, answer); its first problems are used")
    parser.add_argument("--steps", type=int, default=8, help="steps per run (the first --warmup are warm-up)")
    parser.add_argument("--warmup", type=int, default=2, help="steps per run left out of the medians")
    parser.add_argument("--rounds", type=int, default=2, help="A B rounds, the order alternating")
    parser.add_argument("--groups-per-microbatch", type=int, default=None, choices=[1, 2, 4],
                        help="both sides: groups per forward / backward pass, the rest accumulated into the one "
                             "optimizer step (default: W1 4, one pass over the batch; W2 1, as 16 rows of up to "
                             "~650 tokens in one pass take about 20 GiB on the rlvr side and more on TRL's)")
    parser.add_argument("--microbatch-tokens", type=int, default=0,
                        help="rlvr side: optim.microbatch_tokens, whole groups packed longest first under this many "
                             "padded tokens per microbatch (0, the default: --groups-per-microbatch groups each)")
    parser.add_argument("--decode-dtype", choices=["model", "bfloat16"], default="model",
                        help="rlvr side: decode_loop's option dtype (bfloat16: decoding steps on a bf16 copy of the "
                             "weights, its log-probs reported and corrected by truncated importance sampling)")
    parser.add_argument("--base-product-dtype", choices=["model", "bfloat16"], default="model",
                        help="rlvr side: model.base_product_dtype (bfloat16: the frozen base products of the update's "
                             "LoRA projections from a bf16 copy of the weights; the trainer is then another policy "
                             "than the fp32 sampler, whose log-probs decode_loop reports)")
    parser.add_argument("--model", default=MODEL, help="both sides' model: an embedded name or a model folder")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="both sides' device")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="both sides' weights")
    parser.add_argument("--backend", choices=["decode_loop", "hf_generate", "vllm"], default="decode_loop",
                        help="rlvr's rollout backend (vllm: a colocated engine, needs vLLM)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="token budget (0: W1 24, W2 512)")
    parser.add_argument("--trl-vllm", action="store_true", help="TRL generates with vLLM (use_vllm=True, "
                        f"vllm_mode='colocate', {VLLM_GPU_SHARE} of GPU memory; needs CUDA and vLLM)")
    parser.add_argument("--side", choices=["rlvr", "trl"], help="(internal) run one side in this process")
    parser.add_argument("--out", help="(internal) where the child writes its result")
    parser.add_argument("--json", help="result file (default benchmarks/results/vs_trl.json, W2 vs_trl_w2.json)")
    args = parser.parse_args()
    if args.workload == "w2":
        if not args.gsm8k_path or not Path(args.gsm8k_path).is_file():
            parser.error(f"--workload w2 needs --gsm8k-path, a GSM8K jsonl file (got {args.gsm8k_path!r})")
        args.gsm8k_path = str(Path(args.gsm8k_path).resolve())
    if args.groups_per_microbatch is None:
        args.groups_per_microbatch = PROMPTS_PER_STEP if args.workload == "w1" else 1
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be above --warmup ({args.warmup})")
    json_path = args.json or str(REPO / "benchmarks" / "results" / ("vs_trl.json" if args.workload == "w1"
                                                                     else "vs_trl_w2.json"))
    if args.microbatch_tokens < 0:
        parser.error(f"--microbatch-tokens must be >= 0 (0: off), got {args.microbatch_tokens}")
    if args.max_new_tokens < 0:
        parser.error(f"--max-new-tokens must be >= 0 (0: the workload's budget), got {args.max_new_tokens}")
    setup = Setup(args.model, args.device, args.dtype, args.backend, args.max_new_tokens, args.trl_vllm)
    if args.side:
        if args.side == "rlvr":
            run_rlvr(args.steps, Path(args.out), args.groups_per_microbatch, args.workload, args.gsm8k_path, setup,
                     args.microbatch_tokens, args.decode_dtype, args.base_product_dtype)
        else:
            run_trl(args.steps, Path(args.out), args.workload, args.gsm8k_path, args.groups_per_microbatch, setup)
        return 0
    if setup != Setup():
        parser.error("--model / --device / --dtype / --backend / --max-new-tokens / --trl-vllm go with --side "
                     "(benchmarks/comparisons/gpu.sh runs the sides that way); the A B rounds are the CPU setting")
    warm = args.warmup

    runs: dict[str, list[dict]] = {"rlvr": [], "trl": []}
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "TOKENIZERS_PARALLELISM": "false"}
    for round_index in range(args.rounds):
        order = ["rlvr", "trl"] if round_index % 2 == 0 else ["trl", "rlvr"]
        for side in order:
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "result.json"
                started = time.perf_counter()
                subprocess.run([sys.executable, __file__, "--side", side, "--steps", str(args.steps),
                                "--warmup", str(warm), "--workload", args.workload,
                                *(["--gsm8k-path", args.gsm8k_path] if args.gsm8k_path else []),
                                "--groups-per-microbatch", str(args.groups_per_microbatch),
                                "--microbatch-tokens", str(args.microbatch_tokens),
                                "--decode-dtype", args.decode_dtype,
                                "--base-product-dtype", args.base_product_dtype, "--out", str(out)],
                               check=True, cwd=REPO, env=env)
                result = json.loads(out.read_text())
            result["wall_seconds"] = time.perf_counter() - started
            runs[side].append(result)
            print(f"round {round_index + 1} {side}: "
                  f"median step {median_after_warmup(result['step_seconds'], warm):.2f} s, "
                  f"peak RSS {result['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)

    summary = {}
    for side, results in runs.items():
        pooled = {key: [v for r in results for v in r[key][warm:]]
                  for key in ("step_seconds", "generation_seconds", "logprob_seconds", "update_seconds")}
        lengths = [v for r in results for v in r.get("completion_tokens", [])[warm:] if v is not None]
        summary[side] = {
            "median_step_s": statistics.median(pooled["step_seconds"]),
            "median_generation_s": statistics.median(pooled["generation_seconds"]),
            "median_logprobs_s": statistics.median(pooled["logprob_seconds"]),
            "median_update_s": statistics.median(pooled["update_seconds"]),
            "per_run_median_step_s": [median_after_warmup(r["step_seconds"], warm) for r in results],
            "mean_completion_tokens": statistics.mean(lengths) if lengths else None,
            "peak_rss_gib": max(r["peak_rss_bytes"] for r in results) / 2**30,
        }
    prompt_tokens = mean_prompt_tokens(args.workload, args.gsm8k_path)
    gflops = matmul_gflops()
    rlvr, trl = summary["rlvr"], summary["trl"]
    # The bound uses rlvr's own completions (W1: the 24-token budget, which nearly every completion fills).
    completion_tokens = rlvr["mean_completion_tokens"] or MAX_NEW_TOKENS[args.workload]
    bounds = flop_bounds(prompt_tokens, completion_tokens)
    ratio_time = rlvr["median_step_s"] / trl["median_step_s"]
    ratio_rss = rlvr["peak_rss_gib"] / trl["peak_rss_gib"]
    bound_simple = bounds["simple_flops"] / (gflops * 1e9)
    bound_lora = bounds["lora_flops"] / (gflops * 1e9)

    print(f"\n{args.workload.upper()}: {PROMPTS_PER_STEP} prompts x {GROUP} completions, up to "
          f"{MAX_NEW_TOKENS[args.workload]} new tokens (completion tokens per row, mean: rlvr "
          f"{rlvr['mean_completion_tokens'] or 0:.0f}, TRL {trl['mean_completion_tokens'] or 0:.0f}), "
          f"{prompt_tokens:.0f} prompt tokens on average, {args.rounds} alternating rounds of {args.steps} steps, "
          f"median over steps {warm + 1}..{args.steps}\n")
    print("| side | s/step | generation | log-probs | update | peak RSS (GiB) |")
    print("|---|---|---|---|---|---|")
    for side in ("rlvr", "trl"):
        row = summary[side]
        print(f"| {side} | {row['median_step_s']:.2f} | {row['median_generation_s']:.2f} | "
              f"{row['median_logprobs_s']:.2f} | {row['median_update_s']:.2f} | {row['peak_rss_gib']:.2f} |")
    print(f"\nrlvr / TRL: step time {ratio_time:.2f}, peak RSS {ratio_rss:.2f}")
    gaps = {key: [v for r in runs["rlvr"] for v in r.get(key, [])[warm:] if v is not None] for key in SAMPLER_GAP_KEYS}
    if all(gaps.values()):
        summary["rlvr"]["sampler_gap"] = {key: statistics.mean(values) for key, values in gaps.items()}
        print("rlvr sampler against its trainer (mean over the measured steps): " +
              ", ".join(f"{key} {value:.2e}" for key, value in summary["rlvr"]["sampler_gap"].items()))
    print(f"fp32 matmul: {gflops:.0f} GFLOPS; FLOP bound of a step: {bound_simple:.2f} s (2N/6N per token), "
          f"{bound_lora:.2f} s (LoRA-aware); rlvr measured / bound: {rlvr['median_step_s'] / bound_simple:.2f}, "
          f"{rlvr['median_step_s'] / bound_lora:.2f}")
    out = Path(json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "argv": sys.argv[1:], "workload": args.workload, "summary": summary, "ratio_step_time": ratio_time,
        "ratio_peak_rss": ratio_rss,
        "matmul_gflops": gflops, "prompt_tokens_mean": prompt_tokens, "bound_simple_s": bound_simple,
        "bound_lora_s": bound_lora, "runs": runs,
    }, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
