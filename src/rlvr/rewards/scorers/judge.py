"""The ``judge`` scorer: an LLM rates the reasoning of each response 0–10; q = score / 10.

This is the paper's fine-grained scorer ([paper]/[summary] in docs/algorithms/dagrpo.md: "scoring is LLM-based");
the prompt, the 0–10 scale and the parsing are our reconstruction ([design]). The prompt, sent as
one user message (``{reference_block}`` is empty when there is no reference solution)::

    You are grading the reasoning in a solution to a problem.

    Rate the quality of the reasoning with a single integer from 0 to 10, judging:
    - correctness: are the calculations and the logical steps right?
    - relevance: does every step work towards answering the question?
    - clarity: is the reasoning easy to follow, without needless repetition?
    0 means no valid reasoning at all; 10 means correct, relevant and clear reasoning.

    Problem:
    {question}
    {reference_block}
    Solution to grade:
    {response}

    Reply in the form "Score: N" with N an integer from 0 to 10, and nothing else.

with ``{reference_block}`` =

    A reference solution is given to help you check the steps; the solution to grade may take
    a different valid route.

    Reference solution:
    {reference}

Long texts are truncated before sending (``max_chars``, default 4,000 characters each): the
question keeps its beginning, the reference and the response keep their end (where the answer
is), behind a line saying how much was cut.

Parsing (``parse_score``), first match wins: the last "Score: N" / "Rating: N" / "Grade: N"
(``**`` allowed around it), else the last "N/10" or "N out of 10", else the last ``**N**``, else a
reply that is only a number. N may be a decimal; it is clamped to [0, 10]. Anything else is a
failure: the score is None and the trainer falls back to s = r.

Cache: scores are kept in memory, keyed by sha256 of (question, response, reference), least
recently used evicted beyond ``cache_size``; failures are not cached (they may be transient).
Identical requests within a batch are sent once; both count as ``cache_hits``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import OrderedDict
from typing import Protocol

from rlvr.rewards.math_rewards import completion_text
from rlvr.rewards.scorers.base import Counters, check_batch

logger = logging.getLogger(__name__)

JUDGE_PROMPT = """You are grading the reasoning in a solution to a problem.

Rate the quality of the reasoning with a single integer from 0 to 10, judging:
- correctness: are the calculations and the logical steps right?
- relevance: does every step work towards answering the question?
- clarity: is the reasoning easy to follow, without needless repetition?
0 means no valid reasoning at all; 10 means correct, relevant and clear reasoning.

Problem:
{question}
{reference_block}
Solution to grade:
{response}

Reply in the form "Score: N" with N an integer from 0 to 10, and nothing else."""

JUDGE_REFERENCE_BLOCK = """
A reference solution is given to help you check the steps; the solution to grade may take a \
different valid route.

Reference solution:
{reference}
"""

MAX_CHARS = 4_000
CACHE_SIZE = 100_000
MAX_REPLY_CHARS = 2_000  # a score needs a few characters; longer replies are parsed by their end

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_LABELLED = re.compile(r"(?:score|rating|grade)[ \t]*[*_]*[ \t]*(?:[:=]|is)?[ \t]*[*_]*[ \t]*" + _NUMBER,
                       re.IGNORECASE)
_OUT_OF_TEN = re.compile(_NUMBER + r"[ \t]*(?:/|out of)[ \t]*10(?!\d|\.\d)", re.IGNORECASE)
_BOLD = re.compile(r"\*\*[ \t]*" + _NUMBER + r"[ \t]*\*\*")
_ONLY_NUMBER = re.compile(r"[\s*_`\"']*" + _NUMBER + r"[\s*_`\"'.]*")


class JudgeBackend(Protocol):
    """Turns prompts into replies: one ``str`` per prompt, or None where that request failed.

    Must not raise on a failed request; ``pop_stats()`` returns its own counters, reset after.
    """

    def complete(self, prompts: list[str]) -> list[str | None]: ...

    def pop_stats(self) -> dict[str, float]: ...


def parse_score(reply: str) -> float | None:
    """The 0–10 rating in a judge's reply (see the module docstring), clamped; None if none."""
    if not isinstance(reply, str):
        return None
    reply = reply[-MAX_REPLY_CHARS:]
    for pattern in (_LABELLED, _OUT_OF_TEN, _BOLD):
        last = None
        for last in pattern.finditer(reply):
            pass
        if last is not None:
            return _clamp(last.group(1))
    only = _ONLY_NUMBER.fullmatch(reply)
    return _clamp(only.group(1)) if only else None


def _clamp(number: str) -> float:
    return min(10.0, max(0.0, float(number)))


