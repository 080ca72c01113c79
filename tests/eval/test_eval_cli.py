"""`rlvr eval` through run_eval: end to end on tiny-random, exit codes for bad input."""

import argparse
import json
import os
import signal
from pathlib import Path

import pytest

import rlvr.models
from rlvr import eval_cli
from rlvr.config import ExperimentConfig
from rlvr.eval.problems_file import problems_path
from rlvr.eval_cli import add_eval_parser, resolve_model_path, run_eval
from rlvr.rewards import DEFAULT_EXTRACTION


def _eval(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    return run_eval(parser.parse_args(["eval", *argv]))


BASE = ["--model", "tiny-random", "--n", "2", "--k", "1,2", "--max_completion_length", "8", "--no-progress"]


def test_defaults_are_the_config_fields_they_stand_for():
    # written once: the eval options of training and `rlvr eval` sample the same way by default
    args = argparse.ArgumentParser()
    eval_cli._add_arguments(args)
    args = args.parse_args(["--model", "m", "--data", "d", "--out", "o"])
    cfg = ExperimentConfig()
    assert (args.temperature, args.top_p, args.limit) == (cfg.eval.eval_temperature, cfg.eval.eval_top_p,
                                                          cfg.eval.eval_limit)
    assert (args.seed, args.dtype, args.device) == (cfg.run.seed, cfg.model.dtype, cfg.model.device)
    assert (args.instruction, args.system_prompt) == (cfg.data.instruction, cfg.data.system_prompt)
    assert args.answer_extraction == DEFAULT_EXTRACTION  # benchmarks score the written answer, not the last number
    assert args.chat_template_kwargs == cfg.data.chat_template_kwargs is None


def test_chat_template_kwargs_is_a_mapping(capsys):
    parser = argparse.ArgumentParser()
    eval_cli._add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--data", "d", "--out", "o", "--chat-template-kwargs",
                              "{enable_thinking: false}"])
    assert args.chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m", "--data", "d", "--out", "o", "--chat_template_kwargs", "thinking"])
    assert "is not a mapping" in capsys.readouterr().err


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
    run = tmp_path / "new"
    for step in (9, 10):  # checkpoint-10 is newer than checkpoint-9 (by number, not by name)
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "config.json").write_text("{}")
    (run / "checkpoint-11").mkdir()  # no model in it (not a checkpoint rlvr wrote)
    assert resolve_model_path(str(run)) == str(run / "checkpoint-10")
    assert resolve_model_path(str(run / "checkpoint-9")) == str(run / "checkpoint-9")
    (run / "adapter_config.json").write_text("{}")  # a finished LoRA run: its final adapter at the top
    assert resolve_model_path(str(run)) == str(run)


