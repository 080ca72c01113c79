import re
from fractions import Fraction

import pytest

from rlvr.data import anchor_source, anchor_text, load_rows
from rlvr.data.arithmetic_steps import format_number, worked_steps

NUMBER = r"-?\d+(?:\.\d+)?"
BINARY_LINE = re.compile(rf"({NUMBER}) ([-+*/]) ({NUMBER}) = ({NUMBER})")
NEGATION_LINE = re.compile(rf"-\(({NUMBER})\) = ({NUMBER})")
FINAL_LINE = re.compile(r"The answer is \\boxed\{([^{}]*)\}\.")
OPERATIONS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def _exact_value(expression: str) -> Fraction | None:
    """Independent reference: Python's own parser on Fraction literals (generator output only)."""
    as_fractions = re.sub(r"\d+(?:\.\d+)?", lambda m: f"Fraction('{m.group()}')", expression)
    try:
        return eval(as_fractions, {"Fraction": Fraction})  # test-only, on generator output
    except ZeroDivisionError:
        return None


def _check_worked_anchor(text: str, gold: str) -> None:
    """Every step line is arithmetically true, and the box holds the gold."""
    *steps, final = text.split("\n")
    match = FINAL_LINE.fullmatch(final)
    assert match is not None, final
    assert match.group(1) == gold
    for line in steps:
        binary, negation = BINARY_LINE.fullmatch(line), NEGATION_LINE.fullmatch(line)
        if binary:
            a, op, b, c = binary.groups()
            assert OPERATIONS[op](Fraction(a), Fraction(b)) == Fraction(c), line
        else:
            assert negation is not None, f"unexpected line {line!r}"
            assert -Fraction(negation.group(1)) == Fraction(negation.group(2)), line
    if steps:  # the last operation computes the answer, printed as the gold prints it
        assert steps[-1].rpartition(" = ")[2] == gold


def test_all_gsm8k100_rows_get_a_clean_anchor_ending_in_the_gold():
    rows = load_rows("gsm8k-100")
    assert len(rows) == 100
    for row in rows:
        text = anchor_text(row)
        assert text is not None, row["id"]
        assert text.endswith(f"\\boxed{{{row['answer']}}}."), row["id"]
        assert text.count("\\boxed{") == 1
        for marker in ("<<", ">>", "####"):
            assert marker not in text, (row["id"], marker)
        assert anchor_source(row) == "solution"


def test_gsm8k_solution_is_converted_exactly():
    row = {
        "prompt": "How many clips did Natalia sell altogether in April and May?",
        "answer": "72",
        "solution": (
            "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n"
            "#### 72\n"
        ),
    }
    assert anchor_text(row) == (
        "Natalia sold 48/2 = 24 clips in May.\n"
        "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
        "The answer is \\boxed{72}."
    )


def test_gsm8k_tail_with_thousands_commas_is_boxed_without_them():
    row = {"prompt": "q", "answer": "1234", "solution": "1,000 + 234 = <<1000+234=1234>>1,234\n\n#### 1,234"}
    assert anchor_text(row) == "1,000 + 234 = 1,234\nThe answer is \\boxed{1234}."


def test_boxed_solution_is_kept_and_cut_after_the_last_box():
    row = {
        "prompt": "q",
        "answer": "\\frac{1}{2}",
        "solution": "  First \\boxed{3} is wrong. So it is \\boxed{\\frac{1}{2}} and we are done.\n",
    }
    assert anchor_text(row) == "First \\boxed{3} is wrong. So it is \\boxed{\\frac{1}{2}}"
    assert anchor_source(row) == "solution"


def test_boxed_solution_keeps_the_math_delimiter_closing_the_box():
    row = {"prompt": "q", "answer": "5", "solution": "Hence $x = \\boxed{5}$. Done."}
    assert anchor_text(row) == "Hence $x = \\boxed{5}$"


def test_unclosed_box_gives_none():
    assert anchor_text({"prompt": "q", "answer": "5", "solution": "so \\boxed{5"}) is None


def test_plain_solution_gets_the_gold_appended():
    row = {"prompt": "q", "answer": "7", "solution": "3 + 4 = 7 apples.\n"}
    assert anchor_text(row) == "3 + 4 = 7 apples.\nThe answer is \\boxed{7}."


def test_row_without_solution_or_expression_has_no_anchor():
    assert anchor_text({"prompt": "q", "answer": "7"}) is None
    assert anchor_source({"prompt": "q", "answer": "7"}) == "none"
    other_task = {"prompt": "q", "answer": "7", "metadata": {"source_dataset": "countdown", "expression": "3 + 4"}}
    assert anchor_text(other_task) is None


