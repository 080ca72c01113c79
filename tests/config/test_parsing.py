"""Config parsing: typed ``key=value`` pairs, flat or nested YAML, lists, null and free text."""

import pytest
import yaml

from rlvr.config import build_config, load_config


def test_cli_pairs_are_typed(tmp_path):
    cfg = load_config(None, ["beta=0.04", "num_generations=4", "reward_funcs=accuracy,format",
                             "reward_weights=[1, 0.5]", "epsilon_high=null", "resume=true", "data=rg:chain_sum:size=5"])
    assert cfg.algorithm.beta == 0.04
    assert load_config(None, ["learning_rate=3e-3"]).optim.learning_rate == 0.003
    assert cfg.rollout.num_generations == 4
    assert cfg.reward.reward_funcs == ["accuracy", "format"]
    assert cfg.reward.reward_weights == [1.0, 0.5]
    assert cfg.algorithm.epsilon_high is None
    assert cfg.run.resume is True
    assert cfg.data.data == "rg:chain_sum:size=5"


def test_yaml_flat_or_nested_and_cli_wins(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"beta": 0.1}, "max_steps": 7}))
    cfg = load_config(str(path), ["max_steps=9"])
    assert cfg.algorithm.beta == 0.1 and cfg.run.max_steps == 9


def test_resolved_config_round_trips(tmp_path):
    cfg = build_config({"algo": "dapo", "beta": 0.01})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert load_config(str(path), []) == cfg


def test_a_single_value_for_a_list_option_is_a_one_element_list(tmp_path):
    cfg = load_config(None, ["reward_weights=1"])
    assert cfg.reward.reward_funcs == ["accuracy"] and cfg.reward.reward_weights == [1.0]
    cfg = load_config(None, ["reward_funcs=accuracy", "reward_weights=0.5"])
    assert cfg.reward.reward_funcs == ["accuracy"] and cfg.reward.reward_weights == [0.5]
    cfg = load_config(None, ["reward_funcs=accuracy,format", "reward_weights=1,0.1"])
    assert cfg.reward.reward_funcs == ["accuracy", "format"] and cfg.reward.reward_weights == [1.0, 0.1]
    assert load_config(None, ["eval_n=4", "eval_k=4"]).eval.eval_k == [4]
    path = tmp_path / "c.yaml"
    path.write_text("reward_funcs: accuracy\nreward_weights: 1\neval_k: 2\n")
    cfg = load_config(str(path), [])
    assert cfg.reward.reward_weights == [1.0] and cfg.reward.reward_funcs == ["accuracy"] and cfg.eval.eval_k == [2]
    with pytest.raises(TypeError, match="reward_weights must be a number"):
        load_config(None, ["reward_weights=true"])


@pytest.mark.parametrize("pair, key, text", [
    ("instruction=Finish with #### followed by the number.", "instruction", "Finish with #### followed by the number."),
    ("system_prompt=Use # for comments", "system_prompt", "Use # for comments"),
    ("system_prompt=Answer: briefly", "system_prompt", "Answer: briefly"),
    ("instruction=[not a list], {nor: a mapping}", "instruction", "[not a list], {nor: a mapping}"),
    ("system_prompt='quoted'", "system_prompt", "'quoted'"),  # as given: the shell already removed its quotes
])
def test_text_options_take_the_command_line_text_as_given(pair, key, text):
    # YAML read " #..." as a comment and "a: b" as a mapping: the text was cut or refused
    assert getattr(load_config(None, [pair]).data, key) == text


def test_null_still_means_none_for_optional_options_and_other_types_stay_parsed():
    cfg = load_config(None, ["instruction=null", "system_prompt=~", "epsilon_high=null", "output_dir=null"])
    assert cfg.data.instruction is None and cfg.data.system_prompt is None
    assert cfg.algorithm.epsilon_high is None and cfg.run.output_dir is None
    cfg = load_config(None, ["eval_data=gsm8k-100,rg:chain_sum:size=5", "eval_steps=2", "reward_funcs=[accuracy, format]",
                             "reward_weights=1,0.5", "max_steps=3", "resume=false", "beta=1e-3"])
    assert cfg.eval.eval_data == ["gsm8k-100", "rg:chain_sum:size=5"]
    assert cfg.reward.reward_funcs == ["accuracy", "format"] and cfg.reward.reward_weights == [1.0, 0.5]
    assert cfg.run.max_steps == 3 and cfg.run.resume is False and cfg.algorithm.beta == 0.001


def test_a_value_yaml_cannot_read_names_the_option_and_type():
    with pytest.raises(ValueError, match=r"beta='\[0.1' is not a valid number"):
        load_config(None, ["beta=[0.1"])


def test_yaml_file_values_are_already_typed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('instruction: "Finish with #### followed by the number."\nsystem_prompt: "Answer: briefly"\n')
    cfg = load_config(str(path), [])
    assert cfg.data.instruction == "Finish with #### followed by the number."
    assert cfg.data.system_prompt == "Answer: briefly"
