"""Does SFT / expert iteration teach the embedded SmolLM2 format_copy on a CPU?

(a) `rlvr expert-iter configs/format_copy_expert_iter.yaml`: greedy eval exact match after each
round (round 0 = the base model). (b) `rlvr sft configs/format_copy_sft.yaml` on 64 generated
correct answers (prompt = the chat-rendered format_copy prompt, response = `<answer>N</answer>` +
EOS): greedy eval exact match before and after. Both run as a user would, a fresh process each.

    python benchmarks/learning/sft_and_expert_iteration.py
    python benchmarks/learning/sft_and_expert_iteration.py --write-sft-data runs/format_copy_sft.jsonl   # data only

Runs go to `runs/bench-ei` and `runs/bench-sft` (deleted first). Numbers are for the machine it runs on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as `python benchmarks/learning/NAME.py`: the package, this checkout's rlvr
    sys.path.insert(0, str(REPO))

from benchmarks.learning.bench_runs import save_figure  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write_sft_data(path: Path, count: int, model: str = "smollm2-135m-instruct", seed: int = 0) -> Path:
    """`count` correct format_copy pairs from the training stream (held-out numbers excluded)."""
    from rlvr.models import load_tokenizer, resolve_model_path
    from rlvr.rollout import render_prompts
    from rlvr.tasks import FormatCopyTask

    model_path, gguf_file = resolve_model_path(model)
    tokenizer = load_tokenizer(model_path, gguf_file=gguf_file)
    task = FormatCopyTask(seed=seed)
    examples = task.examples("train", count, seed + 1)
    prompts = render_prompts(tokenizer, examples, use_chat_template=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for example, prompt in zip(examples, prompts):
            handle.write(json.dumps({"prompt": prompt, "response": f"<answer>{example.ground_truth}</answer>"
                                     + tokenizer.eos_token, "ground_truth": example.ground_truth}) + "\n")
    print(f"wrote {count} pairs to {path}")
    return path


def run(command: list[str]) -> float:
    print("$", " ".join(command), flush=True)
    started = time.time()
    subprocess.run([sys.executable, "-m", "rlvr", *command], cwd=REPO, check=True)
    return time.time() - started


def plot(ei_evals: list[dict], sft_evals: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_ei, ax_sft) = plt.subplots(1, 2, figsize=(11, 4))
    ax_ei.plot([e["iteration"] for e in ei_evals], [e["eval/accuracy"] for e in ei_evals], marker="o")
    ax_ei.set(xlabel="expert-iteration round (0 = base model)",
              ylabel=f"greedy exact match ({ei_evals[0].get('eval/num_examples', '?')} held-out)",
              title="format_copy: expert iteration", ylim=(-0.02, 1.02))
    ax_ei.set_xticks([e["iteration"] for e in ei_evals])
    ax_sft.plot([e["iteration"] for e in sft_evals], [e["eval/accuracy"] for e in sft_evals], marker="s")
    ax_sft.axhline(0.9, color="grey", linestyle=":")
    ax_sft.set(xlabel="SFT optimizer step",
               ylabel=f"greedy exact match ({sft_evals[0].get('eval/num_examples', '?')} held-out)",
               title="format_copy: SFT on 64 correct answers", ylim=(-0.02, 1.02))
    for ax in (ax_ei, ax_sft):
        ax.grid(alpha=0.3)
    save_figure(fig, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-sft-data", metavar="PATH", help="only write the SFT data to PATH and stop")
    parser.add_argument("--sft-examples", type=int, default=64)
    parser.add_argument("--override", action="append", default=[], help="key=value passed to both runs")
    parser.add_argument("--skip-sft", action="store_true",
                        help="run expert iteration only; keep the SFT result already in --json")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--out", default="docs/figures/sft_and_expert_iteration.png")
    parser.add_argument("--json", default="benchmarks/results/sft_and_expert_iteration.json")
    args = parser.parse_args()
    if args.write_sft_data:
        write_sft_data(Path(args.write_sft_data), args.sft_examples)
        return 0
    runs_dir = (REPO / args.runs_dir).resolve()
    common = [f"train.output_dir={runs_dir}", "train.progress=false", *args.override]

    shutil.rmtree(runs_dir / "bench-ei", ignore_errors=True)
    ei_seconds = run(["expert-iter", "configs/format_copy_expert_iter.yaml", "train.run_name=bench-ei", *common])
    ei_metrics, ei_evals = (read_jsonl(runs_dir / "bench-ei" / "metrics.jsonl"),
                            read_jsonl(runs_dir / "bench-ei" / "eval.jsonl"))

    out_json = REPO / args.json
    if args.skip_sft:
        previous = json.loads(out_json.read_text())["sft"]
        sft_seconds, sft_metrics, sft_evals = previous["seconds"], previous["metrics"], previous["evals"]
    else:
        data = write_sft_data(runs_dir / "bench-sft-data.jsonl", args.sft_examples)
        shutil.rmtree(runs_dir / "bench-sft", ignore_errors=True)
        sft_seconds = run(["sft", "configs/format_copy_sft.yaml", f"sft.data_path={data}", "train.run_name=bench-sft",
                           *common])
        sft_metrics = read_jsonl(runs_dir / "bench-sft" / "metrics.jsonl")
        sft_evals = read_jsonl(runs_dir / "bench-sft" / "eval.jsonl")

    print(f"\nexpert iteration ({ei_seconds:.0f} s): round 0 eval/accuracy={ei_evals[0]['eval/accuracy']:.3f}")
    for m in ei_metrics:
        print(f"  round {m['iteration']}: solved {m['questions_solved']}/"
              f"{m['questions_solved'] / max(m['questions_solved_frac'], 1e-9):.0f}"
              f" questions, kept {m['dataset_size']} of {m['samples']} samples, entropy {m['entropy']:.3f}, "
              f"eval/accuracy {m['eval/accuracy']:.3f}, {m['time/iteration']:.0f} s")
    print(f"sft ({sft_seconds:.0f} s, {len(sft_metrics)} steps, {sft_metrics[-1]['data/size']} examples): "
          f"eval/accuracy {sft_evals[0]['eval/accuracy']:.3f} -> {sft_evals[-1]['eval/accuracy']:.3f}, "
          f"final loss {sft_metrics[-1]['loss']:.4f}")
    plot(ei_evals, sft_evals, REPO / args.out)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "examples"} for r in rows]  # noqa: E731
    out_json.write_text(json.dumps({"expert_iteration": {"seconds": ei_seconds, "metrics": ei_metrics,
                                                         "evals": strip(ei_evals)},
                                    "sft": {"seconds": sft_seconds, "metrics": sft_metrics,
                                            "evals": strip(sft_evals)}}, indent=1))
    print(f"wrote {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
