"""The episode driver: B examples x G episodes with an environment, sampled turn by turn, token in, token out.

Every live episode's next turn is sampled in one batched `backend.generate_from_ids` call on the
token ids the episode holds so far. The ids the policy sampled are kept as they are (loss mask 1);
the environment's reply is rendered to ids once (through the chat template when the task uses it:
the end of the assistant turn, the reply message and the next generation prompt, as the template
writes them) and appended with loss mask 0. Nothing is ever re-tokenized, so a transcript whose
text would tokenize differently still trains on the exact tokens that were sampled. An episode
ends when the environment says so, or is cut by a limit (`TRUNCATION_LIMITS`): `max_turns`,
`turn_tokens` (a turn hit `max_new_tokens` without ending) or `episode_tokens` (the tokens after
the prompt reached `max_episode_tokens`). The result is one `Generation` row per episode
(prompt-major) and the verdicts of `score_episode`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import torch

from rlvr.rollout.backend import RolloutBackend
from rlvr.rollout.generation import Generation, SamplingSettings, cut_at_stop, eos_token_ids, fill_token_id
from rlvr.tasks.task import Example, Verdict
from rlvr.tasks.environment import Episode, Turn, add_counts
from rlvr.tasks.verification.judging import error_verdict, judge_episode

UNLIMITED = 2**31  # max_episode_tokens when none is set
# How a reply is written after the policy's turn when the prompt is raw text (no chat template).
RAW_REPLY = "\n{content}\n"
SENTINEL = "\u2063rlvr-episode-sentinel\u2063"  # stands for the assistant's text when the template is probed
ENV_SPAN_OPEN, ENV_SPAN_CLOSE = "\u27e6", "\u27e7"  # how a transcript shows the environment's masked spans


@dataclass
class EpisodeRecord:
    """One episode as the driver tracks it: its tokens after the prompt and which are the policy's."""

    episode: Episode
    token_ids: list[int] = field(default_factory=list)  # after the prompt
    policy_mask: list[int] = field(default_factory=list)  # 1: sampled by the policy, 0: the environment's
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)
    # the sampler's log-prob of each token (0 on the environment's), when the backend reports them
    sampler_logprobs: list[float] | None = field(default_factory=list)
    env_error: str | None = None  # `respond` raised: the episode ended there and is judged an error

    @property
    def env_tokens(self) -> int:
        return len(self.policy_mask) - sum(self.policy_mask)

    @property
    def turns(self) -> int:
        """Assistant turns taken."""
        return len(self.episode.assistant_turns)


@dataclass(frozen=True)
class EpisodeRollout:
    generation: Generation  # N = B*G rows, prompt-major
    verdicts: list[Verdict]  # [N]
    records: list[EpisodeRecord]  # [N]


