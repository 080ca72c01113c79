"""`rlvr rephrase` end to end through run_rephrase (rlvr/rephrase_cli.py), and its exit codes."""

import argparse
import json

import pytest

from rlvr.rephrase_cli import add_rephrase_parser, run_rephrase


def parse(argv):
    parser = argparse.ArgumentParser(prog="rlvr")
    add_rephrase_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["rephrase", *argv])


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [
        {"id": "a", "question": "Tom has 3 cats. Sara has 2 dogs. How many pets do Tom and Sara have?", "answer": "5"},
        {"id": "b", "question": "If a pen costs $2, what is the cost of 4 pens?", "answer": "8"},
        {"id": "c", "question": "Calculate 12 - -3 * 2.", "answer": "18"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_rules_end_to_end_and_resume(data_file, tmp_path, capsys):
    out = tmp_path / "out" / "rephrasings.jsonl"
    argv = ["--data", str(data_file), "--n", "3", "--via", "rules", "--out", str(out), "--seed", "7"]
    assert run_rephrase(parse(argv)) == 0
    printed = capsys.readouterr().out
    assert "questions rephrased: 3" in printed and "kept per question" in printed and str(out) in printed
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert all(len(r["rephrasings"]) == 3 for r in records)
    first = out.read_bytes()
    assert run_rephrase(parse(argv)) == 0  # everything already there
    assert "questions rephrased: 0 (already in the file: 3)" in capsys.readouterr().out
    assert out.read_bytes() == first


@pytest.mark.parametrize("argv, message", [
    (["--via", "gpt4"], "--via 'gpt4' is not one of"),
    (["--via", "model:"], "is not one of"),
    (["--via", "openai:http://127.0.0.1:1/v1"], "needs --openai-model"),
    (["--via", "rules", "--k", "2"], "--k must be >= --n"),
    (["--via", "rules", "--solver", "tiny-random"], "must be 'model:<path-or-alias>'"),
    (["--via", "rules", "--data", "no/such/file.jsonl"], "does not exist"),
    (["--via", "rules", "--data", "rg:no_such_generator"], "unknown reasoning-gym generator"),
    (["--via", "model:./no-such-model-folder"], "does not exist"),
])
def test_bad_arguments_exit_2_with_a_message(data_file, tmp_path, capsys, argv, message):
    base = ["--data", str(data_file), "--n", "3", "--out", str(tmp_path / "out.jsonl")]
    assert run_rephrase(parse(base + argv)) == 2  # a repeated flag: the last one wins
    err = capsys.readouterr().err
    assert err.startswith("rlvr rephrase: error:") and message in err
    assert not (tmp_path / "out.jsonl").exists()
