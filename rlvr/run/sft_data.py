"""`rlvr sft`'s prompt / response pairs: read from `sft.data_path`, or written by the task (`sft.demonstrations`).

In the run layer, below the training loops, because the memory check (`rlvr.run.memory_check`, which
the run setup imports) sizes an SFT run by the data's longest pair; `rlvr.training.sft` then trains on them.

Demonstrations: a task with a `demonstration(example)` method (the assistant turns of a right
answer, written by a program) gives its warm-up data itself. Each of N distinct training questions
becomes one pair per assistant turn, rendered as the rollout renders its prompt (an environment's
replies come from the environment, `rlvr.rollout.episodes.demonstration_pairs`), and a
demonstration the task's own verifier does not judge right is an error. No question of the run's
held-out split, nor of the splits of `sft.exclude_eval_seeds`, is used: the eval split moves with
the seed, and the RL runs a warm-up starts keep theirs unseen.
"""

from __future__ import annotations

import json
import random

from rlvr.config import Config
from rlvr.run.preflight import check_sft_data
from rlvr.tasks import build_task
from rlvr.tasks.external import accepts_keyword
from rlvr.tasks.environment import is_environment
from rlvr.utils import read_jsonl_numbered

DEMONSTRATIONS_FILE = "sft_data.jsonl"  # in the run folder: the demonstrations a run trained on
# A demonstration row's question itself (not written to the file): filtering judges the row against it, as the
# task's verifier needs the question's own data (a reasoning-gym entry), not just its ground truth.
EXAMPLE_KEY = "example"


def kept_row(pair: dict) -> dict:
    """A row as sft_data.jsonl keeps it: without the question object."""
    return {key: value for key, value in pair.items() if key != EXAMPLE_KEY}
DRAWS_PER_QUESTION = 50  # at most this many training questions drawn per demonstration wanted, to find distinct ones


# The last demonstrations built, by the config that asked for them: the memory check sizes the run by its
# longest pair and the run then trains on the same pairs, so the task's demonstrations are written once.
_last_demonstrations: tuple[str, list[dict]] | None = None


def read_pairs(config: Config) -> list[dict]:
    """Rows as {'prompt', 'response', 'ground_truth'} (ground truth may be None), at most sft.max_examples."""
    global _last_demonstrations
    s = config.sft
    if s.demonstrations:
        key = json.dumps(config.as_dict(), sort_keys=True, default=str)
        if _last_demonstrations is None or _last_demonstrations[0] != key:
            _last_demonstrations = (key, demonstration_data(config))
        pairs = list(_last_demonstrations[1])
    else:
        pairs = _file_pairs(config)
    return pairs[: s.max_examples] if s.max_examples else pairs


def _file_pairs(config: Config) -> list[dict]:
    s = config.sft
    path = check_sft_data(config)
    pairs = []
    for number, row in read_jsonl_numbered(path, what="sft.data_path file"):
        for key in (s.prompt_field, s.response_field):
            if key not in row:
                raise ValueError(f"{path} line {number}: no field {key!r} (fields: {', '.join(row)})")
        pairs.append({"prompt": row[s.prompt_field], "response": row[s.response_field],
                      "ground_truth": row.get(s.ground_truth_field)})
    return pairs


def task_for_seed(config: Config, seed: int):
    """The run's task as a run with train.seed=`seed` builds it (its held-out split is that seed's)."""
    return build_task(config.task.name, reward_weights=config.task.reward_weights, options=config.task.options,
                      use_chat_template=config.task.use_chat_template, seed=seed,
                      max_abs_reward=config.task.max_abs_reward)


def example_key(example) -> str:
    return json.dumps([example.prompt, example.ground_truth], sort_keys=True)


def held_out_keys(config: Config, seeds) -> set[str]:
    """Every question the held-out eval of a run with one of `seeds` scores."""
    return {example_key(example) for seed in seeds for example in task_for_seed(config, seed).iter_eval()}


