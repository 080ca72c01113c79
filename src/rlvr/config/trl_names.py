"""TRL's option names in rlvr: a TRL (``trl grpo``) or open-r1 (``open_r1/grpo.py``) recipe runs as written.

Every key of such a recipe (``GRPOConfig``, ``ModelConfig``, ``ScriptArguments``, the transformers
``TrainingArguments`` keys recipes carry, open-r1's ``GRPOConfig``/``GRPOScriptArguments`` additions)
is one of five kinds (docs/from_trl.md):

- **the same name** in rlvr (``learning_rate``, ``beta``, ``num_generations``, ``bf16``, ``max_steps``,
  ``num_train_epochs``, ``save_strategy``, ``system_prompt``, ``chat_template``, ...): nothing to do;
- **renamed** (:data:`RENAMED`): ``model_name_or_path`` is ``model``, ``torch_dtype`` is ``dtype``, ...;
- **translated** (:func:`translate_trl_keys`): ``dataset_name`` + ``dataset_config`` (or open-r1's older
  ``dataset_configs`` list) + ``dataset_train_split`` make one ``data`` spec; ``use_peft`` turns ``lora_r`` on or off as TRL does; ``use_vllm`` is
  ``rollout_engine=vllm``; ``delta`` (above 1 + epsilon_high) is ``dual_clip``; ``generation_batch_size``
  fixes the prompts per step; ``eval_strategy`` with ``eval_steps`` and ``dataset_test_split`` is evaluation
  during training; ``use_liger_kernel: true`` is rlvr's own chunked LM head; ``resume_from_checkpoint: true``
  is ``resume=true``; ``disable_tqdm`` is ``progress_bar``'s opposite; accelerate's launch keys and ``use_cpu``
  (rlvr.config.launch_keys);
- **accepted** (:data:`ACCEPTED`): keys whose value asks for what rlvr does anyway (``remove_unused_columns:
  false``; the inherited transformers ``TrainingArguments``
  keys of rlvr.config.training_arguments); another value is refused with what rlvr does;
- **not implemented** (:data:`NOT_IMPLEMENTED`): taken at TRL's own default (which is the plain behaviour
  rlvr has), refused otherwise, all of a file's such keys in one error, a line each, with the nearest
  rlvr option.

A config that uses any name of the last four kinds is TRL's (:func:`detect_preset`): it gets TRL's
defaults and semantics (``rlvr.config.presets.TRL_DEFAULTS``) unless it says ``preset: rlvr``.
Plain Python, no torch: ``import rlvr.config`` stays light.
"""

from __future__ import annotations

from typing import Any

from rlvr.config.launch_keys import ACCELERATE, ACCELERATE_BOOL_KEYS, LAUNCH_TRANSLATED, translate_launch_keys
from rlvr.config.launch_keys import truthy as _truthy
from rlvr.config.training_arguments import NO_DATALOADER, TRAINING_ARGUMENTS, TRAINING_ARGUMENTS_BOOL_KEYS, any_value
from rlvr.rollout.names import TRL_USE_VLLM_ENGINE

# TRL name -> rlvr name (same meaning, same values)
RENAMED = {
    "model_name_or_path": "model",
    "shuffle_dataset": "shuffle",
    "torch_dtype": "dtype",
    "num_completions_to_print": "num_completions_to_log",
    "activation_checkpointing": "gradient_checkpointing",  # transformers 5's new name
    "vllm_importance_sampling_cap": "vllm_importance_sampling_clip_max",  # TRL's name before 1.6
}
# renamed keys whose null means "not given" (TRL 1.16 then keeps the new name's value)
RENAMED_NULL_IS_UNSET = frozenset({"vllm_importance_sampling_cap", "torch_dtype"})

# TRL keys that rlvr honours through a translation (translate_trl_keys)
TRANSLATED = ("dataset_name", "dataset_config", "dataset_configs", "dataset_train_split", "dataset_test_split",
              "use_peft", "use_vllm", "generation_batch_size", "use_liger_kernel", "do_eval", "delta", "num_generations_eval", "disable_tqdm",
              *LAUNCH_TRANSLATED)

