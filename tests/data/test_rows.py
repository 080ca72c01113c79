import copy
import math
import re

import pytest

from rlvr.data.rows import normalize_row, normalize_rows

GSM8K_ANSWER = "He buys 2 * 500 = <<2*500=1000>>1000 pens.\nThen 1000 + 234 = <<1000+234=1234>>1234.\n#### 1,234\n"


def test_minimal_row_gets_positional_id():
    assert normalize_row({"prompt": "1+1?", "answer": "2"}, 3, "data.jsonl") == {
        "id": "data.jsonl#3",
        "prompt": "1+1?",
        "answer": "2",
    }


@pytest.mark.parametrize("column", ["prompt", "question", "problem"])
def test_prompt_aliases_keep_the_original_column(column):
    out = normalize_row({column: "What is 2+3?", "answer": "5"}, 0, "s")
    assert out["prompt"] == "What is 2+3?"
    assert out[column] == "What is 2+3?"


def test_prompt_column_wins_over_question():
    out = normalize_row({"question": "Q", "prompt": "P", "answer": "1"}, 0, "s")
    assert out["prompt"] == "P"
    assert out["question"] == "Q"


def test_ground_truth_alias_and_column_kept():
    out = normalize_row({"prompt": "p", "ground_truth": "\\frac{1}{2}"}, 0, "s")
    assert out["answer"] == "\\frac{1}{2}"
    assert out["ground_truth"] == "\\frac{1}{2}"


def test_answer_wins_over_ground_truth():
    assert normalize_row({"prompt": "p", "answer": "1", "ground_truth": "2"}, 0, "s")["answer"] == "1"


@pytest.mark.parametrize(("value", "expected"), [(42, "42"), (-7, "-7"), (3.5, "3.5"), ("  7 \n", "7")])
def test_numeric_gold_becomes_string_and_text_is_stripped(value, expected):
    assert normalize_row({"prompt": "p", "answer": value}, 0, "s")["answer"] == expected


@pytest.mark.parametrize("column", ["answer", "ground_truth"])
def test_gsm8k_tail_gives_number_and_full_solution(column):
    out = normalize_row({"prompt": "p", column: GSM8K_ANSWER}, 0, "s")
    assert out["answer"] == "1234"
    assert out["solution"] == GSM8K_ANSWER


def test_gsm8k_tail_keeps_an_existing_solution_column():
    out = normalize_row({"prompt": "p", "answer": "#### 12", "solution": "6 + 6 = \\boxed{12}"}, 0, "s")
    assert out["answer"] == "12"
    assert out["solution"] == "6 + 6 = \\boxed{12}"


def test_solution_only_with_boxed_answer():
    solution = "Halve it: $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$."
    out = normalize_row({"problem": "Simplify 2/4.", "solution": solution}, 0, "s")
    assert out["answer"] == "\\frac{1}{2}"
    assert out["solution"] == solution


def test_solution_only_with_gsm8k_tail():
    out = normalize_row({"prompt": "p", "solution": GSM8K_ANSWER}, 0, "s")
    assert (out["answer"], out["solution"]) == ("1234", GSM8K_ANSWER)


def test_bare_answer_solution_is_the_gold_and_not_a_solution():
    out = normalize_row({"prompt": "p", "solution": " 42 "}, 0, "s")
    # kept aside as given, for reward functions that read `solution` (reward_columns), not as a solution text
    assert out == {"id": "s#0", "prompt": "p", "answer": "42", "solution_as_gold": " 42 "}


def test_64_char_solution_is_still_a_bare_answer():
    assert normalize_row({"prompt": "p", "solution": "x" * 64}, 0, "s")["answer"] == "x" * 64


def test_long_solution_without_final_answer_is_an_error():
    with pytest.raises(ValueError, match=r"row 2 of s: field 'solution' has no \\boxed\{\} or '#### N'"):
        normalize_row({"prompt": "p", "solution": "x" * 65}, 2, "s")
    with pytest.raises(ValueError, match="field 'solution'"):
        normalize_row({"prompt": "p", "solution": "line one\nline two"}, 2, "s")


def test_ids_from_column():
    assert normalize_row({"id": "abc", "prompt": "p", "answer": "1"}, 5, "s")["id"] == "abc"
    assert normalize_row({"id": 7, "prompt": "p", "answer": "1"}, 5, "s")["id"] == "7"


def test_other_columns_kept_unchanged_and_input_not_mutated():
    metadata = {"source_dataset": "chain_sum", "difficulty": {"num_terms": (2, 2)}}
    row = {"question": "q", "answer": GSM8K_ANSWER, "metadata": metadata, "level": 3}
    before = copy.deepcopy(row)
    out = normalize_row(row, 0, "s")
    assert out["metadata"] is metadata
    assert out["level"] == 3
    assert row == before


def test_message_prompt():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert normalize_row({"prompt": messages, "answer": "4"}, 0, "s")["prompt"] == messages


def test_rephrasings_kept_and_null_optional_columns_dropped():
    out = normalize_row({"prompt": "p", "answer": "1", "rephrasings": ["P?", "p, rephrased"]}, 0, "s")
    assert out["rephrasings"] == ["P?", "p, rephrased"]
    out = normalize_row({"prompt": "p", "answer": "1", "rephrasings": None, "solution": None}, 0, "s")
    assert out == {"id": "s#0", "prompt": "p", "answer": "1"}


