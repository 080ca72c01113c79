"""VerifierPool: math-verify 0.9 equivalences, the fast path, timeouts and dead workers."""

import os
import signal
import threading
import time

import pytest

from rlvr.rewards import VerifierPool, VerifyResult, normalize_answer
from rlvr.rewards.answer_kind import MATH, TEXT, UNPARSED

CORRECT = VerifyResult(correct=True, gold_kind=MATH)
WRONG = VerifyResult(correct=False, gold_kind=MATH)
TIMED_OUT = VerifyResult(correct=False, timed_out=True, gold_kind=MATH)  # soft: the gold was read
KILLED = VerifyResult(correct=False, timed_out=True)  # hard: the worker said nothing
NO_ANSWER = VerifyResult(correct=False)
HUGE_POWER = "9^{9^{9^{9^{9}}}}"


# What math-verify 0.9 answers for (gold, prediction); pinned so an upgrade that changes it shows.
@pytest.mark.parametrize("gold, pred, correct", [
    (r"\frac{1}{2}", "0.5", True),
    ("0.5", r"\frac{1}{2}", True),
    ("1000", "1{,}000", True),
    ("1,234", "1234.0", True),
    ("0.5", r"50\%", True),
    ("50", r"50\%", True),          # math-verify 0.9 is lenient with percent signs
    (r"\frac{1}{3}", "0.333333", True),
    (r"\frac{1}{3}", "0.33", False),
    ("x+1", "1+x", True),
    ("5", "x=5", True),
    ("18", r"\$18", True),          # escaped dollar: still wrapped in $...$ before parsing
    (r"\pi", "3.14159", False),
    ("(1,2)", "(2,1)", False),
    (r"\{1,2\}", r"\{2,1\}", True),
    ("3", "4", False),
    ("3", "not a number", False),
])
def test_math_verify_equivalences(pool, gold, pred, correct):
    assert pool.verify_batch([gold], [pred]) == [VerifyResult(correct=correct, gold_kind=MATH)]


def test_none_and_empty_predictions_are_wrong_without_workers():
    unstarted = VerifierPool(num_workers=1, timeout_s=1.0)
    assert unstarted.verify_batch(["1", "2", "3"], [None, "", "  "]) == [NO_ANSWER] * 3
    assert unstarted.verify_batch(["1,000", "2", "3"], ["1000", "2.00", "3."]) == [CORRECT] * 3
    assert unstarted.pids == []  # nothing needed a worker (a numeric gold's kind is known)


@pytest.mark.parametrize("raw, normal", [
    (" 1,000 ", "1000"), ("-12,345.5", "-12345.5"), ("2.000", "2"), ("x + 1", "x+1"),
    (r"\cos x", r"\cos x"), (r"\cos   x", r"\cos x"), ("1,2", "1,2"), ("2.50", "2.50"),
])
def test_normalize_answer(raw, normal):
    assert normalize_answer(raw) == normal


def test_batch_keeps_order_across_workers(pool):
    golds = [str(k) for k in range(12)]
    preds = [rf"\frac{{{2 * k}}}{{2}}" if k % 3 else str(k + 1) for k in range(12)]
    expected = [CORRECT if k % 3 else WRONG for k in range(12)]
    assert pool.verify_batch(golds, preds) == expected


def test_huge_exponent_times_out_and_pool_recovers(pool):
    pool.verify_batch(["1"], ["0.9999"])
    workers = pool.pids
    # golds that are expressions: a numeric gold rejects a power tower unevaluated, before sympy
    results = pool.verify_batch(["3^{9}", "3x", "2"], [HUGE_POWER, "9^{9^{9}}", r"\sqrt{4}"])
    assert results == [TIMED_OUT, TIMED_OUT, CORRECT]
    assert pool.pids == workers  # the in-worker alarm ended it: no kill, no restart
    assert pool.verify_batch([r"\frac{1}{2}"], ["0.5"]) == [CORRECT]


def test_adversarial_predictions_do_not_hang(pool):
    nested = "{" * 10_000 + "1" + "}" * 10_000
    results = pool.verify_batch(["3", "3"], [nested, "2" * 100_000])
    assert all(not r.correct for r in results)
    assert pool.verify_batch(["4"], ["4.0"]) == [CORRECT]


