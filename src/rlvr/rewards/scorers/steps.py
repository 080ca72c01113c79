"""The ``reward`` and ``steps`` scorers: cheap, offline, deterministic.

``steps`` is OUR offline stand-in for the paper's LLM judge of reasoning quality (a deviation,
[design] in docs/algorithms/dagrpo.md): it checks the arithmetic the response writes down, not its logic.

    q_steps = (# equations that hold) / (# equations checked)     (see ``find_equations``)
    q       = q_steps   if the response has at least one checkable equation
            = clamp(r)  otherwise (nothing to check: the score adds no information)

The trainer combines q with the reward via α (s = α·r + (1−α)·q), so a correct answer reached
with a wrong step scores below a clean one, and a wrong answer whose steps are all right scores
above one with broken arithmetic.

The equations (:func:`find_equations`): the arithmetic equations a response writes, checked with exact
rational arithmetic.

What counts as an equation: on one line, a run of arithmetic tokens split by ``=`` into sides,
each adjacent pair of sides one equation (``2 + 3 = 5 = 6`` is two: one true, one false).
Tokens: numbers (``1,234``, ``0.25``, ``.5``; ``3/4`` is a division), ``+ - * / ^``, ``×``, ``÷``,
``·``, ``−``, ``x`` between numbers (``3 x 4``), ``\\times``, ``\\cdot``, ``\\div``,
``\\frac{a}{b}`` (also ``\\dfrac``, ``\\tfrac``), ``( )`` and ``{ }`` groups, ``2(3+4)`` as a
product. ``$``, ``\\$``, ``**`` (markdown bold), ``&``, ``\\left``/``\\right`` and ``\\boxed`` are
ignored; GSM8K calculator notes ``<<48/2=24>>`` are found like any other equation. Anything else
(words, ``%``, ``!``, ``:``, ``\\sqrt``, ...) ends the run.

An equation is checked only when it is unambiguous, so prose and algebra are not misread:
- both sides parse completely, and some side of the chain computes (has an operator or
  ``\\frac``): ``1 = 1`` alone is a comparison, not a step;
- a side touching a letter or symbol without a space (``2x = 6``, ``x+1 = 3``, ``5 = 5%``,
  ``3:4 = 6:8``) is skipped: the expression goes on beyond what we can read;
- a first side that is a bare number or starts with ``-`` after a word (``half of 10 = 5``,
  ``3 times 4 = 12``, ``x - 2 = 5``) is skipped: the word is probably part of it;
- a list marker at the start of a line (``- ``, ``* ``, ``1) ``, ``2. ``) is not part of it.

Truth: both sides are evaluated as ``fractions.Fraction`` (no float, no ``eval``). With
``decimal_rounding`` (default), a side that is a bare decimal with d places also matches a value
within half a unit in its last place (``10/3 = 3.33`` holds; ``10/3 = 3.34`` does not).

Safety: one regex pass per line that contains ``=``, and each side is parsed only if it has at
most ``MAX_SIDE_TOKENS`` tokens, so the cost is linear in the text. Exponents must be integers
and results at most ``MAX_BITS`` bits (``9^9^9`` is skipped, not computed); nesting deeper than
``MAX_DEPTH`` is skipped; numbers longer than ``MAX_NUMBER_CHARS`` are skipped; at most
``max_equations`` equations are collected.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from rlvr.rewards.scorers.base import Counters, check_batch, reward_as_score

MAX_SIDE_TOKENS = 256
MAX_DEPTH = 32
MAX_BITS = 4096
MAX_NUMBER_CHARS = 100
MAX_EQUATIONS = 10_000

_TOKEN = re.compile(r"""
  (?P<ws>[ \t\r\f\v$&]+ | \*\* | \\[,;:!>\ $] | \\[()\[\]])