def build_prompt(question: str, response: str, reference: str | None, max_chars: int = MAX_CHARS) -> str:
    """``JUDGE_PROMPT`` filled in, each text truncated to ``max_chars`` (see the module docstring)."""
    block = "" if reference is None else JUDGE_REFERENCE_BLOCK.format(reference=_tail(reference, max_chars))
    if len(question) > max_chars:
        cut = len(question) - max_chars
        question = question[:max_chars] + f"\n[... the last {cut} characters are cut ...]"
    return JUDGE_PROMPT.format(reference_block=block, question=question, response=_tail(response, max_chars))


def _tail(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"[... the first {len(text) - max_chars} characters are cut ...]\n" + text[-max_chars:]


def cache_key(question: str, response: str, reference: str | None) -> str:
    """sha256 of the three texts (JSON-encoded, so no separator can be forged)."""
    return hashlib.sha256(json.dumps([question, response, reference]).encode()).hexdigest()


class Judge:
    """LLM-judge scorer: q = parse_score(backend reply) / 10, cached.

    Args:
        backend: an ``OpenAIChatBackend``, a ``LocalModelBackend`` or any ``JudgeBackend``.
        max_chars: characters kept of the question, the reference and the response each.
        cache_size: scores remembered (LRU); 0 turns the cache off.

    Stats (``pop_stats``): ``calls``, ``failures`` (None scores), ``seconds``, ``cache_hits``,
    ``requests`` (prompts sent), ``request_failures`` (no reply), ``parse_failures`` (a reply
    without a score), plus the backend's own counters (``retries``, ``timeouts``, ...).
    """

    name = "judge"

    def __init__(self, backend: JudgeBackend, *, max_chars: int = MAX_CHARS, cache_size: int = CACHE_SIZE):
        if not callable(getattr(backend, "complete", None)):
            raise TypeError(f"backend must have complete(prompts) -> replies, got {type(backend).__name__}; "
                            "use OpenAIChatBackend(...) or LocalModelBackend(model, tokenizer)")
        for field, value, least in (("max_chars", max_chars, 1), ("cache_size", cache_size, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{field} must be an int >= {least}, got {value!r}")
        self.backend = backend
        self.max_chars = max_chars
        self.cache_size = cache_size
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._counters = Counters("cache_hits", "requests", "request_failures", "parse_failures")

    def __repr__(self) -> str:
        return f"Judge(backend={self.backend!r}, max_chars={self.max_chars}, cache_size={self.cache_size})"

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        texts = check_batch(questions, responses, references, rewards)
        questions = [completion_text(q) for q in questions]  # a chat prompt: its last message
        references = [r if isinstance(r, str) else None for r in references]
        with self._counters.timed():
            scores: list[float | None] = [None] * len(texts)
            pending: dict[str, list[int]] = {}
            for i, key in enumerate(cache_key(q, t, r) for q, t, r in zip(questions, texts, references)):
                if key in self._cache:
                    self._cache.move_to_end(key)
                    scores[i] = self._cache[key]
                    self._counters.add("cache_hits")
                elif key in pending:
                    pending[key].append(i)
                    self._counters.add("cache_hits")
                else:
                    pending[key] = [i]
            firsts = [indices[0] for indices in pending.values()]
            replies = self._ask([build_prompt(questions[i], texts[i], references[i], self.max_chars)
                                 for i in firsts])
            for (key, indices), reply in zip(pending.items(), replies):
                rating = parse_score(reply) if reply is not None else None
                if reply is None:
                    self._counters.add("request_failures")
                elif rating is None:
                    self._counters.add("parse_failures")
                else:
                    self._remember(key, rating / 10.0)
                for i in indices:
                    scores[i] = None if rating is None else rating / 10.0
        return self._counters.record(scores)

    def _ask(self, prompts: list[str]) -> list[str | None]:
        if not prompts:
            return []
        self._counters.add("requests", len(prompts))
        try:
            replies = list(self.backend.complete(prompts))
        # A backend bug costs this batch its scores, not the run.
        except Exception as error:  # noqa: BLE001
            logger.warning("judge backend raised %s on %d prompts", type(error).__name__, len(prompts))
            return [None] * len(prompts)
        if len(replies) != len(prompts):
            logger.warning("judge backend returned %d replies for %d prompts", len(replies), len(prompts))
            return [None] * len(prompts)
        return [r if isinstance(r, str) else None for r in replies]

    def _remember(self, key: str, score: float) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = score
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def pop_stats(self) -> dict[str, float]:
        """The counters above and the backend's, reset after."""
        stats = self._counters.pop()
        backend_stats = getattr(self.backend, "pop_stats", None)
        if callable(backend_stats):
            stats.update(backend_stats())
        return stats
