"""TRL's names: a TRL recipe's keys are taken, mapped, or refused one line each; preset=trl is TRL's defaults."""

import dataclasses

import pytest
import yaml

from rlvr.config import FIELD_SECTION, build_config, load_config
from rlvr.config.parsing import pairs_from_cli
from rlvr.config.presets import TRL_DEFAULTS
from rlvr.config.trl_names import ACCEPTED, NOT_IMPLEMENTED, RENAMED

# A recipe as TRL's docs write one (`trl grpo --config grpo.yaml`: GRPOConfig + ModelConfig +
# ScriptArguments keys), with a tiny model and an offline dataset swapped in.
TRL_RECIPE = """
# Model arguments
model_name_or_path: tiny-random
dtype: float32
attn_implementation: sdpa
use_peft: true
lora_r: 8
lora_alpha: 16
lora_target_modules: [q_proj, v_proj]

# Data and rewards
dataset_name: rg:basic_arithmetic:size=16
dataset_train_split: train
reward_funcs: [accuracy]

# GRPO trainer config
output_dir: OUT
bf16: false
learning_rate: 1.0e-06
lr_scheduler_type: cosine
warmup_ratio: 0.1
per_device_train_batch_size: 4
gradient_accumulation_steps: 1
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
num_generations: 4
max_completion_length: 12
max_steps: 2
beta: 0.0
loss_type: dapo
scale_rewards: true
logging_steps: 1
logging_strategy: steps
save_strategy: steps
save_steps: 1
log_completions: true
num_completions_to_print: 2
push_to_hub: false
report_to: none
run_name: tiny-grpo
seed: 42
"""


