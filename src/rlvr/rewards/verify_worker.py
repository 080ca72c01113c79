"""The loop a verifier worker process runs: receive (index, gold, pred), answer with math-verify.

Kept apart from ``verify.py`` so the child interpreter imports only this and math-verify.
Protocol over one socket (``multiprocessing.connection`` framing). Parent → child:
``(index, gold, pred)``, or ``None`` to exit. Child → parent: ``("ready",)`` once math-verify is
imported and warmed up, ``("failed", reason)`` if it cannot be, then
``("result", index, correct, timed_out, error)`` per task. The soft timeout is an
``ITIMER_REAL`` alarm that raises ``SoftTimeout`` (a BaseException, so math-verify's
``except Exception`` blocks let it through); math-verify's own alarms are disabled because they
would reset ours.

A gold in which math-verify reads no math (``\\frac{``, ``√2``: parse gives only its raw-string
fallback) is answered ``error=GOLD_UNPARSED`` without parsing the prediction: such a gold can
match only as text, which the parent's fast path (``normalize_answer``) has already checked.
"""

from __future__ import annotations

import logging
import signal
import sys
from multiprocessing.connection import Connection

GOLD_UNPARSED = "gold did not parse"


class SoftTimeout(BaseException):
    """Raised in the worker by SIGALRM when a task runs past its time."""


def _on_alarm(signum, frame):
    raise SoftTimeout


def as_math_env(answer: str) -> str:
    """Wrap a bare answer in ``$...$`` (math-verify extracts LaTeX only from math environments).

    Left alone if it already has a math delimiter: an unescaped ``$``, ``\\(`` or ``\\[``
    (``\\$18`` is an escaped dollar sign and still gets wrapped).
    """
    if "$" in answer.replace("\\$", "") or "\\(" in answer or "\\[" in answer:
        return answer
    return f"${answer}$"


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
        from math_verify import parse, verify
    except BaseException as exc:  # noqa: BLE001  (report any import failure instead of dying silently)
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    # math-verify logs every timeout and parse failure with the full (possibly huge) input.
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # Pay parser/sympy first-use costs now, outside any task's time budget.
    verify(parse("$x+1$", parsing_timeout=None), parse("$1+x$", parsing_timeout=None),
           timeout_seconds=None)
    has_alarm = hasattr(signal, "setitimer")
    if has_alarm:
        signal.signal(signal.SIGALRM, _on_alarm)
    conn.send(("ready",))
    while True:
        task = conn.recv()  # EOFError when the parent is gone ends main()
        if task is None:
            return
        index, gold, pred = task
        try:
            correct, timed_out, error = _check(parse, verify, gold, pred, timeout_s, has_alarm)
        except SoftTimeout:  # alarm fired between the try body and disarming it
            correct, timed_out, error = False, True, None
        conn.send(("result", index, correct, timed_out, error))


def _check(parse, verify, gold: str, pred: str, timeout_s: float, has_alarm: bool):
    """Parse gold then prediction and verify, under the soft alarm."""
    if has_alarm:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        gold_parsed = parse(as_math_env(gold), parsing_timeout=None)
        if all(isinstance(item, str) for item in gold_parsed):
            return False, False, GOLD_UNPARSED
        pred_parsed = parse(as_math_env(pred), parsing_timeout=None)
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), False, None
    except SoftTimeout:
        return False, True, None
    except Exception as exc:  # noqa: BLE001  (a model's output never crashes the worker)
        # Only the type: str() of a sympy-laden exception can itself run for minutes.
        return False, False, f"{type(exc).__name__} in math-verify"
    finally:
        if has_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
