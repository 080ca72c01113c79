"""Benchmark registry: its shape, the offline error, and local copies through the same column mapping."""

import json

import pyarrow
import pyarrow.parquet
import pytest

from rlvr.data.benchmarks import BENCHMARKS, GOLD_READERS, benchmark_spec, load_benchmark

NAMES = {"math-500", "aime24", "aime25", "amc", "minerva", "olympiadbench", "gsm8k", "gpqa-diamond"}


def test_registry_shape():
    assert set(BENCHMARKS) == NAMES
    for name, bench in BENCHMARKS.items():
        owner, _, repo = bench.hub_id.partition("/")
        assert owner and repo, name
        assert bench.split and bench.question and bench.answer, name
        assert bench.gold in GOLD_READERS, name
    assert BENCHMARKS["gsm8k"].config == "main" and BENCHMARKS["gsm8k"].split == "test"
    assert BENCHMARKS["math-500"].hub_id == "HuggingFaceH4/MATH-500"


def test_offline_hub_failure_names_the_offline_sources(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError) as info:
        load_benchmark("math-500")
    message = str(info.value)
    assert "HuggingFaceH4/MATH-500" in message and "OFFLINE" in message
    assert "gsm8k-100" in message and "rg:" in message and "path=FILE" in message


def test_unknown_name_lists_the_registry():
    with pytest.raises(ValueError, match="math-500"):
        load_benchmark("math-5000")


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_local_jsonl_through_the_math500_mapping(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [
        {"problem": "Compute $1+1$.", "solution": "It is \\boxed{2}.", "answer": "2", "subject": "Algebra",
         "level": 1, "unique_id": "test/algebra/1.json"},
        {"problem": "Simplify $\\frac{2}{4}$.", "solution": "...", "answer": "\\frac{1}{2}", "subject": "Algebra",
         "level": 2, "unique_id": "test/algebra/2.json"},
    ])
    rows = load_benchmark("math-500", path=path)
    assert [row["id"] for row in rows] == ["math-500:test/algebra/1.json", "math-500:test/algebra/2.json"]
    assert rows[1]["prompt"] == "Simplify $\\frac{2}{4}$." and rows[1]["answer"] == "\\frac{1}{2}"


def test_local_parquet_gsm8k_reads_the_hash_tail(tmp_path):
    path = tmp_path / "g.parquet"
    table = pyarrow.table({"question": ["How many?", "How much?"],
                           "answer": ["2 + 2 = <<2+2=4>>4\n#### 4", "Lots.\n#### 1,234"]})
    pyarrow.parquet.write_table(table, path)
    rows = load_benchmark("gsm8k", path=str(path))
    assert [row["answer"] for row in rows] == ["4", "1234"]
    assert [row["id"] for row in rows] == ["gsm8k#0", "gsm8k#1"]
    assert rows[0]["solution"].endswith("#### 4")


def test_amc_float_answers_and_olympiad_lists(tmp_path):
    amc = load_benchmark("amc", path=_jsonl(tmp_path / "a.jsonl", [{"problem": "p", "answer": 142.0},
                                                                     {"problem": "q", "answer": 2.5}]))
    assert [row["answer"] for row in amc] == ["142", "2.5"]
    olympiad = load_benchmark("olympiadbench", path=_jsonl(tmp_path / "o.jsonl", [
        {"id": 7, "question": "p", "final_answer": ["$\\frac{1}{2}$"]},
        {"id": 8, "question": "q", "final_answer": ["$1$", "$2$"]},
    ]))
    assert [row["answer"] for row in olympiad] == ["$\\frac{1}{2}$", "$1$, $2$"]
    assert [row["id"] for row in olympiad] == ["olympiadbench:7", "olympiadbench:8"]


def _gpqa(question, correct="right"):
    return {"Question": question, "Correct Answer": correct, "Incorrect Answer 1": "w1",
            "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3", "Record ID": "rec"}


def test_gpqa_gold_letter_marks_the_correct_option_and_is_stable(tmp_path):
    raw = [_gpqa(f"Question {i}?", correct=f"right {i}") for i in range(8)]
    rows = load_benchmark("gpqa-diamond", path=_jsonl(tmp_path / "g.jsonl", raw))
    for i, row in enumerate(rows):
        options = dict(line.split(") ", 1) for line in row["prompt"].split("\n\n", 1)[1].splitlines())
        assert sorted(options) == ["A", "B", "C", "D"]
        assert options[row["answer"]] == f"right {i}"
    assert len({row["answer"] for row in rows}) > 1  # the letter is shuffled, not always A
    reversed_rows = load_benchmark("gpqa-diamond", path=_jsonl(tmp_path / "r.jsonl", raw[::-1]))
    assert [row["prompt"] for row in reversed_rows] == [row["prompt"] for row in rows[::-1]]
    assert [row["answer"] for row in reversed_rows] == [row["answer"] for row in rows[::-1]]


def test_missing_column_is_named(tmp_path):
    with pytest.raises(ValueError, match="lacks column\\(s\\) \\['problem'\\]"):
        load_benchmark("aime24", path=_jsonl(tmp_path / "x.jsonl", [{"question": "p", "answer": "1"}]))


def test_benchmark_spec_parsing():
    assert benchmark_spec("aime24") == ("aime24", None)
    assert benchmark_spec("aime24:path=/d/aime.jsonl") == ("aime24", "/d/aime.jsonl")
    assert benchmark_spec("gsm8k-100") is None and benchmark_spec("owner/name:split=test") is None
    with pytest.raises(ValueError, match="only path=FILE"):
        benchmark_spec("aime24:split=test")
