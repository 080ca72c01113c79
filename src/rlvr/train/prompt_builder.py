"""The prompts of a run: the rows' questions as trained on, the format that makes them tokens (decided once
at start-up), and the token ids of each question and rephrasing, built once per (row, variant)."""

from __future__ import annotations

import dataclasses
import logging

from rlvr.config import ExperimentConfig
from rlvr.data import PromptFormat
from rlvr.data.prompts import has_chat_template, instruction_for
from rlvr.data.rows import as_chat, select_prompt_column
from rlvr.train.rephrasings import variant_prompt

logger = logging.getLogger(__name__)


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
            ids = fmt.token_ids(self.tokenizer, prompt)
            if self.max_tokens is not None and len(ids) > self.max_tokens:
                ids = ids[-self.max_tokens :]  # from the left: the question's end and the generation prompt stay
                self.truncated.add(row["id"])
            self._cache[key] = ids
        return self._cache[key]

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


def open_r1_chat(cfg: ExperimentConfig) -> bool:
    """preset=trl with system_prompt or dataset_prompt_column: open-r1's grpo.py, which makes every question
    the chat [system?, user] (``make_conversation``); TRL's own script feeds a string question as raw text."""
    return cfg.run.preset == "trl" and (cfg.data.system_prompt is not None or cfg.data.dataset_prompt_column is not None)


def question_rows(rows: list[dict], cfg: ExperimentConfig) -> list[dict]:
    """The rows with their question taken from ``dataset_prompt_column`` (open-r1's), when it is set."""
    if cfg.data.dataset_prompt_column is None:
        return rows
    return select_prompt_column(rows, cfg.data.dataset_prompt_column, cfg.data.data)


def chat_rows(rows: list[dict], cfg: ExperimentConfig) -> list[dict]:
    """The rows as open-r1's grpo.py makes them, [system?, user] chats, when :func:`open_r1_chat`."""
    return as_chat(rows, cfg.data.system_prompt) if open_r1_chat(cfg) else rows


def prompt_format(cfg: ExperimentConfig, tokenizer, rows: list[dict], *, log: bool = False) -> PromptFormat:
    """How the run's prompts become tokens, decided once: the chat template, or raw text for plain-string
    questions (preset=trl, as TRL feeds them; or a tokenizer without a chat template, a base model)."""
    templated = has_chat_template(tokenizer)
    raw = cfg.run.preset == "trl" or not templated
    if not templated:
        chats = sum(isinstance(row["prompt"], list) for row in rows)
        if chats:
            raise ValueError(f"the tokenizer of {cfg.model.model} has no chat template, but {chats} prompts of "
                             f"{cfg.data.data} are chats (lists of messages); set chat_template to a Jinja template, "
                             "or use a chat/instruct model")
        if cfg.data.system_prompt is not None:
            raise ValueError(f"system_prompt needs a chat template, and the tokenizer of {cfg.model.model} has none; "
                             "drop system_prompt (the questions then go to the model as raw text), or set chat_template")
        if log and cfg.run.preset != "trl":
            logger.info("the tokenizer of %s has no chat template: plain-string questions go to the model as raw "
                        "text, as TRL feeds them", cfg.model.model)
    system = None if open_r1_chat(cfg) else cfg.data.system_prompt  # open-r1's chat already holds it
    return PromptFormat(system_prompt=system, instruction=cfg.data.instruction,
                        chat_template_kwargs=cfg.data.chat_template_kwargs, raw_strings=raw)
