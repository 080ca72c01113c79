"""TRL's names: a TRL recipe's keys are taken, mapped, or refused one line each; preset=trl is TRL's defaults."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from rlvr.config import FIELD_SECTION, build_config, load_config
from rlvr.config.defaults_line import defaults_line
from rlvr.config.launch_keys import ACCELERATE, LAUNCH_TRANSLATED
from rlvr.config.parsing import pairs_from_cli
from rlvr.config.presets import TRL_DEFAULTS
from rlvr.config.trl_names import ACCEPTED, NOT_IMPLEMENTED, RENAMED, TRANSLATED

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"

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

# Data and rewards (rlvr's verifier by its explicit name: with TRL's names the bare `accuracy` is open-r1's)
dataset_name: rg:basic_arithmetic:size=16
dataset_train_split: train
reward_funcs: [rlvr:accuracy]

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
    assert cfg.algorithm.loss_type == "dapo"  # TRL's name and TRL's normaliser (rlvr.core.losses.aggregate)
    assert cfg.algorithm.aggregation == "dapo"
    assert cfg.algorithm.scale_rewards == "group"
    assert cfg.run.num_completions_to_log == 2
    assert cfg.model.gradient_checkpointing is True
    assert cfg.run.preset == "trl" and cfg.origin.trl_keys[:2] == ("model_name_or_path", "attn_implementation")[:1] + (
        cfg.origin.trl_keys[1],)
    assert cfg.reward.reward_funcs == ["rlvr:accuracy"]


def test_the_trl_recipe_trains(tmp_path):
    """The recipe runs unchanged (2 steps of tiny-random), LoRA adapters and all."""
    from rlvr.train.trainer import Trainer

    path = tmp_path / "grpo.yaml"
    path.write_text(TRL_RECIPE.replace("OUT", str(tmp_path / "run")))
    cfg = load_config(str(path), ["prompts_per_step=1", "progress_bar=false", "verifier_workers=1"])
    Trainer(cfg).train()
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


def test_warmup_steps_is_transformers_5s_ratio_below_one_and_a_count_above():
    assert build_config({"warmup_steps": 0.1}).optim.warmup_steps == 0.1
    assert build_config({"warmup_steps": 100}).optim.warmup_steps == 100
    with pytest.raises(ValueError, match="warmup_steps.*whole number"):
        build_config({"warmup_steps": 1.5})


def test_use_vllm_is_the_vllm_engine():
    assert build_config({"use_vllm": True}).rollout.rollout_engine == "vllm"
    assert build_config({"use_vllm": False}).rollout.rollout_engine == "rlvr"


def test_trl_options_rlvr_does_not_take_are_refused_together_one_line_each():
    with pytest.raises(ValueError) as error:
        build_config({"load_in_4bit": True, "dataset_streaming": True, "log_unique_prompts": True, "beta": 0.01})
    text = str(error.value)
    assert "load_in_4bit: True: a TRL option rlvr does not implement (only TRL's default False); remove it" in text
    assert "dataset_streaming: True is not supported (rlvr loads the whole dataset)" in text
    assert "log_unique_prompts: True: a TRL option rlvr does not implement (only TRL's default False)" in text
    assert len(text.splitlines()) == 4  # the heading and one line per key


def test_trl_options_at_trls_own_default_are_taken():
    """A recipe that writes a TRL option at TRL's default asks for the plain behaviour rlvr has."""
    cfg = build_config({"use_dora": False, "top_entropy_quantile": 1.0, "fp16": False, "sync_ref_model": False,
                        "logging_steps": 10, "per_device_eval_batch_size": 16, "hub_model_revision": "main"})
    assert cfg.run.preset == "trl"


def test_an_unknown_key_that_is_not_trls_still_suggests_rlvr_names():
    with pytest.raises(ValueError, match="max_step"):
        build_config({"max_step": 3})


# open-r1's additions to TRL's GRPOConfig / ScriptArguments (huggingface/open-r1 src/open_r1/configs.py,
# commit 1416fa0): its recipes carry them
OPEN_R1_KEYS = {
    "benchmarks", "callbacks", "chat_template", "hub_model_revision", "overwrite_hub_revision", "push_to_hub_revision",
    "system_prompt", "wandb_log_unique_prompts", "wandb_entity", "wandb_project", "wandb_run_group",
    "dataset_mixture", "dataset_prompt_column", "cosine_min_value_wrong", "cosine_max_value_wrong",
    "cosine_min_value_correct", "cosine_max_value_correct", "cosine_max_len", "repetition_n_grams",
    "repetition_max_penalty", "code_language", "max_completion_len", "soft_punish_cache",
}


