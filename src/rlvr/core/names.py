"""The names the core math accepts, without torch: ``rlvr.config`` validates options against them.

``advantages`` and ``losses`` import torch; the config (and so ``rlvr train --help``) must not. So the
registries' names are read here from the registries themselves without running them: the
``@register_advantage("name")``, ``@register_policy_loss("name")`` and ``@register_aggregation("name")``
decorators in ``advantages.py`` and ``losses.py``, found in their source (:func:`registered_names`). One
list per family, the decorators: adding a decorated function there is all the config needs
(``tests/config/test_light_import.py`` checks, in a fresh interpreter, that these equal the registries).
A function registered at run time from elsewhere adds its name to these too (the decorators do).
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlvr.core.user_code import split_function_spec


def registered_names(module: str, decorator: str) -> list[str]:
    """The names ``@decorator("name")`` registers in ``rlvr/core/<module>``, in source order, read from its source."""
    tree = ast.parse(Path(__file__).with_name(module).read_text(encoding="utf-8"))
    calls = [d for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             for d in node.decorator_list if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
             and d.func.id == decorator and d.args and isinstance(d.args[0], ast.Constant)]
    return [d.args[0].value for d in sorted(calls, key=lambda d: (d.lineno, d.col_offset))]


# advantage_estimator values; rlvr.core.advantages.ADVANTAGE_ESTIMATORS maps each to its function.
ADVANTAGE_ESTIMATOR_NAMES = set(registered_names("advantages.py", "register_advantage"))
# policy_loss values; rlvr.core.losses.POLICY_LOSSES maps each to its function.
POLICY_LOSS_NAMES = set(registered_names("losses.py", "register_policy_loss")
                        + registered_names("loss_variants.py", "register_policy_loss"))
SCALE_REWARDS = ("group", "batch", "none")
# TRL's multi_objective_aggregation: how several reward functions' rewards become one advantage (rlvr.core.advantages)
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")

IMPORTANCE_LEVELS = ("token", "sequence")
# vllm_importance_sampling_mode values (TRL's): the sampler/trainer correction, rlvr.core.importance
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# token_mean, seq_mean_token_mean, seq_mean_token_sum_norm: verl's loss_agg_mode; dapo and bnpo: TRL's token
# means, whose normalisers differ from verl's token-mean under several optimiser steps or micro-batches
# (canonical names: rlvr.core.losses.AGGREGATIONS maps each to its function)
AGGREGATION_MODES = registered_names("losses.py", "register_aggregation")

# TRL's loss_type names and verl's loss_agg_mode names for the same reductions (TRL's grpo and dr_grpo
# compute what these do with equal micro-batches, which TRL always has).
AGGREGATION_ALIASES = {
    "token-mean": "token_mean",
    "grpo": "seq_mean_token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "luspo": "seq_mean_token_sum",  # TRL's luspo: PPO's clip, each sequence's loss summed, averaged over sequences
}
# TRL's loss types that choose the policy loss too: loss_type -> (policy_loss, aggregation), as TRL's _compute_loss
TRL_LOSS_TYPES = {"cispo": ("cispo", "dapo"), "sapo": ("sapo", "seq_mean_token_mean"), "vespo": ("vespo", "dapo")}


# a researcher's own estimator, loss or aggregation, named as a reward function is (rlvr.train.algorithm_parts)
FUNCTION_SPEC_FORMS = "path/to/file.py:function, module:function or package.module.function"


def is_function_spec(value: str) -> bool:
    """Whether an algorithm option names a user's function rather than a registered name (which has no ``:``
    and no ``.``); the function is loaded and its signature checked at start-up (``compile_plan``)."""
    return split_function_spec(value) is not None


def resolve_aggregation(mode: str) -> str:
    """Canonical aggregation name for a mode or one of its TRL/verl aliases (a user's function: its spec)."""
    if is_function_spec(mode):
        return mode
    mode = TRL_LOSS_TYPES[mode][1] if mode in TRL_LOSS_TYPES else AGGREGATION_ALIASES.get(mode, mode)
    if mode not in AGGREGATION_MODES:
        valid = sorted(set(AGGREGATION_MODES) | set(AGGREGATION_ALIASES) | set(TRL_LOSS_TYPES))
        raise ValueError(f"unknown loss_type/aggregation {mode!r}; valid: {valid}, or your own function: "
                         f"{FUNCTION_SPEC_FORMS}")
    return mode


def resolve_policy_loss(policy_loss: str, loss_type: str) -> str:
    """The policy loss a config asks for: TRL's loss_type cispo / sapo / vespo names its own (TRL_LOSS_TYPES), which
    must then agree with ``policy_loss`` unless that is the default clip; else ``policy_loss``."""
    chosen = TRL_LOSS_TYPES.get(loss_type, (None,))[0]
    if chosen is None or policy_loss == chosen:
        return policy_loss
    if policy_loss != "clip":
        raise ValueError(f"loss_type={loss_type} is TRL's {chosen} loss, but policy_loss={policy_loss}: give one of "
                         f"them (loss_type={loss_type} alone, or policy_loss={policy_loss} with an aggregation "
                         "loss_type such as dapo)")
    return chosen