def demonstration_data(config: Config) -> list[dict]:
    """`sft.demonstrations` pairs from the run's task (train.seed), outside every held-out split named."""
    from rlvr.models import load_tokenizer, resolve_model_path

    task = task_for_seed(config, config.train.seed)
    if not callable(getattr(task, "demonstration", None)):
        raise ValueError(f"sft.demonstrations: task {config.task.name!r} writes no demonstrations (it has no "
                         "`demonstration` method); give sft.data_path instead")
    model_path, gguf_file = resolve_model_path(config.model.name)
    tokenizer = load_tokenizer(model_path, gguf_file=gguf_file)
    held_out = held_out_keys(config, {config.train.seed, *config.sft.exclude_eval_seeds})
    return demonstration_rows(task, tokenizer, config.sft.demonstrations, config.train.seed, held_out,
                              use_chat_template=config.task.use_chat_template,
                              slips=config.sft.demonstration_slips)


def slipped_questions(count: int, share: float, seed: int) -> set[int]:
    """Which of `count` questions get a wrong demonstration: round(share * count) of them, drawn with `seed`."""
    return set(random.Random(seed).sample(range(count), round(share * count)))


def demonstration_rows(task, tokenizer, count: int, seed: int, held_out: set[str] = frozenset(),
                       use_chat_template: bool = True, slips: float = 0.0) -> list[dict]:
    """`count` distinct training questions outside `held_out`, their demonstrations as SFT pairs.

    Each row is a pair (prompt, response), the question's ground_truth and `slip` (a wrong working, for
    `slips` of the questions: the task's demonstration with one step wrong, judged wrong but formatted);
    one row per assistant turn.
    """
    from rlvr.rollout import render_prompts, score_completions
    from rlvr.rollout.episodes import demonstration_pairs

    for draws in (2 * count, DRAWS_PER_QUESTION * count):  # most tasks have room: draw few first
        chosen, seen = [], set()
        for example in task.examples("train", draws, seed):
            key = example_key(example)
            if key not in held_out and key not in seen:
                chosen.append(example)
                seen.add(key)
            if len(chosen) == count:
                break
        if len(chosen) == count:
            break
    if len(chosen) < count:
        raise ValueError(f"only {len(chosen)} distinct training questions of {task.name!r} lie outside the held-out "
                         f"splits; ask for {len(chosen)} demonstrations or fewer")
    prompts = render_prompts(tokenizer, chosen, use_chat_template=use_chat_template)
    slipped = slipped_questions(len(chosen), slips, seed)
    if slipped and (is_environment(task) or not accepts_keyword(task.demonstration, "slip")):
        raise ValueError(f"sft.demonstration_slips: task {task.name!r} writes no wrong demonstrations (its "
                         "`demonstration` takes no `slip`); set sft.demonstration_slips=0")
    rows = []
    for number, (example, prompt) in enumerate(zip(chosen, prompts)):
        slip = number in slipped
        turns = task.demonstration(example, slip=True) if slip else task.demonstration(example)
        if is_environment(task):
            pairs, verdict = demonstration_pairs(task, tokenizer, example, prompt, turns,
                                                 use_chat_template=use_chat_template)
        else:
            if len(turns) != 1:
                raise ValueError(f"task {task.name!r} is single-turn but its demonstration has {len(turns)} turns")
            pairs = [{"prompt": prompt, "response": turns[0] + (tokenizer.eos_token or "")}]
            (verdict,) = score_completions(task, [turns[0]], [example])
        right = verdict.components[task.primary_component] == 1.0
        if slip and (right or verdict.status != "ok" or verdict.components.get("format", 1.0) != 1.0):
            raise ValueError(f"the wrong demonstration for {example.ground_truth!r} is not judged a formatted wrong "
                             f"answer: {verdict.detail}")
        if not slip and not right:
            raise ValueError(f"the demonstration for {example.ground_truth!r} is not judged right: {verdict.detail}")
        rows += [{**pair, "ground_truth": example.ground_truth, "slip": slip, EXAMPLE_KEY: example} for pair in pairs]
    return rows
