"""transformers ``TrainingArguments`` keys that TRL's ``GRPOConfig`` inherits and rlvr has no option for.

``GRPOConfig(...).to_dict()`` (TRL 1.16) holds 191 keys; the ones below change nothing in rlvr or ask for
something rlvr does not do. Each is ``key -> (does this value ask for what rlvr does?, why)``, the shape of
``rlvr.config.trl_names.ACCEPTED``, which takes them in: a value that passes is accepted (a no-op here, said
in the table of docs/from_trl.md), another is refused in one line with the reason and the nearest rlvr
option. :func:`any_value` marks a key that changes nothing in rlvr whatever its value.
Plain Python, no torch.
"""

from __future__ import annotations

from typing import Any


def any_value(value: Any) -> bool:
    """Every value is accepted: the key changes nothing in rlvr."""
    return True


def _off(value: Any) -> bool:
    """TRL's default for a switch or setting that is off: false, null, 0 or an empty list."""
    return value in (None, False, 0, "", [], {})


_EVAL = "rlvr's evaluation is its own pass@k loop (docs/evaluation.md): transformers' evaluation-loop settings do not apply"
NO_DATALOADER = "rlvr has no dataloader: the prompts are in memory"
_DDP = "a DDP performance setting: rlvr builds DDP itself (docs/scaling.md), the gradients are the same"
_BEST = ("rlvr does not load the best checkpoint at the end (save_strategy=best with metric_for_best_model keeps "
         "it); compare checkpoints with `rlvr eval`")
_ONE_REVISION = "rlvr pushes to the main revision"
_ACCELERATOR_DEFAULTS = {"split_batches": False, "dispatch_batches": None, "even_batches": True,
                         "use_seedable_sampler": True, "non_blocking": False, "gradient_accumulation_kwargs": None}

