"""The loop a verifier worker process runs: receive (index, gold, pred), answer with math-verify.

Kept apart from ``verify.py`` so the child interpreter imports only this, ``answer_kind`` (plain
``re``) and math-verify. Protocol over one socket (``multiprocessing.connection`` framing).
Parent → child: ``(index, gold, pred)``, ``pred=None`` asking only for the gold's kind, or ``None``
to exit. Child → parent: ``("ready",)`` once math-verify is imported and warmed up,
``("failed", reason)`` if it cannot be, then ``("result", index, correct, timed_out, error,
gold_kind)`` per task. The soft timeout is an ``ITIMER_REAL`` alarm that raises ``SoftTimeout`` (a
BaseException, so math-verify's ``except Exception`` blocks let it through); math-verify's own
alarms are disabled because they would reset ours.

What is math and what is text, for gold and prediction alike, is decided in ``answer_kind``
(``read_answer``, ``same_answer``); ``gold_kind`` is its ``MATH``, ``TEXT`` or ``UNPARSED``, or
None when the gold's reading timed out. Readings of golds are cached (a GRPO batch repeats each
gold once per sample), so a comparison parses the prediction only.
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
from multiprocessing.connection import Connection

from rlvr.rewards.answer_kind import read_answer, same_answer

GOLD_CACHE_SIZE = 4096


class SoftTimeout(BaseException):
    """Raised in the worker by SIGALRM when a task runs past its time."""


def _on_alarm(signum, frame):
    raise SoftTimeout


def main() -> None:
    """Entry point of ``python -c ... <socket fd> <timeout_s>`` (see ``VerifierPool``)."""
    conn = Connection(int(sys.argv[1]))
    try:
        serve(conn, float(sys.argv[2]))
    except (EOFError, OSError):
        pass  # the parent went away: nothing left to answer
    finally:
        conn.close()


def serve(conn, timeout_s: float) -> None:
    """Worker entry point: import math-verify, then answer tasks until ``None`` or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        from math_verify import verify
    except BaseException as exc:  # noqa: BLE001  (report any import failure instead of dying silently)
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    # math-verify logs every timeout and parse failure with the full (possibly huge) input.
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # Pay parser/sympy first-use costs now, outside any task's time budget.
    verify(read_answer("x+1").values[0], read_answer("1+x").values[0], timeout_seconds=None)
    has_alarm = hasattr(signal, "setitimer")
    if has_alarm:
        signal.signal(signal.SIGALRM, _on_alarm)
    read_gold = functools.lru_cache(maxsize=GOLD_CACHE_SIZE)(read_answer)
    conn.send(("ready",))
    while True:
        task = conn.recv()  # EOFError when the parent is gone ends main()
        if task is None:
            return
        index, gold, pred = task
        try:
            outcome = _check(read_gold, verify, gold, pred, timeout_s, has_alarm)
        except SoftTimeout:  # alarm fired between the try body and disarming it
            outcome = False, True, None, None
        conn.send(("result", index, *outcome))


def _check(read_gold, verify, gold: str, pred: str | None, timeout_s: float, has_alarm: bool):
    """Read gold then prediction and compare them, under the soft alarm.

    Returns ``(correct, timed_out, error, gold_kind)``; ``pred=None`` only reads the gold.
    """
    if has_alarm:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    gold_kind = None
    try:
        gold_reading = read_gold(gold)
        gold_kind = gold_reading.kind
        if pred is None:
            return False, False, None, gold_kind
        pred_reading = read_answer(pred)
        correct = same_answer(gold_reading, pred_reading,
                              lambda g, p: bool(verify(g, p, timeout_seconds=None)))
        return correct, False, None, gold_kind
    except SoftTimeout:
        return False, True, None, gold_kind
    except Exception as exc:  # noqa: BLE001  (a model's output never crashes the worker)
        # Only the type: str() of a sympy-laden exception can itself run for minutes.
        return False, False, f"{type(exc).__name__} in math-verify", gold_kind
    finally:
        if has_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
