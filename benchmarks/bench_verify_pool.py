"""Per-pair cost of VerifierPool against in-process math-verify and the fast path (not a test).

Run: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_verify_pool.py
"""

import logging
import time

from math_verify import parse, verify

from rlvr.rewards import VerifierPool
from rlvr.rewards.verify_worker import as_math_env

N = 300


def best_ms_per_item(fn, n, reps=3):
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - start) * 1000 / n)
    return best


def in_process(golds, preds):
    return [verify(parse(as_math_env(g), parsing_timeout=None),
                   parse(as_math_env(p), parsing_timeout=None), timeout_seconds=None)
            for g, p in zip(golds, preds)]


def main():
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    golds = [str(k) for k in range(N)]
    preds = [rf"\frac{{{2 * k + 2}}}{{2}}" for k in range(N)]  # k+1 as a fraction: a sympy compare
    ones, twos = ["1"] * N, ["2"] * N                          # cached parses: dispatch cost only
    in_process(golds, preds)
    print(f"in-process math-verify, fraction pair: {best_ms_per_item(lambda: in_process(golds, preds), N):.3f} ms")
    print(f"in-process math-verify, '1' vs '2':    {best_ms_per_item(lambda: in_process(ones, twos), N):.3f} ms")
    for workers in (1, 2):
        with VerifierPool(num_workers=workers, timeout_s=5.0) as pool:
            pool.verify_batch(golds, preds)  # start and warm the workers
            batch = best_ms_per_item(lambda: pool.verify_batch(golds, preds), N)
            trivial = best_ms_per_item(lambda: pool.verify_batch(ones, twos), N)
            single = best_ms_per_item(lambda: [pool.verify_batch(["1"], ["2"]) for _ in range(N)], N)
            print(f"pool {workers} worker(s): batch fraction pair {batch:.3f} ms, "
                  f"batch '1' vs '2' {trivial:.3f} ms, one pair per call {single:.3f} ms")
        fast = best_ms_per_item(lambda: pool.verify_batch(["1,000"] * 10_000, ["1000"] * 10_000), 10_000)
    print(f"fast path (no IPC): {fast * 1000:.2f} us per pair")


if __name__ == "__main__":
    main()
