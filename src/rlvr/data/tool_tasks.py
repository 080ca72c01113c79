"""``tool-tasks``: questions where running code helps (for ``tools=python``), offline, seeded, the same on every
machine: exact products of large integers, modular powers, digit sums of large powers, sums of primes below a
bound, and counting a letter in a long random string. Each has one exact integer answer that is tedious to reach by
hand and one line of Python away, so a run with the tool can learn to call it (ToRL's and ReTool's premise). Rows:
id "tool-tasks#i", prompt, answer (the integer, as text), ``kind`` (one of :data:`KINDS`).
"""

from __future__ import annotations

import random
import string

from rlvr.data.rows import normalize_rows

TOOL_TASKS_NAME = "tool-tasks"
TOOL_TASKS_SIZE = 500
SEED = 0
KINDS = ("product", "power_mod", "digit_sum", "prime_sum", "letter_count")


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"[:n]
    for p in range(2, int(n**0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(range(p * p, n, p)))
    return [i for i in range(n) if sieve[i]]


def task(kind: str, rng: random.Random) -> tuple[str, int]:
    """One question of ``kind`` and its answer."""
    if kind == "product":
        a, b = rng.randrange(10_000, 1_000_000), rng.randrange(10_000, 1_000_000)
        return f"What is {a} × {b}?", a * b
    if kind == "power_mod":
        base, exponent, modulus = rng.randrange(2, 50), rng.randrange(100, 10_000), rng.randrange(1_000, 100_000)
        return f"What is {base}^{exponent} mod {modulus}?", pow(base, exponent, modulus)
    if kind == "digit_sum":
        base, exponent = rng.choice((2, 3, 7)), rng.randrange(100, 400)
        return f"What is the sum of the digits of {base}^{exponent}?", sum(map(int, str(base**exponent)))
    if kind == "prime_sum":
        bound = rng.randrange(1_000, 20_000)
        return f"What is the sum of all prime numbers below {bound}?", sum(_primes_below(bound))
    if kind == "letter_count":
        text = "".join(rng.choice(string.ascii_lowercase[:8]) for _ in range(rng.randrange(60, 120)))
        letter = rng.choice(string.ascii_lowercase[:8])
        return f"How many times does the letter '{letter}' appear in \"{text}\"?", text.count(letter)
    raise ValueError(f"unknown tool task kind {kind!r}; one of {KINDS}")


def load_tool_tasks(size: int = TOOL_TASKS_SIZE, seed: int = SEED) -> list[dict]:
    """``size`` rows, the kinds in turn (module docstring)."""
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        kind = KINDS[i % len(KINDS)]
        question, answer = task(kind, rng)
        rows.append({"id": f"{TOOL_TASKS_NAME}#{i}", "prompt": question, "answer": str(answer), "kind": kind})
    return normalize_rows(rows, TOOL_TASKS_NAME)
