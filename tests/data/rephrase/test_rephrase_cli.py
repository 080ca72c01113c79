"""`rlvr rephrase` end to end through run_rephrase (rlvr/rephrase_cli.py), and its exit codes."""

import argparse
import json
import time

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
    (["--via", "rules", "--timeout", "0"], "--timeout must be a number of seconds > 0"),
    (["--via", "rules", "--max-retries", "-1"], "--max-retries must be >= 0"),
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




@pytest.fixture
def many_rows(data_file):
    rows = [{"id": str(i), "question": f"Tom has {i} apples. How many?", "answer": str(i)} for i in range(20)]
    data_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data_file


def _dead_url():
    from tests.helpers.openai_server import FakeServer

    fake = FakeServer()
    fake.close()  # nothing listens on the port any more
    return fake.base_url


def _openai_argv(data, out, url, *extra):
    return ["--data", str(data), "--n", "1", "--k", "2", "--via", f"openai:{url}", "--openai-model", "m",
            "--out", str(out), *extra]


def test_a_dead_endpoint_stops_in_seconds_naming_it_and_the_fix(many_rows, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    url = _dead_url()
    start = time.monotonic()
    assert run_rephrase(parse(_openai_argv(many_rows, out, url))) == 2  # default --timeout, --max-retries
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]  # the last line, after tqdm's bar
    assert err.startswith("rlvr rephrase: error:")
    assert url in err and "Connection refused" in err and "--via rules" in err and "rerun" in err
    assert elapsed < 60, f"a dead endpoint took {elapsed:.0f} s to give up"  # seconds, not minutes
    assert out.read_text() == ""


def test_an_endpoint_that_dies_mid_run_stops_and_keeps_what_was_written(many_rows, tmp_path, capsys, server):
    server.script = [("ok", "Tom owns 0 apples. How many apples does he own?")] * 2  # the first question
    server.default = ("status", 503)
    out = tmp_path / "out.jsonl"
    assert run_rephrase(parse(_openai_argv(many_rows, out, server.base_url, "--max-retries", "0"))) == 2
    err = capsys.readouterr().err
    assert "requests in a row" in err and "HTTP 503" in err and "keeps the questions written so far: 1" in err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["0"]
    assert len(server.requests) < 2 + 8  # not one request per remaining row
    server.default = ("ok", "Tom owns N apples. How many apples does he own?")
    assert run_rephrase(parse(_openai_argv(many_rows, out, server.base_url))) == 0  # resumes
    assert len(out.read_text().splitlines()) == 20


def test_a_hanging_endpoint_is_bounded_by_the_timeout(many_rows, tmp_path, capsys, server):
    server.default = ("hang", None)
    out = tmp_path / "out.jsonl"
    start = time.monotonic()
    argv = _openai_argv(many_rows, out, server.base_url, "--timeout", "0.5", "--max-retries", "0")
    assert run_rephrase(parse(argv)) == 2
    elapsed = time.monotonic() - start
    assert "no full reply within 0.5 s" in capsys.readouterr().err
    assert elapsed < 3 * 5 * 0.5, f"{elapsed:.1f} s"  # 5 requests of 0.5 s, two at a time: a loose bound


def test_the_api_key_is_not_sent_over_plain_http_to_another_host(data_file, tmp_path, capsys, monkeypatch):
    from rlvr.rephrase_cli import _rephraser

    monkeypatch.setenv("REPHRASE_TEST_KEY", "sk-test-not-a-real-key-2718")
    out = tmp_path / "out.jsonl"
    argv = _openai_argv(data_file, out, "http://10.1.2.3:8000/v1", "--api-key-env", "REPHRASE_TEST_KEY")
    assert run_rephrase(parse(argv)) == 2
    err = capsys.readouterr().err
    assert "refusing to send the API key in $REPHRASE_TEST_KEY over plain http:// to 10.1.2.3" in err
    assert "--allow-plain-http" in err and "https://" in err and "sk-test" not in err
    assert not out.exists()
    allowed = parse(argv + ["--allow-plain-http"])
    assert _rephraser("openai", "http://10.1.2.3:8000/v1", allowed).backend.allow_plain_http  # nothing is sent
    monkeypatch.delenv("REPHRASE_TEST_KEY")  # no key: nothing to protect, nothing refused
    assert not _rephraser("openai", "http://10.1.2.3:8000/v1", parse(argv)).backend.allow_plain_http


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
