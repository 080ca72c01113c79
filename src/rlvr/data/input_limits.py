"""Refuse, at start-up, prompts the model cannot take: prompt + response must fit its positions.

A row's prompt of P tokens (chat template included) and a response budget of C tokens need P + C
positions. Past the model's L positions a model with a position table fails deep in the forward
pass (a 5 MB prompt first allocates gigabytes), and a rotary one runs on silently beyond what it
was trained for. ``check_lengths`` refuses such rows before anything is generated, naming the
first (index and id), how many there are, and the fix.

Cost: rendering and tokenising every row measured 0.5–0.6 ms a row (gsm8k-100 × 100, SmolLM2's
tokenizer, 2 shared CPU cores): about a minute for 100k rows. So a row is tokenised only when a
cheap bound says it could be too long (2 µs a row: 0.2 s for 100k). The bound, by bytes:

    tokens(prompt) <= template_bytes · messages + Σ UTF-8 bytes of its texts + TOKEN_SLACK

because every token of a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen, SmolLM2) covers at least
one byte of the rendered text (a special token covers several); ``template_bytes`` is the rendered
prompt of an empty question (template, system prompt, instruction), and TOKEN_SLACK covers a
sentencepiece tokenizer's prefix marker.
A row is never tokenised whole when its texts hold more than ``CHARS_PER_TOKEN`` × budget characters:
no tokenizer averages that many characters a token, so such a prompt is over the budget without
tokenising it (a 10 MB prompt was tokenised for 102 s and 3.46 GB before it was refused), and
truncation=left cuts its texts to their last CHARS_PER_TOKEN × budget characters before tokenising
(``rlvr.data.prompts.cut_prompt``; its last budget tokens are the same).
Convention: rows whose bound fits the budget are not tokenised (a tokenizer that breaks the bound,
e.g. by expanding characters in its normaliser, is checked only for the rows over it);
``template_bytes=None`` tokenises every row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.prompts import CHARS_PER_TOKEN, PromptFormat

TOKEN_SLACK = 8  # tokens a tokenizer may add that cover no byte (sentencepiece's leading "▁")
_SHOWN = 3  # offending rows named in the message


@dataclass(frozen=True)
class LengthCheck:
    """What ``check_lengths`` did: the prompt budget, rows tokenised, longest prompt among them."""

    budget: int | None  # most prompt tokens a row may have (None: no limit known)
    tokenized: int  # rows tokenised because their byte bound exceeded the budget
    longest: int  # most prompt tokens among the tokenised rows (0 if none)
    too_long: tuple[int, ...] = ()  # indices of the rows over the budget (only when not refused)


def template_bytes(tokenizer: Any, *, system_prompt: str | None, instruction: str | None,
                   chat_template_kwargs: dict | None = None, raw_strings: bool = False) -> int:
    """UTF-8 bytes of the rendered prompt for an empty question: what the template adds to each row."""
    return PromptFormat(system_prompt=system_prompt, instruction=instruction, chat_template_kwargs=chat_template_kwargs,
                        raw_strings=raw_strings).template_bytes(tokenizer)


def prompt_budget(*, max_positions: int | None, max_completion_length: int, max_prompt_length: int | None) -> int | None:
    """Most prompt tokens a row may have; ValueError when max_completion_length leaves no room."""
    if max_positions is not None and max_completion_length >= max_positions:
        raise ValueError(
            f"max_completion_length={max_completion_length} does not fit the model's {max_positions} positions, "
            f"which must hold the prompt and the response; use max_completion_length below {max_positions} "
            "less the longest prompt"
        )
    limits = [v for v in (max_prompt_length, None if max_positions is None else max_positions - max_completion_length)
              if v is not None]
    return min(limits) if limits else None


def check_lengths(
    rows: Sequence[dict],
    tokenize: Callable[[dict], Sequence[Sequence[int]] | Sequence[int]],
    *,
    max_positions: int | None,
    max_completion_length: int,
    max_prompt_length: int | None = None,
    template_bytes: int | None = None,
    source: str = "the data",
    refuse: bool = True,
) -> LengthCheck:
    """Refuse rows whose prompt + max_completion_length exceeds max_positions, or prompt > max_prompt_length.

    Args:
        rows: normalized rows (``id``, ``prompt``, optional ``rephrasings``).
        tokenize: row → its prompts' token ids (a list per variant, or one list), as generation sees them.
        max_positions: the model's (and engine's) position limit (``rlvr.models.loading.position_limit``);
            None: unknown, only max_prompt_length is checked.
        max_completion_length: the response budget C.
        max_prompt_length: refuse longer prompts (None: no limit of its own).
        template_bytes: from ``template_bytes()``; rows whose byte bound fits are not tokenised
            (None: tokenise every row).
        source: the data's name in the message (e.g. the data spec).
        refuse: raise for rows over the budget (else return them in ``too_long``, for the caller to
            drop or truncate; max_completion_length alone too large is refused either way).

    Raises:
        ValueError: naming the first rows over the budget (index and id), their count and the fix;
            max_completion_length alone too large is refused before any row is tokenised.
    """
    budget = prompt_budget(max_positions=max_positions, max_completion_length=max_completion_length,
                           max_prompt_length=max_prompt_length)
    if budget is None:
        return LengthCheck(budget=None, tokenized=0, longest=0)
    too_long: list[tuple[int, Any, int | None]] = []  # (index, id, prompt tokens; None: over the characters)
    tokenized = longest = 0
    for index, row in enumerate(rows):
        if template_bytes is not None and _byte_bound(row, template_bytes) + TOKEN_SLACK <= budget:
            continue
        if _longest_text(row) > CHARS_PER_TOKEN * budget:  # over the budget in any tokenizer: not tokenised
            too_long.append((index, row.get("id"), None))
            continue
        ids = tokenize(row)
        variants = [ids] if not ids or isinstance(ids[0], int) else ids
        tokens = max(len(v) for v in variants)
        tokenized += 1
        longest = max(longest, tokens)
        if tokens > budget:
            too_long.append((index, row.get("id"), tokens))
    if too_long and not refuse:
        return LengthCheck(budget=budget, tokenized=tokenized, longest=longest,
                           too_long=tuple(index for index, _, _ in too_long))
    if too_long:
        raise ValueError(_too_long_message(too_long, len(rows), source, budget, max_positions=max_positions,
                                           max_completion_length=max_completion_length,
                                           max_prompt_length=max_prompt_length))
    return LengthCheck(budget=budget, tokenized=tokenized, longest=longest)


def _byte_bound(row: dict, per_message: int) -> int:
    """An upper bound on the UTF-8 bytes of any of the row's rendered prompts (question or rephrasing)."""
    prompt = row.get("prompt", "")
    rephrasings = [len(r.encode("utf-8")) for r in row.get("rephrasings") or [] if isinstance(r, str)]
    if isinstance(prompt, str):
        return per_message + max([len(prompt.encode("utf-8")), *rephrasings])
    contents = sum(len(str(m.get("content", "")).encode("utf-8")) for m in prompt)
    return per_message * max(1, len(prompt)) + contents + max([0, *rephrasings])