@pytest.mark.parametrize("extra", [["--n", "0"], ["--k", "1,x"]])
def test_bad_arguments_exit_2(tmp_path, extra):
    assert _eval(["--model", "tiny-random", "--data", "gsm8k-100", *extra, "--out", str(tmp_path / "x.json")]) == 2


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if the model is loaded: the refusal must come before that (minutes for a big model)."""
    def load_policy(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(rlvr.models, "load_policy", load_policy)


def _file_then_dir(tmp_path):
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "res.json"


@pytest.mark.parametrize(("make_out", "named"), [
    (lambda tmp_path: tmp_path, "is a directory"),
    (lambda tmp_path: (tmp_path / "r.json.problems.jsonl").mkdir() or tmp_path / "r.json", "is a directory"),
    (_file_then_dir, "is a file, not a folder"),
])
def test_an_out_that_cannot_be_written_exits_2_before_any_work(tmp_path, capsys, no_model_load, make_out, named):
    # Issue 16: `--out DIR` failed only when the summary was written, after all the work.
    out = make_out(tmp_path)
    assert _eval([*BASE, "--data", "gsm8k-100", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert named in err and "--out" in err and len(err.strip().splitlines()) == 1


def test_an_out_in_a_read_only_folder_exits_2(tmp_path, capsys, no_model_load, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    if os.geteuid() == 0:  # root may write anywhere: let access() answer as it would for a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != folder and real_access(path, mode))
    try:
        assert _eval([*BASE, "--data", "gsm8k-100", "--out", str(folder / "new" / "res.json")]) == 2
    finally:
        folder.chmod(0o700)
    err = capsys.readouterr().err
    assert "permission denied" in err and str(folder) in err


def test_an_out_in_a_new_folder_is_created(tmp_path):
    out = tmp_path / "a" / "b" / "res.json"
    assert _eval([*BASE, "--data", "gsm8k-100", "--limit", "1", "--out", str(out)]) == 0
    assert out.is_file() and problems_path(out).is_file()


def test_a_dtype_change_on_resume_exits_2_before_the_model_loads(tmp_path, capsys, monkeypatch):
    # Issue 16: a problems file mixing fp32 and bf16 problems was accepted.
    out = tmp_path / "res.json"
    assert _eval([*BASE, "--data", "gsm8k-100", "--limit", "1", "--dtype", "float32", "--out", str(out)]) == 0
    capsys.readouterr()

    def load_policy(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(rlvr.models, "load_policy", load_policy)
    assert _eval([*BASE, "--data", "gsm8k-100", "--limit", "2", "--dtype", "bfloat16", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "dtype: 'float32' → 'bfloat16'" in err and "another --out" in err and "original values" in err
    assert len(problems_path(out).read_text().splitlines()) == 1 + 1


@pytest.mark.parametrize(("option", "old", "new", "named"), [
    ("--temperature", "0.6", "0.7", "temperature: 0.6 → 0.7"),
    ("--top_p", "0.95", "0.9", "top_p: 0.95 → 0.9"),
    ("--max_completion_length", "8", "6", "max_completion_length: 8 → 6"),
    ("--answer-extraction", "boxed", "flexible", "answer_extraction: 'boxed' → 'flexible'"),
    ("--seed", "0", "3", "seed: 0 → 3"),
])
def test_a_changed_sampling_option_on_resume_exits_2(tmp_path, capsys, option, old, new, named):
    out = tmp_path / "res.json"
    assert _eval([*BASE, "--data", "gsm8k-100", "--limit", "1", option, old, "--out", str(out)]) == 0
    assert _eval([*BASE, "--data", "gsm8k-100", "--limit", "1", option, new, "--out", str(out)]) == 2
    assert named in capsys.readouterr().err


def test_a_model_load_error_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    def load_policy(*args, **kwargs):
        raise ValueError("models/x has no config.json\nit holds: nothing;\ngive a model folder")

    monkeypatch.setattr(rlvr.models, "load_policy", load_policy)
    assert _eval([*BASE, "--data", "gsm8k-100", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err == "rlvr eval: error: models/x has no config.json it holds: nothing; give a model folder\n"


def test_an_empty_model_folder_exits_2_without_a_traceback(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = _eval([*BASE, "--model", str(tmp_path / "empty"), "--data", "gsm8k-100", "--out", str(tmp_path / "x.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and len(err.strip().splitlines()) == 1


def test_a_second_signal_exits_at_once(monkeypatch, capfd):
    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(eval_cli.os, "_exit", exit_now)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as second, eval_cli._stop_on_signals():
            with pytest.raises(KeyboardInterrupt):  # the first: an exception, so clean-up runs
                signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # during that clean-up: exits, no second exception to catch
        assert second.value.code == 130
        assert "SIGINT again: exiting at once" in capfd.readouterr().err
        with pytest.raises(SystemExit) as after:  # still so on the way out (atexit), after the block
            signal.raise_signal(signal.SIGTERM)
        assert after.value.code == 143
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    with eval_cli._stop_on_signals():  # no signal: the handlers are put back
        pass
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_stop_message_says_what_is_saved(tmp_path):
    out = tmp_path / "res.json"
    assert "nothing was saved" in eval_cli._stopped_message(signal.SIGTERM, str(out))
    problems_path(out).write_text('{"settings": {}}\n' + json.dumps(
        {"dataset": "d", "id": "a", "problem": "0", "n": 1, "correct": 0, "greedy_correct": None,
         "diversity": None, "timeouts": 0}) + "\n" + '{"dataset": "d", "i')  # the last line half-written
    message = eval_cli._stopped_message(signal.SIGINT, str(out))
    assert message == (f"rlvr eval: stopped by SIGINT; 1 finished problem is saved in {problems_path(out)}; "
                       "run the same command again to continue from there")


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_an_unchanged_command_resumes_and_adds_the_new_problems(tmp_path, capsys, dtype):
    """The check before the model loads leaves out what only loading decides (the dtype under ``auto``,
    raw strings for a tokenizer without a chat template): an unchanged command resumes instead of
    reporting a change nobody made."""
    from rlvr.models.tiny import tiny_random_model_and_tokenizer

    model, tokenizer = tiny_random_model_and_tokenizer(0)
    tokenizer.chat_template = None
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "res.json"
    argv = [*BASE[2:], "--model", str(tmp_path / "model"), "--data", "gsm8k-100", "--dtype", dtype, "--out", str(out)]
    assert _eval([*argv, "--limit", "1"]) == 0
    header = json.loads(problems_path(out).read_text().splitlines()[0])["settings"]
    assert header.get("raw_strings") is True and header["dtype"] == "float32"
    assert _eval([*argv, "--limit", "2"]) == 0, capsys.readouterr().err
    assert len(problems_path(out).read_text().splitlines()) == 1 + 2
