"""Config: presets, CLI parsing, validation messages, security defaults."""

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

import rlvr.train.trainer as trainer_module
from rlvr.config import SECTIONS, ExperimentConfig, build_config, field_help, load_config

from .conftest import tiny_overrides


def test_defaults_are_grpo():
    cfg = ExperimentConfig()
    assert cfg.algorithm.algo == "grpo"
    assert cfg.algorithm.scale_rewards == "group"
    assert cfg.algorithm.aggregation == "token_mean"
    assert cfg.algorithm.beta == 0.0
    assert not cfg.algorithm.needs_old_logprobs


def test_dr_grpo_preset_and_user_override_wins():
    cfg = build_config({"algo": "dr_grpo"})
    assert cfg.algorithm.scale_rewards == "none"
    assert cfg.algorithm.aggregation == "seq_mean_token_sum_norm"
    cfg = build_config({"algo": "dr_grpo", "scale_rewards": "group"})
    assert cfg.algorithm.scale_rewards == "group"


def test_dapo_preset():
    cfg = build_config({"algo": "dapo"})
    assert cfg.algorithm.epsilon_high == 0.28 and cfg.algorithm.dynamic_sampling


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


@pytest.mark.parametrize(
    "pairs, words",
    [
        (["bta=0.1"], ["unknown option 'bta'", "beta"]),
        (["num_generations=1"], ["num_generations", "G >= 2"]),
        (["num_generations=abc"], ["num_generations must be an integer"]),
        (["loss_type=foo"], ["unknown loss_type", "token_mean"]),
        (["scale_rewards=std"], ["scale_rewards", "group"]),
        (["algo=ppo"], ["algo", "grpo"]),
        (["reward_weights=[1,2]"], ["one weight per reward function"]),
        (["steps_per_generation=3", "prompts_per_step=2"], ["steps_per_generation", "whole groups"]),
        (["per_device_train_batch_size=4", "gradient_accumulation_steps=3"], ["gradient_accumulation_steps"]),
        (["resume=maybe"], ["resume must be true or false"]),
        (["max_steps"], ["expected key=value"]),
        (["nproc=0"], ["nproc", "number of processes"]),
        (["parallelism=zero3"], ["parallelism", "ddp or fsdp"]),
        (["max_skipped_steps=0"], ["max_skipped_steps", "positive count"]),
        (["ddp_timeout=0"], ["ddp_timeout", "positive number of seconds"]),
        # options that would silently do nothing or the opposite
        (["advantage_eps=-1e-6"], ["advantage_eps", "eps >= 0", "flip the sign"]),
        (["max_grad_norm=-1"], ["max_grad_norm", "or 0 to disable clipping"]),
        (["learning_rate=inf"], ["learning_rate", "finite"]),
        (["learning_rate=nan"], ["learning_rate", "finite"]),
        (["judge_model=tiny-random"], ["judge_model", "scorer=none", "add scorer=judge, or drop judge_model"]),
        (["judge_base_url=http://host:8000/v1", "judge_model_name=m"], ["judge_base_url", "add scorer=judge"]),
        (["judge_model_name=m"], ["judge_model_name", "add scorer=judge"]),
        (["algo=dagrpo", "judge_model=tiny-random"], ["judge_model", "scorer=steps", "add scorer=judge"]),
        (["eval_data=gsm8k-100"], ["eval_steps=0", "set eval_steps=K", "or drop eval_data"]),
        (["algo=sft", "anchors=off"], ["anchors", "drop anchors=off"]),
        *[([f"algo={algo}", "num_rephrasings=0"], ["num_rephrasings", "plain GRPO", "algo=grpo"])
          for algo in ("tagrpo", "tagrpo_unanchored", "tagrpo_unpooled")],
        (["algo=equal_sampling", "num_rephrasings=0"], ["equal_sampling", "set num_rephrasings=N"]),
    ],
)
def test_bad_options_name_the_problem(pairs, words):
    with pytest.raises((ValueError, TypeError)) as info:
        load_config(None, pairs)
    for word in words:
        assert word in str(info.value)


def _number_fields() -> list[str]:
    hints = {name: hint for cls in SECTIONS.values() for name, hint in typing.get_type_hints(cls).items()}
    return [name for name, hint in hints.items() if float in (hint, *typing.get_args(hint))
            or list[float] in typing.get_args(hint)]


@pytest.mark.parametrize("value", ["nan", "inf", ".inf", "-.inf"])
@pytest.mark.parametrize("name", _number_fields())
def test_every_number_option_must_be_finite(name, value):
    # nan passes every range check (nan <= 0 is False) and inf passes > 0: one check covers all of them
    with pytest.raises(ValueError, match=re.escape(name)):
        load_config(None, [f"{name}={value}"])


def test_number_fields_cover_the_float_options():
    names = set(_number_fields())
    assert {"learning_rate", "temperature", "epsilon", "epsilon_high", "beta", "max_grad_norm", "weight_decay",
            "warmup_ratio", "score_alpha", "pair_tau", "judge_timeout", "verifier_timeout", "reward_weights",
            "advantage_eps", "eval_temperature"} <= names
    assert "max_steps" not in names


