"""TRL's option names in rlvr: a TRL ``GRPOConfig`` / ``ModelConfig`` / ``ScriptArguments`` YAML runs.

Every key of a TRL recipe is one of four kinds (docs/training.md, "From TRL"):

- **the same name** in rlvr (``learning_rate``, ``beta``, ``num_generations``, ``bf16``, ...): nothing to do;
- **renamed** (:data:`RENAMED`, and the composite ones in :func:`translate_trl_keys`): ``model_name_or_path``
  is ``model``; ``dataset_name`` + ``dataset_config`` + ``dataset_train_split`` make one ``data`` spec;
  ``use_peft`` turns ``lora_r`` on or off as TRL does; ``use_vllm: true`` is ``rollout_engine=vllm``;
- **accepted** (:data:`ACCEPTED`): keys whose value asks for what rlvr always does (``push_to_hub:
  false``, ``remove_unused_columns: false``, ``logging_steps``: rlvr writes every step); any other value
  is refused with what rlvr does;
- **not implemented** (:data:`NOT_IMPLEMENTED`, the rest of TRL's names): refused, all of them in one
  error, a line each, with the nearest rlvr option where there is one.

Values TRL spells differently are mapped too (``scale_rewards: true`` is ``group``; ``loss_type: dapo``
is an alias rlvr's aggregation already knows). Plain Python, no torch: ``import rlvr.config`` stays light.
"""

from __future__ import annotations

from typing import Any

# TRL name -> rlvr name (same meaning, same values)
RENAMED = {
    "model_name_or_path": "model",
    "shuffle_dataset": "shuffle",
    "torch_dtype": "dtype",
    "num_completions_to_print": "num_completions_to_log",
    "activation_checkpointing": "gradient_checkpointing",  # transformers 5's new name
    "vllm_importance_sampling_cap": "vllm_importance_sampling_clip_max",  # TRL's name before 1.6
}

# TRL key -> (does this value ask for what rlvr does?, what rlvr does)
ACCEPTED: dict[str, tuple[Any, str]] = {
    "push_to_hub": (lambda v: v is False, "rlvr does not push to the Hub"),
    "hub_model_id": (lambda v: v is None, "rlvr does not push to the Hub"),
    "do_train": (lambda v: v is True, "rlvr train always trains"),
    "do_eval": (lambda v: v is False, "evaluation during training is eval_steps/eval_data"),
    "eval_strategy": (lambda v: v == "no", "evaluation during training is eval_steps/eval_data"),
    "logging_strategy": (lambda v: v == "steps", "rlvr logs every step"),
    "logging_steps": (lambda v: isinstance(v, (int, float)) and v > 0, "rlvr logs every step"),
    "logging_first_step": (lambda v: isinstance(v, bool), "rlvr logs every step"),
    "save_strategy": (lambda v: v == "steps", "rlvr saves every save_steps steps"),
    "remove_unused_columns": (lambda v: v is False, "every dataset column reaches the reward functions"),
    "disable_dropout": (lambda v: v is True, "rlvr always runs the policy without dropout (eval mode)"),
    "model_revision": (lambda v: v in (None, "main"), "rlvr loads the default revision"),
    "attn_implementation": (lambda v: v in (None, "sdpa"), "rlvr uses transformers' default (sdpa)"),
    "gradient_checkpointing_kwargs": (lambda v: v in (None, {}, {"use_reentrant": False}),
                                      "gradient_checkpointing is non-reentrant"),
    "use_liger_kernel": (lambda v: v is False, "rlvr's own chunked head is lm_head_chunk_tokens"),
    "ddp_find_unused_parameters": (lambda v: v in (None, False), "every parameter gets a gradient"),
    "dataset_streaming": (lambda v: v is False, "rlvr loads the whole dataset"),
    "use_peft": (lambda v: isinstance(v, bool), ""),  # translated below
    "use_vllm": (lambda v: isinstance(v, bool), ""),  # translated below
    "dataset_name": (lambda v: isinstance(v, str), ""),  # translated below
    "dataset_config": (lambda v: v is None or isinstance(v, str), ""),
    "dataset_train_split": (lambda v: isinstance(v, str), ""),
    # transformers 5: a float below 1 is a ratio of the run (translated below), a count is not supported
    "warmup_steps": (lambda v: isinstance(v, (int, float)) and 0 <= v < 1, "use warmup_ratio, a fraction of the run"),
}

