"""TRL's logging options are rlvr options of the same name (read by rlvr.train.run_plan into its LoggingPlan):
TRL's defaults with preset=trl, transformers' values, the rest refused with the fix."""

import pytest

from rlvr.config import build_config, load_config
from rlvr.config.parsing import pairs_from_cli
from rlvr.train.run_plan import LoggingPlan, compile_run_plan


def test_preset_trl_logs_every_ten_steps_and_rlvrs_own_preset_every_step():
    assert build_config({"preset": "trl"}).run.logging_steps == 10  # TRL's GRPOConfig default
    assert build_config({}).run.logging_steps == 1
    plan = compile_run_plan(build_config({"logging_strategy": "epoch", "logging_first_step": True,
                                          "include_num_input_tokens_seen": "non_padding",
                                          "skip_memory_metrics": False})).logging
    assert plan == LoggingPlan(strategy="epoch", steps=1, first_step=True, tokens_seen=True, memory=True)


def test_transformers_forms_of_the_values():
    assert build_config({"include_num_input_tokens_seen": True}).run.include_num_input_tokens_seen == "all"
    assert build_config({"include_num_input_tokens_seen": "false"}).run.include_num_input_tokens_seen == "no"
    assert build_config({"disable_tqdm": True}).run.progress_bar is False  # TRL's name, rlvr's opposite
    assert build_config({"disable_tqdm": False}).run.progress_bar is True
    assert LoggingPlan("steps", 0.25, False, False, False).every(10) == 3  # a fraction of the run, rounded up
    assert LoggingPlan("steps", 4.0, False, False, False).every(10) == 4


@pytest.mark.parametrize(("overrides", "message"), [
    ({"logging_steps": 2.5}, "logging_steps=2.5: use a whole number of steps"),
    ({"logging_steps": 0}, "logging_steps=0"),
    ({"logging_strategy": "sometimes"}, r"logging_strategy='sometimes': choose one of \('steps', 'epoch', 'no'\)"),
    ({"include_num_input_tokens_seen": "some"}, "include_num_input_tokens_seen='some': choose one of"),
    ({"disable_tqdm": True, "progress_bar": True}, "disable_tqdm: True contradicts progress_bar: True; remove one"),
])
def test_a_bad_value_is_refused_with_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        build_config(overrides)


def test_the_command_line_and_yaml_take_them(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("model_name_or_path: tiny-random\nlogging_steps: 5\nlogging_strategy: steps\n")
    cfg = load_config(str(path), pairs_from_cli(["--logging_first_step", "--include_num_input_tokens_seen", "all"]))
    assert (cfg.run.preset, cfg.run.logging_steps, cfg.run.logging_first_step) == ("trl", 5, True)
    assert cfg.run.include_num_input_tokens_seen == "all"
