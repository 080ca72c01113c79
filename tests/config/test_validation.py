"""Config validation: every bad value or combination is refused with a message naming the option and the fix."""

import re
import typing

import pytest

from rlvr.config import SECTIONS, build_config, load_config


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
        (["steps_per_generation=3", "prompts_per_step=2"], ["steps_per_generation=3 must divide the 16 completions"]),
        (["steps_per_generation=4", "prompts_per_step=2"], ["4 optimiser steps per pass", "whole prompts"]),
        (["per_device_train_batch_size=4", "gradient_accumulation_steps=3"], ["gradient_accumulation_steps",
                                                                              "use a divisor of 8"]),
        (["per_device_train_batch_size=5"], ["per_device_train_batch_size=5 must divide the 32 completions"]),
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
        (["policy_loss=ppo2"], ["policy_loss", "choose one of", "'clip'"]),
        (["advantage_estimator=gae"], ["advantage_estimator", "'grpo'", "'rloo'"]),
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


@pytest.mark.parametrize("nproc", [1, 2])
def test_vllm_with_fsdp_is_refused_at_any_process_count(nproc):
    # a one-process run would otherwise start, and fail only once scaled to several processes; the plan refuses
    # it (an engine that keeps its own weights: an ability of the engine class), at start-up and in --dry-run
    from rlvr.train.plan import compile_plan

    with pytest.raises(ValueError, match=r"rollout_engine=vllm with parallelism=fsdp is not supported .*"
                                         r"use parallelism=ddp or rollout_engine=rlvr"):
        compile_plan(build_config({"parallelism": "fsdp", "rollout_engine": "vllm", "nproc": nproc}))
    assert build_config({"parallelism": "fsdp", "nproc": nproc}).rollout.rollout_engine == "rlvr"
    assert build_config({"rollout_engine": "vllm", "nproc": nproc}).run.parallelism == "ddp"


@pytest.mark.parametrize(("option", "bad", "fix"), [
    ("lm_head_chunk_tokens", "-1", "chunk such as 1024"),
    ("max_tokens_per_micro_batch", "0", "positive integer"),
    ("truncation", "right", "choose one of"),
])
def test_the_memory_and_prompt_options_refuse_bad_values_with_the_fix(option, bad, fix):
    with pytest.raises(ValueError, match=f"{option}.*{fix}"):
        load_config(None, [f"{option}={bad}"])
    load_config(None, ["lm_head_chunk_tokens=1024", "max_tokens_per_micro_batch=4096", "truncation=left"])
