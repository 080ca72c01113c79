"""extract_answer: the three answer forms, their precedence, and adversarial inputs."""

import pytest

from rlvr.rewards import MAX_ANSWER_CHARS, extract_answer, find_last_box


@pytest.mark.parametrize("text, expected", [
    # \boxed, nested braces, spacing, \fbox, escaped braces
    (r"so the result is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
    (r"\boxed {7}", "7"),
    (r"\fbox{3}", "3"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"$\boxed{ 42 }$", "42"),
    (r"\boxed{\left\{ x \right.}", r"\left\{ x \right."),  # unpaired \{ does not count as a brace
    # last one wins; nested box gives the inner (last by position)
    (r"first \boxed{1}, then \fbox{2}, finally \boxed{3} done", "3"),
    (r"\boxed{\boxed{5}}", "5"),
    # a \boxed mentioned in prose (no brace) is skipped for the previous real one
    (r"\boxed{8}. Remember to use \boxed when answering", "8"),
    # GSM8K
    ("so 1000 in total\n#### 1,000", "1,000"),
    ("#### 72", "72"),
    ("#### -3.5", "-3.5"),
    ("#### $18", "18"),
    ("#### **7**.\n", "7"),
    ("#### 5\nlater\n#### 6", "6"),
    # prose forms
    ("The answer is 42.", "42"),
    ("Thus the final answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("Final answer: 3.5.", "3.5"),
    ("**Final Answer:** **12**", "12"),
    ("the answer is \\(x+1\\)", "x+1"),
    ("The answer is 7. Let me double check: yes.", "7"),
    ("Answer: 9", "9"),
])
def test_forms(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    (r"The answer is 5. \boxed{6}", "6"),             # box beats prose wherever it is
    ("#### 4\nThe answer is 5", "4"),                 # #### beats prose
    ("#### Step 1: add\nThe answer is 5.", "5"),      # a markdown heading is not a GSM8K answer
    ("#### 1. Set-up\nThe answer is 5.", "5"),        # nor is a numbered one
])
def test_precedence(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", [
    "", "no answer here", r"\boxed{}", r"\boxed{1} and then \boxed{2",  # truncated last box
    "\\boxed{" + "x" * (MAX_ANSWER_CHARS + 1) + "}",
    "The answer is " + "y" * (MAX_ANSWER_CHARS + 1),
    "#### 18 dollars",                                                  # not a bare number line
])
def test_none(text):
    assert extract_answer(text) is None


def test_answer_at_cap_is_kept():
    assert extract_answer("\\boxed{" + "7" * MAX_ANSWER_CHARS + "}") == "7" * MAX_ANSWER_CHARS


def test_megabyte_of_text():
    # Linear scans only; each of these would take minutes if any step were quadratic.
    assert extract_answer("a" * 1_000_000) is None
    assert extract_answer("\\boxed " * 150_000) is None
    assert extract_answer("####" * 250_000) is None
    assert extract_answer("answer " * 150_000) is None
    assert extract_answer("x" * 1_000_000 + r"\boxed{2}") == "2"
    assert extract_answer(r"\boxed" + " " * 1_000_000) is None
    assert extract_answer("####" + " " * 1_000_000 + "x") is None
    assert extract_answer("#### " + "1" * 1_000_000 + "x") is None
    assert extract_answer("1 " * 500_000, mode="flexible") == "1"


def test_ten_thousand_nested_braces():
    deep = "{" * 10_000 + "1" + "}" * 10_000
    assert extract_answer(r"\boxed{" + deep + "}") is None        # longer than the cap
    assert extract_answer("{" * 10_000 + r"\boxed{3}" + "}" * 10_000) == "3"
    assert extract_answer(r"\boxed{" * 10_000) is None             # never closed
    assert extract_answer("}" * 10_000 + r"\boxed{4}") == "4"


@pytest.mark.parametrize("text, boxed, flexible", [
    ("so we get 3 apples and then 1,250 pears", None, "1,250"),
    ("costs -2.5 today", None, "-2.5"),
    ("#### 4\nthen 9", "4", "4"),                      # a written form still wins
    (r"\boxed{7} and 8", "7", "7"),
    (r"\boxed{7", None, None),                          # truncated box: no guessing
    ("no digits", None, None),
])
def test_flexible_mode_adds_last_number(text, boxed, flexible):
    assert extract_answer(text) == boxed
    assert extract_answer(text, mode="flexible") == flexible


def test_unknown_mode():
    with pytest.raises(ValueError, match="boxed"):
        extract_answer("x", mode="strict")


def test_find_last_box_span():
    text = r"a \boxed{x^2} b"
    start, end = find_last_box(text)
    assert text[start:end] == "x^2" and text[end] == "}"
    assert find_last_box("nothing") is None


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError, match="message content"):
        extract_answer([{"role": "assistant", "content": "x"}])
