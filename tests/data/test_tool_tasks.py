"""``tool-tasks`` (rlvr.data.tool_tasks): every gold recomputed another way, the set seeded and balanced."""

from __future__ import annotations

import re
from collections import Counter

import sympy
from sympy.ntheory.digits import digits as sympy_digits

from rlvr.data.sources import load_rows
from rlvr.data.tool_tasks import KINDS, TOOL_TASKS_SIZE


def independent_answer(row: dict) -> int:
    q = row["prompt"]
    numbers = [int(n) for n in re.findall(r"\d+", q)]
    if row["kind"] == "product":
        return sympy.Mul(sympy.Integer(numbers[0]), sympy.Integer(numbers[1]))
    if row["kind"] == "power_mod":
        return int(sympy.Pow(numbers[0], numbers[1]) % numbers[2])
    if row["kind"] == "digit_sum":
        return sum(sympy_digits(sympy.Integer(numbers[0]) ** numbers[1])[1:])
    if row["kind"] == "prime_sum":
        return sum(sympy.primerange(numbers[0]))
    letter, text = re.fullmatch(r"How many times does the letter '(.)' appear in \"(\w+)\"\?", q).groups()
    return Counter(text)[letter]


def test_every_gold_is_the_independently_computed_answer_and_the_set_is_seeded():
    rows = load_rows("tool-tasks")
    assert len(rows) == TOOL_TASKS_SIZE and len({r["id"] for r in rows}) == TOOL_TASKS_SIZE
    assert Counter(r["kind"] for r in rows) == {kind: TOOL_TASKS_SIZE // len(KINDS) for kind in KINDS}
    for row in rows:
        assert int(row["answer"]) == independent_answer(row), row["id"]
    assert load_rows("tool-tasks") == rows  # the same rows every time (and on every machine: a fixed seed)
    assert rows[0]["prompt"] == "What is 895440 × 413958?"
