"""pass@k: hand-computed values, edge cases, agreement with the binomial formula."""

import math

import pytest

from rlvr.eval import mean_pass_at_k, pass_at_k


def test_hand_value_n8_c3_k4():
    # 1 − C(5,4)/C(8,4) = 1 − 5/70 = 0.9285714…
    assert pass_at_k(8, 3, 4) == pytest.approx(1 - 5 / 70)
    assert pass_at_k(8, 3, 4) == pytest.approx(0.9285714285714286)


def test_hand_value_n8_c3_k2():
    # 1 − C(5,2)/C(8,2) = 1 − 10/28 = 0.6428571…
    assert pass_at_k(8, 3, 2) == pytest.approx(1 - 10 / 28)


def test_edges():
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(8, 5, 4) == 1.0  # n − c = 3 < k = 4: every 4-subset holds a correct sample
    assert pass_at_k(1, 1, 1) == 1.0


@pytest.mark.parametrize(("n", "c"), [(1, 0), (4, 1), (8, 3), (16, 7), (128, 1), (128, 100)])
def test_k1_is_the_accuracy(n, c):
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_agrees_with_exact_binomials_on_a_grid():
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    # Large n, where the binomials themselves are huge: C(128, 64) ≈ 2.4e37.
    exact = 1 - math.comb(128 - 3, 64) / math.comb(128, 64)
    assert pass_at_k(128, 3, 64) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (4, 1, 5, "k=5 is larger than the n=4"),
        (4, 1, 0, "k must be >= 1"),
        (4, 5, 1, "c=5 correct out of n=4"),
        (-1, 0, 1, "n must be >= 0"),
        (4, -1, 1, "c must be >= 0"),
    ],
)
def test_invalid_arguments(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(("n", "c", "k", "match"), [(4.0, 1, 1, "n must be an int"), (4, True, 1, "c must be an int")])
def test_non_int_arguments(n, c, k, match):
    with pytest.raises(TypeError, match=match):
        pass_at_k(n, c, k)


def test_mean_over_problems():
    # (0.9285714 + 0 + 1) / 3
    assert mean_pass_at_k([(8, 3), (8, 0), (8, 8)], 4) == pytest.approx((1 - 5 / 70 + 0 + 1) / 3)
    assert mean_pass_at_k([(8, 3), (4, 1)], 1) == pytest.approx((3 / 8 + 1 / 4) / 2)
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 1)
