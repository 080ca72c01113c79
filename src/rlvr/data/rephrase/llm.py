"""LLM rephrasing: one prompt per candidate to a text-completion back end, then clean-up.

The prompt (``REPHRASE_PROMPT``), sent as one user message; ``{style}`` is ``REPHRASE_STYLES[k %
len(REPHRASE_STYLES)]`` for candidate k, so that greedy back ends (both of rlvr's judge back ends
decode greedily) still give K different rewrites::

    Rewrite the math problem below so that it asks exactly the same thing in a different way.
    {style}

    Rules:
    - Keep every number exactly as it is written, in digits. Do not add, remove or change any
      number or quantity, and do not spell numbers out in words.
    - Keep every name and every fact, so that the answer stays exactly the same.
    - Do not solve the problem, and do not give hints, steps or the answer.
    - Output only the rewritten problem, with no introduction, title or comments.

    Problem:
    {question}

    Rewritten problem:

Clean-up (``clean_reply``): strip white space, a code fence, a leading label ("Rewritten
problem:", "Here is the rewritten problem:", "**Rephrased:**", ...), and quotes around the
whole text; cut at a line that starts a solution, a note or another labelled version
("Answer:", "Solution:", "Note:", "Explanation:", "Rewritten answer:", "Original problem:").
A reply that is not a string (a failed request) is None, and counts as no candidate; a reply
that is empty after this is "" (filters.py rejects it as ``empty``) and judges the rest.

The back end is any object with ``complete(prompts: list[str]) -> list[str | None]`` (None: that
request failed), e.g. rlvr.rewards.scorers.OpenAIChatBackend or LocalModelBackend; its sampling
settings (temperature, reply length) are its own. Whatever else it raises costs that question its
candidates, except a ``ConnectionError`` (OpenAIChatBackend's ``EndpointDown`` when requests keep
failing): that one stops the run, since every later question would fail the same way.
"""

from __future__ import annotations

import logging
import random
import re
from typing import Protocol

logger = logging.getLogger(__name__)

REPHRASE_PROMPT = """Rewrite the math problem below so that it asks exactly the same thing in a different way. \
{style}

Rules:
- Keep every number exactly as it is written, in digits. Do not add, remove or change any number or \
quantity, and do not spell numbers out in words.
- Keep every name and every fact, so that the answer stays exactly the same.
- Do not solve the problem, and do not give hints, steps or the answer.
- Output only the rewritten problem, with no introduction, title or comments.

Problem:
{question}

Rewritten problem:"""

REPHRASE_STYLES = (
    "Change the wording: use different words and sentence structure.",
    "Change the format: list the given facts as bullet points, then ask the question.",
    "Change the order in which the information is given, keeping the question at the end.",
    "Make it more concise, without dropping any fact.",
    "Make it more formal, like a textbook exercise.",
    "Turn the question into an instruction (or the instruction into a question).",
    "Tell it as a short story in plain, everyday language.",
    "Use simpler words, as if for a younger student.",
)

_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_ADJECTIVE = r"(?:rewritten|rephrased|reworded|paraphrased|new|revised)"
_NOUN = r"(?:problem|question|version|text|rewrite|rephrasing)"
_LABEL = re.compile(
    rf"^\s*[*_#\s]*(?:here(?:'s| is) (?:the |a |my )?)?(?:{_ADJECTIVE}(?:\s+{_NOUN})?|{_NOUN})"
    r"\s*[*_]*\s*:\s*[*_]*\s*",
    re.IGNORECASE,
)
# A line starting a solution, a note or another labelled version ends the rewritten problem.
# ("Question:" does not: a rewrite may list facts, then "Question: ...".)
_TAIL = re.compile(
    r"\n\s*[*_#]*\s*(?:answer|solution|final answer|note|explanation|(?:rewritten|rephrased|original) \w+)"
    r"\b[*_]*\s*:.*\Z",
    re.IGNORECASE | re.DOTALL,
)
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"))


class CompletionBackend(Protocol):
    """Turns prompts into replies: one ``str`` per prompt, or None where that request failed.

    Raises ConnectionError when its endpoint is down for good (the run stops; module docstring).
    """

    def complete(self, prompts: list[str]) -> list[str | None]: ...


def build_rephrase_prompt(question: str, k: int) -> str:
    """REPHRASE_PROMPT for candidate `k` of `question`."""
    return REPHRASE_PROMPT.format(style=REPHRASE_STYLES[k % len(REPHRASE_STYLES)], question=question)


def clean_reply(reply: object) -> str | None:
    """The rewritten problem inside a reply (module docstring); None for a failed request (no str)."""
    if not isinstance(reply, str):
        return None
    text = reply.strip()
    if (fence := _FENCE.match(text)) is not None:
        text = fence.group(1).strip()
    text = _LABEL.sub("", text, count=1).strip()
    text = _TAIL.sub("", text).strip()
    for left, right in _QUOTES:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right) and text.count(left) <= 2:
            text = text[len(left):-len(right)].strip()
    return text


class LLMRephraser:
    """Rephrasing candidates from an LLM back end (module docstring); a rephraser for pipeline.py.

    Args:
        backend: ``complete(prompts) -> list[str | None]``; sampling settings are the back end's.
    """

    name = "llm"

    def __init__(self, backend: CompletionBackend):
        if not callable(getattr(backend, "complete", None)):
            raise TypeError(f"backend must have complete(prompts) -> replies, got {type(backend).__name__}; "
                            "use rlvr.rewards.scorers.OpenAIChatBackend(...) or LocalModelBackend(model, tokenizer)")
        self.backend = backend

    def __repr__(self) -> str:
        return f"LLMRephraser(backend={self.backend!r})"

    def rephrase(self, question: str, rngs: list[random.Random]) -> list[str | None]:
        """One cleaned reply per rng (the rngs only set the count: prompts vary by candidate index)."""
        prompts = [build_rephrase_prompt(question, k) for k in range(len(rngs))]
        try:
            replies = list(self.backend.complete(prompts))
        except ConnectionError:  # the endpoint is down: stop the run (module docstring)
            raise
        # A back-end bug costs this question its candidates, not the run.
        except Exception as error:  # noqa: BLE001
            logger.warning("rephrasing back end raised %s on %d prompts", type(error).__name__, len(prompts))
            return [None] * len(prompts)
        if len(replies) != len(prompts):
            logger.warning("rephrasing back end returned %d replies for %d prompts", len(replies), len(prompts))
            return [None] * len(prompts)
        return [clean_reply(reply) for reply in replies]
