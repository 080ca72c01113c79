"""Which rephrasing candidates to keep: each failed check is counted under a reason.

Checks, in this order (the first that fails names the reason):
    no_output        the generator gave nothing (a failed request, no applicable rule)
    empty            only white space
    too_short        fewer than max(MIN_CHARS, MIN_LENGTH_RATIO · len(original)) characters
                     (truncated output; lost content is mostly caught by the number check)
    too_long         more than MAX_LENGTH_RATIO · len(original) characters (a solution or chatter)
    unchanged        equal to the original after normalise() (case and white space)
    changed_numbers  the multiset of numbers differs from the original's, or the multiset of
                     number words (two, half, twice, dozen, ...) does
    near_duplicate   normalised-equal to, or character NGRAM-gram Jaccard ≥ NEAR_DUPLICATE_JACCARD
                     with, a rephrasing already kept for this question
    solver_wrong     the solver check says the answer changed (optional, see pipeline.py)
Candidates after the first N kept are not checked (``surplus``).

Numbers: written digits with optional thousands commas (``1,000`` = ``1000``) and decimals,
compared by value (``1.50`` = ``1.5``). A ``-`` directly before the digits is a sign unless it
follows a letter, digit or ``)`` (``2 - -1`` holds 2 and -1; ``10-foot`` holds 10; ``5-3``
holds 5 and 3). So a number spelled out ("five" for 5) counts as dropped, and a renumbered list
or a stated answer counts as added.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

REASONS = ("no_output", "empty", "too_short", "too_long", "unchanged", "changed_numbers", "near_duplicate",
           "solver_wrong")
MIN_CHARS = 8
MIN_LENGTH_RATIO = 0.2
MAX_LENGTH_RATIO = 3.0
NGRAM = 4
NEAR_DUPLICATE_JACCARD = 0.9

NUMBER = re.compile(r"(?:(?<![\w)\]])-)?(?:\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?|\d+(?:\.\d+)?)")
NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
    thousand million billion half halves twice double triple quarter quarters third thirds fourth
    fourths fifth fifths dozen dozens""".split()
)
_WORD = re.compile(r"[a-z]+")
_SPACE = re.compile(r"\s+")


def numbers(text: str) -> Counter:
    """The multiset of numbers written in digits, by value (Decimal), see the module docstring."""
    return Counter(Decimal(match.replace(",", "")) for match in NUMBER.findall(text))


def number_words(text: str) -> Counter:
    """The multiset of number words (NUMBER_WORDS), lower case."""
    return Counter(w for w in _WORD.findall(text.lower()) if w in NUMBER_WORDS)


def same_quantities(original: str, candidate: str) -> bool:
    """True when both texts hold the same multisets of numbers and of number words."""
    return numbers(original) == numbers(candidate) and number_words(original) == number_words(candidate)


def normalise(text: str) -> str:
    """Case-folded, white space collapsed to single spaces, stripped."""
    return _SPACE.sub(" ", text).strip().casefold()


def ngram_jaccard(a: str, b: str, n: int = NGRAM) -> float:
    """Jaccard similarity of the sets of character n-grams of normalise(a) and normalise(b).

    |A ∩ B| / |A ∪ B|; a text shorter than n is its own single gram.
    """
    grams_a, grams_b = _grams(normalise(a), n), _grams(normalise(b), n)
    return len(grams_a & grams_b) / len(grams_a | grams_b)


def _grams(text: str, n: int) -> set[str]:
    return {text[i:i + n] for i in range(len(text) - n + 1)} or {text}


def candidate_reason(original: str, candidate: str | None) -> str | None:
    """The first failed per-candidate check (no_output … changed_numbers), or None if it passes."""
    if candidate is None:
        return "no_output"
    text = candidate.strip()
    if not text:
        return "empty"
    length = len(original.strip())
    if len(text) < max(MIN_CHARS, MIN_LENGTH_RATIO * length):
        return "too_short"
    if len(text) > MAX_LENGTH_RATIO * length:
        return "too_long"
    if normalise(text) == normalise(original):
        return "unchanged"
    if not same_quantities(original, text):
        return "changed_numbers"
    return None


def is_near_duplicate(candidate: str, kept: list[str]) -> bool:
    """Normalised-equal to, or NGRAM-gram Jaccard ≥ NEAR_DUPLICATE_JACCARD with, any kept text."""
    key = normalise(candidate)
    return any(key == normalise(k) or ngram_jaccard(candidate, k) >= NEAR_DUPLICATE_JACCARD for k in kept)


@dataclass
class Selection:
    """The kept rephrasings (stripped, in candidate order) and the rejections by reason."""

    kept: list[str] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)
    surplus: int = 0  # candidates not checked because N were already kept


def select_candidates(original: str, candidates: list[str | None], *, n: int,
                      solver_check: Callable[[str], bool] | None = None) -> Selection:
    """Keep up to `n` candidates that pass every check (module docstring), in order.

    Args:
        original: the question the candidates rephrase.
        candidates: generator output, None for a failed candidate.
        n: the most rephrasings to keep.
        solver_check: True when a candidate still has the original's answer; called last, only
            on candidates that passed every other check, and never after N are kept.
    """
    selection = Selection()
    for position, candidate in enumerate(candidates):
        if len(selection.kept) >= n:
            selection.surplus = len(candidates) - position
            break
        reason = candidate_reason(original, candidate)
        if reason is None and is_near_duplicate(candidate, selection.kept):
            reason = "near_duplicate"
        if reason is None and solver_check is not None and not solver_check(candidate.strip()):
            reason = "solver_wrong"
        if reason is None:
            selection.kept.append(candidate.strip())
        else:
            selection.rejected[reason] += 1
    return selection


_ANSWER_NOISE = re.compile(r"[\s$,]|\\[,!;]|\\text\{[^}]*\}")


def answers_equal(gold: str, prediction: str | None) -> bool:
    """A plain answer comparison for solver checks without a verifier.

    Equal after removing white space, ``$``, thousands commas and ``\\text{...}``, as numbers
    when both parse (``1,000`` = ``1000.0``), else as case-folded strings. The CLI uses
    rlvr.rewards.VerifierPool (math-verify) instead.
    """
    if prediction is None:
        return False
    a, b = _ANSWER_NOISE.sub("", gold), _ANSWER_NOISE.sub("", prediction)
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a.casefold() == b.casefold()
