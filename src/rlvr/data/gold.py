"""Find the gold answer inside an expert solution text: a GSM8K `#### N` tail or the last `\\boxed{}`.

These parse *dataset* text, which we control and validate, so they return None when the form is
absent and the caller decides whether that is an error. (Parsing *model output* belongs to
rlvr.rewards, which never raises.) A gold is checked for presence here, not for math syntax: one
that is not math as a whole is compared as normalised text by the verifier, counted as
``text_compared`` / ``gold_unparsed`` (rlvr.rewards.answer_kind, rlvr.rewards.math_rewards).
"""

from __future__ import annotations

import re

# `#### 1,234` at the very end of the text (GSM8K). The tail is one line; trailing blank lines are
# allowed because the GSM8K files end with "\n".
_GSM8K_TAIL = re.compile(r"####[ \t]*([^\n]*?)\s*\Z")
_HAS_GSM8K_MARK = "####"
# A number written with thousands separators: only then are commas removed ("1,000" → "1000");
# a tail such as "(1, 2)" keeps its comma.
_NUMBER_WITH_COMMAS = re.compile(r"[-+]?\$?\d{1,3}(,\d{3})+(\.\d+)?")
_BOX_OPENERS = ("\\boxed{", "\\fbox{")


def has_gsm8k_mark(text: str) -> bool:
    """True when the text contains the GSM8K final-answer marker `####` anywhere."""
    return _HAS_GSM8K_MARK in text


def gsm8k_tail(text: str) -> str | None:
    """The answer after a trailing `#### N` (thousands commas removed), or None without one.

    Returns None also when `####` is followed by nothing or by more than one line, so the caller
    can report a malformed tail instead of guessing.
    """
    match = _GSM8K_TAIL.search(text)
    if match is None:
        return None
    tail = match.group(1).strip()
    if not tail:
        return None
    if _NUMBER_WITH_COMMAS.fullmatch(tail):
        tail = tail.replace(",", "")
    return tail


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if absent.

    Returns "" for an empty box and None for an unclosed one.
    """
    start = max(text.rfind(opener) + len(opener) if opener in text else -1 for opener in _BOX_OPENERS)
    if start < 0:
        return None
    depth = 1
    for position in range(start, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:position].strip()
    return None
