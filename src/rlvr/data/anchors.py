"""Anchor texts for DaGRPO: an expert solution written as a response that ends with the boxed answer.

[design] (docs/algorithms/dagrpo.md, "Anchors"): the paper takes the anchor from the dataset's expert
solution; how that text is turned into a response, and the worked solutions generated for
reasoning-gym arithmetic rows that have none, are our choices.

Formats, first match wins:
    1. The row has a `solution` (see rows.py: present only when usable):
       - GSM8K (`#### N` as its last line): calculator notes `<<48/2=24>>` are removed (the
         visible result after them stays); the tail line becomes "The answer is \\boxed{N}.";
       - it contains `\\boxed{...}`: kept (stripped) and cut right after the last box (a math
         delimiter `$`, `$$`, `\\)`, `\\]` closing right after it is kept), so the response stops
         at the box; an unclosed box gives None;
       - anything else: "<solution>\\nThe answer is \\boxed{<answer>}." with the row's gold.
    2. A reasoning-gym row of a task in ARITHMETIC_TASKS (its `metadata.expression` is the whole
       problem): a worked solution, one line per operation in precedence order, exact rational
       arithmetic (arithmetic_steps.py), e.g. "5 - 3 = 2\\n2 - 6 = -4\\nThe answer is \\boxed{-4}.".
       It is emitted only when the computed value equals the gold numerically (basic_arithmetic
       golds come from floor division, so a row with an inexact division gets None), and the box
       holds the gold text itself.
    3. Anything else: None.
Convention: a solution's own final answer is not checked against the gold here; the trainer runs
the verifier on every anchor and skips the ones it rejects (docs/algorithms/dagrpo.md).
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlvr.data.arithmetic_steps import worked_steps
from rlvr.data.gold import gsm8k_tail

# reasoning-gym tasks whose metadata.expression is exactly the arithmetic asked for. Not included:
# decimal_arithmetic (no expression in metadata; gold rounded to 12 significant digits),
# countdown (the expression is one possible answer, not the problem).
ARITHMETIC_TASKS = frozenset({"chain_sum", "basic_arithmetic", "products", "decimal_chain_sum"})
ANCHOR_SOURCES = ("solution", "generated", "none")

_CALCULATOR_NOTE = re.compile(r"<<[^<>\n]*>>")
_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_MATH_CLOSERS = ("$$", "$", "\\)", "\\]")


def _final_line(answer: str) -> str:
    return f"The answer is \\boxed{{{answer}}}."


def _end_of_last_box(text: str) -> int | None:
    """Index just past the closing brace of the last box (and a math closer right after it)."""
    start = max(text.rfind(opener) + len(opener) if opener in text else -1 for opener in _BOX_OPENERS)
    depth = 1
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                end = position + 1
                closer = next((c for c in _MATH_CLOSERS if text.startswith(c, end)), "")
                return end + len(closer)
    return None


def _from_solution(solution: str, answer: str) -> str | None:
    text = solution.strip()
    tail = gsm8k_tail(text)
    if tail is not None:
        body = _CALCULATOR_NOTE.sub("", text[: text.rfind("####")]).rstrip()
        return f"{body}\n{_final_line(tail)}" if body else _final_line(tail)
    if any(opener in text for opener in _BOX_OPENERS):
        end = _end_of_last_box(text)
        return None if end is None else text[:end]
    return f"{text}\n{_final_line(answer)}"


def _as_number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None


def _generated(row: dict, answer: str) -> str | None:
    metadata = row.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("source_dataset") not in ARITHMETIC_TASKS:
        return None
    expression = metadata.get("expression")
    gold = _as_number(answer)
    if not isinstance(expression, str) or gold is None:
        return None
    worked = worked_steps(expression)
    if worked is None or worked[1] != gold:
        return None
    return "\n".join([*worked[0], _final_line(answer.strip())])


def _anchor(row: dict) -> tuple[str | None, str]:
    if not isinstance(row, dict) or not isinstance(row.get("answer"), str):
        raise TypeError(
            f"anchor rows need a string gold 'answer'; got {row!r:.120} — "
            "normalize rows first with rlvr.data.normalize_row (load_rows does)"
        )
    solution = row.get("solution")
    if isinstance(solution, str) and solution.strip():
        text = _from_solution(solution, row["answer"])
        return text, ("solution" if text is not None else "none")
    text = _generated(row, row["answer"])
    return text, ("generated" if text is not None else "none")


def anchor_text(row: dict) -> str | None:
    """The row's anchor response ending in "\\boxed{...}", or None when the row has none.

    Args:
        row: a normalized dataset row (rows.py): `answer`, optional `solution`, optional
            reasoning-gym `metadata` with `source_dataset` and `expression`.
    Convention: a row with a `solution` never falls back to a generated anchor.
    """
    return _anchor(row)[0]


def anchor_source(row: dict) -> str:
    """Where the row's anchor comes from: "solution", "generated" or "none" (for metrics)."""
    return _anchor(row)[1]