class ReplyRenderer:
    """The environment's reply as token ids: what the chat template writes after the assistant's text.

    With a template, `closing` is the text the template puts after an assistant message's content
    (`<|im_end|>\\n` for SmolLM2); when the policy's turn already ended with that EOS token, only the
    rest of it is inserted. Then the reply message and the next generation prompt, each probed by
    rendering the conversation with and without it. Without a template: `RAW_REPLY`.
    """

    def __init__(self, tokenizer, use_chat_template: bool, eos_ids: set[int]):
        self.tokenizer, self.use_chat_template, self.eos_ids = tokenizer, use_chat_template, eos_ids
        if use_chat_template:
            if getattr(tokenizer, "chat_template", None) is None:
                raise ValueError("task.use_chat_template is true but the tokenizer has no chat template; "
                                 "set task.use_chat_template=false for a base model")
            self.before = [{"role": "user", "content": "?"}, {"role": "assistant", "content": SENTINEL}]
            self.after_assistant = self._render(self.before, False)
            self.closing = self.after_assistant[self.after_assistant.index(SENTINEL) + len(SENTINEL):]

    def _render(self, messages, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def text(self, role: str, content: str, last_token: int | None) -> str:
        """The reply's text after a policy turn whose last sampled token is `last_token`."""
        if not self.use_chat_template:
            return RAW_REPLY.format(content=content)
        full = self._render(self.before + [{"role": role, "content": content}], True)
        if not full.startswith(self.after_assistant):
            raise ValueError("the chat template renders earlier messages differently once a reply follows; the "
                             "episode driver cannot append the reply as tokens with this template")
        closing = self.closing
        if last_token in self.eos_ids:
            eos_text = self.tokenizer.decode([last_token], skip_special_tokens=False)
            if closing.startswith(eos_text):
                closing = closing[len(eos_text):]
        return closing + full[len(self.after_assistant):]

    def ids(self, role: str, content: str, last_token: int | None) -> list[int]:
        return self.tokenizer(self.text(role, content, last_token), add_special_tokens=False)["input_ids"]


def turn_budgets(records: list[EpisodeRecord], live: list[int], max_new_tokens: int,
                 max_episode_tokens: int) -> list[int]:
    """Tokens each live episode may sample this turn: the turn's budget, or what is left of the episode's."""
    return [min(max_new_tokens, max_episode_tokens - len(records[row].token_ids)) for row in live]


def turn_truncation(sampled: int, budget: int, ended: bool, max_new_tokens: int) -> str | None:
    """Which limit a turn of `sampled` tokens (kept up to `budget`) hit, or None when it ended on its own.

    More than `budget` (only possible when the episode's budget is the smaller): `episode_tokens`.
    Exactly `budget` without EOS or a stop string: `turn_tokens` when that was the turn's full
    budget, else `episode_tokens`.
    """
    if sampled > budget:
        return "episode_tokens"
    if ended:
        return None
    if sampled >= budget:
        return "turn_tokens" if budget >= max_new_tokens else "episode_tokens"
    return None


def answer_turn(task, record: EpisodeRecord, text: str, sampled: list[int], renderer: ReplyRenderer, *,
                last_turn: bool, max_episode_tokens: int) -> bool:
    """The environment's answer to the turn the policy just took (`text`, its tokens `sampled`).

    Counts its tool calls and errors, keeps its reply in the transcript and, when the episode goes
    on, inserts the reply as tokens with loss mask 0. Returns whether the episode goes on: not when
    the environment ends it or raises (`env_error`), after the last allowed turn (`max_turns`), or
    when the reply leaves no room for the policy's next token (`episode_tokens`).
    """
    try:
        reply = task.respond(record.episode.state, text)
    except Exception as exc:  # noqa: BLE001 - an environment bug ends its episode, never the run
        record.env_error = f"respond of task {task.name!r} raised {type(exc).__name__}: {exc}"
        return False
    add_counts(record.tool_calls, reply.tool_calls)
    add_counts(record.tool_errors, reply.tool_errors)
    if reply.content is not None:
        record.episode.turns.append(Turn(reply.role, reply.content))
    if reply.done:
        return False
    if last_turn:
        record.episode.truncated_by = "max_turns"
        return False
    reply_ids = renderer.ids(reply.role, reply.content, sampled[-1] if sampled else None)
    if len(record.token_ids) + len(reply_ids) >= max_episode_tokens:
        record.episode.truncated_by = "episode_tokens"  # no room left for the policy's next token
        return False
    record.token_ids += reply_ids
    record.policy_mask += [0] * len(reply_ids)
    if record.sampler_logprobs is not None:
        record.sampler_logprobs += [0.0] * len(reply_ids)
    return True


def run_episodes(backend: RolloutBackend, task, examples: Sequence[Example], prompts: Sequence[str], *,
                 group_size: int, settings: SamplingSettings, use_chat_template: bool) -> EpisodeRollout:
    """G episodes of each example (rows prompt-major), every live one's next turn in one batched call."""
    tokenizer = backend.tokenizer
    eos_ids = eos_token_ids(tokenizer, getattr(backend, "policy", None))
    max_turns = settings.max_turns if settings.max_turns is not None else int(task.max_turns)
    max_episode_tokens = settings.max_episode_tokens if settings.max_episode_tokens is not None else UNLIMITED
    if max_turns < 1:
        raise ValueError(f"an episode needs max_turns >= 1, got {max_turns}")
    renderer = ReplyRenderer(tokenizer, use_chat_template, eos_ids)
    stops = tuple(s for s in settings.stop_strings if s)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]  # [B] lists
    rows = [(index, example) for index, example in enumerate(examples) for _ in range(group_size)]  # [N], prompt-major
    states = [task.start(example) for _, example in rows]
    offered = tuple(getattr(task, "tool_names", ()))  # counted per tool from 0, so an unused tool shows as 0
    records = [EpisodeRecord(Episode(example=example, turns=[], state=state),
                             tool_calls=dict.fromkeys(offered, 0), tool_errors=dict.fromkeys(offered, 0))
               for (_, example), state in zip(rows, states)]
    live = list(range(len(rows)))
    # One sync block for every turn: the weights stay put, so a turn may continue from the keys and
    # values the previous one left (a backend with a turn cache: `rlvr/rollout/turn_cache.py`).
    with backend.sync():
        for turn in range(max_turns):
            budgets = turn_budgets(records, live, settings.max_new_tokens, max_episode_tokens)
            for row, budget in zip(live, budgets):
                if budget <= 0:
                    records[row].episode.truncated_by = "episode_tokens"
            live, budgets = [r for r, b in zip(live, budgets) if b > 0], [b for b in budgets if b > 0]
            if not live:
                break
            call_settings = dataclasses.replace(settings, max_new_tokens=max(budgets))
            generation = backend.generate_from_ids([prompt_ids[rows[row][0]] + records[row].token_ids
                                                    for row in live], call_settings)
            still_live = []
            for position, (row, budget) in enumerate(zip(live, budgets)):
                record = records[row]
                length = int(generation.completion_lengths[position])
                sampled = generation.input_ids[position, generation.prompt_len:generation.prompt_len + length].tolist()
                ended = not bool(generation.truncated[position])
                limit = turn_truncation(len(sampled), budget, ended, settings.max_new_tokens)
                sampled = sampled[:budget]
                text = cut_at_stop(tokenizer.decode([t for t in sampled if t not in eos_ids], skip_special_tokens=True),
                                   stops)
                record.token_ids += sampled
                record.policy_mask += [1] * len(sampled)
                if generation.sampler_logprobs is None or record.sampler_logprobs is None:
                    record.sampler_logprobs = None
                else:
                    record.sampler_logprobs += generation.sampler_logprobs[position, :len(sampled)].tolist()
                record.episode.turns.append(Turn("assistant", text))
                if limit is not None:
                    record.episode.truncated_by = limit
                elif answer_turn(task, record, text, sampled, renderer, last_turn=turn + 1 == max_turns,
                                 max_episode_tokens=max_episode_tokens):
                    still_live.append(row)
            live = still_live
    verdicts = [judge_episode(task, record.episode) if record.env_error is None
                else error_verdict(task, record.env_error) for record in records]
    return EpisodeRollout(generation=episode_generation(records, prompt_ids, rows, fill_token_id(tokenizer)),
                          verdicts=verdicts, records=records)