_CHECKPOINTING = (lambda v: v is None or (isinstance(v, dict) and set(v) <= {"use_reentrant"}),
                  "activation checkpointing takes no other arguments")

# TRL key -> (does this value ask for what rlvr does?, what rlvr does)
ACCEPTED: dict[str, tuple[Any, str]] = {
    "do_train": (lambda v: isinstance(v, bool), "read by scripts, not by the trainer: rlvr train always trains"),
    "remove_unused_columns": (lambda v: v is False, "every dataset column reaches the reward functions"),
    "model_revision": (lambda v: v in (None, "main"), "rlvr loads the default revision"),
    # both give the same gradients; rlvr's activation checkpointing is non-reentrant
    "gradient_checkpointing_kwargs": _CHECKPOINTING,
    "activation_checkpointing_kwargs": _CHECKPOINTING,  # transformers 5's new name
    "ddp_find_unused_parameters": (lambda v: v in (None, False), "every parameter gets a gradient"),
    "dataset_streaming": (lambda v: v is False, "rlvr loads the whole dataset"),
    # GRPOConfig.to_dict() writes <HUB_TOKEN> in place of any token, None included
    "hub_token": (lambda v: v in (None, "<HUB_TOKEN>"), ("a token in a config file ends up in config.yaml: set the HF_TOKEN "
                                       "environment variable instead")),
    "dataloader_num_workers": (any_value, NO_DATALOADER),
    "dataloader_pin_memory": (any_value, NO_DATALOADER),
    "pad_to_multiple_of": (lambda v: v in ("auto", None), ("rlvr pads to the longest sequence, as TRL's auto does "
                           "off Neuron devices")),
    "save_only_model": (lambda v: v is False, "rlvr's checkpoints keep the optimiser state, so a run resumes exactly"),
    "log_on_each_node": (any_value, "rlvr's rank 0 alone writes the logs"),
    # open-r1's GRPOConfig / GRPOScriptArguments additions
    "benchmarks": (lambda v: not v, "rlvr evaluates with eval_data / `rlvr eval`"),
    "callbacks": (lambda v: not v, "rlvr's callbacks come from Python (Trainer(cfg, callbacks=[...]))"),
    "hub_model_revision": (lambda v: v in (None, "main"), "rlvr pushes to the main revision"),
    "overwrite_hub_revision": (lambda v: v is False, "rlvr pushes to the main revision"),
    "push_to_hub_revision": (lambda v: v is False, "rlvr pushes to the main revision"),
    "wandb_log_unique_prompts": (lambda v: isinstance(v, bool), "rlvr logs samples to samples.jsonl"),
    "wandb_entity": (lambda v: v is None, "set WANDB_ENTITY in the environment (open-r1 sets it from this key)"),
    "wandb_project": (lambda v: v is None, "set WANDB_PROJECT in the environment (open-r1 sets it from this key)"),
    "wandb_run_group": (lambda v: v is None, "set WANDB_RUN_GROUP in the environment (open-r1 sets it from this key)"),
    # open-r1's reward parameters: rlvr's open-r1 rewards use open-r1's defaults (rlvr.rewards.open_r1)
    "cosine_min_value_wrong": (lambda v: v == 0.0, "the cosine reward uses open-r1's defaults"),
    "cosine_max_value_wrong": (lambda v: v == -0.5, "the cosine reward uses open-r1's defaults"),
    "cosine_min_value_correct": (lambda v: v == 0.5, "the cosine reward uses open-r1's defaults"),
    "cosine_max_value_correct": (lambda v: v == 1.0, "the cosine reward uses open-r1's defaults"),
    "cosine_max_len": (lambda v: v == 1000, "the cosine reward uses open-r1's defaults"),
    "repetition_n_grams": (lambda v: v == 3, "the repetition_penalty reward uses open-r1's defaults"),
    "repetition_max_penalty": (lambda v: v == -1.0, "the repetition_penalty reward uses open-r1's defaults"),
    "max_completion_len": (lambda v: v == 16384, "the soft_overlong_punishment reward uses open-r1's defaults"),
    "soft_punish_cache": (lambda v: v == 4096, "the soft_overlong_punishment reward uses open-r1's defaults"),
    "code_language": (lambda v: v == "python", "open-r1's code rewards are not available in rlvr"),
    **TRAINING_ARGUMENTS,
    **ACCELERATE,
}

