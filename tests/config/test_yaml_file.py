"""``--config`` files read strictly (rlvr.config.yaml_file): bounded aliases, unique keys, ``${VAR}`` expanded.

Each case ran silently or hung before (issue 41): a "billion laughs" grew to 3.35 GB in the dry run's
printout, a key given twice (or flat beside its section) took the last value, ``${HOME}`` stayed literal.
"""

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.config.yaml_file import MAX_FILE_BYTES
from tests.helpers.cli_output import one_error_line

# nine levels of nine aliases inside a valid mapping option: 9^9 strings once expanded
LAUGHS = "model: tiny-random\nchat_template_kwargs:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  {b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def _dry_run(tmp_path, capsys, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--dry-run"]) == 2
    return one_error_line(capsys)


def test_nested_aliases_are_refused_while_reading(tmp_path, capsys):
    message = _dry_run(tmp_path, capsys, LAUGHS)  # before: no output, 3.35 GB, killed
    assert "c.yaml:" in message and "aliases" in message and "more than" in message


def test_a_few_aliases_still_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: &steps 6\nsave_steps: *steps\nalgorithm:\n  beta: 0.2\n")
    cfg = load_config(str(path), [])
    assert cfg.run.max_steps == cfg.run.save_steps == 6 and cfg.algorithm.beta == 0.2


def test_a_merge_key_may_be_overridden_by_the_mappings_own_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("chat_template_kwargs:\n  <<: &base {enable_thinking: false, x: 1}\n  x: 2\n")
    assert load_config(str(path), []).data.chat_template_kwargs == {"enable_thinking": False, "x": 2}


def test_a_recursive_alias_is_refused(tmp_path, capsys):
    assert "c.yaml:2:" in _dry_run(tmp_path, capsys, "model: tiny-random\nchat_template_kwargs: &a {x: *a}\n")


def test_a_file_over_the_size_bound_is_refused(tmp_path, capsys):
    message = _dry_run(tmp_path, capsys, "system_prompt: " + "x" * MAX_FILE_BYTES + "\n")
    assert "over 1 MiB" in message and "data file" in message


def test_a_key_given_twice_names_both_lines(tmp_path, capsys):
    message = _dry_run(tmp_path, capsys, "model: tiny-random\nmax_steps: 1\nseed: 2\nmax_steps: 7\n")
    assert "c.yaml:4: max_steps is given twice in the same mapping, at lines 2 and 4; keep one" in message


def test_a_key_given_twice_inside_a_section_or_option_is_refused(tmp_path, capsys):
    assert "lines 2 and 3" in _dry_run(tmp_path, capsys, "run:\n  seed: 1\n  seed: 2\n")
    assert "x is given twice" in _dry_run(tmp_path, capsys, "chat_template_kwargs: {x: 1, x: 2}\n")


def test_a_key_given_flat_and_in_its_section_names_both_places(tmp_path, capsys):
    message = _dry_run(tmp_path, capsys, "model: tiny-random\nrun: {max_steps: 1}\nmax_steps: 7\n")
    assert "max_steps is given twice, as `run: max_steps` (line 2) and `max_steps` (line 3); keep one" in message
    message = _dry_run(tmp_path, capsys, "run:\n  seed: 1\noptim:\n  seed: 2\n")
    assert "`run: seed` (line 2) and `optim: seed` (line 4)" in message


def test_environment_variables_in_values_are_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_ROOT", str(tmp_path))
    monkeypatch.delenv("RLVR_TEST_UNSET", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: ${RLVR_TEST_ROOT}/runs/a\nrun_name: ${RLVR_TEST_UNSET:-fallback}\n"
                    "system_prompt: costs $5, keep $${RLVR_TEST_ROOT} and ${\\frac12}\n")
    cfg = load_config(str(path), [])
    assert cfg.run.output_dir == f"{tmp_path}/runs/a" and cfg.run.run_name == "fallback"
    assert cfg.data.system_prompt == "costs $5, keep ${RLVR_TEST_ROOT} and ${\\frac12}"


def test_a_default_may_hold_variables_and_braces_as_in_a_shell(tmp_path, monkeypatch, capsys):
    """``${A:-${B}}`` was read up to the first ``}``: the run went into a folder literally named ``${B}``."""
    monkeypatch.setenv("RLVR_TEST_ROOT", str(tmp_path))
    monkeypatch.delenv("RLVR_TEST_UNSET", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: ${RLVR_TEST_UNSET:-${RLVR_TEST_ROOT}}/runs\n"
                    "run_name: ${RLVR_TEST_UNSET:-${RLVR_TEST_UNSET:-inner}}\n"
                    "system_prompt: ${RLVR_TEST_UNSET:-\\frac{1}{2}} and $${RLVR_TEST_UNSET:-${RLVR_TEST_ROOT}}\n")
    cfg = load_config(str(path), [])
    assert cfg.run.output_dir == f"{tmp_path}/runs" and cfg.run.run_name == "inner"
    assert cfg.data.system_prompt == "\\frac{1}{2} and ${RLVR_TEST_UNSET:-${RLVR_TEST_ROOT}}"
    message = _dry_run(tmp_path, capsys, "model: tiny-random\noutput_dir: ${RLVR_TEST_UNSET:-${RLVR_TEST_UNSET}}\n")
    assert "c.yaml:2: ${RLVR_TEST_UNSET} is not set in the environment" in message


def test_an_unset_environment_variable_is_an_error_not_literal_text(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RLVR_TEST_UNSET", raising=False)
    message = _dry_run(tmp_path, capsys, "model: tiny-random\noutput_dir: ${RLVR_TEST_UNSET}/runs\n")
    assert "c.yaml:2: ${RLVR_TEST_UNSET} is not set in the environment" in message


def test_home_is_expanded_in_the_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "c.yaml"
    path.write_text("model: tiny-random\ndata: rg:chain_sum:size=4\noutput_dir: ${HOME}/runs\n")
    main(["train", "--config", str(path), "--dry-run"])
    assert f"output_dir: {tmp_path}/runs" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_file_is_still_no_options(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert load_config(str(path), []) == load_config(None, [])
