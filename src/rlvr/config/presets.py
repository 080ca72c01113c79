"""Presets: ``preset=`` (whose defaults to start from) and ``algo=`` (the defaults that differ from GRPO's).

Resolution (later wins): field defaults <- ``preset`` <- ``algo`` preset <- YAML file <- command line.
The user's own keys always win.
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


# preset=trl: TRL GRPOConfig's (1.16) defaults for what changes the numbers of a run, for like-for-like
# comparisons; docs/training.md ("From TRL") lists every default where rlvr and TRL differ, and why.
# Not here: TRL's bf16=True and gradient_checkpointing=True (hardware choices; rlvr's defaults are for
# CPUs) and its batch shape (generation_batch_size = per_device_train_batch_size x processes x
# steps_per_generation completions: 1 prompt of 8 at its defaults on one device).
TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-6,
    "adam_beta2": 0.999,  # transformers' TrainingArguments
    "lr_scheduler_type": "linear",
    "instruction": None,  # TRL appends nothing to the prompt
    "answer_extraction": "boxed",
    "max_completion_length": 512,
    "advantage_eps": 1e-4,  # TRL: (r - mean) / (std + 1e-4)
}
DEFAULTS: dict[str, dict[str, Any]] = {"rlvr": {}, "trl": TRL_DEFAULTS}
# ``preset`` is read while the config is built, not kept: config.yaml holds the values it chose
PRESET_HELP = ("whose defaults to start from: rlvr | trl (TRL GRPOConfig's: learning_rate 1e-6, adam_beta2 0.999, "
               "linear schedule, no instruction, boxed extraction, 512 tokens, advantage_eps 1e-4; "
               "docs/training.md 'From TRL')")