# The keys accepted whatever their value (any_value above): each is one with which TRL's GRPOTrainer computes the
# same numbers whatever its value — its GRPO loss, sampler or evaluation does not read it, or it only changes
# speed, memory or where logs print. docs/from_trl.md's table says so for each; tests/config/test_grpo_config_keys.py
# walks every GRPOConfig field and fails on one that is not honoured, refused past TRL's default, or in this list.
SAME_IN_TRL = frozenset({
    "label_smoothing_factor", "use_cache", "torch_empty_cache_steps", "log_on_each_node",
    "prediction_loss_only", "eval_do_concat_batches", "eval_use_gather_object", "eval_accumulation_steps",
    "include_for_metrics", "batch_eval_metrics", "enable_jit_checkpoint", "hub_always_push", "dataloader_drop_last",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "dataloader_multiprocessing_context", "dataloader_in_order", "train_sampling_strategy", "length_column_name",
    "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_static_graph", "do_predict", "local_rank",
})

# TRL names rlvr does not implement -> (TRL's default, which is rlvr's plain behaviour; the nearest rlvr option)
NOT_IMPLEMENTED: dict[str, tuple[Any, str | None]] = {
    # GRPOConfig
    "model_init_kwargs": (None, "dtype, attn_implementation"), "router_aux_loss_coef": (None, None),
    "ds3_gather_for_generation": (True, "parallelism"),
    "cache_implementation": (None, None), "vllm_model_impl": ("vllm", None),
    "vllm_structured_outputs_regex": (None, None),
    "log_multimodal": (True, None), "log_unique_prompts": (False, None),
    "log_completions_hub_repo": (None, None), "use_transformers_continuous_batching": (False, "rollout_engine"),
    "transformers_continuous_batching_config": (None, None), "use_transformers_paged": (False, "rollout_engine"),
    # ModelConfig
    "lora_target_parameters": (None, "lora_target_modules"), "lora_task_type": ("CAUSAL_LM", None),
    "load_in_8bit": (False, "dtype"), "load_in_4bit": (False, "dtype"), "bnb_4bit_quant_type": ("nf4", None),
    "use_bnb_nested_quant": (False, None), "bnb_4bit_quant_storage": (None, None),
    # ScriptArguments (trl/scripts/utils.py, trl/scripts/grpo.py; open-r1's)
    "ignore_bias_buffers": (False, None), "reward_model_name_or_path": (None, "reward_funcs"),
    "dataset_mixture": (None, "data"),
    # transformers TrainingArguments keys TRL recipes carry
    "fp16": (False, "bf16"), "tf32": (None, None), "deepspeed": (None, "parallelism"), "fsdp": (None, "parallelism"),
    "fsdp_config": (None, "parallelism"), "torch_compile": (False, None), "label_names": (None, None),
    "max_length": (None, "max_prompt_length"), "auto_find_batch_size": (False, "max_tokens_per_micro_batch"),
}