def test_a_trl_recipe_resolves_to_the_rlvr_options_it_means(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(TRL_RECIPE.replace("OUT", str(tmp_path / "run")))
    cfg = load_config(str(path), ["prompts_per_step=1"])
    assert cfg.model.model == "tiny-random"
    assert cfg.model.lora_r == 8 and cfg.model.lora_target_modules == "q_proj,v_proj"
    assert cfg.data.data == "rg:basic_arithmetic:size=16"
    assert cfg.optim.learning_rate == 1e-6 and cfg.optim.lr_scheduler_type == "cosine"
    assert cfg.algorithm.loss_type == "dapo"  # TRL's name, resolved by the aggregation (token_mean)
    assert cfg.algorithm.aggregation == "token_mean"
    assert cfg.algorithm.scale_rewards == "group"
    assert cfg.run.num_completions_to_log == 2
    assert cfg.model.gradient_checkpointing is True


def test_the_trl_recipe_trains(tmp_path):
    """The recipe runs unchanged (2 steps of tiny-random), LoRA adapters and all."""
    from rlvr.train.sft import make_trainer

    path = tmp_path / "grpo.yaml"
    path.write_text(TRL_RECIPE.replace("OUT", str(tmp_path / "run")))
    cfg = load_config(str(path), ["prompts_per_step=1", "progress_bar=false", "verifier_workers=1"])
    make_trainer(cfg).train()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_use_peft_decides_whether_lora_r_counts_as_in_trl():
    assert build_config({"use_peft": False, "lora_r": 16}).model.lora_r == 0
    assert build_config({"use_peft": True}).model.lora_r == 16  # TRL's default r
    assert build_config({"lora_r": 4}).model.lora_r == 4  # rlvr's own form: lora_r alone


def test_dataset_name_config_and_split_make_one_data_spec():
    cfg = build_config({"dataset_name": "openai/gsm8k", "dataset_config": "main", "dataset_train_split": "test"})
    assert cfg.data.data == "openai/gsm8k:split=test:config=main"
    assert build_config({"dataset_name": "gsm8k-100"}).data.data == "gsm8k-100"


def test_warmup_steps_below_one_is_transformers_5s_ratio():
    assert build_config({"warmup_steps": 0.1}).optim.warmup_ratio == 0.1
    with pytest.raises(ValueError, match="warmup_steps: 100 is not supported .use warmup_ratio"):
        build_config({"warmup_steps": 100})


def test_use_vllm_is_the_vllm_engine():
    assert build_config({"use_vllm": True}).rollout.rollout_engine == "vllm"
    assert build_config({"use_vllm": False}).rollout.rollout_engine == "rlvr"


def test_trl_options_rlvr_does_not_take_are_refused_together_one_line_each():
    with pytest.raises(ValueError) as error:
        build_config({"num_train_epochs": 3, "push_to_hub": True, "top_entropy_quantile": 0.2, "beta": 0.01})
    text = str(error.value)
    assert "num_train_epochs: a TRL option rlvr does not implement; remove it (nearest rlvr option: max_steps)" in text
    assert "push_to_hub: True is not supported (rlvr does not push to the Hub)" in text
    assert "top_entropy_quantile: a TRL option rlvr does not implement" in text
    assert len(text.splitlines()) == 4  # the heading and one line per key


def test_an_unknown_key_that_is_not_trls_still_suggests_rlvr_names():
    with pytest.raises(ValueError, match="max_step"):
        build_config({"max_step": 3})


def test_the_trl_tables_are_disjoint_from_rlvr_and_cover_trls_own_option_names():
    """Every GRPOConfig / ModelConfig / ScriptArguments field of the installed TRL is placed somewhere."""
    from transformers import TrainingArguments
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.utils import ScriptArguments

    ours = set(FIELD_SECTION)
    tables = set(RENAMED) | set(ACCEPTED) | set(NOT_IMPLEMENTED)
    assert not tables & ours, tables & ours  # an rlvr name is never re-routed
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    trl_own = {f.name for cls in (GRPOConfig, ModelConfig, ScriptArguments) for f in dataclasses.fields(cls)}
    trl_own = (trl_own - base) | {f.name for f in dataclasses.fields(GRPOConfig) if f.name in ("learning_rate",)}
    trl_own |= {"reward_funcs", "reward_model_name_or_path"}  # trl/scripts/grpo.py's GRPOScriptArguments
    unplaced = sorted(trl_own - ours - tables)
    assert not unplaced, f"TRL options with no place in rlvr.config.trl_names: {unplaced}"
    # the transformers keys we place are real TrainingArguments fields (not typos)
    placed_base = (set(ACCEPTED) | set(NOT_IMPLEMENTED)) - trl_own - {"reward_model_name_or_path"}
    assert placed_base <= base | {"torch_dtype", "max_length"}, placed_base - base


def test_preset_trl_is_trls_defaults_and_the_users_keys_still_win():
    from trl import GRPOConfig

    trl = GRPOConfig(output_dir="unused", use_cpu=True, report_to=[])
    cfg = build_config({"preset": "trl"})
    assert cfg.optim.learning_rate == trl.learning_rate == 1e-6
    assert cfg.optim.adam_beta2 == trl.adam_beta2
    assert cfg.optim.lr_scheduler_type == str(trl.lr_scheduler_type.value if hasattr(trl.lr_scheduler_type, "value")
                                              else trl.lr_scheduler_type)
    assert cfg.rollout.max_completion_length == trl.max_completion_length
    assert cfg.rollout.num_generations == trl.num_generations
    assert cfg.algorithm.beta == trl.beta and cfg.algorithm.epsilon == trl.epsilon
    assert cfg.algorithm.aggregation == "token_mean" and trl.loss_type == "dapo"
    assert cfg.algorithm.scale_rewards == trl.scale_rewards
    assert cfg.optim.weight_decay == trl.weight_decay and cfg.optim.adam_beta1 == trl.adam_beta1
    assert cfg.optim.warmup_ratio == trl.warmup_steps == 0 and cfg.optim.max_grad_norm == trl.max_grad_norm
    assert cfg.data.instruction is None and cfg.reward.answer_extraction == "boxed"
    assert cfg.algorithm.advantage_eps == TRL_DEFAULTS["advantage_eps"] == 1e-4
    assert build_config({"preset": "trl", "learning_rate": 3e-6}).optim.learning_rate == 3e-6
    assert build_config({"preset": "trl", "algo": "dapo"}).algorithm.epsilon_high == 0.28  # algo over preset
    assert build_config({}).optim.learning_rate == 3e-5  # rlvr's own defaults otherwise
    with pytest.raises(ValueError, match="preset.*rlvr.*trl"):
        build_config({"preset": "verl"})


@pytest.mark.parametrize(("tokens", "pairs"), [
    (["--max_steps", "2"], ["max_steps=2"]),
    (["--max-steps=2", "beta=0.04"], ["max_steps=2", "beta=0.04"]),
    (["--bf16", "--max_steps", "3"], ["bf16=true", "max_steps=3"]),
    (["--bf16", "false"], ["bf16=false"]),
    (["--data", "rg:chain_sum:size=10"], ["data=rg:chain_sum:size=10"]),
    (["--epsilon_high", "null"], ["epsilon_high=null"]),
    (["--model_name_or_path", "tiny-random"], ["model_name_or_path=tiny-random"]),
])
def test_the_command_line_takes_key_value_and_dashed_forms(tokens, pairs):
    assert pairs_from_cli(tokens) == pairs


def test_a_dashed_option_without_its_value_is_refused():
    with pytest.raises(ValueError, match="--max_steps needs a value"):
        pairs_from_cli(["--max_steps"])
    with pytest.raises(ValueError, match="--max_steps needs a value"):
        pairs_from_cli(["--max_steps", "--beta", "0.1"])


def test_the_dashed_forms_give_the_same_config_as_key_value():
    a = load_config(None, pairs_from_cli(["--max_steps", "5", "--bf16", "--use_peft", "true", "--lora_r", "4"]))
    b = load_config(None, ["max_steps=5", "bf16=true", "lora_r=4"])
    assert a == b
    assert yaml.safe_dump(a.to_dict()) == yaml.safe_dump(b.to_dict())
