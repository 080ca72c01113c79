"""Final-answer extraction from model completions, and the cleaning of an extracted answer (``clean_answer``:
rule 1 of rlvr.rewards.answer_kind, shared by the verifier's fast path and the kind rules).

Three forms, tried in this order (the first form present anywhere wins, and within a form the
last occurrence wins): the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced, LaTeX's escaped
``\\{`` ``\\}`` skipped), the last GSM8K ``#### N`` line (N a number, alone on its line), the last
"the answer is X" / "final answer: X" / "answer: X" (X up to the end of its line or sentence).

Safety: boxes are found with ``str.rfind`` and a forward walk bounded by the answer cap, so the
cost is linear in the text and independent of nesting depth; no recursion; the two regexes have
no adjacent overlapping quantifiers, so they cannot backtrack catastrophically. An answer longer than ``MAX_ANSWER_CHARS`` yields None (a runaway box is not an
answer, and the verifier should never see megabytes of LaTeX).

Convention: a truncated last box (no closing brace) yields None; we do not fall back to an
earlier box, because an earlier box in an unfinished completion is usually an intermediate.
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 500
_DELIMITER = re.compile(r"(?<!\\)\$|\\[()\[\]]")
_SPACED_THOUSANDS = re.compile(r"-?\d{1,3}(?: \d{3})+(?:\.\d+)?")

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# Thousands-separated first so "1,000" is not cut at the comma; no nested quantifiers.
_NUMBER = r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?"
# "#### N" must be the whole line (bar $, ** and a period), so a markdown heading such as
# "#### 1. Set-up" is not read as an answer. Prefix and suffix are one character class each:
# two adjacent optional runs could backtrack quadratically on a long run of spaces.
_GSM8K = re.compile(r"####[ \t*$\\]*(" + _NUMBER + r")(?=[ \t*$.]*(?:\r?\n|\Z))")
_ANSWER_IS = re.compile(r"answer\s*(?:is\b|:)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_SPACES = re.compile(r"[ \t\n]*")
_ANY_NUMBER = re.compile(_NUMBER)

EXTRACTION_MODES = ("boxed", "flexible")
# Where a score must mean the answer the model wrote (benchmarks, `rlvr eval`, these functions);
# training defaults to flexible instead (RewardConfig.answer_extraction), for small models.
DEFAULT_EXTRACTION = "boxed"


def extract_answer(text: str, mode: str = DEFAULT_EXTRACTION) -> str | None:
    """The final answer written in a completion, or None when there is none.

    Order: last ``\\boxed{}``/``\\fbox{}`` → last ``#### N`` → last "the answer is X" /
    "final answer: X" / "answer: X" → (``mode="flexible"`` only) the last number in the text, as
    lm-eval's GSM8K "flexible-extract". Never raises on model output; linear time.

    Args:
        text: the completion text (any length).
        mode: ``boxed`` (the three written forms only) or ``flexible`` (also the last number).

    Returns:
        The answer string, stripped (box contents verbatim; for the prose forms also without
        ``$``, ``**``, ``\\(`` ``\\)`` and a trailing period), or None if no form is present, the
        last box is unbalanced or empty, or the answer exceeds ``MAX_ANSWER_CHARS``.
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_answer expects a str, got {type(text).__name__}; "
                        "pass the completion's text (for chat completions, the message content)")
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {EXTRACTION_MODES}")
    open_pos = _last_box_open(text)
    if open_pos is not None:
        span = _match_brace(text, open_pos)
        answer = text[span[0]:span[1]].strip() if span is not None else ""
        return answer or None
    answer = _last_gsm8k(text)
    if answer is None:
        answer = _last_answer_is(text)
    if answer is None and mode == "flexible":
        answer = _last_match(_ANY_NUMBER, text)
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def find_last_box(text: str) -> tuple[int, int] | None:
    """Span ``(start, end)`` of the contents of the last ``\\boxed{...}``/``\\fbox{...}``, or None.

    "Last" is by position of the command, so ``\\boxed{\\boxed{1}}`` gives the inner box. The walk
    to the matching brace stops after ``MAX_ANSWER_CHARS`` characters: a longer box counts as
    unclosed (None), and so does an unbalanced one.
    """
    open_pos = _last_box_open(text)
    return None if open_pos is None else _match_brace(text, open_pos)


