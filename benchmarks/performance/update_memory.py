"""Peak memory of W2's rlvr side, and where the heap goes microbatch by microbatch.

Runs the rlvr side of `benchmarks/comparisons/vs_trl.py`'s W2 (GSM8K `r1_zero` prompts, 4 x 4 completions of
up to 512 tokens, LoRA r=16, one group per microbatch or `--microbatch-tokens`, bf16 decoding steps
and base products by default, as in the W2 comparison) in this process, with the resident set
read from /proc every 20 ms and glibc's heap (`mallinfo2`: arena size, in use, free) at the start
and end of every microbatch's forward. It prints the peak RSS, the heap at each forward's end, and
writes all of it to `--json`; `--saved-tensors` adds what autograd keeps for the first microbatch's
backward, by last dimension and dtype (each storage once).

`--leave-out` undoes memory changes for one run, to measure what each is worth: `mask` (`sdpa_gqa`
takes transformers' boolean mask, which every layer's attention turns into a float copy that
autograd keeps), `mlp` (the SwiGLU product kept as the LoRA down projection's input instead of
recomputed, `rlvr.models.lora_mlp`), `grad_buffers` (gradients created by the first backward,
between the activations, instead of before the first forward, `rlvr.training.gradient_buffers`).
It swaps those functions for the run; nothing else changes. Run each setting in its own process:

    python benchmarks/performance/update_memory.py --gsm8k-path data/gsm8k/train.jsonl --steps 1
    python benchmarks/performance/update_memory.py --gsm8k-path data/gsm8k/train.jsonl --steps 1 --leave-out mlp
    python benchmarks/performance/update_memory.py --gsm8k-path data/gsm8k/train.jsonl --steps 1 \\
        --leave-out mask mlp grad_buffers
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/performance/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.comparisons import vs_trl  # noqa: E402

LEAVE_OUT = ("mask", "mlp", "grad_buffers")
GIB = 2**30


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_reader():
    """A function returning glibc's heap as {"heap", "in_use", "free", "mmapped"} bytes, or None without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None

    def read() -> dict:
        info = libc.mallinfo2()
        return {"heap": info.arena, "in_use": info.uordblks, "free": info.fordblks, "mmapped": info.hblkhd}

    return read


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssPoll:
    """The resident set every `interval` seconds on a thread, as (seconds, bytes)."""

    def __init__(self, interval: float = 0.02):
        self.samples: list[tuple[float, int]] = []
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.started, rss_bytes()))
            time.sleep(interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def leave_out(names, assign=setattr) -> None:
    """Swap the named memory changes for what they replaced (see the module docstring); `assign(owner, name,
    value)` makes each swap (a test passes pytest's monkeypatch.setattr, which undoes them)."""
    unknown = sorted(set(names) - set(LEAVE_OUT))
    if unknown:
        raise ValueError(f"--leave-out {unknown}: unknown; valid: {', '.join(LEAVE_OUT)}")
    if "mask" in names:
        from transformers.masking_utils import sdpa_mask

        import rlvr.models.kernels as kernels

        assign(kernels, "additive_sdpa_mask", sdpa_mask)  # read when load_policy registers sdpa_gqa
    if "mlp" in names:
        import rlvr.models.policy as policy

        assign(policy, "install_fused_lora_mlp", lambda model: 0)
    if "grad_buffers" in names:
        from rlvr.training.gradient_buffers import GradientBuffers

        assign(GradientBuffers, "allocate", lambda self: None)  # drop_unreached then keeps autograd's gradients


def saved_tensor_bytes(function, *args, **kwargs):
    """`function(*args, **kwargs)` and what autograd keeps for its backward: {"last dim, dtype": bytes}, each
    storage counted once (a tensor kept by several functions, or a view, is one storage)."""
    import torch

    storages: dict = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = f"{tensor.shape[-1] if tensor.dim() else 0}, {str(tensor.dtype).removeprefix('torch.')}"
        storages.setdefault(storage.data_ptr(), (key, storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = function(*args, **kwargs)
    totals: dict = {}
    for key, nbytes in storages.values():
        totals[key] = totals.get(key, 0) + nbytes
    return result, dict(sorted(totals.items(), key=lambda item: -item[1]))


def record_microbatches(marks: list, poll: RssPoll, read_heap, assign=setattr, saved: dict | None = None) -> None:
    """Wrap the update's forward so that each microbatch's start and end are marked with the heap and RSS; with
    `saved`, fill it with what autograd keeps for the first microbatch (`saved_tensor_bytes`)."""
    import rlvr.training.update as update

    score = update.score_minibatch

    def mark(name: str) -> None:
        marks.append({"seconds": time.perf_counter() - poll.started, "event": name, "rss": rss_bytes(),
                      **(read_heap() if read_heap else {})})

    def recorded(*args, **kwargs):
        mark("forward start")
        if saved is not None and not saved:
            scores, totals = saved_tensor_bytes(score, *args, **kwargs)
            saved.update(totals)
        else:
            scores = score(*args, **kwargs)
        mark("forward end")
        return scores

    assign(update, "score_minibatch", recorded)


def run(args, assign=setattr) -> dict:
    leave_out(args.leave_out, assign)
    read_heap = heap_reader()
    marks: list = []
    saved: dict | None = {} if args.saved_tensors else None
    setup = vs_trl.Setup(model=args.model, max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory() as folder, RssPoll() as poll:
        record_microbatches(marks, poll, read_heap, assign, saved)
        result = vs_trl.run_rlvr(
            args.steps, Path(folder) / "result.json", groups_per_microbatch=1, workload="w2",
            gsm8k_path=args.gsm8k_path, setup=setup, microbatch_tokens=args.microbatch_tokens,
            decode_dtype=args.decode_dtype, base_product_dtype=args.base_product_dtype,
        )
    return {
        "argv": sys.argv[1:], "leave_out": list(args.leave_out),
        "peak_rss_bytes": max([rss for _, rss in poll.samples] + [mark["rss"] for mark in marks]),
        "step_seconds": result["step_seconds"], "generation_seconds": result["generation_seconds"],
        "update_seconds": result["update_seconds"], "completion_tokens": result["completion_tokens"],
        "microbatch_marks": marks, "rss_samples": poll.samples, "saved_tensor_bytes": saved,
    }


def report(result: dict) -> str:
    lines = [f"leave out: {', '.join(result['leave_out']) or 'nothing'}",
             f"peak RSS {result['peak_rss_bytes'] / GIB:.2f} GiB; steps {result['step_seconds']} s "
             f"(update {result['update_seconds']}); completion tokens per row {result['completion_tokens']}",
             "| forward | seconds | RSS GiB | heap GiB | in use GiB | free GiB |", "|---|---|---|---|---|---|"]
    ends = [mark for mark in result["microbatch_marks"] if mark["event"] == "forward end"]
    for index, mark in enumerate(ends, 1):
        heap = [f"{mark[key] / GIB:.2f}" if key in mark else "n/a" for key in ("heap", "in_use", "free")]
        lines.append(f"| {index} | {mark['seconds']:.1f} | {mark['rss'] / GIB:.2f} | {' | '.join(heap)} |")
    saved = result.get("saved_tensor_bytes")
    if saved:
        lines.append(f"kept for the first microbatch's backward: {sum(saved.values()) / GIB:.2f} GiB; by last "
                     "dimension and dtype (MiB): " + ", ".join(f"{key}: {nbytes / 2**20:.1f}"
                                                          for key, nbytes in list(saved.items())[:12]))
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k-path", required=True, help="GSM8K train jsonl (question, answer)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--leave-out", nargs="*", default=[], choices=LEAVE_OUT)
    parser.add_argument("--microbatch-tokens", type=int, default=2700)
    parser.add_argument("--decode-dtype", choices=("model", "bfloat16"), default="bfloat16")
    parser.add_argument("--base-product-dtype", choices=("model", "bfloat16"), default="bfloat16")
    parser.add_argument("--model", default=vs_trl.MODEL, help="an embedded name or a model folder")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="0: W2's 512")
    parser.add_argument("--saved-tensors", action="store_true",
                        help="also sum what autograd keeps for the first microbatch's backward (saved-tensor hooks)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    result = run(args)
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
