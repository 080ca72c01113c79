"""The `steps` scorer and its equation finder: hand-checked truths, skips, fallback, safety."""

import pytest

from rlvr.rewards.scorers import RewardScorer, StepsScorer, find_equations


def _holds(text, **kwargs):
    return [e.holds for e in find_equations(text, **kwargs)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 + 3 = 5", [True]),
        ("2 + 3 = 6", [False]),
        ("So 7 * 8 = 56, then 56 - 6 = 50.", [True, True]),
        ("Chain: 2 + 3 = 5 = 6", [True, False]),  # 2+3 = 5 holds, 5 = 6 does not
        ("12 / 4 + 1 = 4 = 2 * 2", [True, True]),
        # GSM8K calculator notes, also glued to the text around them
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.", [True]),
        ("She earns <<12*50=600>>600 and spends <<600-25=585>>575", [True, False]),  # 600-25 = 575
        ("<<7*6=43>>43", [False]),
        # fractions: 3/4 + 1/4 = 1; 1/2 + 1/3 = 5/6, not 2/5
        ("3/4 + 1/4 = 1", [True]),
        (r"\frac{1}{2} + \frac{1}{3} = \frac{5}{6}", [True]),
        (r"$\dfrac{1}{2} + \tfrac{1}{3} = \frac{2}{5}$", [False]),
        (r"\frac{\frac{1}{2}}{4} = 1/8", [True]),
        # thousands separators, decimals (0.1 + 0.2 is not 0.3 in floats; it is here)
        ("1,200 + 800 = 2,000", [True]),
        ("0.1 + 0.2 = 0.3", [True]),
        ("2.5 * 4 = 10.0", [True]),
        ("1,000,000 / 1,000 = 999", [False]),
        # currency and multiplication signs
        (r"\$12 \times 3 = \$36", [True]),
        ("$4 + $5 = $9", [True]),
        (r"6 \cdot 7 = 42 and 84 \div 2 = 42", [True, True]),
        ("6 × 7 = 42, 84 ÷ 2 = 41", [True, False]),
        ("3 x 4 = 12", [True]),
        ("3x4 = 13", [False]),
        # powers (integers), precedence, groups, implicit product, unary minus
        ("2^10 = 1024", [True]),
        ("2^{10} = 1000", [False]),
        ("2 + 3 * 4 = 14", [True]),
        ("(2 + 3) * 4 = 20", [True]),
        ("2(3 + 4) = 14", [True]),
        ("-2^2 = -4", [True]),
        ("5 - 8 = -3", [True]),
        (r"3 \times 4 = \boxed{12}", [True]),
        (r"\left(1 + 2\right) \cdot 3 = 9", [True]),
        # markdown around equations
        ("**3 + 4 = 7**", [True]),
        ("- 3 + 4 = 7", [True]),  # a list marker, not a minus
        ("1) 3 + 4 = 7", [True]),
        ("2. 10 - 4 = 6", [True]),
        ("7 - 2 = 5 apples", [True]),
        (r"3 \cdot 4 = 12\text{ cm}", [True]),
    ],
)
def test_equation_truth(text, expected):
    assert _holds(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2x = 6",            # algebra: the 2 is a coefficient
        "x + 2 = 5",         # the left side goes on into a variable
        "x - 2 = 5",
        "half of 10 = 5",    # the word is part of the left side
        "3 times 4 = 12",
        "20% of 50 = 10",
        "5 = 5%",
        "3:4 = 6:8",
        r"\sqrt{16} = 4",
        "5! = 120",
        "x = 5",             # an assignment: nothing computed
        "1 = 1",             # a comparison of numbers, not a step
        "9^9^9 = 1",         # exponent far beyond the cap: skipped, not computed
        "2^0.5 = 1.41",      # non-integer exponent
        "5 / 0 = 1",
        "3 + = 4",
        "(1 + 2 = 3",
        "3 ≈ 3.1",
    ],
)
def test_ambiguous_or_uncomputable_equations_are_skipped(text):
    assert find_equations(text) == []


def test_equation_sides_are_reported_as_written():
    [eq] = find_equations("Total: $1,200 + 800 = 2,000 dollars")
    assert (eq.lhs, eq.rhs, eq.holds) == ("1,200 + 800", "2,000", True)


def test_decimal_rounding_accepts_half_a_unit_in_the_last_place():
    # 10/3 = 3.3333..: |3.33 - 10/3| = 0.0033 <= 0.005; |3.34 - 10/3| = 0.0067 > 0.005
    assert _holds("10/3 = 3.33") == [True]
    assert _holds("10/3 = 3.34") == [False]
    assert _holds("2/3 = 0.67") == [True]
    assert _holds("10/3 = 3.33", decimal_rounding=False) == [False]
    # exact decimals need no rounding (in binary floats 0.1 + 0.2 != 0.3)
    assert _holds("0.1 + 0.2 = 0.3", decimal_rounding=False) == [True]
    assert _holds("0.1 + 0.2 = 0.30000000000000004", decimal_rounding=False) == [False]


