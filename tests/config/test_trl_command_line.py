"""HfArgumentParser's command line: --no_<flag> for every boolean, and a command-line value that turns a
feature off makes the file's keys for that feature unused, not an error."""

import dataclasses

import pytest

from rlvr.config import FIELD_SECTION, load_config
from rlvr.config.parsing import _is_bool_key, _is_list_key, pairs_from_cli
from rlvr.config.trl_names import TRL_BOOL_KEYS

BOOL_OPTIONS = sorted([key for key in FIELD_SECTION if _is_bool_key(key)] + list(TRL_BOOL_KEYS))


@pytest.mark.parametrize("key", BOOL_OPTIONS)
def test_no_flag_is_false_for_every_boolean(key):
    assert pairs_from_cli([f"--no_{key}", "--max_steps", "2"]) == [f"{key}=false", "max_steps=2"]


def test_every_boolean_and_list_key_of_the_installed_grpo_config_takes_hfargumentparsers_forms():
    trl = pytest.importorskip("trl")
    fields = {f.name: str(f.type) for f in dataclasses.fields(trl.GRPOConfig)}
    assert not [name for name, kind in fields.items() if kind.startswith("bool") and not _is_bool_key(name)]
    assert not [name for name, kind in fields.items() if "list[" in kind and not _is_list_key(name)]


def test_no_bf16_over_a_file_that_sets_bf16(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: tiny-random\nbf16: true\n")
    assert load_config(str(path), pairs_from_cli(["--no_bf16"])).model.bf16 is False
    assert load_config(str(path), []).model.bf16 is True


def test_a_no_prefix_that_is_not_a_boolean_stays_what_it_was():
    with pytest.raises(ValueError, match="--no_such_thing needs a value"):
        pairs_from_cli(["--no_such_thing"])


EVAL_FILE = "model_name_or_path: tiny-random\ndataset_name: d/x\neval_strategy: steps\neval_steps: 50\n"


def test_eval_strategy_no_on_the_command_line_turns_the_files_evaluation_off(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(EVAL_FILE)
    assert load_config(str(path), []).eval.eval_steps == 50  # the file alone evaluates
    cfg = load_config(str(path), pairs_from_cli(["--eval_strategy", "no"]))
    assert not cfg.eval.enabled and cfg.eval.eval_strategy == "no"


def test_eval_strategy_no_over_an_rlvr_file_with_eval_data(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("eval_steps: 5\neval_data: [gsm8k-100]\n")
    cfg = load_config(str(path), ["eval_strategy=no"])
    assert not cfg.eval.enabled and cfg.eval.eval_data == []
    with pytest.raises(ValueError, match="eval_steps/eval_delay/eval_data are unused"):  # both on the command line: a mistake
        load_config(None, ["eval_strategy=no", "eval_steps=5"])