def test_the_trl_tables_are_disjoint_from_rlvr_and_cover_trls_own_option_names():
    """Every GRPOConfig / ModelConfig / ScriptArguments field of the installed TRL, and open-r1's additions,
    is placed somewhere: an rlvr option of the same name, or one of the tables."""
    from transformers import TrainingArguments
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.utils import ScriptArguments

    ours = set(FIELD_SECTION)
    tables = set(RENAMED) | set(TRANSLATED) | set(ACCEPTED) | set(NOT_IMPLEMENTED)
    assert not tables & ours, tables & ours  # an rlvr name is never re-routed
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    trl_own = {f.name for cls in (GRPOConfig, ModelConfig, ScriptArguments) for f in dataclasses.fields(cls)}
    trl_own = (trl_own - base) | {f.name for f in dataclasses.fields(GRPOConfig) if f.name in ("learning_rate",)}
    trl_own |= {"reward_funcs", "reward_model_name_or_path"}  # trl/scripts/grpo.py's GRPOScriptArguments
    unplaced = sorted((trl_own | OPEN_R1_KEYS) - ours - tables)
    assert not unplaced, f"TRL / open-r1 options with no place in rlvr.config.trl_names: {unplaced}"
    # the transformers keys we place are real TrainingArguments fields (not typos)
    placed_base = tables - trl_own - OPEN_R1_KEYS - {"reward_model_name_or_path"} - set(ACCELERATE) - set(LAUNCH_TRANSLATED)
    older = {"dataset_configs"}  # open-r1's recipes until 2025-03 (open-r1 #461), in no dataclass
    assert placed_base <= base | {"torch_dtype", "max_length"} | older, placed_base - base


def test_the_keys_of_the_two_open_r1_recipes_and_trls_example_are_all_placed():
    recipes = sorted(RECIPES.glob("*.yaml"))
    assert len(recipes) == 3
    keys = set().union(*(yaml.safe_load(path.read_text()) for path in recipes))
    tables = set(RENAMED) | set(TRANSLATED) | set(ACCEPTED) | set(NOT_IMPLEMENTED)
    assert not sorted(keys - set(FIELD_SECTION) - tables)


# rlvr's name of each TRL default that preset=trl sets -> where the installed TRL keeps it
TRL_DEFAULT_SOURCES = {
    "learning_rate": "learning_rate", "adam_beta2": "adam_beta2", "lr_scheduler_type": "lr_scheduler_type",
    "seed": "seed", "max_steps": "max_steps", "num_train_epochs": "num_train_epochs",
    "per_device_train_batch_size": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps", "loss_type": "loss_type",
    "max_completion_length": "max_completion_length", "bf16": "bf16", "gradient_checkpointing": "gradient_checkpointing",
    "save_steps": "save_steps", "save_total_limit": "save_total_limit", "log_completions": "log_completions",
    "logging_steps": "logging_steps",
    "disable_dropout": "disable_dropout", "use_bias_correction_kl": "use_bias_correction_kl",
    "lora_alpha": "model:lora_alpha", "lora_dropout": "model:lora_dropout", "lora_target_modules": "model:lora_target_modules",
}


def test_preset_trl_is_trls_defaults_and_the_users_keys_still_win():
    from trl import GRPOConfig, ModelConfig

    trl, model = GRPOConfig(output_dir="unused", use_cpu=True, report_to=[]), ModelConfig()
    cfg = build_config({"preset": "trl"}).flat()
    for ours, theirs in TRL_DEFAULT_SOURCES.items():
        source, name = (model, theirs[6:]) if theirs.startswith("model:") else (trl, theirs)
        value = getattr(source, name)
        assert cfg[ours] == getattr(value, "value", value), ours  # (enums: their value)
    assert set(TRL_DEFAULT_SOURCES) <= set(TRL_DEFAULTS)
    # the rest of TRL_DEFAULTS: TRL behaviours, not GRPOConfig fields
    assert TRL_DEFAULTS["advantage_eps"] == 1e-4  # TRL: (r - mean) / (std + 1e-4), hard-coded
    assert TRL_DEFAULTS["instruction"] is None and TRL_DEFAULTS["prompts_per_step"] is None
    assert cfg["temperature"] == trl.temperature and cfg["beta"] == trl.beta and cfg["epsilon"] == trl.epsilon
    assert cfg["scale_rewards"] == trl.scale_rewards and cfg["num_generations"] == trl.num_generations
    assert build_config({"preset": "trl", "learning_rate": 3e-6}).optim.learning_rate == 3e-6
    assert build_config({"preset": "trl", "algo": "dapo"}).algorithm.epsilon_high == 0.28  # algo over preset
    assert build_config({}).optim.learning_rate == 3e-5  # rlvr's own defaults otherwise
    with pytest.raises(ValueError, match="preset.*rlvr.*trl"):
        build_config({"preset": "verl"})


