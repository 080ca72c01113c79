"""Math-verify in a persistent pool of worker processes, with our own per-task timeout.

Why processes: math-verify's timeouts use SIGALRM, which works only in a main thread, and a
pathological answer (``9^{9^{9^{9}}}``) can keep sympy busy for minutes. Each worker is a fresh
interpreter (spawned, never forked after torch) that imports math-verify once and answers one task
at a time over its own socket, using ``multiprocessing.connection`` framing.

Departure from ``multiprocessing``'s 'spawn'/'forkserver' contexts: those re-import the caller's
``__main__`` in every worker. With a training script that imports torch and transformers that
measured 4.0 s and 276 MiB per worker instead of 0.8 s and 59 MiB, paid again on every
replacement, and a script without an ``if __name__ == "__main__":`` guard would re-run itself in
the worker. So workers are started with ``subprocess`` running ``verify_worker.main``.

Two timeouts, both reported as ``timed_out=True`` (incorrect):
- soft: inside the worker, ``setitimer`` raises at ``timeout_s``; the worker survives (cheap);
- hard: the parent kills a worker that has not answered ``timeout_s + KILL_GRACE_S`` after the
  task was sent (C code that ignores signals, a stopped process) and starts a replacement.
math-verify's own SIGALRM timeouts are switched off in the workers because they would cancel ours.

A worker that dies mid-task (OOM killer, segfault) is replaced and its task retried once; a second
death makes the result incorrect with ``error`` set. Nothing waits without a deadline, so a dead
worker cannot deadlock the caller. Workers start on first use; ``close()`` stops them and a later
call starts fresh ones.

Convention: gold first (math-verify is not symmetric). What counts as math and what as text, for
gold and prediction alike, is decided in ``rlvr.rewards.answer_kind``: an answer is math only if it
parses as a whole (never as a fragment: ``2^floor(n/2)*floor(n/2)!`` is not ``2``), prose is
compared as normalised text (``No`` is not ``n*o``), and a prose answer whose words are all
fillers around one math core (``3 is the only possible value``) is read as that core. Each result
carries the gold's kind (``MATH``, ``TEXT``, ``UNPARSED``), which ``MathAccuracy`` counts.
Strings equal after ``normalize_answer`` are correct without any IPC.
Final answers: a gold that is a plain number asks for a number. A prediction that is still an
arithmetic expression (``84 - 12``, ``-67 * -17``, ``2^3``; the part after the last ``=`` when
it is an equation) is incorrect with ``error=UNEVALUATED`` without reaching math-verify, which
would evaluate it and call it equal. Under RL a policy finds this: a TA-GRPO run here learned to
answer "The answer is: 84 - 12" to "84 - 12 =" (docs/results.md). Fractions (``3/4``,
``\\frac{3}{4}``) are numbers and still reach math-verify.
POSIX only (socket pairs, ``setitimer``), like math-verify's own timeouts.
"""

from __future__ import annotations

import collections
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Self

from rlvr.rewards.answer_kind import MATH, TEXT
from rlvr.rewards.extract import clean_answer

KILL_GRACE_S = 1.0
STARTUP_TIMEOUT_S = 120.0
_POLL_S = 0.5  # also check process liveness this often, in case a socket end leaked to a fork
_WORKER_COMMAND = ("import sys; sys.path[:] = sys.argv[3:]; "
                   "from rlvr.rewards.verify_worker import main; main()")
_MAX_ATTEMPTS = 2  # a task whose worker died is retried once on a fresh worker
_KIND_CACHE_SIZE = 100_000  # distinct golds whose kind the parent remembers (cleared when full)

# a space between two letters or digits is kept: "\\cos x" is not "\\cosx", "2 3" is not "23"
_SPACE_NOT_BETWEEN_WORDS = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_INT_WITH_ZERO_DECIMALS = re.compile(r"(-?\d+)\.0+")


UNEVALUATED = "unevaluated expression"
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# a number (or a closing bracket) and an operator and another operand: "84 - 12", "6*-7", "2^{3}"
_OPERATION = re.compile(r"[\d)}]\s*(?:[-+*×÷·^]|\\times|\\cdot|\\div)\s*[-+({]?\s*[\d(\\{]")