def test_max_equations_keeps_the_first():
    assert _holds("1+1=2\n1+1=3\n1+1=2", max_equations=2) == [True, False]


def _steps(responses, rewards, **kwargs):
    scorer = StepsScorer(**kwargs)
    n = len(responses)
    return scorer([""] * n, responses, [None] * n, rewards), scorer.pop_stats()


def test_steps_score_is_the_fraction_of_true_equations():
    responses = [
        "2 + 3 = 5\n5 * 4 = 20\n20 - 1 = 18\n\\boxed{18}",  # 2 of 3 true
        "Chain 2 + 3 = 5 = 6",                             # 1 of 2
        "<<48/2=24>>24 and <<24+48=72>>72",                # 2 of 2
        "5 * 5 = 24",                                      # 0 of 1
    ]
    scores, stats = _steps(responses, [0.0, 1.0, 1.0, 1.0])
    assert scores == pytest.approx([2 / 3, 0.5, 1.0, 0.0])
    assert stats["calls"] == 4 and stats["failures"] == 0 and stats["no_equations"] == 0
    assert stats["equations"] == 3 + 2 + 2 + 1 and stats["equations_true"] == 2 + 1 + 2 + 0


def test_steps_without_equations_falls_back_to_the_reward():
    responses = ["The answer is \\boxed{4}.", "I think 2x = 6 so x is 3.", "", "no idea"]
    scores, stats = _steps(responses, [1.0, 0.0, 0.0, 1.5])
    assert scores == [1.0, 0.0, 0.0, 1.0]  # the reward, clamped to [0, 1]
    assert stats["no_equations"] == 4 and stats["equations"] == 0


def test_steps_accepts_chat_messages_and_checks_lengths():
    scorer = StepsScorer()
    assert scorer(["q"], [[{"role": "assistant", "content": "1 + 1 = 3"}]], [None], [1.0]) == [0.0]
    with pytest.raises(ValueError, match="one question, reference and reward per response"):
        scorer(["q"], ["1 + 1 = 2", "2"], [None, None], [1.0, 1.0])


def test_pop_stats_resets():
    scorer = StepsScorer()
    scorer(["q"], ["1 + 1 = 2"], [None], [1.0])
    assert scorer.pop_stats()["calls"] == 1
    assert scorer.pop_stats()["calls"] == 0


@pytest.mark.parametrize(
    "response",
    [
        "1+" * 500_000 + "1 = 3",                          # 1 MB, one side far over the token cap
        "2 * 3 = 6\n" * 100_000,                           # 1 MB of equations (capped count)
        "lorem ipsum = dolor " * 50_000,                   # 1 MB of prose with '='
        "(" * 10_000 + "1" + ")" * 10_000 + " = 1 + 0",    # 10k nested parentheses
        "\\frac{" * 5_000 + "1" + "}{2}" * 5_000 + " = 1 + 0",
        "9^9^9^9 = 1 + 2^100000 = 10^10^10 = (2^4096)^4096",  # huge exponents
        "1" * 10_000 + " + 1 = 2",                         # a 10k-digit number
        "-" * 100_000 + "1 = 1 + 0",                       # 100k unary minuses
        "=" * 1_000_000,
    ],
)
def test_adversarial_responses_finish_and_score_in_range(response):
    scores, stats = _steps([response], [1.0])
    assert stats["failures"] == 0
    assert scores[0] is not None and 0.0 <= scores[0] <= 1.0


def test_adversarial_caps_skip_rather_than_compute():
    assert find_equations("(" * 10_000 + "1" + ")" * 10_000 + " = 1 + 0") == []
    assert find_equations("(" * 20 + "1" + ")" * 20 + " = 1 + 0")[0].holds  # shallow nesting is fine
    assert find_equations("2^4096 = 2^4096 + 0") == []  # 4097 bits > MAX_BITS
    assert find_equations("2^4000 + 1 = 1 + 2^4000")[0].holds


def test_reward_scorer_is_the_clamped_reward():
    scorer = RewardScorer()
    assert scorer(["q"] * 4, ["a"] * 4, [None] * 4, [1.0, 0.0, 1.1, float("nan")]) == [1.0, 0.0, 1.0, None]
    assert scorer.pop_stats() == {"calls": 4, "failures": 1, "seconds": 0.0}