def test_a_trl_only_name_makes_the_config_trls_and_preset_rlvr_keeps_rlvrs():
    assert build_config({"model_name_or_path": "tiny-random"}).run.preset == "trl"
    assert build_config({"num_train_epochs": 1, "max_steps": -1}).run.preset == "rlvr"  # an rlvr option too
    assert build_config({"use_vllm": False}).run.preset == "trl"
    assert build_config({"per_device_eval_batch_size": 5}).run.preset == "rlvr"  # an rlvr option too (eval_mode=trl)
    assert build_config({"logging_steps": 5}).run.preset == "rlvr"  # an rlvr option too (TRL's log, every 5 steps)
    assert build_config({"model": "tiny-random", "learning_rate": 1e-6}).run.preset == "rlvr"  # shared names decide nothing
    kept = build_config({"model_name_or_path": "tiny-random", "preset": "rlvr"})
    assert kept.run.preset == "rlvr" and kept.optim.learning_rate == 3e-5 and kept.model.model == "tiny-random"


def test_the_start_up_line_names_the_trl_keys_and_every_default_left_unset():
    cfg = build_config({"model_name_or_path": "tiny-random", "learning_rate": 2e-6, "lora_r": 0})
    line = defaults_line(cfg)
    assert line.startswith("rlvr: a TRL config (it uses model_name_or_path)")
    assert "adam_beta2=0.999 (rlvr: 0.99)" in line and "seed=42 (rlvr: 0)" in line
    assert "learning_rate" not in line  # the user set it
    assert "lora_alpha" not in line  # no LoRA: its defaults do not matter
    assert "plain-string prompts fed as raw text" in line
    assert defaults_line(build_config({})) is None


def test_generation_batch_size_is_trls_prompts_per_step():
    cfg = build_config({"generation_batch_size": 32, "num_generations": 8, "per_device_train_batch_size": 8,
                        "model_name_or_path": "tiny-random"})
    shape = cfg.batch_shape(1)
    assert (shape.prompts_per_step, shape.micro_batches, shape.accumulation) == (4, 4, 1)  # 4 optimiser steps
    with pytest.raises(ValueError, match="generation_batch_size or steps_per_generation, not both"):
        build_config({"generation_batch_size": 64, "steps_per_generation": 4})
    # both, as GRPOConfig.to_dict() writes them: 8 per device x 1 process x 4 = 32 says nothing more
    both = build_config({"generation_batch_size": 32, "steps_per_generation": 4, "per_device_train_batch_size": 8,
                         "model_name_or_path": "tiny-random"})
    assert both.batch_shape(1) == build_config({"steps_per_generation": 4, "per_device_train_batch_size": 8,
                                                "model_name_or_path": "tiny-random"}).batch_shape(1)
    with pytest.raises(ValueError, match="whole prompts of 8 completions"):
        build_config({"generation_batch_size": 12})


def test_eval_strategy_evaluates_on_the_test_split():
    cfg = build_config({"dataset_name": "openai/gsm8k", "dataset_config": "main", "eval_strategy": "steps",
                        "eval_steps": 5})
    assert cfg.eval.eval_data == ["openai/gsm8k:split=test:config=main"] and cfg.eval.eval_steps == 5
    cfg = build_config({"dataset_name": "openai/gsm8k", "eval_strategy": "epoch", "dataset_test_split": "validation"})
    assert cfg.eval.eval_strategy == "epoch" and cfg.eval.eval_data == ["openai/gsm8k:split=validation"]
    assert build_config({"dataset_name": "d/x", "eval_strategy": "steps", "logging_steps": 3}).eval.eval_steps == 3
    with pytest.raises(ValueError, match="do_eval: true without eval_strategy"):
        build_config({"dataset_name": "d/x", "do_eval": True})
    assert build_config({"dataset_name": "d/x", "do_eval": False}).eval.enabled is False


