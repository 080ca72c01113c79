"""The prompts of a run: the order rows are drawn in, and each row's prompt as the model sees it (chat
messages through the chat template, or raw text).

:class:`PromptFormat` holds the few choices, made once at start-up (``rlvr.train.trainer``):

- **chat prompts** (a list of {role, content} messages, as verl's rows and TRL's conversational
  datasets give them) go through the tokenizer's chat template. They are never rewritten: rlvr's
  default instruction is not added, and ``system_prompt`` only fills a missing system message. An
  instruction the user wrote in the config (``instruction=...``) is appended to the last user message.
- **plain-string prompts** become one user message (after ``system_prompt``, if any) when the format
  uses the chat template, or are fed as raw text (``raw_strings``): TRL's way with a string prompt,
  and the only way for a base model whose tokenizer has no chat template. Raw text is tokenised as
  TRL does, ``tokenizer(text)`` (special tokens such as a BOS added); rendered chat text without
  them (the template holds its own).
- **the instruction**: ``auto`` (rlvr's default) appends :data:`DEFAULT_INSTRUCTION` only to a
  plain-string question that carries no instruction of its own (:func:`carries_instruction`: it
  mentions ``\\boxed``, ``####`` or a final answer); ``None`` appends nothing (TRL's way); other text
  is appended to every question.

`None` means "no system prompt" / "no instruction"; an empty string is rejected, so a config typo
cannot silently drop the instruction.

:class:`PromptBuilder` gives each (row, variant) its token ids once and caches them: variant 0 is the
question, variant j > 0 TA-GRPO's j-th rephrasing put in the question's place (:func:`variant_prompt`).

:class:`PromptSampler` draws the rows a step asks for: an endless, resumable stream of dataset rows,
epoch after epoch. Epoch e is the permutation random.Random(f"{seed}:{e}").shuffle(range(num_rows)) (identity when
shuffle=False). It depends only on (seed, e) — not on the global RNG, on PYTHONHASHSEED (a str
seed is hashed with SHA-512) or on how rows were taken before — so the state is just the number of
rows consumed, and a resumed run draws exactly the rows an uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
AUTO_INSTRUCTION = "auto"  # the config's default: DEFAULT_INSTRUCTION where the question asks for no format itself

# A question that says how to give its answer: verl's `Let's think step by step and output the final
# answer after "####".` / `... within \boxed{}.`, or any text asking for a boxed or final answer.
_OWN_INSTRUCTION = re.compile(r"\\boxed|####|final answer", re.IGNORECASE)


def carries_instruction(text: str) -> bool:
    """The question already tells the model how to give its answer (\\boxed, ####, "final answer")."""
    return bool(_OWN_INSTRUCTION.search(text))


def _check_optional_text(value: str | None, name: str) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} is {value!r}; give non-empty text, or None for no {name.replace('_', ' ')}")


def _with_instruction(content: str, instruction: str | None) -> str:
    return content if instruction is None else f"{content}\n\n{instruction}"


def instruction_for(prompt: str | list[dict], instruction: str | None) -> str | None:
    """The instruction appended to this prompt: ``auto`` resolves per prompt (None for chat prompts and
    questions that carry their own); None is none; other text is the user's, for every prompt."""
    if instruction != AUTO_INSTRUCTION:
        return instruction
    if isinstance(prompt, str) and not carries_instruction(prompt):
        return DEFAULT_INSTRUCTION
    return None


def prompt_messages(
    prompt: str | list[dict], *, system_prompt: str | None, instruction: str | None
) -> list[dict]:
    """Chat messages for one prompt; the input is never modified (``instruction`` may be ``auto``)."""
    _check_optional_text(system_prompt, "system_prompt")
    _check_optional_text(instruction, "instruction")
    instruction = instruction_for(prompt, instruction)
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": _with_instruction(prompt, instruction)}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        return messages
    if not isinstance(prompt, (list, tuple)):
        raise ValueError(
            f"prompt is a {type(prompt).__name__}; give a string or a list of {{role, content}} messages "
            "(normalize rows with rlvr.data.normalize_rows first)"
        )
    messages = [dict(message) for message in prompt]
    user_positions = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    if not user_positions:
        raise ValueError("prompt messages have no user message; add one with the question")
    last_user = messages[user_positions[-1]]
    last_user["content"] = _with_instruction(last_user["content"], instruction)
    if system_prompt is not None and not any(message.get("role") == "system" for message in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


# apply_chat_template's own arguments, which render_prompt sets: not template variables
_RENDER_ARGUMENTS = ("conversation", "tokenize", "add_generation_prompt", "return_dict", "return_tensors",
                     "continue_final_message", "tools")


def has_chat_template(tokenizer: Any) -> bool:
    return getattr(tokenizer, "chat_template", None) is not None


def render_prompt(tokenizer: Any, messages: list[dict], *, chat_template_kwargs: dict | None = None,
                  tools: Sequence | None = None) -> str:
    """The prompt text the model sees: the tokenizer's chat template with a generation prompt.

    ``chat_template_kwargs`` (TRL's name): extra variables the template reads, e.g.
    ``{"enable_thinking": False}`` for Qwen3's; None: none. ``tools``: functions (or JSON schemas) the template
    lists (transformers builds a function's schema from its signature and docstring); None: none.
    """
    extra = dict(chat_template_kwargs or {})
    clash = sorted(set(extra) & set(_RENDER_ARGUMENTS))
    if clash:
        raise ValueError(f"chat_template_kwargs sets {clash}, which rlvr sets itself when rendering a prompt; "
                         "remove them (give only the template's own variables, e.g. enable_thinking)")
    if not has_chat_template(tokenizer):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"tokenizer {name!r} has no chat template, which chat-format prompts (lists of messages) and "
            "system_prompt need; give the questions as plain strings (fed as raw text, as TRL does), set "
            "chat_template to a Jinja template, or use a chat/instruct model"
        )
    if tools:
        extra["tools"] = list(tools)
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    assert isinstance(text, str), f"apply_chat_template(tokenize=False) returned {type(text).__name__}"
    return text