# TRL-only keys of type bool: a bare ``--use_peft`` on the command line is true (HfArgumentParser's form)
TRL_BOOL_KEYS = frozenset({
    "use_peft", "use_vllm", "use_liger_kernel", "do_eval", "do_train", "remove_unused_columns",
    "dataset_streaming", "save_only_model", "disable_tqdm", "overwrite_hub_revision", "push_to_hub_revision",
    "wandb_log_unique_prompts", "load_in_4bit", "load_in_8bit", "fp16", "tf32",
    "torch_compile", "sync_ref_model", "use_adaptive_entropy", "log_unique_prompts", "log_multimodal",
    "use_transformers_paged", "use_transformers_continuous_batching", "cast_lm_head_to_fp32",
    "ds3_gather_for_generation", "ignore_bias_buffers", "auto_find_batch_size", "ddp_find_unused_parameters",
    "dataloader_pin_memory", "log_on_each_node", "use_bnb_nested_quant",
}) | TRAINING_ARGUMENTS_BOOL_KEYS | ACCELERATE_BOOL_KEYS
# TRL keys that take a list (``--benchmarks a b``), besides rlvr's own list options and lora_target_modules
TRL_LIST_KEYS = frozenset({"benchmarks", "callbacks", "lora_target_parameters", "label_names",
                           "optim_target_modules", "include_for_metrics", "debug"})


def trl_only_keys(keys, rlvr_fields: set[str]) -> list[str]:
    """The keys that only TRL (or transformers, or open-r1) has: the ones that make a config TRL's."""
    known = set(RENAMED) | set(TRANSLATED) | set(ACCEPTED) | set(NOT_IMPLEMENTED)
    return [key for key in keys if key not in rlvr_fields and key in known]


def detect_preset(overrides: dict[str, Any], rlvr_fields: set[str]) -> tuple[str, list[str]]:
    """(preset, the TRL-only keys that chose it): ``preset`` as given, else trl when a TRL-only name is used."""
    trl_keys = trl_only_keys(overrides, rlvr_fields)
    given = overrides.get("preset")
    if given is not None:
        return given, trl_keys
    return ("trl" if trl_keys else "rlvr"), trl_keys


def translate_trl_keys(overrides: dict[str, Any], rlvr_fields: set[str]) -> dict[str, Any]:
    """``overrides`` with TRL's names turned into rlvr's; ValueError listing every TRL key rlvr refuses."""
    out, problems = {}, []
    trl = {k: v for k, v in overrides.items() if k not in rlvr_fields}
    for key, value in overrides.items():
        if key in rlvr_fields:
            out[key] = value
        elif key in RENAMED:
            if value is not None or key not in RENAMED_NULL_IS_UNSET:
                out[RENAMED[key]] = value
        elif key in TRANSLATED:
            continue  # below
        elif key in ACCEPTED:
            honoured, what = ACCEPTED[key]
            if not honoured(value):
                problems.append(f"{key}: {value!r} is not supported ({what}); remove the key")
        elif key in NOT_IMPLEMENTED:
            default, near = NOT_IMPLEMENTED[key]
            if value != default:
                problems.append(f"{key}: {value!r}: a TRL option rlvr does not implement (only TRL's default "
                                f"{default!r}); remove it" + (f" (nearest rlvr option: {near})" if near else ""))
        else:
            out[key] = value  # not a TRL name: the unknown-key error (with suggestions) comes later
    problems += _translate(trl, overrides, out)
    if problems:
        raise ValueError("TRL options rlvr does not take (docs/training.md, 'From TRL'):\n  " + "\n  ".join(problems))
    return out


