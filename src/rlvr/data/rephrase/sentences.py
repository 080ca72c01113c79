"""Sentences of a word problem, and whether a sentence leans on the ones around it.

The splitter is deliberately timid: it splits only at ``.``/``!``/``?`` (optionally followed by
a closing quote or bracket) + white space + a capital letter, digit, ``$`` or opening quote, and
not after a title or abbreviation (``Mr.``, ``Dr.``, ``a.m.``) or an initial (``J.``).
Multi-line text is not split at all (its layout may carry meaning). A missed split only makes a
transform less applicable; a wrong one could change the problem.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]]*)(\s+)(?=[\"'(]?[A-Z0-9$])")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof vs etc no approx e.g i.e a.m p.m u.s oz lb lbs ft in min hr hrs mt mts".split()
)
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")

# A sentence containing one of these refers to something said before it (a pronoun, a
# demonstrative, "the rest", a time connective), so moving it could change what it refers to.
ANAPHORA = frozenset(
    """he she it they him her his hers its their theirs them himself herself itself themselves
    this that these those then there here too also again rest remaining remainder other others
    another same such former latter each both either neither meanwhile afterwards afterward later
    before after previous previously next following first second third last finally however but so
    thus therefore instead total altogether whole""".split()
)
# A sentence starting with one of these (or with a digit) continues the previous one.
DEPENDENT_STARTS = ANAPHORA | frozenset(
    "the and or if when while because since as during once until unless in on at of for with from by out "
    "additionally moreover furthermore besides half all some most none many few several".split()
)


def split_sentences(text: str) -> list[str] | None:
    """The sentences of a one-line text (punctuation kept), or None for multi-line text."""
    text = text.strip()
    if not text or "\n" in text:
        return None
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        end = match.start(2)
        candidate = text[start:end]
        last_word = candidate.rstrip("\"')]").rstrip(".!?").rsplit(maxsplit=1)[-1] if candidate.strip() else ""
        if last_word.lower() in _ABBREVIATIONS or re.fullmatch(r"[A-Z]", last_word):
            continue
        sentences.append(candidate.strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def words(sentence: str) -> list[str]:
    """Lower-case words, possessive ``'s`` removed."""
    return [w.lower().removesuffix("'s") for w in _WORD.findall(sentence)]


def names(sentence: str) -> set[str]:
    """Capitalised words after the first word (names, places), lower case, possessive ``'s`` removed."""
    found = _WORD.findall(sentence)[1:]
    return {w.lower().removesuffix("'s") for w in found if w[0].isupper()}


def is_dependent(sentence: str) -> bool:
    """True when the sentence may refer back to an earlier one (see ANAPHORA, DEPENDENT_STARTS)."""
    stripped = sentence.lstrip("\"'(")
    if not stripped or not stripped[0].isalpha() or not stripped[0].isupper():
        return True
    tokens = words(sentence)
    return not tokens or tokens[0] in DEPENDENT_STARTS or any(t in ANAPHORA for t in tokens)


PRONOUNS = frozenset("he she it they him her his hers its their theirs them this that these those".split())
_ARTICLES = frozenset("a an every".split())


def has_pronoun(sentence: str) -> bool:
    """True when the sentence uses a personal or demonstrative pronoun (PRONOUNS)."""
    return any(t in PRONOUNS for t in words(sentence))


def subject_and_next(sentence: str) -> tuple[str, str]:
    """The first word that is not an article and the word after it, lower case.

    ``"A pen costs $2."`` → ``("pen", "costs")``; ``"Jennifer's dog has 8 puppies."`` →
    ``("jennifer", "dog")``.
    """
    tokens = [t for t in words(sentence) if t not in _ARTICLES]
    return (tokens[0] if tokens else "", tokens[1] if len(tokens) > 1 else "")