@dataclass(frozen=True)
class PromptFormat:
    """How every prompt of a run becomes token ids (see the module docstring).

    ``raw_strings``: plain-string prompts are fed as raw text (TRL's way; a tokenizer without a chat
    template) instead of one user message through the chat template. ``tools``: rendered into every chat prompt.
    """

    system_prompt: str | None = None
    instruction: str | None = AUTO_INSTRUCTION
    chat_template_kwargs: dict | None = None
    raw_strings: bool = False
    tools: tuple = ()  # function tools the chat template lists (TRL's tools=[fn, ...]); () none

    def __post_init__(self) -> None:
        _check_optional_text(self.system_prompt, "system_prompt")
        _check_optional_text(self.instruction, "instruction")
        if self.raw_strings and self.system_prompt is not None:
            raise ValueError("system_prompt needs the chat template, but plain-string prompts are fed as raw text "
                             "here; drop system_prompt, or use a tokenizer with a chat template")

    def text(self, tokenizer: Any, prompt: str | list[dict]) -> str:
        """The prompt text: the rendered chat, or the raw question (with its instruction, if any)."""
        if isinstance(prompt, str) and self.raw_strings:
            return _with_instruction(prompt, instruction_for(prompt, self.instruction))
        messages = prompt_messages(prompt, system_prompt=self.system_prompt, instruction=self.instruction)
        return render_prompt(tokenizer, messages, chat_template_kwargs=self.chat_template_kwargs, tools=self.tools)

    def token_ids(self, tokenizer: Any, prompt: str | list[dict]) -> list[int]:
        """The prompt's token ids, as TRL builds them: ``tokenizer(text)`` for raw text (BOS and the like
        added), the rendered chat without added special tokens (its template holds them)."""
        raw = isinstance(prompt, str) and self.raw_strings
        return tokenizer(self.text(tokenizer, prompt), add_special_tokens=raw)["input_ids"]

    def template_bytes(self, tokenizer: Any) -> int:
        """UTF-8 bytes the format adds around an empty question (the length check's bound)."""
        if self.raw_strings:
            return len((instruction_for("", self.instruction) or "").encode("utf-8")) + 2
        messages = prompt_messages("", system_prompt=self.system_prompt, instruction=self.instruction)
        return len(render_prompt(tokenizer, messages, chat_template_kwargs=self.chat_template_kwargs,
                                 tools=self.tools).encode("utf-8"))


# more characters a token than any tokenizer averages over a long text (byte-level BPE: ~4 for English)
CHARS_PER_TOKEN = 16


def cut_prompt(prompt: str | list[dict], max_chars: int) -> str | list[dict]:
    """The prompt with each text (the question, or each message's content) cut to its last ``max_chars``
    characters: what left truncation to ``max_chars / CHARS_PER_TOKEN`` tokens keeps, without tokenising the rest."""
    if isinstance(prompt, str):
        return prompt[-max_chars:] if len(prompt) > max_chars else prompt
    return [{**m, "content": m["content"][-max_chars:]} if isinstance(m.get("content"), str)
            and len(m["content"]) > max_chars else m for m in prompt]


def variant_prompt(prompt: str | list[dict], rephrasing: str) -> str | list[dict]:
    """The dataset prompt with its question replaced by a rephrasing (last user message for chats)."""
    if isinstance(prompt, str):
        return rephrasing
    messages = [dict(m) for m in prompt]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    messages[last_user]["content"] = rephrasing
    return messages