def _last_box_open(text: str) -> int | None:
    """Index of the ``{`` of the last box command; a command not followed by ``{`` (prose that
    mentions ``\\boxed``, or ``\\boxedfoo``) is skipped in favour of the one before it."""
    # One cursor per command, each only moving backwards, keeps the search linear.
    last = {cmd: text.rfind(cmd) for cmd in _BOX_COMMANDS}
    while True:
        cmd = max(last, key=last.__getitem__)
        pos = last[cmd]
        if pos < 0:
            return None
        i = _SPACES.match(text, pos + len(cmd)).end()
        if i < len(text) and text[i] == "{":
            return i
        last[cmd] = text.rfind(cmd, 0, pos)


def _match_brace(text: str, open_pos: int) -> tuple[int, int] | None:
    """Contents span of the group opened at ``open_pos``; None if not closed within the cap."""
    depth = 0
    i = open_pos
    stop = min(len(text), open_pos + MAX_ANSWER_CHARS + 2)
    while i < stop:
        ch = text[i]
        if ch == "\\":
            i += 2  # skip escaped chars, notably \{ and \} which are literal braces
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return open_pos + 1, i
        i += 1
    return None


def _last_gsm8k(text: str) -> str | None:
    last = None
    for last in _GSM8K.finditer(text):
        pass
    return last.group(1) if last is not None else None


def _last_match(pattern: re.Pattern, text: str) -> str | None:
    last = None
    for last in pattern.finditer(text):
        pass
    return last.group(0) if last is not None else None


def _last_answer_is(text: str) -> str | None:
    last = None
    for last in _ANSWER_IS.finditer(text):
        pass
    if last is None:
        return None
    start = last.end()
    window = text[start:start + 4 * MAX_ANSWER_CHARS]
    line = window.split("\n", 1)[0]
    if len(line) >= 4 * MAX_ANSWER_CHARS:
        return None  # no line end within reach: far longer than any answer
    return _clean_prose_answer(line)


def _clean_prose_answer(line: str) -> str:
    """Strip the markup models wrap prose answers in: ``**``, ``$``, ``\\(\\)``, a final period."""
    end = _SENTENCE_END.search(line)
    if end is not None:
        line = line[:end.start()]
    line = line.replace("**", "").replace("\\$", "").replace("$", "")
    line = line.strip().lstrip(":").strip()
    for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
        if line.startswith(left) and line.endswith(right):
            line = line[len(left):-len(right)].strip()
    return line.rstrip(".").strip()


def clean_answer(answer: str) -> str:
    """Rule 1: the answer without delimiters, trailing punctuation, ``\\dfrac``; spaces collapsed.

    ``"$\\dfrac{1}{2}.$"`` → ``"\\frac{1}{2}"``; ``"1, 2, ..."`` keeps its ellipsis.
    """
    text = _DELIMITER.sub(" ", answer)
    text = " ".join(text.split())
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\varnothing", "\\emptyset")
    text = _strip_trailing(text)
    if _SPACED_THOUSANDS.fullmatch(text):
        text = text.replace(" ", "")
    return text


def _strip_trailing(text: str) -> str:
    """Drop trailing spaces, LaTeX spacing (``\\,``) and one-character punctuation; keep ``...``.

    A loop from the end, not a regex anchored at ``$``: that would be quadratic on model output.
    """
    end = len(text)
    while end:
        if text[end - 1] == " ":
            end -= 1
        elif end >= 2 and text[end - 2] == "\\" and text[end - 1] in ",;!: " and not _escaped(text, end - 2):
            end -= 2
        elif text[end - 1] in ".,;:" and not text.endswith("..", 0, end) and not _escaped(text, end - 1):
            end -= 1
        else:
            break
    return text[:end]


def _escaped(text: str, i: int) -> bool:
    """True when ``text[i]`` follows an odd run of backslashes (``\\;`` is spacing, ``\\\\;`` is not)."""
    run = 0
    while i - run - 1 >= 0 and text[i - run - 1] == "\\":
        run += 1
    return run % 2 == 1