def test_zero_eps_and_zero_grad_norm_stay_allowed():
    cfg = load_config(None, ["advantage_eps=0", "max_grad_norm=0"])
    assert cfg.algorithm.advantage_eps == 0.0 and cfg.optim.max_grad_norm == 0.0


def test_judge_options_with_the_judge_scorer_and_eval_data_with_eval_steps_are_accepted():
    cfg = load_config(None, ["scorer=judge", "judge_model=tiny-random"])
    assert cfg.dagrpo.judge_model == "tiny-random"
    cfg = load_config(None, ["scorer=judge", "judge_base_url=http://host:8000/v1", "judge_model_name=m"])
    assert cfg.dagrpo.judge_model_name == "m"
    cfg = load_config(None, ["eval_data=gsm8k-100", "eval_steps=100", "max_steps=10"])  # only at the end
    assert cfg.eval.eval_data == ["gsm8k-100"]


def test_tagrpo_algos_keep_their_rephrasings():
    for algo in ("tagrpo", "tagrpo_unanchored", "tagrpo_unpooled", "equal_sampling"):
        assert build_config({"algo": algo}).tagrpo.num_rephrasings == 4
        assert build_config({"algo": algo, "num_rephrasings": 1}).tagrpo.num_rephrasings == 1
    assert build_config({"num_rephrasings": 0}).tagrpo.enabled is False  # algo=grpo: off is the default


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


def test_committed_study_configs_still_build():
    # every arm of every study (and each resolved config.yaml of its runs) passes the checks above
    for study in Path("experiments").glob("*.yaml"):
        spec = yaml.safe_load(study.read_text())
        for arm in spec["arms"].values():
            build_config({**spec["common"], **arm})
    for saved in Path("experiments/results").rglob("config.yaml"):
        load_config(str(saved), [])


def test_every_field_has_help():
    rows = field_help()
    assert len(rows) > 30
    assert all(text for _, _, _, text in rows)


def test_no_option_can_hold_an_api_key():
    # config.yaml is written to every run directory: options may only *name* the env var of a key.
    secret_words = {"key", "keys", "secret", "password", "passwd", "token", "credential", "credentials", "auth"}
    named = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
             if secret_words & set(re.split(r"[_\W]+", f.name.lower()))]
    assert named == ["dagrpo.judge_api_key_env"]
    assert all(name.endswith("_env") for name in named)
    assert ExperimentConfig().dagrpo.judge_api_key_env == "OPENAI_API_KEY"


def test_trust_remote_code_is_off_by_default_and_reaches_load_policy(tmp_path, monkeypatch):
    assert ExperimentConfig().model.trust_remote_code is False
    seen = []

    class Loaded(Exception):
        pass

    def spy(name, **kwargs):
        seen.append(kwargs["trust_remote_code"])
        pickles.append(kwargs["allow_pickle_weights"])
        raise Loaded  # stop before any model is built

    pickles = []

    monkeypatch.setattr(trainer_module, "load_policy", spy)
    for value, overrides in ((False, {}), (True, {"trust_remote_code": True})):
        cfg = build_config(tiny_overrides(tmp_path / str(value), data="rg:chain_sum:size=4", **overrides))
        with pytest.raises(Loaded):
            trainer_module.Trainer(cfg)
        assert seen[-1] is value
    assert pickles == [False, False]  # safetensors only unless allow_pickle_weights=true
    cfg = build_config(tiny_overrides(tmp_path / "pickle", data="rg:chain_sum:size=4", allow_pickle_weights=True))
    with pytest.raises(Loaded):
        trainer_module.Trainer(cfg)
    assert pickles[-1] is True


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


@pytest.mark.parametrize("value", [2**64, 2**63, -1])
def test_seed_outside_the_range_torch_takes_is_refused(value):
    with pytest.raises(ValueError, match=re.escape("seed=") + ".*2\\*\\*63 - 1"):
        load_config(None, [f"seed={value}"])
    assert load_config(None, [f"seed={2**63 - 1}"]).run.seed == 2**63 - 1


def test_max_prompt_length_is_positive_or_null():
    assert load_config(None, []).rollout.max_prompt_length is None
    assert load_config(None, ["max_prompt_length=512"]).rollout.max_prompt_length == 512
    with pytest.raises(ValueError, match="max_prompt_length"):
        load_config(None, ["max_prompt_length=0"])


@pytest.mark.parametrize("option, value, fix", [
    ("max_reward_error_frac", 1.5, "a fraction in \\[0, 1\\]"),
    ("max_reward_error_frac", -0.1, "a fraction in \\[0, 1\\]"),
    ("reward_timeout", 0, "positive number of seconds"),
    ("reward_weights", [1e7], "at most 1e6"),
])
def test_reward_failure_options_are_validated(option, value, fix):
    with pytest.raises(ValueError, match=rf"{option}=.*{fix}"):
        build_config({option: value})
    assert build_config({}).reward.max_reward_error_frac == 0.5 and build_config({}).reward.reward_timeout == 600.0