def test_a_recipes_eval_on_start_delay_and_generations():
    """The keys the Python API's TRL evaluation takes mean the same in a recipe, which evaluates as TRL does
    (eval_mode=trl): eval_on_start alone evaluates the test split before the first step (TRL's eval_strategy stays
    no); eval_delay and a fractional eval_steps are kept for the schedule; num_generations_eval is eval_n (default
    num_generations, as TRL's); refused against an eval_n that says otherwise. pass@k's own settings are refused
    there; an rlvr config keeps pass@k."""
    cfg = build_config({"dataset_name": "d/x", "eval_on_start": True, "num_generations": 2})
    e = cfg.eval
    assert (e.eval_strategy, e.eval_on_start, e.eval_data, e.eval_n, e.eval_mode) == ("no", True, ["d/x:split=test"],
                                                                                      2, "trl")
    with pytest.raises(ValueError, match="eval_k.*pass@k's setting; eval_mode=trl evaluates as TRL does"):
        build_config({"dataset_name": "d/x", "eval_on_start": True, "eval_k": [1]})
    assert build_config({"dataset_name": "d/x", "eval_on_start": True, "eval_mode": "passk",
                         "num_generations": 2}).eval.eval_k == [1, 2]
    assert build_config({"eval_data": ["gsm8k-100"], "eval_steps": 2}).eval.eval_mode == "passk"
    e = build_config({"dataset_name": "d/x", "eval_strategy": "steps", "eval_steps": 0.25, "eval_delay": 4,
                      "num_generations_eval": 4}).eval
    assert (e.eval_steps, e.eval_delay, e.eval_n, e.eval_k, e.eval_on_start) == (0.25, 4.0, 4, [1, 2, 4], False)
    with pytest.raises(ValueError, match="num_generations_eval: 4 contradicts eval_n=2"):
        build_config({"dataset_name": "d/x", "eval_strategy": "steps", "num_generations_eval": 4, "eval_n": 2})
    with pytest.raises(ValueError, match="eval_on_start: evaluates on the dataset's test split, but"):
        build_config({"model_name_or_path": "tiny-random", "eval_on_start": True})
    with pytest.raises(ValueError, match="eval_steps=2.5: use 0"):
        build_config({"dataset_name": "d/x", "eval_strategy": "steps", "eval_steps": 2.5})


def test_trl_value_spellings():
    assert build_config({"resume_from_checkpoint": True, "output_dir": "o"}).run.resume is True
    assert build_config({"resume_from_checkpoint": "true", "output_dir": "o"}).run.resume is True
    assert build_config({"scale_rewards": "false"}).algorithm.scale_rewards == "none"
    assert build_config({"delta": 3.0}).algorithm.dual_clip == 3.0
    assert build_config({"use_liger_kernel": True}).optim.lm_head_chunk_tokens == 1024
    assert build_config({"torch_dtype": "bfloat16", "bf16": True}).model.dtype == "bfloat16"  # open-r1 sets both


@pytest.mark.parametrize(("tokens", "pairs"), [
    (["--max_steps", "2"], ["max_steps=2"]),
    (["--max-steps=2", "beta=0.04"], ["max_steps=2", "beta=0.04"]),
    (["--bf16", "--max_steps", "3"], ["bf16=true", "max_steps=3"]),
    (["--bf16", "false"], ["bf16=false"]),
    (["--data", "rg:chain_sum:size=10"], ["data=rg:chain_sum:size=10"]),
    (["--epsilon_high", "null"], ["epsilon_high=null"]),
    (["--model_name_or_path", "tiny-random"], ["model_name_or_path=tiny-random"]),
    # HfArgumentParser's forms: a list's values one after another, a bare TRL boolean, --flag true
    (["--report_to", "tensorboard", "wandb", "--seed", "1"], ["report_to=tensorboard,wandb", "seed=1"]),
    (["--reward_funcs", "accuracy", "format", "beta=0.1"], ["reward_funcs=accuracy,format", "beta=0.1"]),
    (["--lora_target_modules", "q_proj", "v_proj"], ["lora_target_modules=q_proj,v_proj"]),
    (["--use_peft", "--max_steps", "3"], ["use_peft=true", "max_steps=3"]),
    (["--use_vllm", "false"], ["use_vllm=false"]),
    (["--scale_rewards", "true"], ["scale_rewards=true"]),
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
    b = load_config(None, ["max_steps=5", "bf16=true", "use_peft=true", "lora_r=4"])
    assert a == b
    assert yaml.safe_dump(a.to_dict()) == yaml.safe_dump(b.to_dict())