class PromptBuilder:
    """Prompt token ids in the run's :class:`~rlvr.data.PromptFormat` (chat template or raw text, system
    prompt, instruction), cached per (row, variant).

    ``rephrased``: TA-GRPO is on, so a row's variants are the question and its rephrasings.
    """

    def __init__(self, tokenizer, prompt_format: PromptFormat, *, rephrased: bool):
        self.tokenizer, self.format = tokenizer, prompt_format
        self.rephrased = rephrased
        self.max_tokens: int | None = None  # truncation=left: keep a prompt's last max_tokens tokens
        self.truncated: set[str] = set()  # ids of the rows one of whose prompts was cut
        self._cache: dict[tuple[str, int], list[int]] = {}

    def ids(self, row: dict, variant: int = 0) -> list[int]:
        """The prompt of the row's question (variant 0) or of its rephrasing ``variant`` (cached)."""
        key = (row["id"], variant)
        if key not in self._cache:
            fmt, prompt = self.format, row["prompt"]
            if variant:  # a rephrasing is asked the way its question is (instruction=auto decides on q_0)
                fmt = dataclasses.replace(fmt, instruction=instruction_for(prompt, fmt.instruction))
                prompt = variant_prompt(prompt, row["rephrasings"][variant - 1])
            if self.max_tokens is not None:  # a 10 MB text is cut to characters first, not tokenised whole
                prompt = cut_prompt(prompt, CHARS_PER_TOKEN * self.max_tokens)
            ids = fmt.token_ids(self.tokenizer, prompt)
            if self.max_tokens is not None and len(ids) > self.max_tokens:
                ids = ids[-self.max_tokens :]  # from the left: the question's end and the generation prompt stay
                self.truncated.add(row["id"])
            self._cache[key] = ids
        return self._cache[key]

    def observed(self, row: dict, observation: str | None, tools: Sequence) -> list[int]:
        """The row's prompt as one environment rollout sees it (``rlvr.rollout.environments``): ``observation``
        appended to the prompt's last message (to the question, for a string), listed with ``tools`` (that
        environment's); cut as :meth:`ids` cuts. Not cached: each rollout's observation is its own."""
        prompt = row["prompt"]
        if observation is not None:
            prompt = prompt + observation if isinstance(prompt, str) else [
                *prompt[:-1], {**prompt[-1], "content": prompt[-1]["content"] + observation}]
        if self.max_tokens is not None:
            prompt = cut_prompt(prompt, CHARS_PER_TOKEN * self.max_tokens)
        ids = dataclasses.replace(self.format, tools=tuple(tools)).token_ids(self.tokenizer, prompt)
        if self.max_tokens is not None and len(ids) > self.max_tokens:
            ids = ids[-self.max_tokens :]
            self.truncated.add(row["id"])
        return ids

    def truncate_to(self, max_tokens: int) -> None:
        """From now on keep at most a prompt's last ``max_tokens`` tokens (truncation=left)."""
        self.max_tokens = max_tokens
        self._cache.clear()

    def is_truncated(self, row: dict) -> bool:
        """Some prompt of the row (the question or a rephrasing) was cut to ``max_tokens``."""
        return row["id"] in self.truncated

    def variants(self, row: dict) -> list[list[int]]:
        """[q_0, q_1, ..., q_N] prompt ids: the question, then its rephrasings when TA-GRPO is on."""
        count = len(row.get("rephrasings") or []) if self.rephrased else 0
        return [self.ids(row, j) for j in range(count + 1)]


class PromptSampler:
    """take(n) returns the next n rows of the stream; n may exceed the dataset (epochs wrap)."""

    def __init__(self, rows: Sequence[dict], *, seed: int, shuffle: bool = True) -> None:
        if len(rows) == 0:
            raise ValueError("PromptSampler got no rows; load a dataset with at least one row")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed is {seed!r}; give an integer")
        self._rows = list(rows)
        self._seed = seed
        self._shuffle = shuffle
        self._position = 0
        self._order_epoch = -1
        self._order: list[int] = []

    @property
    def position(self) -> int:
        """Rows consumed so far, over all epochs."""
        return self._position

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch != self._order_epoch:
            order = list(range(len(self._rows)))
            if self._shuffle:
                random.Random(f"{self._seed}:{epoch}").shuffle(order)
            self._order, self._order_epoch = order, epoch
        return self._order

    def take(self, n: int) -> list[dict]:
        """The next n rows (shallow copies, so callers may add keys freely)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"take(n) got n={n!r}; give a non-negative integer")
        taken = []
        for _ in range(n):
            epoch, offset = divmod(self._position, len(self._rows))
            taken.append(dict(self._rows[self._epoch_order(epoch)[offset]]))
            self._position += 1
        return taken

    def state_dict(self) -> dict:
        """Everything needed to resume; seed/shuffle/num_rows guard against resuming on other data."""
        return {
            "position": self._position,
            "seed": self._seed,
            "shuffle": self._shuffle,
            "num_rows": len(self._rows),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; ValueError if it was saved for another seed, order or dataset size."""
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state))
        if missing:
            raise ValueError(f"sampler state lacks {missing}; pass a dict saved by PromptSampler.state_dict()")
        for key in ("seed", "shuffle", "num_rows"):
            if state[key] != expected[key]:
                raise ValueError(
                    f"sampler state has {key}={state[key]!r} but this sampler has {key}={expected[key]!r}; "
                    "resume with the same dataset and data seed, or start a fresh run"
                )
        position = state["position"]
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"sampler state has position={position!r}; it must be a non-negative integer")
        self._position = position
