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


def test_an_unreachable_openai_server_stops_with_exit_2(data_file, tmp_path, capsys, monkeypatch):
    rows = [{"id": str(i), "question": f"Tom has {i} apples. How many?", "answer": str(i)} for i in range(8)]
    data_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr("rlvr.rephrase_cli.OPENAI_MAX_RETRIES", 0)
    out = tmp_path / "out.jsonl"
    argv = ["--data", str(data_file), "--n", "1", "--k", "2", "--via", "openai:http://127.0.0.1:9/v1",
            "--openai-model", "m", "--out", str(out)]
    assert run_rephrase(parse(argv)) == 2
    assert "gave no candidate for the first 5 questions" in capsys.readouterr().err
    assert out.read_text() == ""


def test_solver_check_with_a_local_model(data_file, tmp_path, capsys, monkeypatch):
    # A tiny random solver answers no original right, so the check is skipped for every question.
    monkeypatch.setattr("rlvr.rephrase_cli.SOLVER_MAX_NEW_TOKENS", 4)
    out = tmp_path / "out.jsonl"
    argv = ["--data", str(data_file), "--n", "2", "--via", "rules", "--solver", "model:tiny-random", "--out", str(out)]
    assert run_rephrase(parse(argv)) == 0
    assert "solver check skipped on 3 questions" in capsys.readouterr().out
    assert all(len(json.loads(line)["rephrasings"]) == 2 for line in out.read_text().splitlines())


def test_model_solver_extracts_the_boxed_answer():
    from rlvr.rephrase_cli import ModelSolver

    class Backend:
        def complete(self, prompts):
            assert prompts[0].startswith("What is 2 + 3?\n\n") and "\\boxed{}" in prompts[0]
            return ["2 + 3 = 5, so \\boxed{5}."]

    assert ModelSolver(Backend())("What is 2 + 3?") == "5"
