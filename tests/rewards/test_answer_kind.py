"""answer_kind: the text-side rules (clean, unit, prose, math core) without math-verify."""

import pytest

from rlvr.rewards.answer_kind import clean_answer, is_prose, math_core, math_strings, split_unit, text_form


@pytest.mark.parametrize("raw, clean", [
    (r"2^{n-1}.", r"2^{n-1}"), (r"\frac{1}{2}.", r"\frac{1}{2}"), ("1/2.", "1/2"), ("42 ;", "42"),
    (r"$\dfrac{3}{4}$", r"\frac{3}{4}"), (r"\tfrac{1}{6},", r"\frac{1}{6}"), ("1, 2, ...", "1, 2, ..."),
    ("1 234", "1234"), ("2 3", "2 3"), ("x\n+ 1", "x + 1"), (r"\varnothing", r"\emptyset"),
])
def test_clean_answer(raw, clean):
    assert clean_answer(raw) == clean


@pytest.mark.parametrize("raw, text", [
    (r"\text{Exactly one}.", "exactly one"), ("YES", "yes"), (r"\textbf{No}", "no"), ("$18.00", "18.00"),
    ("2^floor(n/2)*floor(n/2)!", "2^floor(n/2)*floor(n/2)!"),  # "!" is a factorial, kept
])
def test_text_form(raw, text):
    assert text_form(raw) == text


@pytest.mark.parametrize("raw, split", [
    ("5 cm", ("5", "cm")), (r"5 \text{ cm}", ("5", "cm")), (r"25\text{ cm}^2", ("25", "cm")),
    ("18 dollars", ("18", "dollar")), ("3 inches", ("3", "inch")), ("12 feet", ("12", "foot")),
    ("3+2t", ("3+2t", None)), ("x+2m", ("x+2m", None)), ("5 m", ("5 m", None)),  # one letter: a symbol
    (r"12 \text{ not}", (r"12 \text{ not}", None)), ("3 is", ("3 is", None)), ("50 percent", ("50 percent", None)),
    ("No", ("No", None)),
])
def test_split_unit(raw, split):
    assert split_unit(raw) == split


@pytest.mark.parametrize("answer, prose", [
    ("No", True), ("on", True), ("Bob", True), ("ab", True), ("YES", True), (r"\text{Exactly one}", True),
    ("0 is not the only possible value", True), ("2ab", False), ("x<1 or x>3", False), ("1 and 2", False),
    (r"\sqrt{2} xy", False), (r"2^{\lfloor n/2 \rfloor}", False), ("floor(n/2)", False),
    (r"\frac{1}{2} \text{garbage}", True), (r"x \in \mathbb{R}", False), (r"\begin{pmatrix}1\\2\end{pmatrix}", False),
])
def test_is_prose(answer, prose):
    assert is_prose(answer) is prose


@pytest.mark.parametrize("answer, core", [
    ("The limit exists and is equal to 3", "3"), ("3 is the only possible value", "3"), ("The answer is 42", "42"),
    (r"3 \text{ is the only possible value}", "3"),
    ("0 is not the only possible value", None), ("3 is a possible value", None), ("The answer is 3 and 4", None),
    ("The limit does not exist", None), ("Yes, and the sequence is 1/2^3, 1/2^6", None), ("never 3", None),
])
def test_math_core(answer, core):
    assert math_core(answer) == core


def test_alternatives_and_negations():
    assert math_strings("C(10, 5), or equivalently 252") == ("C(10, 5)", "252")
    assert math_strings("3, or equivalently not 4") is None
    assert math_strings("No") is None and math_strings("x+1") == ("x+1",)