def episode_generation(records: list[EpisodeRecord], prompt_ids: list[list[int]], rows, fill_id: int) -> Generation:
    """One row per episode: its prompt left-padded to P, its conversation right-padded to C."""
    prompt_len = max(len(ids) for ids in prompt_ids)
    width = max(1, max(len(record.token_ids) for record in records))
    num_rows = len(records)
    input_ids = torch.full((num_rows, prompt_len + width), fill_id, dtype=torch.long)  # [N, P+C]
    attention_mask = torch.zeros((num_rows, prompt_len + width), dtype=torch.long)  # [N, P+C]
    loss_mask = torch.zeros((num_rows, width), dtype=torch.long)  # [N, C]
    reported = all(record.sampler_logprobs is not None for record in records)
    sampler_logprobs = torch.zeros((num_rows, width)) if reported else None  # [N, C]
    for row, (record, (prompt_index, _)) in enumerate(zip(records, rows)):
        prompt = prompt_ids[prompt_index]
        input_ids[row, prompt_len - len(prompt):prompt_len] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, prompt_len - len(prompt):prompt_len + len(record.token_ids)] = 1
        if record.token_ids:
            input_ids[row, prompt_len:prompt_len + len(record.token_ids)] = torch.tensor(record.token_ids)
            loss_mask[row, :len(record.policy_mask)] = torch.tensor(record.policy_mask, dtype=torch.long)
            if sampler_logprobs is not None:
                sampler_logprobs[row, :len(record.sampler_logprobs)] = torch.tensor(record.sampler_logprobs)
    return Generation(
        input_ids=input_ids, attention_mask=attention_mask, prompt_len=prompt_len,
        completion_texts=[transcript(record.episode) for record in records],
        completion_lengths=loss_mask.sum(dim=1),  # [N] the policy's tokens
        truncated=torch.tensor([record.episode.truncated_by is not None for record in records]),
        loss_mask=loss_mask, sampler_logprobs=sampler_logprobs,
    )


