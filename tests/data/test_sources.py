import json

import pyarrow
import pyarrow.parquet
import pytest

from rlvr.data import load_rows, sources

ROWS = [
    {"id": "q1", "question": "What is 2+3?", "answer": 5, "level": 1},
    {"id": "q2", "question": "Tom has 3 apples and buys 4.", "answer": "3 + 4 = <<3+4=7>>7\n#### 7", "level": 2},
    {"id": "q3", "question": "Simplify 2/4.", "answer": "\\frac{1}{2}", "level": 3},
]
# Hand-written expectations for ROWS.
EXPECTED = [
    {"id": "q1", "prompt": "What is 2+3?", "answer": "5", "question": "What is 2+3?", "level": 1},
    {
        "id": "q2",
        "prompt": "Tom has 3 apples and buys 4.",
        "answer": "7",
        "solution": "3 + 4 = <<3+4=7>>7\n#### 7",
        "question": "Tom has 3 apples and buys 4.",
        "level": 2,
    },
    {"id": "q3", "prompt": "Simplify 2/4.", "answer": "\\frac{1}{2}", "question": "Simplify 2/4.", "level": 3},
]


def test_jsonl_round_trip_skips_blank_lines(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in ROWS) + "\n\n", encoding="utf-8")
    assert load_rows(str(path)) == EXPECTED


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_utf8_byte_order_mark_is_read_as_pandas_and_datasets_read_it(tmp_path, suffix):
    """Windows editors start UTF-8 files with a byte-order mark; the rows are the same as without it."""
    path = tmp_path / f"train{suffix}"
    text = "\n".join(json.dumps(row) for row in ROWS) if suffix == ".jsonl" else json.dumps(ROWS)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert load_rows(str(path)) == EXPECTED


def test_json_round_trip(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(ROWS), encoding="utf-8")
    assert load_rows(str(path)) == EXPECTED


def test_parquet_round_trip(tmp_path):
    path = tmp_path / "train.parquet"
    # parquet columns have one type: write every answer as a string.
    table = pyarrow.Table.from_pylist([{**row, "answer": str(row["answer"])} for row in ROWS])
    pyarrow.parquet.write_table(table, path)
    assert load_rows(str(path)) == EXPECTED


def test_parquet_nulls_in_optional_columns_and_message_prompts(tmp_path):
    rows = [
        {"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2", "solution": "1+1=\\boxed{2}"},
        {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4", "solution": None},
    ]
    path = tmp_path / "chat.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    loaded = load_rows(str(path))
    assert loaded == [
        {
            "id": "chat.parquet#0",
            "prompt": [{"role": "user", "content": "1+1?"}],
            "answer": "2",
            "solution": "1+1=\\boxed{2}",
        },
        {"id": "chat.parquet#1", "prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"},
    ]


def test_local_file_errors_name_the_row_by_file_name(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "abc", "prompt": "p", "answer": ""}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="row 0 \\(id 'abc'\\) of bad.jsonl: field 'answer' is empty"):
        load_rows(str(path))


def test_missing_local_file_is_named(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ValueError, match=f"dataset file '{missing}' does not exist"):
        load_rows(str(missing))


def test_invalid_jsonl_line_is_named(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "p", "answer": "1"}\n\n{"prompt": oops}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 3 of .*broken.jsonl: invalid JSON"):
        load_rows(str(path))


def test_json_must_be_a_list(tmp_path):
    path = tmp_path / "dict.json"
    path.write_text(json.dumps({"data": ROWS}), encoding="utf-8")
    with pytest.raises(ValueError, match="must be a list of row objects, got a dict"):
        load_rows(str(path))


def test_existing_file_of_unsupported_type(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("prompt,answer\np,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unsupported file type '.csv'; use one of .jsonl, .json, .parquet"):
        load_rows(str(path))


@pytest.mark.parametrize("spec", ["", "gsm8k-10", "just-a-name"])
def test_unknown_spec_lists_the_forms(spec):
    with pytest.raises(ValueError, match="rg:NAME\\[:key=value...\\]"):
        load_rows(spec)


def test_hub_spec_passes_name_config_split(monkeypatch):
    calls = []

    def fake_load_dataset(name, config):
        calls.append((name, config))
        return {"train": [{"prompt": "p", "answer": "1"}], "test": [{"question": "q", "answer": "#### 3"}]}  # all splits

    monkeypatch.setattr("datasets.load_dataset", fake_load_dataset)
    rows = load_rows("openai/gsm8k:config=main:split=test")
    assert calls == [("openai/gsm8k", "main")]
    assert rows == [
        {"id": "openai/gsm8k:main:test#0", "prompt": "q", "answer": "3", "solution": "#### 3", "question": "q"}
    ]
    # the split train; the config default is datasets' None (the dataset's default config)
    assert load_rows("owner/name:config=default") == [{"id": "owner/name:train#0", "prompt": "p", "answer": "1"}]
    assert calls[-1] == ("owner/name", None)


def test_hub_spec_rejects_unknown_option():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['revision'\]; Hub datasets take split= and config="):
        load_rows("owner/name:revision=main")


def test_hub_failure_is_a_value_error_explaining_offline_mode(monkeypatch):
    def unreachable(name, config):
        raise ConnectionError(f"Couldn't reach {name!r} on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr("datasets.load_dataset", unreachable)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(ValueError) as error:
        load_rows("openai/gsm8k:config=main")
    message = str(error.value)
    assert "could not load Hugging Face Hub dataset 'openai/gsm8k' (config 'main', split 'train')" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert "local .jsonl/.json/.parquet file" in message
    assert isinstance(error.value.__cause__, ConnectionError)


def test_hub_failure_online_hint(monkeypatch):
    def missing(name, config):
        raise FileNotFoundError("no such dataset")

    monkeypatch.setattr("datasets.load_dataset", missing)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(ValueError, match="FileNotFoundError: no such dataset. no local file or folder 'owner/missing' exists either; check the id"):
        load_rows("owner/missing")


def test_real_offline_hub_load_fails_fast_with_a_value_error():
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        pytest.skip("needs HF_HUB_OFFLINE=1 at interpreter start (set by CI); online this would hit the network")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        sources.load_hub_dataset("rlvr-test/definitely-not-cached:config=main")
