"""`rlvr eval` through run_eval: end to end on tiny-random, exit codes for bad input."""

import argparse
import json

import pytest

from rlvr.eval_cli import add_eval_parser, resolve_model_path, run_eval


def _eval(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    return run_eval(parser.parse_args(["eval", *argv]))


BASE = ["--model", "tiny-random", "--n", "2", "--k", "1,2", "--max_completion_length", "8", "--no-progress"]


def test_end_to_end_on_a_local_file_and_gsm8k_100(tmp_path, capsys):
    data = tmp_path / "toy.jsonl"
    data.write_text(json.dumps({"prompt": "What is 2 + 2?", "answer": "987654"}) + "\n", encoding="utf-8")
    out = tmp_path / "res.json"
    assert _eval([*BASE, "--data", f"{data},gsm8k-100", "--limit", "2", "--greedy", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["model"] == "tiny-random"
    assert result["settings"]["n"] == 2 and result["settings"]["k"] == [1, 2]
    assert result["settings"]["answer_extraction"] == "boxed" and result["settings"]["greedy"] is True
    assert list(result["datasets"]) == [str(data), "gsm8k-100"]
    assert result["datasets"]["gsm8k-100"]["num_problems"] == 2
    assert result["datasets"][str(data)]["num_problems"] == 1
    assert set(result["datasets"]["gsm8k-100"]["pass@k"]) == {"1", "2"}
    assert f"wrote {out}" in capsys.readouterr().out
    assert not (tmp_path / "res.json.samples.jsonl").exists()  # only with --log-samples


def test_log_samples_flag_writes_the_responses(tmp_path):
    data = tmp_path / "toy.jsonl"
    data.write_text(json.dumps({"prompt": "What is 2 + 2?", "answer": "4"}) + "\n", encoding="utf-8")
    out = tmp_path / "res.json"
    assert _eval([*BASE, "--data", str(data), "--out", str(out), "--log_samples"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "res.json.samples.jsonl").read_text().splitlines()]
    assert [(r["id"], r["sample"], r["answer"]) for r in rows] == [("toy.jsonl#0", 0, "4"), ("toy.jsonl#0", 1, "4")]


def test_k_larger_than_n_exits_2_naming_both(tmp_path, capsys):
    code = _eval(["--model", "tiny-random", "--data", "gsm8k-100", "--n", "4", "--k", "1,8",
                  "--out", str(tmp_path / "x.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--k 8" in err and "--n 4" in err


def test_unknown_dataset_exits_2(tmp_path, capsys):
    assert _eval([*BASE, "--data", "no-such-benchmark", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no-such-benchmark" in err and "math-500" in err


def test_default_ks_are_powers_of_two_up_to_n(tmp_path):
    out = tmp_path / "d.json"
    assert _eval(["--model", "tiny-random", "--data", "gsm8k-100", "--limit", "1", "--n", "6",
                  "--max_completion_length", "4", "--no-progress", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["settings"]["k"] == [1, 2, 4, 6]


def test_checkpoint_and_run_folders_resolve_to_the_model_folder(tmp_path):
    for step in ("step-000010", "step-000020"):
        (tmp_path / "run" / "checkpoints" / step / "model").mkdir(parents=True)
        (tmp_path / "run" / "checkpoints" / step / "model" / "config.json").write_text("{}")
    latest = str(tmp_path / "run" / "checkpoints" / "step-000020" / "model")
    assert resolve_model_path(str(tmp_path / "run")) == latest
    assert resolve_model_path(str(tmp_path / "run" / "checkpoints" / "step-000020")) == latest
    assert resolve_model_path(latest) == latest
    assert resolve_model_path("tiny-random") == "tiny-random"


@pytest.mark.parametrize("extra", [["--n", "0"], ["--k", "1,x"]])
def test_bad_arguments_exit_2(tmp_path, extra):
    assert _eval(["--model", "tiny-random", "--data", "gsm8k-100", *extra, "--out", str(tmp_path / "x.json")]) == 2
