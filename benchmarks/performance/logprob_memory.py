"""Peak memory of the log-prob path alone, vocabulary 151,936 (Qwen-sized), forward + backward.

Compares, at several sequence lengths L, the naive path (full [B, L, V] logits, fp32 log-softmax,
gather; what a plain `model(...).logits` implementation does) with rlvr's
`compute_completion_logprobs` (LM head only at completion positions, in row chunks recomputed in
backward; `rlvr_frozen_head`: the same with the tied LM head frozen, as under LoRA, where each
chunk's gradient with respect to the hidden states is taken in the forward pass). Each measurement runs in a
fresh process: peak resident memory during the call minus the resident memory just before it. The model is a
small random Llama (hidden 128, 2 layers) with the real vocabulary size, so the LM head dominates as it does in
real small models.

    python benchmarks/performance/logprob_memory.py                       # B=4, L = 128 256 512 1024
    python benchmarks/performance/logprob_memory.py --lengths 256 2048
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VOCAB = 151_936


def current_rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def measure(path: str, batch: int, length: int, prompt: int) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.core import compute_per_token_logprobs
    from rlvr.models.completion_logprobs import compute_completion_logprobs

    torch.manual_seed(0)
    torch.set_num_threads(2)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    input_ids = torch.randint(0, VOCAB, (batch, length))
    attention_mask = torch.ones_like(input_ids)
    completion_mask = torch.zeros(batch, length - 1)
    completion_mask[:, prompt - 1 :] = 1
    before = current_rss()
    if path == "naive":
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()  # [B, L-1, V]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    elif path == "chunked_full":
        logprobs = compute_per_token_logprobs(model, input_ids, attention_mask)
    else:
        if path == "rlvr_frozen_head":  # as with LoRA: the (tied) LM head takes no gradient
            model.get_output_embeddings().weight.requires_grad_(False)
        logprobs, _ = compute_completion_logprobs(model, input_ids, attention_mask, prompt, with_entropy=False,
                                                  completion_mask=completion_mask)
    (logprobs * completion_mask).sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"path": path, "batch": batch, "length": length, "peak_bytes": peak - before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="*", default=[128, 256, 512, 1024])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (not scored)")
    parser.add_argument("--paths", nargs="*", default=["naive", "chunked_full", "rlvr", "rlvr_frozen_head"])
    parser.add_argument("--one", nargs=2, metavar=("PATH", "LENGTH"), help="(internal) measure one point")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "logprob_memory.json"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.batch, int(args.one[1]), args.prompt)))
        return 0
    rows = []
    for length in args.lengths:
        for path in args.paths:
            out = subprocess.run([sys.executable, __file__, "--one", path, str(length), "--batch", str(args.batch),
                                  "--prompt", str(args.prompt)], check=True, capture_output=True, text=True, cwd=REPO)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"L={length:5d} {path:13s} peak {rows[-1]['peak_bytes'] / 2**20:8.0f} MiB", flush=True)
    logits_mib = {L: args.batch * (L - 1) * VOCAB * 4 / 2**20 for L in args.lengths}
    print(f"\nV={VOCAB}, B={args.batch}, forward + backward, peak RSS above the pre-call level (MiB)\n")
    print("| L | one fp32 [B, L-1, V] tensor | " + " | ".join(args.paths) + " |")
    print("|---|---|" + "---|" * len(args.paths))
    for length in args.lengths:
        cells = [f"{r['peak_bytes'] / 2**20:.0f}" for p in args.paths for r in rows
                 if r["path"] == p and r["length"] == length]
        print(f"| {length} | {logits_mib[length]:.0f} | " + " | ".join(cells) + " |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"argv": sys.argv[1:], "vocab": VOCAB, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
