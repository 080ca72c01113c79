"""A worked solution for a plain arithmetic expression: one line per operation, exact arithmetic.

`worked_steps("(3 + 4) * 2 - 6 / 3")` gives the lines
    3 + 4 = 7
    7 * 2 = 14
    6 / 3 = 2
    14 - 2 = 12
and the value 12. Grammar (usual precedence, left-associative, unary minus binds tightest, as in
Python): expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
unary := '-' unary | number | '(' expr ')'. Numbers are unsigned decimals (`12`, `4.50`); a minus
written before a number is part of it (`5 - -3` is `5 - (-3)`), a minus before a group gets its
own line (`-(12) = -12`). The expression is parsed, never `eval`-ed.
Convention: values are `fractions.Fraction`; each carries the number of decimal places to print,
as `decimal.Decimal` would: a literal keeps its written places (`5.720`), + and − take the larger,
× the sum, ÷ only what the exact result needs. A value with no finite decimal form (`1 / 3`) or a
division by zero cannot be written exactly, and the whole expression gets None.
"""

from __future__ import annotations

import re
from fractions import Fraction

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([-+*/()]))")
_MAX_DEPTH = 200  # far above any generated expression; keeps recursion bounded on odd input


class _Unwritable(Exception):
    """The expression cannot be parsed, or one step has no exact finite-decimal form."""


def _tokens(expression: str) -> list[str]:
    tokens, position = [], 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _Unwritable(f"unexpected character at {position}")
        tokens.append(match.group(1) or match.group(2))
        position = match.end()
    return tokens


# AST nodes: ("num", value, places) | ("neg", child) | (op, left, right) with op in + - * /.
class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.position = tokens, 0

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise _Unwritable("expression ends early")
        self.position += 1
        return token

    def parse(self) -> tuple:
        node = self._sum(0)
        if self._peek() is not None:
            raise _Unwritable(f"unexpected {self._peek()!r}")
        return node

    def _sum(self, depth: int) -> tuple:
        node = self._product(depth)
        while self._peek() in ("+", "-"):
            node = (self._take(), node, self._product(depth))
        return node

    def _product(self, depth: int) -> tuple:
        node = self._unary(depth)
        while self._peek() in ("*", "/"):
            node = (self._take(), node, self._unary(depth))
        return node

    def _unary(self, depth: int) -> tuple:
        if depth > _MAX_DEPTH:
            raise _Unwritable("expression nested too deeply")
        token = self._take()
        if token == "-":
            child = self._unary(depth + 1)
            if child[0] == "num":  # a signed literal, not an operation
                return ("num", -child[1], child[2])
            return ("neg", child)
        if token == "(":
            node = self._sum(depth + 1)
            if self._take() != ")":
                raise _Unwritable("unbalanced parentheses")
            return node
        if token[0].isdigit():
            places = len(token.partition(".")[2])
            return ("num", Fraction(token), places)
        raise _Unwritable(f"unexpected {token!r}")


def _places_needed(value: Fraction) -> int:
    """Fewest decimal places that write `value` exactly; _Unwritable if there are none."""
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        raise _Unwritable(f"{value} has no finite decimal form")
    return max(twos, fives)


def format_number(value: Fraction, places: int = 0) -> str:
    """`value` in decimal notation with at least `places` decimals (integers without '.0')."""
    places = max(places, _places_needed(value))
    scaled = abs(value) * 10**places
    assert scaled.denominator == 1, "places was chosen so that the value is exact"
    digits = str(scaled.numerator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    if places == 0:
        return sign + digits
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _combine(op: str, left: tuple[Fraction, int], right: tuple[Fraction, int]) -> tuple[Fraction, int]:
    (a, a_places), (b, b_places) = left, right
    if op == "+":
        return a + b, max(a_places, b_places)
    if op == "-":
        return a - b, max(a_places, b_places)
    if op == "*":
        return a * b, a_places + b_places
    if b == 0:
        raise _Unwritable("division by zero")
    return a / b, _places_needed(a / b)


def _evaluate(node: tuple, lines: list[str]) -> tuple[Fraction, int]:
    """Value and print places of `node`, appending one line per operation (post-order, left first)."""
    kind = node[0]
    if kind == "num":
        return node[1], node[2]
    if kind == "neg":
        value, places = _evaluate(node[1], lines)
        lines.append(f"-({format_number(value, places)}) = {format_number(-value, places)}")
        return -value, places
    left, right = _evaluate(node[1], lines), _evaluate(node[2], lines)
    value, places = _combine(kind, left, right)
    lines.append(f"{format_number(*left)} {kind} {format_number(*right)} = {format_number(value, places)}")
    return value, places


def worked_steps(expression: str) -> tuple[list[str], Fraction, str] | None:
    """(lines, exact value, value as printed) for `expression`, or None if it cannot be written exactly."""
    try:
        lines: list[str] = []
        value, places = _evaluate(_Parser(_tokens(expression)).parse(), lines)
        return lines, value, format_number(value, places)
    except _Unwritable:
        return None