def test_exact_error_message_names_row_id_field_and_fix():
    with pytest.raises(ValueError) as error:
        normalize_row({"id": "abc", "prompt": "p", "answer": "   "}, 17, "data.jsonl")
    assert str(error.value) == (
        "row 17 (id 'abc') of data.jsonl: field 'answer' is empty; "
        "every row needs a gold answer in 'answer' (or 'ground_truth')"
    )


@pytest.mark.parametrize(
    ("row", "field", "fix"),
    [
        ({"prompt": "", "answer": "1"}, "prompt", "non-empty prompt"),
        ({"question": " \n", "answer": "1"}, "question", "non-empty prompt"),
        ({"prompt": 12, "answer": "1"}, "prompt", "string or a list"),
        ({"answer": "1"}, "prompt", "'question' / 'problem'"),
        ({"prompt": [], "answer": "1"}, "prompt", "at least one user message"),
        ({"prompt": [{"role": "user"}], "answer": "1"}, "prompt", "'role' and 'content'"),
        ({"prompt": [{"role": "robot", "content": "hi"}], "answer": "1"}, "prompt", "system, user, assistant"),
        ({"prompt": [{"role": "user", "content": 3}], "answer": "1"}, "prompt", "non-empty string"),
        ({"prompt": [{"role": "system", "content": "s"}], "answer": "1"}, "prompt", "no user message"),
        ({"prompt": "p"}, "answer", "'ground_truth'"),
        ({"prompt": "p", "answer": None}, "answer", "string or number"),
        ({"prompt": "p", "answer": True}, "answer", "string or number"),
        ({"prompt": "p", "answer": ["1"]}, "answer", "string or number"),
        ({"prompt": "p", "answer": math.nan}, "answer", "finite number"),
        ({"prompt": "p", "ground_truth": ""}, "ground_truth", "gold answer"),
        ({"prompt": "p", "answer": "so #### "}, "answer", "#### <answer>"),
        ({"prompt": "p", "solution": "thus \\boxed{}"}, "solution", "gold answer"),
        ({"prompt": "p", "answer": "1", "solution": 5}, "solution", "full solution text"),
        ({"prompt": "p", "answer": "1", "solution": " "}, "solution", "drop the column"),
        ({"prompt": "p", "answer": "1", "rephrasings": "P?"}, "rephrasings", "list of non-empty strings"),
        ({"prompt": "p", "answer": "1", "rephrasings": ["ok", ""]}, "rephrasings", "non-empty string"),
        ({"prompt": "p", "answer": "1", "rephrasings": ["ok", 3]}, "rephrasings", "non-empty string"),
    ],
)
def test_bad_rows_name_row_field_and_fix(row, field, fix):
    with pytest.raises(ValueError) as error:
        normalize_row(row, 4, "train.parquet")
    message = str(error.value)
    assert message.startswith("row 4 of train.parquet: field " + repr(field)), message
    assert fix in message


@pytest.mark.parametrize("bad_id", ["", None, 1.5, ["a"], True])
def test_bad_id_is_named(bad_id):
    with pytest.raises(ValueError, match=re.escape("row 1 of s: field 'id' is")):
        normalize_row({"id": bad_id, "prompt": "p", "answer": "1"}, 1, "s")


def test_non_dict_row():
    with pytest.raises(ValueError, match="row 0 of s is a str"):
        normalize_row("What is 1+1?", 0, "s")


def test_normalize_rows_numbers_rows_and_accepts_iterables():
    rows = normalize_rows(iter([{"prompt": "a", "answer": 1}, {"prompt": "b", "answer": 2}]), "x.json")
    assert [(r["id"], r["answer"]) for r in rows] == [("x.json#0", "1"), ("x.json#1", "2")]


def test_normalize_rows_rejects_duplicate_ids_naming_both_rows():
    rows = [
        {"id": "a", "prompt": "p", "answer": "1"},
        {"id": "b", "prompt": "p", "answer": "1"},
        {"id": "a", "prompt": "q", "answer": "2"},
    ]
    with pytest.raises(ValueError, match="rows 0 and 2 of s share id 'a'; ids must be unique"):
        normalize_rows(rows, "s")


def test_normalize_rows_rejects_empty_dataset():
    with pytest.raises(ValueError, match="s has no rows"):
        normalize_rows([], "s")


def test_normalize_rows_reports_the_bad_row_index():
    rows = [{"prompt": "p", "answer": "1"}, {"prompt": "p", "answer": "1"}, {"prompt": "p", "answer": ""}]
    with pytest.raises(ValueError, match="row 2 of s: field 'answer' is empty"):
        normalize_rows(rows, "s")


def test_reward_columns_pass_a_short_solution_read_as_the_gold_under_its_name():
    from rlvr.train.rewarding import reward_columns
    row = normalize_row({"prompt": [{"role": "user", "content": "2+2?"}], "solution": "4", "level": 3}, 0, "trl")
    assert "solution" not in row  # no expert text: no anchor or SFT target is made from it
    assert reward_columns(row) == {"id": "trl#0", "answer": "4", "solution": "4", "level": 3}
    full = normalize_row({"prompt": "q", "solution": "2 + 2 = 4, so \\boxed{4}"}, 0, "s")
    assert reward_columns(full)["solution"] == "2 + 2 = 4, so \\boxed{4}" and reward_columns(full)["answer"] == "4"
    tagrpo = normalize_row({"prompt": "q", "answer": "1", "rephrasings": ["Q?"]}, 0, "s")
    assert reward_columns(tagrpo) == {"id": "s#0", "answer": "1"}  # rlvr's own fields stay out
