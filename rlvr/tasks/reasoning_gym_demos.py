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

Slips: a dataset with a registered slip also writes a *wrong* demonstration, the same working with
one step done wrong and the answer that follows from it (`basic_arithmetic`: the result one off;
`spell_backward`: two neighbouring letters swapped in the reversal). A warm-up with a share of
them (`sft.demonstration_slips`) is the data that filtering on correctness (`sft.filter_correct`) has
something to remove from, as in an SFT set of model-written traces.
"""

from __future__ import annotations

from typing import Callable

from rlvr.registry import Registry

# dataset name -> ((entry, the answer the working reaches) -> the reasoning in the think span, without the tags)
TRACES: Registry[Callable[[dict, str], str]] = Registry("reasoning-gym trace")
# dataset name -> (entry -> a wrong answer, the one a working with one step done wrong reaches)
SLIPS: Registry[Callable[[dict], str]] = Registry("reasoning-gym slip")


@TRACES.register("spell_backward")
def spell_backward_trace(entry: dict, answer: str) -> str:
    """`s u n -> n u s`: the word's letters, then the letters of the answer (the word's from the last)."""
    word = entry.get("metadata", {}).get("word") or entry["answer"][::-1]
    return f"{' '.join(word)} -> {' '.join(answer)}"


@SLIPS.register("spell_backward")
def spell_backward_slip(entry: dict) -> str:
    """The reversal with the first two different neighbouring letters swapped (`nus` -> `uns`)."""
    answer = entry["answer"]
    for i in range(len(answer) - 1):
        if answer[i] != answer[i + 1]:
            return answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:]
    raise ValueError(f"spell_backward: {answer!r} has no two different neighbouring letters to swap")


@TRACES.register("basic_arithmetic")
def arithmetic_trace(entry: dict, answer: str) -> str:
    """`-5 * 9 = -45`: the expression and its value."""
    return f"{entry['metadata']['expression']} = {answer}"


@SLIPS.register("basic_arithmetic")
def arithmetic_slip(entry: dict) -> str:
    """The value one off (up for an even source index, down for an odd one)."""
    value = int(entry["answer"])
    return str(value + (1 if entry["metadata"].get("source_index", 0) % 2 == 0 else -1))


def demonstration_text(dataset: str, entry: dict, opens_think: bool, slip: bool = False) -> str:
    """The completion: `<think>TRACE</think>\\n<answer>ANSWER</answer>` (no `<think>` where the prompt opened it);
    with `slip`, the working with one step wrong and its wrong answer.

    A dataset without a registered trace gets an empty think span; one without a registered slip writes none.
    """
    if slip and dataset not in SLIPS:
        raise ValueError(f"reasoning-gym dataset {dataset!r} writes no wrong demonstrations (sft.demonstration_slips); "
                         f"the datasets that do: {', '.join(SLIPS.names())}")
    answer = SLIPS.get(dataset)(entry) if slip else entry["answer"]
    trace = TRACES.get(dataset)(entry, answer) if dataset in TRACES else ""
    return f"{'' if opens_think else '<think>'}{trace}</think>\n<answer>{answer}</answer>"