# TRL names rlvr does not implement -> the nearest rlvr option (or None)
NOT_IMPLEMENTED: dict[str, str | None] = {
    # GRPOConfig
    "model_init_kwargs": None, "router_aux_loss_coef": None, "cast_lm_head_to_fp32": None,
    "num_generations_eval": "eval_n", "ds3_gather_for_generation": "parallelism", "pad_to_multiple_of": None,
    "generation_batch_size": "prompts_per_step", "generation_kwargs": None, "cache_implementation": None,
    "vllm_model_impl": None, "vllm_structured_outputs_regex": None,
    "delta": "dual_clip", "sapo_temperature_neg": None, "sapo_temperature_pos": None, "vespo_k_pos": None,
    "vespo_lambda_pos": None, "vespo_k_neg": None, "vespo_lambda_neg": None,
    "multi_objective_aggregation": "reward_weights", "sync_ref_model": "beta", "ref_model_mixup_alpha": None,
    "ref_model_sync_steps": None, "top_entropy_quantile": None, "use_adaptive_entropy": None,
    "entropy_coef_min": None, "entropy_coef_max": None, "entropy_coef_delta": None, "entropy_target": None,
    "max_tool_calling_iterations": None,
    "off_policy_mask_threshold": None, "use_bias_correction_kl": None, "log_multimodal": None,
    "log_unique_prompts": None,
    "log_completions_hub_repo": None, "use_transformers_continuous_batching": None,
    "transformers_continuous_batching_config": None, "use_transformers_paged": None,
    # ModelConfig
    "lora_target_parameters": "lora_target_modules", "lora_modules_to_save": None, "lora_task_type": None,
    "use_rslora": None, "use_dora": None, "load_in_8bit": "dtype", "load_in_4bit": "dtype",
    "bnb_4bit_quant_type": None, "use_bnb_nested_quant": None, "bnb_4bit_quant_storage": None,
    # ScriptArguments (trl/scripts/utils.py, trl/scripts/grpo.py)
    "dataset_test_split": "eval_data", "ignore_bias_buffers": None, "reward_model_name_or_path": "reward_funcs",
    # transformers TrainingArguments keys TRL recipes carry
    "num_train_epochs": "max_steps", "fp16": "bf16", "tf32": None,
    "per_device_eval_batch_size": None, "save_only_model": None,
    "lr_scheduler_kwargs": "lr_scheduler_type", "dataloader_num_workers": None, "deepspeed": "parallelism",
    "fsdp": "parallelism", "fsdp_config": "parallelism", "torch_compile": None, "label_names": None,
    "log_level": None, "hub_strategy": None, "hub_private_repo": None, "max_length": "max_prompt_length",
}


def translate_trl_keys(overrides: dict[str, Any], rlvr_fields: set[str]) -> dict[str, Any]:
    """``overrides`` with TRL's names turned into rlvr's; ValueError listing every TRL key rlvr refuses."""
    out, problems = {}, []
    trl = {k: v for k, v in overrides.items() if k not in rlvr_fields}
    for key, value in overrides.items():
        if key in rlvr_fields:
            out[key] = value
        elif key in RENAMED:
            out[RENAMED[key]] = value
        elif key in ACCEPTED:
            honoured, what = ACCEPTED[key]
            if not honoured(value):
                problems.append(f"{key}: {value!r} is not supported ({what}); remove the key")
        elif key in NOT_IMPLEMENTED:
            near = NOT_IMPLEMENTED[key]
            problems.append(f"{key}: a TRL option rlvr does not implement; remove it"
                            + (f" (nearest rlvr option: {near})" if near else ""))
        else:
            out[key] = value  # not a TRL name: the unknown-key error (with suggestions) comes later
    if "dataset_name" in trl and "data" not in overrides:
        spec = trl["dataset_name"]
        if trl.get("dataset_train_split") not in (None, "train"):
            spec += f":split={trl['dataset_train_split']}"
        if trl.get("dataset_config"):
            spec += f":config={trl['dataset_config']}"
        out["data"] = spec
    if "use_peft" in trl:  # TRL's lora_r (default 16) only counts with use_peft: true
        out["lora_r"] = (overrides.get("lora_r") or 16) if trl["use_peft"] else 0
    if trl.get("use_vllm") and "rollout_engine" not in overrides:
        out["rollout_engine"] = "vllm"
    if "warmup_steps" in trl and "warmup_ratio" not in overrides:
        out["warmup_ratio"] = trl["warmup_steps"]
    if isinstance(out.get("scale_rewards"), bool):  # TRL's older boolean form
        out["scale_rewards"] = "group" if out["scale_rewards"] else "none"
    if isinstance(out.get("lora_target_modules"), list):
        out["lora_target_modules"] = ",".join(out["lora_target_modules"])
    if problems:
        raise ValueError("TRL options rlvr does not take (docs/training.md, 'From TRL'):\n  " + "\n  ".join(problems))
    return out