def test_row_without_gold_is_rejected_with_the_fix():
    with pytest.raises(TypeError, match="normalize_row"):
        anchor_text({"prompt": "q", "solution": "s"})


def _rg_row(expression: str, answer: str, task: str = "basic_arithmetic") -> dict:
    return {"prompt": f"Calculate {expression}.", "answer": answer, "metadata": {"source_dataset": task, "expression": expression}}


def test_precedence_and_parentheses_give_the_expected_lines():
    # (3 + 4) * 2 - 6 / 3: the group first, then * and / left to right, then the subtraction.
    assert anchor_text(_rg_row("(3 + 4) * 2 - 6 / 3", "12")) == (
        "3 + 4 = 7\n7 * 2 = 14\n6 / 3 = 2\n14 - 2 = 12\nThe answer is \\boxed{12}."
    )


def test_negated_group_and_signed_literals():
    # -(2 * -3) = 6; 6 - -1 = 7 (a minus before a number is its sign, not an operation)
    assert anchor_text(_rg_row("-( 2 * -3 ) - -1", "7")) == (
        "2 * -3 = -6\n-(-6) = 6\n6 - -1 = 7\nThe answer is \\boxed{7}."
    )
    assert anchor_text(_rg_row("-(2*-3)--1", "7")) == anchor_text(_rg_row("-( 2 * -3 ) - -1", "7"))


def test_a_wrong_or_inexact_gold_gives_no_anchor():
    assert anchor_text(_rg_row("5 - 3 - 6", "-3")) is None  # gold disagrees with exact arithmetic
    assert anchor_text(_rg_row("7 / 2 * 2", "6")) is None  # a floor-division gold
    assert anchor_text(_rg_row("1 / 3 * 3", "1")) is None  # 1/3 has no finite decimal form
    assert anchor_text(_rg_row("4 / 0", "0")) is None
    assert anchor_text(_rg_row("4 + x", "4")) is None  # not plain arithmetic


def test_gold_is_compared_numerically_and_boxed_as_written():
    assert anchor_text(_rg_row("1.5 + 2.0", "3.50", task="decimal_chain_sum")) == (
        "1.5 + 2.0 = 3.5\nThe answer is \\boxed{3.50}."
    )
    assert anchor_text(_rg_row("7 / 2", "3.5")) == "7 / 2 = 3.5\nThe answer is \\boxed{3.5}."


@pytest.mark.parametrize(
    ("value", "places", "text"),
    [(Fraction(12), 0, "12"), (Fraction(-4), 0, "-4"), (Fraction(7, 2), 0, "3.5"), (Fraction(7140, 1000), 3, "7.140"),
     (Fraction(-1, 20), 1, "-0.05"), (Fraction(0), 2, "0.00")],
)
def test_format_number(value, places, text):
    assert format_number(value, places) == text


def test_worked_steps_rejects_malformed_expressions():
    for expression in ("", "3 +", "(3 + 4", "3 + 4)", "3 ** 2", "2 3"):
        assert worked_steps(expression) is None, expression


@pytest.mark.parametrize(
    "spec",
    [
        "rg:chain_sum:size=200",
        "rg:chain_sum:size=200:seed=1:min_terms=2:max_terms=2:max_digits=1",
        "rg:chain_sum:size=200:seed=2:min_terms=5:max_terms=6:min_digits=4:max_digits=5",
        "rg:chain_sum:size=200:seed=3:allow_negation=True",
        "rg:products:size=200",
        "rg:decimal_chain_sum:size=200",
    ],
)
def test_every_row_of_exact_tasks_gets_a_true_worked_anchor(spec):
    for row in load_rows(spec):
        text = anchor_text(row)
        assert text is not None, (row["id"], row["metadata"]["expression"])
        _check_worked_anchor(text, row["answer"])
        assert anchor_source(row) == "generated"


@pytest.mark.parametrize(
    "spec",
    ["rg:basic_arithmetic:size=200", "rg:basic_arithmetic:size=200:seed=5:whitespace=no_space"],
)
def test_basic_arithmetic_anchor_exactly_when_exact_arithmetic_gives_the_gold(spec):
    rows = load_rows(spec)
    with_anchor = 0
    for row in rows:
        text = anchor_text(row)
        exact = _exact_value(row["metadata"]["expression"])
        # Golds use floor division: an inexact division can make them disagree with the true value.
        if exact is not None and exact == Fraction(row["answer"]):
            assert text is not None, row["metadata"]["expression"]
            _check_worked_anchor(text, row["answer"])
            with_anchor += 1
        else:
            assert text is None, row["metadata"]["expression"]
    assert with_anchor >= 0.95 * len(rows)  # 989 of the first 1000 default rows
