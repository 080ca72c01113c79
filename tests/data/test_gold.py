import pytest

from rlvr.data.gold import gsm8k_tail, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 + 4 = <<3+4=7>>7 apples.\n#### 7\n", "7"),
        ("So 1,000 + 234 = 1,234.\n#### 1,234", "1234"),  # thousands commas removed
        ("#### -3", "-3"),
        ("#### 3.5\n\n", "3.5"),
        ("#### (1, 2)", "(1, 2)"),  # not a number with thousands separators: comma kept
        ("no marker at all", None),
        ("#### ", None),  # marker with nothing after it
        ("#### 5\nmore text after the tail", None),  # not a tail
    ],
)
def test_gsm8k_tail(text, expected):
    assert gsm8k_tail(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{4}.", "4"),
        ("first \\boxed{1}, then \\boxed{2}", "2"),  # the last box wins
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces balanced
        ("\\fbox{ 9 }", "9"),
        ("\\boxed{1} and \\fbox{3}", "3"),
        ("\\boxed{}", ""),
        ("\\boxed{12", None),  # unclosed
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected
