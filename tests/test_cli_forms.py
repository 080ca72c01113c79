"""Every subcommand takes ``key=value`` and ``--key value``; `rlvr train --help` says so."""

import argparse

import pytest
import yaml

from rlvr.cli import build_parser, flags_from_pairs, main, split_train_args


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[name]


def test_train_takes_dashed_options_like_trl(capsys):
    assert main(["train", "--max_steps", "2", "--model", "tiny-random", "--bf16", "--dry-run", "beta=0.04"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["run"]["max_steps"] == 2 and resolved["model"]["model"] == "tiny-random"
    assert resolved["model"]["bf16"] is True and resolved["algorithm"]["beta"] == 0.04


def test_train_dashed_and_pair_forms_resolve_alike(capsys):
    main(["train", "--dry-run", "--learning-rate=1e-6", "--preset", "trl"])
    dashed = capsys.readouterr().out
    main(["train", "learning_rate=1e-6", "preset=trl", "--dry-run"])
    assert capsys.readouterr().out == dashed


def test_train_config_flag_in_any_position(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 7\nmodel_name_or_path: tiny-random\n")
    assert main(["train", "--seed", "3", "--config", str(path), "--dry-run"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["run"]["max_steps"] == 7 and resolved["run"]["seed"] == 3
    assert split_train_args([f"--config={path}"]).config == str(path)


def test_train_errors_name_the_option(capsys):
    assert main(["train", "--max_steps"]) == 2
    assert "--max_steps needs a value" in capsys.readouterr().err
    assert main(["train", "--log_unique_prompts", "--dry-run"]) == 2
    assert "log_unique_prompts: True: a TRL option rlvr does not implement" in capsys.readouterr().err
    assert main(["train", "--top_entropy_quantile", "1.5", "--dry-run"]) == 2
    assert "top_entropy_quantile" in capsys.readouterr().err


def test_train_help_shows_both_forms(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "key=value, --key value or --key=value" in out
    assert "preset = 'rlvr'" in out and "optim = 'adamw_torch_fused'" in out


def test_eval_takes_key_value_pairs_as_its_flags():
    parser = _subparser("eval")
    pairs = parser.parse_args(flags_from_pairs(parser, ["model=tiny-random", "data=gsm8k-100", "out=o.json",
                                                        "n=8", "top_p=0.9", "greedy=true", "log_samples=false"]))
    flags = parser.parse_args(["--model", "tiny-random", "--data", "gsm8k-100", "--out", "o.json", "--n", "8",
                               "--top-p", "0.9", "--greedy"])
    assert vars(pairs) == vars(flags)
    with pytest.raises(ValueError, match="greedy=.maybe.: --greedy is a switch"):
        flags_from_pairs(parser, ["greedy=maybe"])


def test_report_keeps_its_positional_run_folders():
    parser = _subparser("report")
    assert flags_from_pairs(parser, ["runs/a=b", "smooth=3"]) == ["runs/a=b", "--smooth", "3"]
