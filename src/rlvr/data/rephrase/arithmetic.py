"""Arithmetic expressions inside question text: find them, and rewrite their operator notation.

An expression *run* is a maximal stretch of numbers, operators (``+ - * / × ÷ =``), parentheses
and spaces. Inside a run an operator is *binary* when the nearest token before it is a number or
``)`` and a number, ``(`` or a unary minus follows; any other ``-`` is a unary sign and is never
touched (``2 - -1`` → ``2 minus -1``). Conservative on purpose, so prose is never misread:
- only binary operators with white space on both sides are rewritten (``10-foot``, ``1/2``,
  ``3-5 hours`` stay as they are);
- a run followed by a letter is left alone (``2 - 3 hours`` is more likely a range than a
  subtraction);
- ``=`` is rewritten only between two operands or at the very end of the text;
- operators become words only in runs that do not mix ``+``/``-`` with ``*``/``/`` (precedence
  is clear in symbols, not in words).
Numbers are never rewritten, so every quantity stays in digits exactly as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NUMBER_PATTERN = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_TOKEN = re.compile(rf"(?P<num>{NUMBER_PATTERN})|(?P<op>[-+*/×÷=])|(?P<paren>[()])|(?P<space>[ \t]+)|(?P<other>.)",
                    re.DOTALL)

# Symbol styles: what each binary operator becomes. A style that changes nothing in a given
# expression is not applicable to it.
OPERATOR_STYLES: dict[str, dict[str, str]] = {
    "words": {"+": "plus", "-": "minus", "*": "times", "×": "times", "/": "divided by", "÷": "divided by",
              "=": "equals"},
    "words_multiplied": {"+": "plus", "-": "minus", "*": "multiplied by", "×": "multiplied by",
                         "/": "divided by", "÷": "divided by", "=": "equals"},
    "unicode": {"*": "×", "/": "÷"},
    "ascii": {"×": "*", "÷": "/"},
}
# In words, "1 plus 5 minus 8 times 2" reads left to right for many readers; symbols carry the
# usual precedence. So word styles skip a run that mixes + / - with * / ÷ at any depth.
WORD_STYLES = frozenset({"words", "words_multiplied"})
_ADDITIVE, _MULTIPLICATIVE = frozenset("+-"), frozenset("*/×÷")
_WORD_OPERATORS = {"plus": "+", "minus": "-", "times": "*", "multiplied by": "*", "divided by": "/",
                   "equals": "="}
_WORDS_BETWEEN_OPERANDS = re.compile(
    r"(?<=[\d)])(\s+)(plus|minus|times|multiplied by|divided by|equals)(\s+)(?=-?\d|-?\()"
)
_TRAILING_EQUALS_WORD = re.compile(r"(?<=[\d)])(\s+)equals(\s*)$")


@dataclass(frozen=True)
class Token:
    kind: str  # num | op | paren | space
    text: str
    start: int


@dataclass(frozen=True)
class Run:
    """A stretch of arithmetic tokens: text[start:end], without leading/trailing spaces."""

    start: int
    end: int
    tokens: tuple[Token, ...]

    def binary_operators(self) -> list[int]:
        """Indices (into tokens) of the binary operators of this run, see the module docstring."""
        significant = [i for i, t in enumerate(self.tokens) if t.kind != "space"]
        found = []
        for position, i in enumerate(significant):
            token = self.tokens[i]
            if token.kind != "op":
                continue
            before = self.tokens[significant[position - 1]] if position > 0 else None
            after = self.tokens[significant[position + 1]] if position + 1 < len(significant) else None
            if before is None or not (before.kind == "num" or before.text == ")"):
                continue  # a unary sign
            if after is None and token.text != "=":
                continue
            if after is not None and not (after.kind == "num" or after.text == "(" or after.text == "-"):
                continue
            found.append(i)
        return found


def find_runs(text: str) -> list[Run]:
    """Every run of arithmetic tokens in `text` holding at least one binary operator."""
    runs, current = [], []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "other":
            _close_run(current, runs)
            current = []
        else:
            current.append(Token(kind, match.group(), match.start()))
    _close_run(current, runs)
    return runs


def _close_run(tokens: list[Token], runs: list[Run]) -> None:
    while tokens and tokens[0].kind == "space":
        tokens = tokens[1:]
    while tokens and tokens[-1].kind == "space":
        tokens = tokens[:-1]
    if not tokens:
        return
    last = tokens[-1]
    run = Run(tokens[0].start, last.start + len(last.text), tuple(tokens))
    if run.binary_operators():
        runs.append(run)


def _spaced(run: Run, index: int) -> bool:
    tokens = run.tokens
    before = index > 0 and tokens[index - 1].kind == "space"
    after = index + 1 >= len(tokens) or tokens[index + 1].kind == "space"
    return before and after


def rewrite_operators(text: str, style: str) -> str | None:
    """`text` with the binary operators of its expressions in `style` (OPERATOR_STYLES); None if unchanged."""
    mapping = OPERATOR_STYLES[style]
    pieces, cursor = [], 0
    for run in find_runs(text):
        if _followed_by_word(text, run.end) or (style in WORD_STYLES and _mixes_precedence(run)):
            continue
        for i in run.binary_operators():
            token = run.tokens[i]
            if token.text not in mapping or not _spaced(run, i):
                continue
            if token.text == "=" and not (_has_operand_after(run, i) or text[token.start + 1:].strip() == ""):
                continue
            pieces.append(text[cursor:token.start])
            pieces.append(mapping[token.text])
            cursor = token.start + 1
    if not pieces:
        return None
    pieces.append(text[cursor:])
    result = "".join(pieces)
    return None if result == text else result


def _mixes_precedence(run: Run) -> bool:
    operators = {run.tokens[i].text for i in run.binary_operators()}
    return bool(operators & _ADDITIVE) and bool(operators & _MULTIPLICATIVE)


def _followed_by_word(text: str, end: int) -> bool:
    rest = text[end:].lstrip(" \t")
    return bool(rest) and rest[0].isalpha()


def _has_operand_after(run: Run, index: int) -> bool:
    return any(t.kind in ("num", "paren") for t in run.tokens[index + 1:])


def words_to_symbols(text: str, *, times: str = "*", divided: str = "/") -> str | None:
    """Operator words between two operands (``5 plus 3``) as symbols; None if there are none."""
    symbols = dict(_WORD_OPERATORS, times=times, **{"multiplied by": times, "divided by": divided})
    used = {symbols[m.group(2)] for m in _WORDS_BETWEEN_OPERANDS.finditer(text)}
    if used & _ADDITIVE and used & (_MULTIPLICATIVE | {times, divided}):
        return None  # the words may have been meant left to right; symbols would impose precedence
    result = _WORDS_BETWEEN_OPERANDS.sub(lambda m: f"{m.group(1)}{symbols[m.group(2)]}{m.group(3)}", text)
    result = _TRAILING_EQUALS_WORD.sub(lambda m: f"{m.group(1)}={m.group(2)}", result)
    return None if result == text else result


def expression_question(text: str) -> tuple[str, str] | None:
    """(lead-in, expression) when the whole question is one instruction plus one expression.

    ``"Calculate 5 - 3 - 6."`` → ``("Calculate", "5 - 3 - 6")``;
    ``"State the final answer to the following arithmetic problem: 4 - 1 ="`` →
    ``("State the final answer to the following arithmetic problem:", "4 - 1")``.
    The lead-in holds only letters, spaces, commas and a colon; after the expression only
    ``.``, ``?``, ``=`` or ``= ?`` may follow. Otherwise None.
    """
    stripped = text.strip()
    runs = find_runs(stripped)
    if len(runs) != 1:
        return None
    run = runs[0]
    lead, tail = stripped[:run.start].strip(), stripped[run.end:].strip()
    expression = stripped[run.start:run.end].rstrip()
    if expression.endswith("="):
        expression, tail = expression[:-1].rstrip(), "=" + tail
    if not re.fullmatch(r"[A-Za-z][A-Za-z ,']*:?", lead) or tail not in ("", ".", "?", "=", "= ?", "=?"):
        return None
    if "=" in expression or not expression:
        return None
    return lead, expression
