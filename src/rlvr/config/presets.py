"""Presets: ``preset=`` (whose defaults and semantics: rlvr's or TRL's) and ``algo=`` (the defaults that
differ from GRPO's).

Resolution (later wins): field defaults <- ``preset`` <- ``algo`` preset <- YAML file <- command line.
The user's own keys always win. A config that uses a name only TRL has (``model_name_or_path``,
``num_train_epochs``, ...) is TRL's unless it says ``preset: rlvr`` (``rlvr.config.trl_names.detect_preset``).
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "dr_grpo": {"scale_rewards": "none", "loss_type": "dr_grpo"},
    "dapo": {"epsilon_high": 0.28, "loss_type": "token_mean", "dynamic_sampling": True, "beta": 0.0},
    "rloo": {"advantage_estimator": "rloo", "scale_rewards": "none"},
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
             "loss_type": "seq_mean_token_mean"},
    # DaGRPO (docs/algorithms/dagrpo.md [design]): the offline `steps` scorer stands in for the paper's LLM judge.
    "dagrpo": {"pair_masking": True, "scorer": "steps", "anchors": "failed"},
    "dagrpo_sgr": {"pair_masking": True, "scorer": "steps", "anchors": "off"},
    "hybrid": {"anchors": "always", "pair_masking": False, "anchor_psi": "luffy"},
    "sft": {"anchors": "always"},
    # TA-GRPO (docs/algorithms/tagrpo.md): pools of the original and N rephrasings, ratios anchored to q_0 (v5).
    "tagrpo": {"num_rephrasings": 4},
    "tagrpo_unanchored": {"num_rephrasings": 4, "ratio_anchor": "unanchored"},
    "tagrpo_unpooled": {"num_rephrasings": 4, "pooled": False},
    "equal_sampling": {"num_rephrasings": 4, "equal_sampling": True},
}


# preset=trl: every default of TRL 1.16's GRPOConfig / ModelConfig (and transformers' TrainingArguments)
# where rlvr's own differs. docs/training.md ("From TRL") lists them with rlvr's values and why rlvr
# differs; the start-up line of a TRL config names those the user did not set (`defaults_line`).
TRL_DEFAULTS: dict[str, Any] = {
    "preset": "trl",
    "learning_rate": 1e-6,
    "adam_beta2": 0.999,  # transformers' TrainingArguments
    "lr_scheduler_type": "linear",
    "seed": 42,  # transformers' TrainingArguments
    "max_steps": -1,  # then num_train_epochs decides
    "num_train_epochs": 3.0,
    "prompts_per_step": None,  # TRL's: per_device_train_batch_size x processes x steps_per_generation / G
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "loss_type": "dapo",  # TRL's dapo: its own normaliser (rlvr.core.losses.aggregate)
    "advantage_eps": 1e-4,  # TRL: (r - mean) / (std + 1e-4)
    "use_bias_correction_kl": True,  # (only with beta > 0)
    "max_completion_length": 512,
    "bf16": True,
    "gradient_checkpointing": True,
    "instruction": None,  # TRL appends nothing to the prompt
    # TRL has no default reward; with preset=trl the bare `accuracy` is open-r1's, so rlvr's own default
    # reward is named explicitly
    "reward_funcs": ["rlvr:accuracy"],
    "answer_extraction": "boxed",
    "truncation": "left",  # TRL's tokenizer cut prompts over max_prompt_length from the left
    "save_steps": 500,
    "logging_steps": 10,  # TRL's GRPOConfig (transformers' own: 500); rlvr's: every step
    "save_total_limit": None,
    "log_completions": False,
    "lora_alpha": 32,  # TRL's ModelConfig (LoRA only with use_peft: true)
    "lora_dropout": 0.05,
    "lora_target_modules": None,  # PEFT's default modules for the architecture
    "disable_dropout": False,
}
RLVR_DEFAULTS: dict[str, Any] = {"preset": "rlvr"}
DEFAULTS: dict[str, dict[str, Any]] = {"rlvr": RLVR_DEFAULTS, "trl": TRL_DEFAULTS}
PRESET_HELP = ("whose defaults and semantics: rlvr | trl (TRL 1.16's GRPOConfig defaults: learning_rate 1e-6, "
               "epochs, 8 completions per device, bf16, string prompts as raw text, ...). A config using a name "
               "only TRL has (model_name_or_path, num_train_epochs, ...) is trl unless it says preset=rlvr; "
               "docs/training.md 'From TRL'")