def demonstration_pairs(task, tokenizer, example: Example, prompt: str, turns: Sequence[str], *,
                        use_chat_template: bool) -> tuple[list[dict], Verdict]:
    """Scripted assistant `turns` replayed against the environment, as SFT pairs: one per turn.

    Each pair's prompt is the conversation before that turn as the episode driver would hold it
    (the rendered `prompt`, then every earlier turn and the environment's reply written by the
    same `ReplyRenderer`), its response the turn; the last turn also gets the tokenizer's EOS text,
    which the chat template writes after a final message. The replies come from `task.respond`
    itself (a calculator demonstration gets the calculator's own output). Returns the pairs and
    `score_episode`'s verdict of the replayed episode, so a caller keeps only the right ones.
    A script that the environment ends early, or that ends while the environment waits, is refused.
    """
    if not turns:
        raise ValueError("a demonstration needs at least one assistant turn")
    renderer = ReplyRenderer(tokenizer, use_chat_template, eos_token_ids(tokenizer))
    episode = Episode(example=example, turns=[], state=task.start(example))
    context, pairs = prompt, []
    for index, text in enumerate(turns):
        last = index == len(turns) - 1
        reply = task.respond(episode.state, text)
        episode.turns.append(Turn("assistant", text))
        if reply.content is not None:
            episode.turns.append(Turn(reply.role, reply.content))
        if reply.done != last:
            where = "ended the episode after" if reply.done else "still waits after the last"
            raise ValueError(f"task {task.name!r} {where} turn {index + 1} of {len(turns)} of the demonstration "
                             f"{text!r}")
        pairs.append({"prompt": context, "response": text + ((tokenizer.eos_token or "") if last else "")})
        if not last:
            context += text + renderer.text(reply.role, reply.content, None)
    return pairs, judge_episode(task, episode)


def transcript(episode: Episode, mark_environment: bool = False) -> str:
    """The conversation after the prompt as text; `mark_environment` wraps the environment's turns in ⟦ ⟧."""
    parts = []
    for turn in episode.turns:
        if turn.role == "assistant":
            parts.append(turn.content)
        elif mark_environment:
            parts.append(f"{ENV_SPAN_OPEN}{turn.role}: {turn.content}{ENV_SPAN_CLOSE}")
        else:
            parts.append(turn.content)
    return "\n".join(parts)


def episode_fields(record: EpisodeRecord) -> dict:
    """What a logged record (eval, generations.jsonl, samples.jsonl) shows of an episode."""
    return {"transcript": transcript(record.episode, mark_environment=True), "turns": record.turns,
            "truncated_by": record.episode.truncated_by, "env_tokens": record.env_tokens,
            "tool_calls": dict(record.tool_calls), "tool_errors": dict(record.tool_errors)}
