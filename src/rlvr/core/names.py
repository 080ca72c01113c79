"""The names the core math accepts, without torch: ``rlvr.config`` validates options against them.

``advantages`` and ``losses`` import torch; the config (and so ``rlvr train --help``) must not, so
the option values they take live here. The two registries' name sets start with the built-ins and
grow when a function is registered (``register_advantage``, ``register_policy_loss``).
"""

from __future__ import annotations

# advantage_estimator values; rlvr.core.advantages.ADVANTAGE_ESTIMATORS maps each to its function.
ADVANTAGE_ESTIMATOR_NAMES = {"grpo", "rloo", "dagrpo"}
# policy_loss values; rlvr.core.losses.POLICY_LOSSES maps each to its function.
POLICY_LOSS_NAMES = {"clip"}
SCALE_REWARDS = ("group", "batch", "none")

IMPORTANCE_LEVELS = ("token", "sequence")
# vllm_importance_sampling_mode values (TRL's): the sampler/trainer correction, rlvr.core.importance
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# token_mean, seq_mean_token_mean, seq_mean_token_sum_norm: verl's loss_agg_mode; dapo and bnpo: TRL's token
# means, whose normalisers differ from verl's token-mean under several optimiser steps or micro-batches
AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "dapo", "bnpo")

# TRL's loss_type names and verl's loss_agg_mode names for the same reductions (TRL's grpo and dr_grpo
# compute what these do with equal micro-batches, which TRL always has).
AGGREGATION_ALIASES = {
    "token-mean": "token_mean",
    "grpo": "seq_mean_token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}


# a researcher's own estimator, loss or aggregation, named as a reward function is (rlvr.train.algorithm_parts)
FUNCTION_SPEC_FORMS = "path/to/file.py:function, module:function or package.module.function"


def is_function_spec(value: str) -> bool:
    """Whether an algorithm option names a user's function rather than a registered name (which has no ``:``
    and no ``.``); the function is loaded and its signature checked at start-up (``compile_plan``)."""
    return ":" in value or "." in value.strip(".")


def resolve_aggregation(mode: str) -> str:
    """Canonical aggregation name for a mode or one of its TRL/verl aliases (a user's function: its spec)."""
    if is_function_spec(mode):
        return mode
    mode = AGGREGATION_ALIASES.get(mode, mode)
    if mode not in AGGREGATION_MODES:
        valid = sorted(set(AGGREGATION_MODES) | set(AGGREGATION_ALIASES))
        raise ValueError(f"unknown loss_type/aggregation {mode!r}; valid: {valid}, or your own function: "
                         f"{FUNCTION_SPEC_FORMS}")
    return mode
