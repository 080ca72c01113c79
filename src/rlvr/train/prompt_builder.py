"""The prompt tokens of a row's question and of its rephrasings, built once per (row, variant)."""

from __future__ import annotations

from rlvr.data import prompt_messages, render_prompt
from rlvr.train.rephrasings import variant_prompt


class PromptBuilder:
    """Chat-formatted prompt token ids: the training template (system prompt, instruction) applied.

    ``rephrased``: TA-GRPO is on, so a row's variants are the question and its rephrasings.
    """

    def __init__(self, tokenizer, *, system_prompt: str | None, instruction: str | None, rephrased: bool,
                 chat_template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.system_prompt, self.instruction = system_prompt, instruction
        self.chat_template_kwargs = chat_template_kwargs  # template variables (e.g. enable_thinking)
        self.rephrased = rephrased
        self.max_tokens: int | None = None  # truncation=left: keep a prompt's last max_tokens tokens
        self.truncated: set[str] = set()  # ids of the rows one of whose prompts was cut
        self._cache: dict[tuple[str, int], list[int]] = {}

    def ids(self, row: dict, variant: int = 0) -> list[int]:
        """The prompt of the row's question (variant 0) or of its rephrasing ``variant`` (cached)."""
        key = (row["id"], variant)
        if key not in self._cache:
            prompt = row["prompt"] if variant == 0 else variant_prompt(row["prompt"], row["rephrasings"][variant - 1])
            messages = prompt_messages(prompt, system_prompt=self.system_prompt, instruction=self.instruction)
            text = render_prompt(self.tokenizer, messages, chat_template_kwargs=self.chat_template_kwargs)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
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