| (?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)? | [0-9]+(?:\.[0-9]+)? | \.[0-9]+)
| (?P<cmd>\\[A-Za-z]+)
| (?P<xmul>(?<![^\W\d_])[xX](?![^\W\d_])(?=[ \t]*[0-9(]))
| (?P<word>[^\W\d]+)
| (?P<eq>==?)
| (?P<op>[-+*/^×÷·⋅−∗])
| (?P<open>[({])
| (?P<close>[)}])
| (?P<other>\\.? | .)
""", re.VERBOSE | re.DOTALL)
# "- ", "* ", "+ ", "• ", "1) ", "2. " opening a line.
_LIST_MARKER = re.compile(r"[ \t]*(?:[-*+•]|[0-9]{1,3}[.)])[ \t]+")

_OPS = {"×": "*", "÷": "/", "·": "*", "⋅": "*", "−": "-", "∗": "*"}
_CMD_OPS = {"times": "*", "cdot": "*", "ast": "*", "div": "/"}
_CMD_FRAC = {"frac", "dfrac", "tfrac", "cfrac"}
# Layout commands that change nothing about the value of what follows.
_CMD_IGNORED = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
                "biggl", "biggr", "displaystyle", "textstyle", "boxed", "mathbf", "textbf",
                "quad", "qquad", "limits"}
# Text after a number ("5 \text{ apples}") ends the run without gluing to the number.
_CMD_TEXT = {"text", "mathrm", "mbox", "textrm", "textit", "mathit", "emph", "textnormal"}
_STICKY = set("%!|:'_[]~#@°√∞πΣ∑∏∫") | {"\\%", "\\{", "\\}", "\\|"}
_CLOSER = {"(": ")", "{": "}"}

NUM, OP, EQ, OPEN, CLOSE, FRAC, BREAK = "num", "op", "eq", "open", "close", "frac", "break"
WORD, STICKY, PLAIN = "word", "sticky", "plain"  # the three kinds of BREAK (Token.value)


class Token(NamedTuple):
    kind: str
    value: object  # NUM: (Fraction | None, decimals); OP/OPEN/CLOSE: the char; BREAK: its kind
    start: int
    end: int


@dataclass(frozen=True)
class Equation:
    """One checked equation: the two sides as written, and whether they are equal."""

    lhs: str
    rhs: str
    holds: bool


class _Side(NamedTuple):
    value: Fraction | None  # None: empty, ambiguous or not computable
    computes: bool
    decimals: int  # > 0 only for a bare decimal literal such as 3.33
    start: int
    end: int


class _Invalid(Exception):
    """The side is not a complete, computable expression within the caps."""


def find_equations(text: str, *, decimal_rounding: bool = True,
                   max_equations: int = MAX_EQUATIONS) -> list[Equation]:
    """Every unambiguous equation in ``text``, in order, each checked exactly (see module doc)."""
    found: list[Equation] = []
    for line in text.split("\n"):
        if "=" in line:
            _scan_line(line, found, decimal_rounding, max_equations)
            if len(found) >= max_equations:
                break
    return found[:max_equations]


def _scan_line(line: str, found: list[Equation], decimal_rounding: bool, max_equations: int) -> None:
    marker = _LIST_MARKER.match(line)
    prev_break: Token | None = None
    side: list[Token] = []
    sides: list[_Side] = []  # the closed sides of the current run
    for tok in _tokens(line, marker.end() if marker else 0):
        if tok.kind == EQ:
            sides.append(_close_side(side, first=not sides, left=prev_break, right=None))
            side = []
            if len(sides) + len(found) > max_equations:
                break
        elif tok.kind == BREAK:
            if sides:
                sides.append(_close_side(side, first=False, left=prev_break, right=tok))
                _check_run(line, sides, found, decimal_rounding)
            side, sides, prev_break = [], [], tok
        elif len(side) <= MAX_SIDE_TOKENS:
            side.append(tok)
    if sides:
        sides.append(_close_side(side, first=False, left=prev_break, right=None))
        _check_run(line, sides, found, decimal_rounding)


def _check_run(line: str, sides: list[_Side], found: list[Equation], decimal_rounding: bool) -> None:
    """Each adjacent pair of computable sides is an equation, if any side of the chain computes."""
    if not any(s.computes for s in sides):
        return  # "1 = 1", "page 5 = 6": a comparison of numbers, not a computation step
    for a, b in itertools.pairwise(sides):
        if a.value is None or b.value is None:
            continue
        holds = a.value == b.value
        if not holds and decimal_rounding:
            for literal, other in ((a, b), (b, a)):
                half_unit = Fraction(1, 2 * 10 ** literal.decimals)
                if literal.decimals > 0 and abs(literal.value - other.value) <= half_unit:
                    holds = True
        found.append(Equation(line[a.start:a.end], line[b.start:b.end], holds))


def _close_side(side: list[Token], *, first: bool, left: Token | None, right: Token | None) -> _Side:
    invalid = _Side(None, False, 0, 0, 0)
    if not side or len(side) > MAX_SIDE_TOKENS:
        return invalid
    if first and left is not None and left.value in (WORD, STICKY):
        touching = left.end == side[0].start
        bare = len(side) == 1 or side[0].kind == OP
        if touching or (left.value == WORD and bare):
            return invalid
    if right is not None and right.value in (WORD, STICKY) and right.start == side[-1].end:
        return invalid
    try:
        value = _Parser(side).parse()
    except (_Invalid, ZeroDivisionError, OverflowError, RecursionError):
        return invalid
    literal = side[-1] if len(side) == 1 or (len(side) == 2 and side[0].kind == OP) else None
    if literal is not None and literal.kind == NUM:  # a bare number such as 3.33 or -2
        return _Side(value, False, literal.value[1], side[0].start, side[-1].end)
    computes = any(t.kind in (OP, FRAC) for t in side)
    return _Side(value, computes, 0, side[0].start, side[-1].end)


def _tokens(line: str, pos: int):
    """Tokens of ``line`` from ``pos`` on; whitespace and ignored markup are dropped."""
    prev: Token | None = None
    for m in _TOKEN.finditer(line, pos):
        kind, text = m.lastgroup, m.group()
        if kind == "ws":
            continue
        if kind == "num":
            tok = Token(NUM, _number(text), m.start(), m.end())
        elif kind == "op":
            tok = Token(OP, _OPS.get(text, text), m.start(), m.end())
        elif kind == "xmul":
            is_times = prev is not None and prev.kind in (NUM, CLOSE)  # "3 x 4", not "x 4"
            tok = Token(OP if is_times else BREAK, "*" if is_times else WORD, m.start(), m.end())
        elif kind == "cmd":
            name = text[1:]
            if name in _CMD_IGNORED:
                continue
            if name in _CMD_OPS:
                tok = Token(OP, _CMD_OPS[name], m.start(), m.end())
            elif name in _CMD_FRAC:
                tok = Token(FRAC, name, m.start(), m.end())
            else:
                tok = Token(BREAK, PLAIN if name in _CMD_TEXT else WORD, m.start(), m.end())
        elif kind in ("eq", "open", "close"):
            tok = Token(kind, text, m.start(), m.end())
        elif kind == "word":
            tok = Token(BREAK, WORD, m.start(), m.end())
        else:
            tok = Token(BREAK, STICKY if text in _STICKY else PLAIN, m.start(), m.end())
        prev = tok
        yield tok


def _number(text: str) -> tuple[Fraction | None, int]:
    if len(text) > MAX_NUMBER_CHARS:
        return None, 0
    text = text.replace(",", "")
    decimals = len(text) - text.index(".") - 1 if "." in text else 0
    return Fraction(text), decimals


def _bounded(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise _Invalid("too large")
    return value


class _Parser:
    """Recursive descent over one side: expr := term (± term)*; term := unary ((*|/) unary |
    (group))*; unary := -unary | power; power := primary (^ unary)?; primary := number | group |
    \\frac group group. So -2^2 = -4 and 2^3^2 = 2^9."""

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.tokens):
            raise _Invalid("trailing tokens")
        return value

    def _peek(self, kind: str, values: str | None = None) -> Token | None:
        if self.i < len(self.tokens):
            tok = self.tokens[self.i]
            if tok.kind == kind and (values is None or tok.value in values):
                return tok
        return None

    def _deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Invalid("nested too deeply")

    def expr(self) -> Fraction:
        value = self.term()
        while (op := self._peek(OP, "+-")) is not None:
            self.i += 1
            rhs = self.term()
            value = _bounded(value + rhs if op.value == "+" else value - rhs)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while True:
            if (op := self._peek(OP, "*/")) is not None:
                self.i += 1
                rhs = self.unary()
                value = _bounded(value * rhs if op.value == "*" else value / rhs)
            elif self._peek(OPEN, "(") is not None and self.tokens[self.i - 1].kind in (NUM, CLOSE):
                value = _bounded(value * self.power())  # 2(3 + 4)
            else:
                return value

    def unary(self) -> Fraction:
        if self._peek(OP, "-") is not None:
            self.i += 1
            self._deeper()
            value = -self.unary()
            self.depth -= 1
            return value
        return self.power()

    def power(self) -> Fraction:
        base = self.primary()
        if self._peek(OP, "^") is None:
            return base
        self.i += 1
        self._deeper()
        exponent = self.unary()
        self.depth -= 1
        if exponent.denominator != 1:
            raise _Invalid("non-integer exponent")
        if abs(base) == 1:
            return base ** (exponent.numerator % 2)
        # (bit_length - 1)·|e| is a lower bound on the result's bits, so what passes is < 2·MAX_BITS.
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if (bits - 1) * abs(exponent.numerator) > MAX_BITS:
            raise _Invalid("power too large")
        return _bounded(base ** exponent.numerator)

    def primary(self) -> Fraction:
        if (tok := self._peek(NUM)) is not None:
            self.i += 1
            if tok.value[0] is None:
                raise _Invalid("number too long")
            return tok.value[0]
        if self._peek(FRAC) is not None:
            self.i += 1
            numerator = self.group("{")
            return _bounded(numerator / self.group("{"))
        return self.group("({")

    def group(self, openers: str) -> Fraction:
        opener = self._peek(OPEN, openers)
        if opener is None:
            raise _Invalid("expected a number or a group")
        self.i += 1
        self._deeper()
        value = self.expr()
        if self._peek(CLOSE, _CLOSER[opener.value]) is None:
            raise _Invalid("unbalanced group")
        self.i += 1
        self.depth -= 1
        return value


class RewardScorer:
    """q = r, clamped to [0, 1] (None for a non-finite reward): SGR on the reward alone."""

    name = "reward"

    def __init__(self):
        self._counters = Counters()

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        check_batch(questions, responses, references, rewards)
        return self._counters.record([reward_as_score(r) for r in rewards])

    def pop_stats(self) -> dict[str, float]:
        """``calls``, ``failures`` (non-finite rewards), ``seconds``; reset after."""
        return self._counters.pop()


class StepsScorer:
    """Fraction of the response's written equations that hold (exact rational arithmetic); q = r
    when it has none.

    Offline stand-in for the paper's LLM judge (our deviation): see the module docstring for the
    formula and :func:`find_equations` for what counts as an equation.

    Args:
        decimal_rounding: a bare decimal side with d places also matches a value within half a
            unit in its last place (``10/3 = 3.33`` holds).
        max_equations: equations checked per response at most (the first ones).

    Stats (``pop_stats``): ``calls``, ``failures`` (internal errors; the score is None),
    ``seconds``, ``equations`` (checked), ``equations_true``, ``no_equations`` (responses that
    fell back to q = r).
    """

    name = "steps"

    def __init__(self, *, decimal_rounding: bool = True, max_equations: int = MAX_EQUATIONS):
        if isinstance(max_equations, bool) or not isinstance(max_equations, int) or max_equations < 1:
            raise ValueError(f"max_equations must be an int >= 1, got {max_equations!r}")
        self.decimal_rounding = bool(decimal_rounding)
        self.max_equations = max_equations
        self._counters = Counters("equations", "equations_true", "no_equations")

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        texts = check_batch(questions, responses, references, rewards)
        with self._counters.timed():
            scores = [self._score(text, reward) for text, reward in zip(texts, rewards)]
        return self._counters.record(scores)

    def _score(self, text: str, reward: float) -> float | None:
        try:
            equations = find_equations(text, decimal_rounding=self.decimal_rounding,
                                       max_equations=self.max_equations)
        except Exception:  # noqa: BLE001 -- a parser bug must not stop training; counted
            return None
        if not equations:
            self._counters.add("no_equations")
            return reward_as_score(reward)
        true = sum(e.holds for e in equations)
        self._counters.add("equations", len(equations))
        self._counters.add("equations_true", true)
        return true / len(equations)

    def pop_stats(self) -> dict[str, float]:
        """The counters above, reset after."""
        return self._counters.pop()