def test_a_gold_math_verify_cannot_parse_is_reported_not_raised(pool):
    unparsed = VerifyResult(correct=False, gold_kind=UNPARSED)
    results = pool.verify_batch([r"\frac{", "√2", "#", "√2"], ["1", r"\sqrt{2}", "#", " √2 "])
    # equal as text: correct by the fast path, and the gold's kind is still read in a worker
    assert results == [unparsed, unparsed, VerifyResult(True, gold_kind=UNPARSED),
                       VerifyResult(True, gold_kind=UNPARSED)]
    assert pool.verify_batch(["√4"], ["2"]) == [unparsed]


def test_gold_kinds(pool):
    golds = ["72", r"\frac{1}{2}", "No", "3 is the only possible value", "2^floor(n/2)*floor(n/2)!",
             "0 is not the only possible value", r"\frac{", "x + 1", "No"]
    assert pool.gold_kinds(golds) == ["math", "math", "text", "math", "text", "text", "text", "math", "text"]
    assert pool.gold_kinds([]) == []
    with pytest.raises(ValueError, match="gold #0"):
        pool.gold_kinds([""])


def test_gold_kinds_counts_a_timeout_as_text():
    # 1 ms is too short for any parse: every reading times out (and is not cached); a plain
    # number needs no reading
    with VerifierPool(num_workers=1, timeout_s=0.001) as own:
        assert own.gold_kinds([r"\frac{1}{2}", "x^2", "72"]) == ["text", "text", "math"]


def test_text_golds_are_compared_as_text(pool):
    prose = VerifyResult(correct=True, gold_kind=TEXT)
    results = pool.verify_batch(["No", "No", "Yes", "Exactly one", "0 is not the only possible value"],
                                ["on", r"\text{No}", "YES", r"\text{Exactly one}.", "0 is the only possible value"])
    assert results == [VerifyResult(False, gold_kind=TEXT), prose, prose, prose, VerifyResult(False, gold_kind=TEXT)]


def test_unresponsive_workers_are_killed_and_replaced(pool):
    pool.verify_batch(["1"], ["0.9999"])  # make sure both workers are up
    stopped = pool.pids
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)  # ignores our soft alarm: only the hard kill can end it
    assert pool.verify_batch(["1", "2"], ["3", "4"]) == [KILLED, KILLED]
    assert not set(pool.pids) & set(stopped)
    assert pool.verify_batch(["1", "2"], [r"\frac{2}{2}", r"\sqrt{4}"]) == [CORRECT, CORRECT]


def test_killed_idle_worker_is_replaced(pool):
    pool.verify_batch(["1"], ["0.9999"])
    victim = pool.pids[0]
    os.kill(victim, signal.SIGKILL)
    while victim in pool.pids:  # is_alive() reaps it once the kernel is done
        time.sleep(0.01)
    assert pool.verify_batch(["1", "2"], [r"\frac{3}{3}", "3"]) == [CORRECT, WRONG]
    assert victim not in pool.pids and len(pool.pids) == 2


def test_worker_killed_mid_task_does_not_deadlock(pool):
    pool.verify_batch(["1"], ["0.9999"])
    victims = pool.pids
    killer = threading.Timer(0.3, lambda: [os.kill(pid, signal.SIGKILL) for pid in victims])
    killer.start()
    # The task is retried once on a fresh worker, where it runs into the soft timeout.
    assert pool.verify_batch(["3^{9}"], [HUGE_POWER]) == [TIMED_OUT]
    killer.join()
    assert not set(pool.pids) & set(victims)
    assert pool.verify_batch(["2"], [r"\sqrt{4}"]) == [CORRECT]


def test_close_then_reuse_restarts_workers():
    with VerifierPool(num_workers=1, timeout_s=2.0) as own:
        assert own.verify_batch(["2"], [r"\sqrt{4}"]) == [CORRECT]
        first = own.pids
        own.close()
        assert own.pids == []
        assert own.verify_batch(["2"], ["3"]) == [WRONG]
        assert own.pids != first
    assert own.pids == []


@pytest.mark.parametrize("kwargs, match", [
    ({"num_workers": 0}, "num_workers"), ({"timeout_s": 0}, "timeout_s"),
    ({"timeout_s": float("inf")}, "timeout_s"),
])
def test_bad_pool_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VerifierPool(**kwargs)


def test_bad_batches_are_caller_errors(pool):
    with pytest.raises(ValueError, match="one gold per prediction"):
        pool.verify_batch(["1"], ["1", "2"])
    with pytest.raises(ValueError, match="gold #1"):
        pool.verify_batch(["1", ""], ["1", "2"])
    with pytest.raises(TypeError, match="prediction #0"):
        pool.verify_batch(["1"], [1])
