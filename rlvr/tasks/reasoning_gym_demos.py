"""Program-written right completions for reasoning-gym questions: `ReasoningGymTask.demonstration`.

They are an SFT warm-up's data (`sft.demonstrations`) for a dataset the model never answers
zero-shot. A dataset with a registered trace gets its working written out in the think span
(`spell_backward`: the word's letters, then the same letters in reverse order, then the answer
joined); any other gets the oracle answer alone. The text continues the prompt: after the r1_zero
prompt, which already opens `<think>`, it starts inside the think span.

The spelling trace was chosen by measurement (SmolLM2-135M-Instruct, 800 demonstrations, one epoch,
greedy on 100 held-out words of 3-5 letters): spaced letters gave 19% right; the letters numbered
(`1s 2u 3n -> 3n 2u 1s`) made the reversal step 91% right but joining the letters back 23%, and
9% in all, at twice the tokens. The model's limit is spelling its own tokens and joining letters
into them, not the reversal.
"""

from __future__ import annotations

from typing import Callable

from rlvr.registry import Registry

# dataset name -> (entry -> the reasoning written in the think span, without the tags)
TRACES: Registry[Callable[[dict], str]] = Registry("reasoning-gym trace")


@TRACES.register("spell_backward")
def spell_backward_trace(entry: dict) -> str:
    """`s u n -> n u s`: the word's letters, then the same letters from the last."""
    word = entry.get("metadata", {}).get("word") or entry["answer"][::-1]
    return f"{' '.join(word)} -> {' '.join(reversed(word))}"


def demonstration_text(dataset: str, entry: dict, opens_think: bool) -> str:
    """The completion: `<think>TRACE</think>\\n<answer>ANSWER</answer>` (no `<think>` where the prompt opened it).

    A dataset without a registered trace gets an empty think span.
    """
    trace = TRACES.get(dataset)(entry) if dataset in TRACES else ""
    return f"{'' if opens_think else '<think>'}{trace}</think>\n<answer>{entry['answer']}</answer>"