TRAINING_ARGUMENTS: dict[str, tuple[Any, str]] = {
    "optim_args": (_off, "rlvr's AdamW takes adam_beta1, adam_beta2, adam_epsilon and weight_decay, no other arguments"),
    "optim_target_modules": (_off, "no GaLore/APOLLO-style optimiser in rlvr (nearest: lora_r with lora_target_modules)"),
    "average_tokens_across_devices": (lambda v: v is True, ("rlvr's loss normalisers count the tokens of every "
                                      "process, as TRL's default (true) does")),
    "label_smoothing_factor": (any_value, "GRPO's loss has no labels to smooth (TRL's GRPOTrainer ignores it too)"),
    "bf16_full_eval": (_off, "rlvr evaluates in the training precision (bf16)"),
    "fp16_full_eval": (_off, "rlvr evaluates in the training precision (bf16)"),
    "torch_compile_backend": (_off, "rlvr does not torch.compile the model"),
    "torch_compile_mode": (_off, "rlvr does not torch.compile the model"),
    "liger_kernel_config": (_off, ("use_liger_kernel: true is rlvr's chunked LM head (lm_head_chunk_tokens), which "
                            "takes no kernel config")),
    "use_cache": (any_value, "rlvr's rollout keeps its own KV cache; its training forward passes use none"),
    "neftune_noise_alpha": (_off, "NEFTune's embedding noise is not in rlvr"),
    "torch_empty_cache_steps": (any_value, ("it changes memory housekeeping only, not the results; rlvr does not "
                                "empty the allocator's cache on a schedule")),
    "logging_nan_inf_filter": (lambda v: v is True, ("rlvr skips an optimiser step with a non-finite loss or gradient "
                               "(max_skipped_steps): a NaN is never averaged into the logged loss, as TRL's default "
                               "filter does")),
    "log_level_replica": (lambda v: v in ("warning", "passive"), ("rlvr's log_level sets the level of every "
                          "process; replicas log warnings, TRL's default")),
    "project": (lambda v: v in (None, "huggingface"), ("set TRACKIO_PROJECT in the environment (rlvr's trackio "
                "project; default rlvr)")),
    "trackio_space_id": (_off, "rlvr's trackio logs locally (TRACKIO_DIR); no Space"),
    "trackio_bucket_id": (_off, "rlvr's trackio logs locally (TRACKIO_DIR); no Space"),
    "trackio_static_space_id": (lambda v: v in (None, False), "rlvr's trackio logs locally (TRACKIO_DIR); no Space"),
    "prediction_loss_only": (any_value, _EVAL),
    "eval_do_concat_batches": (any_value, _EVAL),
    "eval_use_gather_object": (any_value, _EVAL),
    "eval_accumulation_steps": (any_value, _EVAL),
    "include_for_metrics": (any_value, _EVAL),
    "batch_eval_metrics": (any_value, _EVAL),
    "save_on_each_node": (_off, "rlvr's rank 0 writes each checkpoint to output_dir (a shared file system)"),
    "enable_jit_checkpoint": (any_value, "rlvr always saves a checkpoint on SIGTERM and Ctrl-C"),
    "hub_always_push": (any_value, "rlvr pushes each checkpoint when it is saved, in order"),
    "hub_revision": (lambda v: v in (None, "main"), _ONE_REVISION),
    "load_best_model_at_end": (_off, _BEST),
    "ignore_data_skip": (_off, "a resumed rlvr run continues at the exact data position it stopped at"),
    "restore_callback_states_from_checkpoint": (_off, "rlvr's callbacks are Python objects (Trainer(cfg, callbacks=...))"),
    "full_determinism": (_off, ("rlvr seeds everything from seed but does not switch torch to deterministic "
                         "kernels (nearest: seed)")),
    "data_seed": (_off, "rlvr's data order comes from seed (nearest: seed)"),
    "accelerator_config": (lambda v: v is None or (isinstance(v, dict) and all(
        _ACCELERATOR_DEFAULTS.get(k, object()) == x for k, x in v.items())),
        "rlvr has no accelerate dataloader: only accelerate's defaults apply"),
    "parallelism_config": (_off, "accelerate's ParallelismConfig is not rlvr's (nearest: parallelism=ddp|fsdp, nproc)"),
    "dataloader_drop_last": (any_value, ("TRL's RepeatSampler already drops an incomplete last generation batch, "
                             "whatever this says; rlvr's epochs are whole steps too")),
    "dataloader_persistent_workers": (any_value, NO_DATALOADER),
    "dataloader_prefetch_factor": (any_value, NO_DATALOADER),
    "dataloader_multiprocessing_context": (any_value, NO_DATALOADER),
    "dataloader_in_order": (any_value, NO_DATALOADER),
    "train_sampling_strategy": (any_value, ("TRL's GRPOTrainer draws prompts with its own sampler, as rlvr does "
                                "(shuffle_dataset / shuffle)")),
    "length_column_name": (any_value, "only for group_by_length sampling, which GRPO does not use"),
    "ddp_bucket_cap_mb": (any_value, _DDP),
    "ddp_broadcast_buffers": (any_value, _DDP),
    "ddp_static_graph": (any_value, _DDP),
    "ddp_backend": (_off, "rlvr uses NCCL with CUDA and gloo otherwise"),
    "debug": (_off, "transformers' debug modes (underflow_overflow, tpu_metrics_debug) are not in rlvr"),
    "do_predict": (any_value, "read by scripts, not by the trainer; rlvr eval runs predictions"),
    "local_rank": (any_value, "torchrun sets LOCAL_RANK, which rlvr reads"),
}

# the bool keys above: a bare ``--key`` on the command line is true (HfArgumentParser's form)
TRAINING_ARGUMENTS_BOOL_KEYS = frozenset({
    "average_tokens_across_devices", "bf16_full_eval", "fp16_full_eval", "use_cache", "logging_nan_inf_filter",
    "prediction_loss_only", "eval_do_concat_batches", "eval_use_gather_object", "batch_eval_metrics",
    "save_on_each_node", "enable_jit_checkpoint", "hub_always_push", "load_best_model_at_end",
    "ignore_data_skip", "restore_callback_states_from_checkpoint", "full_determinism", "dataloader_drop_last",
    "dataloader_persistent_workers", "dataloader_in_order", "ddp_broadcast_buffers", "ddp_static_graph",
    "do_predict",
})
