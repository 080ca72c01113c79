"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

For a problem with n samples of which c are correct, the probability that at least one of k
samples drawn without replacement from those n is correct:

    pass@k = 1 − C(n−c, k) / C(n, k)  =  1 − ∏_{i=n−c+1}^{n} (1 − k/i)

The product form avoids the huge binomials (C(128, 64) ≈ 2.4e37) and is exact up to float
rounding; it is 1 when n − c < k (every k-subset holds a correct sample). pass@1 = c/n, the mean
accuracy over the n samples. A benchmark's pass@k is the mean over its problems.
Convention: docs/design/conventions.md, "pass@k"; the same estimator as open-instruct and the Codex paper.
"""

from __future__ import annotations

from collections.abc import Iterable


def _check_count(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"pass@k: {name} must be an int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"pass@k: {name} must be >= 0, got {value}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 − C(n−c, k)/C(n, k).

    Args:
        n: samples drawn for the problem (n ≥ k).
        c: how many of them are correct (0 ≤ c ≤ n).
        k: the k of pass@k (1 ≤ k ≤ n).

    Convention: computed as 1 − ∏_{i=n−c+1}^{n} (1 − k/i); exactly 1.0 when n − c < k and exactly
    0.0 when c = 0.
    """
    for value, name in ((n, "n"), (c, "c"), (k, "k")):
        _check_count(value, name)
    if k < 1:
        raise ValueError(f"pass@k: k must be >= 1, got k={k}")
    if k > n:
        raise ValueError(f"pass@k: k={k} is larger than the n={n} samples; draw n >= k samples per problem")
    if c > n:
        raise ValueError(f"pass@k: c={c} correct out of n={n} samples is impossible; c must be <= n")
    if n - c < k:
        return 1.0
    all_wrong = 1.0  # probability that k samples drawn without replacement are all wrong
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def mean_pass_at_k(per_problem: Iterable[tuple[int, int]], k: int) -> float:
    """Mean of pass_at_k(n, c, k) over problems given as (n, c) pairs."""
    values = [pass_at_k(n, c, k) for n, c in per_problem]
    if not values:
        raise ValueError("mean_pass_at_k: no problems given; pass at least one (n, c) pair")
    return sum(values) / len(values)
