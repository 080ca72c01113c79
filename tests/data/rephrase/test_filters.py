"""Filters: one test per rejection reason, the number rules, near-duplicates, answers_equal."""

from collections import Counter
from decimal import Decimal

import pytest

from rlvr.data.rephrase import REASONS, answers_equal, candidate_reason, ngram_jaccard, numbers, select_candidates

ORIGINAL = "Tom has 1,000 apples and buys 2.5 kg of pears. He eats half of them. How many apples are left?"
GOOD = "Tom owns 1000 apples and purchases 2.50 kg of pears. He eats half of them. How many apples remain?"


def test_numbers_by_value_with_signs_only_where_unary():
    assert numbers("1,000 and 1000 and 2.50 and 2.5") == Counter({Decimal(1000): 2, Decimal("2.5"): 2})
    assert numbers("2 - -1") == Counter({Decimal(2): 1, Decimal(-1): 1})
    assert numbers("5-3 and a 10-foot pole, 1/2, COVID-19") == Counter(
        {Decimal(5): 1, Decimal(3): 1, Decimal(10): 1, Decimal(1): 1, Decimal(2): 1, Decimal(19): 1})
    assert numbers("-( -2842 * -5436 )") == Counter({Decimal(-2842): 1, Decimal(-5436): 1})
    assert numbers("It ends in 6. Then 7, 8.") == Counter({Decimal(6): 1, Decimal(7): 1, Decimal(8): 1})


@pytest.mark.parametrize("candidate, reason", [
    (None, "no_output"),
    ("   \n", "empty"),
    ("Apples?", "too_short"),
    (ORIGINAL * 4, "too_long"),
    ("  " + ORIGINAL.upper().replace(" ", "   ") + "\n", "unchanged"),
    (GOOD.replace("1000", "one thousand"), "changed_numbers"),  # spelled out: 1000 dropped
    (GOOD.replace("1000", "100"), "changed_numbers"),  # changed
    (GOOD + " The answer is 998.", "changed_numbers"),  # a number added
    (GOOD.replace("2 - ", "").replace("He eats", "He eats 2"), "changed_numbers"),
    (GOOD.replace("half", "a third"), "changed_numbers"),  # a number word changed
    (GOOD.replace("1000 apples", "-1000 apples"), "changed_numbers"),  # a sign added
    (GOOD, None),
])
def test_candidate_reason(candidate, reason):
    assert reason is None or reason in REASONS
    assert candidate_reason(ORIGINAL, candidate) == reason


def test_select_rejects_near_duplicates_of_kept_ones_and_stops_at_n():
    near = GOOD.replace("remain?", "remain ?")
    assert ngram_jaccard(GOOD, near) >= 0.9
    other = "Facts:\n- Tom has 1000 apples.\n- Tom buys 2.5 kg of pears.\n- He eats half of them.\n\nHow many apples remain?"
    selection = select_candidates(ORIGINAL, [GOOD, near, GOOD.lower(), None, other, GOOD + " Hurry up!"], n=2)
    assert selection.kept == [GOOD, other]
    assert selection.rejected == Counter({"near_duplicate": 2, "no_output": 1})
    assert selection.surplus == 1


def test_select_asks_the_solver_only_about_candidates_that_passed_the_rest():
    asked = []

    def check(text):
        asked.append(text)
        return "purchases" not in text

    other = "Solve this: " + ORIGINAL.replace("buys", "gets")
    selection = select_candidates(ORIGINAL, [None, GOOD, ORIGINAL, other], n=4, solver_check=check)
    assert selection.kept == [other]
    assert selection.rejected == Counter({"no_output": 1, "solver_wrong": 1, "unchanged": 1})
    assert asked == [GOOD, other]


def test_ngram_jaccard_hand_computed():
    # 4-grams of "abcde": {abcd, bcde}; of "abcdx": {abcd, bcdx} → 1 shared of 3.
    assert ngram_jaccard("abcde", "ABCDX") == pytest.approx(1 / 3)
    assert ngram_jaccard("ab", "ab") == 1.0


@pytest.mark.parametrize("gold, prediction, equal", [
    ("1000", "1,000", True), ("18", "18.0", True), ("$5", "5", True), ("-4", "-4", True),
    ("3", "4", False), ("x+1", "X + 1", True), ("7", None, False), ("10", "10 \\text{ dollars}", True),
])
def test_answers_equal(gold, prediction, equal):
    assert answers_equal(gold, prediction) is equal