def _translate(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """Fill ``out`` with what the TRANSLATED keys of ``trl`` mean; return the values refused."""
    problems = _translate_dataset_configs(trl)
    if "dataset_name" in trl and "data" not in overrides:
        out["data"] = _data_spec(trl["dataset_name"], trl.get("dataset_train_split", "train"), trl.get("dataset_config"))
    if "use_peft" in trl:  # TRL's lora_r (default 16) only counts with use_peft: true
        out["lora_r"] = (overrides.get("lora_r") or 16) if _truthy(trl["use_peft"]) else 0
    if _truthy(trl.get("use_vllm")) and "rollout_engine" not in overrides:
        out["rollout_engine"] = TRL_USE_VLLM_ENGINE
    elif "use_vllm" in trl and not _truthy(trl["use_vllm"]) and overrides.get("rollout_engine") == TRL_USE_VLLM_ENGINE:
        problems.append("use_vllm: false contradicts rollout_engine=vllm; remove one")
    if "generation_batch_size" in trl and trl["generation_batch_size"] is not None:
        out["generation_batch_size"] = trl["generation_batch_size"]  # resolved with num_generations (parsing)
    problems += _translate_delta(trl, overrides, out)
    problems += _translate_display(trl, overrides, out)
    problems += translate_launch_keys(trl, overrides, out)
    if _truthy(trl.get("use_liger_kernel")) and "lm_head_chunk_tokens" not in overrides:
        out["lm_head_chunk_tokens"] = 1024  # liger's fused linear + loss: rlvr's chunked LM head, also exact
    problems += _translate_eval(trl, overrides, out)
    if isinstance(out.get("scale_rewards"), bool) or str(out.get("scale_rewards")).lower() in ("true", "false"):
        out["scale_rewards"] = "group" if _truthy(out["scale_rewards"]) else "none"  # TRL's older boolean form
    for key in ("lora_target_modules", "lora_modules_to_save"):  # TRL's lists, rlvr's comma lists
        if isinstance(out.get(key), list):
            out[key] = ",".join(out[key])
    resume = out.get("resume_from_checkpoint")
    if isinstance(resume, bool) or str(resume).lower() in ("true", "false"):  # TRL: true = the newest checkpoint
        out.pop("resume_from_checkpoint")
        if _truthy(resume):
            out["resume"] = True
    return problems


def _translate_display(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """``disable_tqdm`` as rlvr's ``progress_bar`` (its opposite; null: transformers' default, the bar shown), and
    ``include_num_input_tokens_seen``'s boolean form (transformers: true is all, false is no)."""
    tokens = out.get("include_num_input_tokens_seen")
    if isinstance(tokens, bool) or str(tokens).lower() in ("true", "false"):
        out["include_num_input_tokens_seen"] = "all" if _truthy(tokens) else "no"
    if trl.get("disable_tqdm") is None:
        return []
    shown = not _truthy(trl["disable_tqdm"])
    if overrides.get("progress_bar", shown) != shown:
        return [(f"disable_tqdm: {trl['disable_tqdm']!r} contradicts progress_bar: {overrides['progress_bar']!r}; "
                 "remove one")]
    out["progress_bar"] = shown
    return []


def _translate_delta(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """TRL's ``delta`` as rlvr's ``dual_clip``. TRL caps the ratio of the unclipped term at delta for every
    sign of A: for A < 0 that is verl's dual clip at c = delta, and for A > 0 the clipped term (at most
    1 + epsilon_high) already wins when delta is above it; below, TRL caps A > 0 tokens at delta too, which
    rlvr does not do (tests/conformance/test_trl_loss.py runs TRL's loss beside rlvr's on both sides)."""
    delta = trl.get("delta")
    if delta is None:
        return []
    epsilon = overrides.get("epsilon", 0.2)
    high = overrides.get("epsilon_high") if overrides.get("epsilon_high") is not None else epsilon
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or delta <= 1 + high:
        return [(f"delta: {delta!r}: rlvr takes TRL's two-sided clipping above 1 + epsilon_high = {1 + high:g} "
                "(TRL recommends it above 1 + epsilon); a delta inside the clip range also caps the ratio of "
                "positive-advantage tokens, which rlvr does not do")]
    out["dual_clip"] = delta
    return []


def _translate_eval(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """TRL's evaluation as rlvr's: ``eval_strategy`` steps (every ``eval_steps``, default ``logging_steps``) or
    epoch, and ``eval_on_start``, on ``dataset_test_split`` of ``dataset_name`` unless ``eval_data`` names the data
    (pass@k of ``num_generations_eval`` samples a problem, :func:`_eval_samples`)."""
    strategy = str(overrides.get("eval_strategy", "no")).lower()
    on_start = _truthy(overrides.get("eval_on_start"))
    if strategy == "no":
        if trl or out.get("eval_steps", 0) is None:  # TRL reads eval_steps only with eval_strategy: steps
            out.pop("eval_steps", None)
        if _truthy(trl.get("do_eval")) and not overrides.get("eval_steps") and not on_start:
            return [("do_eval: true without eval_strategy: TRL's trainer then evaluates nothing during training; set "
                    "eval_strategy: steps (with eval_steps) to evaluate on the test split, or remove do_eval")]
        if not on_start:
            return []
        if trl:
            out["eval_strategy"] = "no"  # TRL's default (rlvr's is steps): only eval_on_start's evaluation
    if not trl:  # an rlvr config: its eval options are its own
        return []
    out.setdefault("eval_mode", overrides.get("eval_mode", "trl"))  # TRL's evaluation: its loss and rollout metrics
    if strategy == "steps" and overrides.get("eval_steps") is None:
        out["eval_steps"] = int(overrides.get("logging_steps") or 10)  # TRL: eval_steps defaults to logging_steps
    if "eval_data" not in overrides:
        if "dataset_name" not in trl:
            key = "eval_strategy" if strategy != "no" else "eval_on_start"
            return [(f"{key}: evaluates on the dataset's test split, but the data is not a Hub dataset "
                    "(dataset_name): set eval_data=FILE or a dataset spec")]
        split = trl.get("dataset_test_split", "test")
        out["eval_data"] = [_data_spec(trl["dataset_name"], split, trl.get("dataset_config"))]
    return _eval_samples(trl, overrides, out)


def _eval_samples(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """``num_generations_eval`` (TRL: completions per eval prompt, default ``num_generations``) as pass@k's
    ``eval_n``, and ``eval_k``'s default kept to the k <= n; refused when ``eval_n`` says otherwise."""
    from rlvr.config.evaluation import EvalConfig
    from rlvr.config.sections import RolloutConfig  # (sections imports this module's tables through presets)

    given = trl.get("num_generations_eval")
    if "eval_n" in overrides:
        if given is not None and given != overrides["eval_n"]:
            return [(f"num_generations_eval: {given} contradicts eval_n={overrides['eval_n']} (both are the samples "
                     "per eval problem); remove one")]
        return []
    n = int(given or overrides.get("num_generations") or RolloutConfig.num_generations)
    out["eval_n"] = n
    if "eval_k" not in overrides and out.get("eval_mode") != "trl":
        out["eval_k"] = [k for k in EvalConfig().eval_k if k <= n]
    return []


def _translate_dataset_configs(trl: dict[str, Any]) -> list[str]:
    """open-r1's older ``dataset_configs: [NAME]`` (in its recipes until 2025-03, open-r1 #461) as ``dataset_config``.
    open-r1's grpo.py never read the key (it loads ``load_dataset(dataset_name, name=dataset_config)``): ``[all]``
    (and ``[]``) is the default config, as open-r1 loaded it; ``[NAME]`` is ``dataset_config: NAME``. Several
    names are refused: rlvr loads one config, as TRL's and open-r1's scripts do. Replaces the key in ``trl``."""
    if "dataset_configs" not in trl:
        return []
    configs = trl.pop("dataset_configs")
    configs = [configs] if isinstance(configs, str) else list(configs or [])
    if len(configs) > 1:
        return [(f"dataset_configs: {configs!r}: rlvr loads one config of dataset_name, as TRL's and open-r1's "
                 "scripts do (open-r1's never read dataset_configs); keep one: dataset_config: NAME")]
    config = None if not configs or configs[0] in ("all", "default") else configs[0]
    if config is not None and trl.get("dataset_config") not in (None, config):
        return [f"dataset_configs: {configs!r} contradicts dataset_config: {trl['dataset_config']!r}; remove one"]
    if config is not None:
        trl["dataset_config"] = config
    return []


def _data_spec(name: str, split: str | None, config: str | None) -> str:
    """The ``data`` spec of TRL's dataset_name (a Hub id, a local file or folder, an rlvr source), split and config:
    ``name[:split=S][:config=C]`` (rlvr.data.sources reads it)."""
    spec = name
    if split not in (None, "train"):
        spec += f":split={split}"
    if config:
        spec += f":config={config}"
    return spec