def _longest_text(row: dict) -> int:
    """Characters of the row's longest text (question, message content or rephrasing)."""
    prompt = row.get("prompt", "")
    texts = [prompt] if isinstance(prompt, str) else [str(m.get("content", "")) for m in prompt]
    return max(len(text) for text in [*texts, *(row.get("rephrasings") or []), ""] if isinstance(text, str))


def _too_long_message(too_long, num_rows: int, source: str, budget: int, *, max_positions, max_completion_length,
                      max_prompt_length) -> str:
    chars = CHARS_PER_TOKEN * budget

    def size(n: int | None) -> str:
        return f"{n} tokens" if n is not None else f"over {chars} characters (> {CHARS_PER_TOKEN} a token)"

    worst = max(too_long, key=lambda item: chars if item[2] is None else item[2])
    shown = ", ".join(f"row {i} (id {row_id!r}) has {size(n)}" for i, row_id, n in too_long[:_SHOWN])
    more = f", ... (longest: row {worst[0]}, {size(worst[2])})" if len(too_long) > _SHOWN else ""
    if max_prompt_length is not None and budget == max_prompt_length:
        limit = f"are longer than max_prompt_length={max_prompt_length} tokens"
        fix = "raise max_prompt_length"
    else:
        limit = (f"do not fit the model's {max_positions} positions with max_completion_length={max_completion_length} "
                 f"(at most {budget} prompt tokens)")
        room = max_positions - (chars if worst[2] is None else worst[2])
        fix = f"lower max_completion_length to at most {room}" if room >= 1 else "use a model with more positions"
    return (f"{len(too_long)} of {num_rows} prompts of {source} {limit}: {shown}{more}, chat template "
            f"included. Shorten or filter those rows out of the data, {fix}, or set truncation=drop (leave them "
            "out) or truncation=left (keep their last tokens, as TRL does)")
