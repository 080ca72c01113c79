"""The two offline sources: reasoning-gym generators (`rg:...`) and `gsm8k-100`."""

import re

import pytest

from rlvr.data import load_rows
from rlvr.data.spec_options import parse_value

CHAIN_SUM = "rg:chain_sum:size=50:seed=3:min_terms=4:max_terms=4:max_digits=1"


def _terms_in_question(question: str) -> list[int]:
    # "State the final answer to the following arithmetic problem: 5 + 9 + 7 - 9 ="
    expression = question.split(":", 1)[1].rstrip(" =")
    return [int(number) for number in re.findall(r"\d+", expression)]


def test_rg_rows_honour_options():
    rows = load_rows(CHAIN_SUM)
    assert len(rows) == 50
    assert [row["id"] for row in rows[:2]] == ["rg:chain_sum:3:0", "rg:chain_sum:3:1"]
    for row in rows:
        assert row["metadata"]["source_dataset"] == "chain_sum"
        assert row["metadata"]["num_terms"] == 4
        terms = _terms_in_question(row["prompt"])
        assert len(terms) == 4, row["prompt"]
        assert all(0 <= term <= 9 for term in terms)  # max_digits=1
        # The gold is the value of the expression the question shows (only + and - occur).
        assert int(row["answer"]) == eval(row["metadata"]["expression"]), row
        assert set(row) == {"id", "prompt", "answer", "metadata"}


def test_rg_is_deterministic_and_seed_matters():
    assert load_rows(CHAIN_SUM) == load_rows(CHAIN_SUM)
    other = load_rows(CHAIN_SUM.replace("seed=3", "seed=4"))
    assert [r["prompt"] for r in other] != [r["prompt"] for r in load_rows(CHAIN_SUM)]


def test_rg_defaults_size_1000_seed_0():
    rows = load_rows("rg:chain_sum:min_terms=2:max_terms=2:max_digits=1")
    assert len(rows) == 1000
    assert rows[0]["id"] == "rg:chain_sum:0:0"
    assert rows[-1]["id"] == "rg:chain_sum:0:999"


def test_rg_bool_option_reaches_the_generator():
    def negated_terms(flag: str) -> int:
        rows = load_rows(f"rg:chain_sum:size=200:min_terms=2:max_terms=2:allow_negation={flag}")
        # A negated term is a '-' directly before a digit, e.g. "-1 - -6".
        return sum(bool(re.search(r"-\d", row["metadata"]["expression"])) for row in rows)

    assert negated_terms("false") == 0
    assert negated_terms("true") > 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rg:chainsum", "unknown reasoning-gym generator 'chainsum'; close names: chain_sum"),
        ("rg:", "names no generator"),
        (
            "rg:chain_sum:bogus=1",
            "generator 'chain_sum' has no option 'bogus'; valid options: allow_negation, max_digits",
        ),
        ("rg:chain_sum:min_terms=5:max_terms=2", "max_terms must be >= min_terms"),
        ("rg:chain_sum:size=0", "option size=0 must be an integer >= 1"),
        ("rg:chain_sum:seed=abc", "option seed='abc' must be an integer >= 0"),
        ("rg:chain_sum:size", "option 'size' is not key=value"),
        ("rg:chain_sum:seed=1:seed=2", "option 'seed' is given twice"),
    ],
)
def test_rg_bad_specs(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_rows(spec)


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), ("-2", -2), ("0.5", 0.5), ("1e-3", 0.001), ("true", True), ("False", False), ("abc", "abc"), ("", "")],
)
def test_parse_value(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_gsm8k100():
    rows = load_rows("gsm8k-100")
    assert len(rows) == 100
    assert len({row["id"] for row in rows}) == 100
    for row in rows:
        assert row["id"].startswith("gsm8k-100:")
        float(row["answer"])  # every gold is a number
        assert "####" in row["solution"]
        assert row["solution"].rstrip().endswith(row["answer"])
        assert isinstance(row["prompt"], str) and row["prompt"].strip()
    # Hand-checked against 0000.toml: GSM8K test id 473, the shark/remora question; 2·6 in = 1 ft
    # of a 10 ft shark = 10 %.
    first = rows[0]
    assert first["id"] == "gsm8k-100:473"
    assert first["prompt"].startswith("Benny saw a 10-foot shark with 2 6-inch remoras")
    assert first["answer"] == "10"
    assert "<<6*2=12>>" in first["solution"]
    assert rows[40]["answer"] == "3.5"  # the one non-integer gold