def is_unevaluated(gold: str, pred: str) -> bool:
    """True when ``gold`` is a plain number and ``pred`` (after its last ``=``) is an arithmetic
    expression still to be evaluated, not a number: such a prediction restates the work."""
    if not _PLAIN_NUMBER.fullmatch(normalize_answer(gold)):
        return False
    return _OPERATION.search(pred.rsplit("=", 1)[-1]) is not None


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one gold/prediction comparison.

    ``timed_out`` and ``error`` both imply ``correct=False``; ``error`` is a short description
    (worker crash, exception inside math-verify, ``UNEVALUATED``), never a traceback of the
    model's text. ``gold_kind`` says how the gold was compared (``answer_kind``): ``math``,
    ``text`` (prose) or ``unparsed`` (looks like math but does not parse as a whole: as text).
    """

    correct: bool
    timed_out: bool = False
    error: str | None = None
    gold_kind: str | None = None  # answer_kind.MATH/TEXT/UNPARSED; None: no answer, or timed out


def normalize_answer(answer: str) -> str:
    """Cheap canonical form for the fast path: exact matches after it skip math-verify.

    ``extract.clean_answer`` (delimiters, a trailing period, ``\\dfrac``), then collapses
    whitespace (kept only between two letters or digits, so ``\\cos x`` ≠ ``\\cosx`` and
    ``2 3`` ≠ ``23``), drops thousands
    separators from plain numbers (``1,000`` → ``1000``) and zero decimals (``2.0`` → ``2``).
    Equal normal forms mean the same answer, math or text.
    """
    text = _SPACE_NOT_BETWEEN_WORDS.sub("", clean_answer(answer))
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    match = _INT_WITH_ZERO_DECIMALS.fullmatch(text)
    return match.group(1) if match else text


class _Worker:
    """Parent-side handle: the process, its socket, and the task it holds (if any)."""

    def __init__(self, timeout_s: float):
        ours, theirs = socket.socketpair()
        # The child gets our sys.path (as multiprocessing's spawn does), so it imports this rlvr.
        sys_path = [entry or os.getcwd() for entry in sys.path]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_COMMAND, str(theirs.fileno()), repr(timeout_s),
             *sys_path],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False
        self.started_at = time.monotonic()
        self.task: int | None = None
        self.deadline = math.inf

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, graceful: bool) -> None:
        if graceful:
            try:
                self.process.wait(timeout=1.0)  # after _stop_all sent the exit request
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=5.0)
        self.conn.close()


def _stop_all(workers: list) -> None:
    for worker in workers:  # ask all first, so they exit in parallel
        if worker is not None and worker.alive():
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
    for i, worker in enumerate(workers):
        if worker is not None:
            worker.stop(graceful=True)
            workers[i] = None


class VerifierPool:
    """Persistent pool of math-verify worker processes with a per-task timeout.

    Args:
        num_workers: worker processes; tasks of a batch run in parallel across them.
        timeout_s: seconds one comparison (parse gold, parse prediction, verify) may take.

    Use as a context manager or call ``close()``; workers start lazily on the first batch that
    needs them. Thread-safe: concurrent ``verify_batch`` calls are serialised.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}; "
                             "use 1 for a single verifier process")
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive finite number of seconds, got "
                             f"{timeout_s!r}; 5.0 suits competition math")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self._workers: list[_Worker | None] = [None] * num_workers
        self._lock = threading.Lock()
        self._startup_deaths = 0  # consecutive; a worker that keeps dying at start is a broken install
        self._kinds: dict[str, str] = {}  # gold → kind reported by a worker
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop all workers (politely, then by kill). Idempotent; a later batch restarts them."""
        with self._lock:
            _stop_all(self._workers)

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring and tests)."""
        return [w.process.pid for w in self._workers if w is not None and w.alive()]

    def verify_batch(self, golds: list[str], preds: list[str | None]) -> list[VerifyResult]:
        """Compare each prediction with its gold; one ``VerifyResult`` per pair, in order.

        ``None`` or empty predictions are incorrect without dispatch, and so are unevaluated
        expressions for a numeric gold (``is_unevaluated``); pairs equal after
        ``normalize_answer`` are correct without dispatch (a gold whose kind is not yet known is
        then read once in a worker, for ``gold_kind``); the rest run in the workers.

        Raises:
            ValueError/TypeError: mismatched lengths, an empty or non-string gold, a prediction
                that is neither str nor None (caller bugs, never model output).
            RuntimeError: a worker cannot start at all (broken install), not per-task failures.
        """
        golds, preds = list(golds), list(preds)
        _check_inputs(golds, preds)
        results: list[VerifyResult | None] = [None] * len(golds)
        tasks, slots = [], []  # (gold, pred) for the workers, and the result each one fills
        for i, (gold, pred) in enumerate(zip(golds, preds)):
            pred_norm = normalize_answer(pred) if pred is not None else ""
            if not pred_norm:
                results[i] = VerifyResult(correct=False)
            elif is_unevaluated(gold, pred):
                results[i] = VerifyResult(correct=False, error=UNEVALUATED, gold_kind=MATH)
            elif pred_norm == normalize_answer(gold):
                results[i] = VerifyResult(correct=True, gold_kind=self._known_kind(gold))
            else:
                tasks.append((gold, pred))
                slots.append(i)
        sent = {gold for gold, _ in tasks}
        unknown = {golds[i] for i, r in enumerate(results) if r is not None and r.correct and r.gold_kind is None}
        tasks += [(gold, None) for gold in sorted(unknown - sent)]
        replies = self._dispatch(tasks)
        for i, reply in zip(slots, replies):
            results[i] = reply
        for i, result in enumerate(results):
            if result.correct and result.gold_kind is None:
                results[i] = VerifyResult(correct=True, gold_kind=self._kinds.get(golds[i]))
        return results

    def gold_kinds(self, golds: list[str]) -> list[str]:
        """How each gold will be compared: ``"math"`` (by math-verify) or ``"text"``, in order.

        For a start-up check of a dataset: call once with its distinct golds. ``"text"`` covers
        prose golds and golds that look like math but do not parse as a whole (``answer_kind``'s
        ``TEXT`` and ``UNPARSED``), and a gold whose reading times out or fails (it can never be
        matched as math within ``timeout_s``). Each uncached gold is one task in the workers.

        Raises:
            ValueError: an empty or non-string gold (fix or drop that dataset row).
        """
        golds = list(golds)
        _check_inputs(golds, [None] * len(golds))
        todo = sorted({gold for gold in golds if self._known_kind(gold) is None})
        self._dispatch([(gold, None) for gold in todo])
        return [MATH if self._known_kind(gold) == MATH else TEXT for gold in golds]

    def _known_kind(self, gold: str) -> str | None:
        if _PLAIN_NUMBER.fullmatch(normalize_answer(gold)):
            return MATH  # the common case, without a round trip
        return self._kinds.get(gold)

    def _dispatch(self, tasks: list[tuple[str, str | None]]) -> list[VerifyResult]:
        """Run ``(gold, pred)`` tasks in the workers (``pred=None``: read the gold only); remember
        the gold kinds they report."""
        if not tasks:
            return []
        replies: list[VerifyResult | None] = [None] * len(tasks)
        with self._lock:
            self._run(collections.deque((i, 1) for i in range(len(tasks))), tasks, replies)
            if len(self._kinds) > _KIND_CACHE_SIZE:
                self._kinds.clear()
            for (gold, _), reply in zip(tasks, replies):
                if reply.gold_kind is not None:
                    self._kinds[gold] = reply.gold_kind
        return replies

    def _run(self, pending: collections.deque, tasks, results) -> None:
        """Dispatch ``pending`` (index, attempt) tasks until every result is filled."""
        attempts: dict[int, int] = {}
        remaining = len(pending)
        for slot, worker in enumerate(self._workers):
            # A task still held here was abandoned by an interrupted call: its answer would be
            # mistaken for one of ours, so that worker is replaced.
            if worker is None or not worker.alive() or worker.task is not None:
                self._replace(slot)
        while remaining:
            now = time.monotonic()
            for worker in self._workers:
                if worker.ready and worker.task is None and pending:
                    index, attempt = pending.popleft()
                    attempts[index] = attempt
                    worker.task, worker.deadline = index, now + self.timeout_s + KILL_GRACE_S
                    try:
                        worker.conn.send((index, *tasks[index]))
                    except (OSError, ValueError):
                        pass  # dead already; found below by EOF or poll()
            wake_at = min(w.deadline if w.ready else w.started_at + STARTUP_TIMEOUT_S
                          for w in self._workers)
            assert wake_at < math.inf, "tasks remain but no worker holds one or is starting"
            timeout = min(_POLL_S, max(0.0, wake_at - time.monotonic()))
            ready = set(wait([w.conn for w in self._workers], timeout=timeout))
            for slot, worker in enumerate(self._workers):
                outcome = self._poll(slot, worker, ready)
                if outcome is None:
                    continue
                index, result = outcome
                if result is None and attempts[index] < _MAX_ATTEMPTS:
                    pending.appendleft((index, attempts[index] + 1))
                    continue
                results[index] = result or VerifyResult(False, error="verifier worker died twice")
                remaining -= 1

    def _poll(self, slot: int, worker: _Worker, ready: set):
        """Handle one worker's events: returns (index, result) for a finished task, (index, None)
        for a task lost to a dead worker, or None when it has no finished task."""
        if worker.conn in ready:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                return self._lost(slot, worker)
            if message[0] == "ready":
                worker.ready = True
                self._startup_deaths = 0
                return None
            if message[0] == "failed":
                raise RuntimeError(f"verifier worker could not start: {message[1]}; check that "
                                   "math-verify is installed in this environment")
            _, index, correct, timed_out, error, gold_kind = message
            worker.task, worker.deadline = None, math.inf
            return index, VerifyResult(correct, timed_out, error, gold_kind)
        if not worker.alive():
            # A last message may still be unread: take it on the next round, then see EOF.
            return None if worker.conn.poll() else self._lost(slot, worker)
        now = time.monotonic()
        if worker.task is not None and now >= worker.deadline:
            index = worker.task
            self._replace(slot)
            return index, VerifyResult(correct=False, timed_out=True)
        if not worker.ready and now >= worker.started_at + STARTUP_TIMEOUT_S:
            raise RuntimeError(f"verifier worker did not start within {STARTUP_TIMEOUT_S:.0f} s; "
                               "the machine may be overloaded: lower num_workers")
        return None

    def _lost(self, slot: int, worker: _Worker):
        if not worker.ready:
            self._startup_deaths += 1
            if self._startup_deaths >= 3:
                raise RuntimeError(f"verifier workers keep exiting during start-up (last exit "
                                   f"code {worker.process.returncode}); run "
                                   "`python -c 'import math_verify'` to see why")
        index = worker.task
        self._replace(slot)
        return None if index is None else (index, None)

    def _replace(self, slot: int) -> None:
        if self._workers[slot] is not None:
            self._workers[slot].stop(graceful=False)
        self._workers[slot] = _Worker(self.timeout_s)


def _check_inputs(golds: list, preds: list) -> None:
    if len(golds) != len(preds):
        raise ValueError(f"verify_batch got {len(golds)} golds and {len(preds)} predictions; "
                         "pass one gold per prediction (repeat the gold for each sample)")
    for i, gold in enumerate(golds):
        if not isinstance(gold, str) or not gold.strip():
            raise ValueError(f"gold #{i} is {gold!r}; every gold must be a non-empty string "
                             "(fix or drop that dataset row)")
    for i, pred in enumerate(preds):
        if pred is not None and not isinstance(pred, str):
            raise TypeError(f"prediction #{i} is a {type(pred).__name__}; pass the extracted "
                            "answer as str, or None when there is none")
