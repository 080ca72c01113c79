"""``rlvr train --help`` for the options whose values are registered names: the lists read from the registries.

Each function renders one option's help when the help is shown (``rlvr.config.fields._f`` takes a function), so a
name registered in its registry (``rlvr.rollout.names``, ``rlvr.core.names``, ``rlvr.rewards.registry``,
``rlvr.config.presets``) is listed without an edit here; the notes below only add words to names that have them.
Light: no torch, no engine or loss module is imported.
"""

from __future__ import annotations

from rlvr.config.presets import PRESETS
from rlvr.core.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    AGGREGATION_ALIASES,
    AGGREGATION_MODES,
    POLICY_LOSS_NAMES,
    TRL_LOSS_TYPES,
)
from rlvr.rewards.registry import reward_funcs_help
from rlvr.rollout.names import ROLLOUT_ENGINE_SUMMARIES, ROLLOUT_ENGINES

ESTIMATOR_NOTES = {"dagrpo": "the masked pairwise form; algo=dagrpo's pair_masking sets it"}
POLICY_LOSS_NOTES = {
    "clip": "PPO's clipped surrogate; verl: policy_loss.loss_mode=vanilla",
    **dict.fromkeys(TRL_LOSS_TYPES, "TRL's"),
    **dict.fromkeys(("clip_cov", "kl_cov"), "verl's; settings: the objective section"),
}
AGGREGATION_NOTES = {"dapo": "TRL's normaliser", "bnpo": "TRL's normaliser"}


def listed(names, notes: dict[str, str], sep: str = ", ") -> str:
    """``names`` joined by ``sep``, each followed by its note in parentheses when it has one."""
    return sep.join(f"{name} ({notes[name]})" if name in notes else name for name in names)


def rollout_engine() -> str:
    return f"generation engine: {listed(ROLLOUT_ENGINES, ROLLOUT_ENGINE_SUMMARIES)}"


def advantage_estimator() -> str:
    return (f"{listed(sorted(ADVANTAGE_ESTIMATOR_NAMES), ESTIMATOR_NOTES, ' | ')}, a name registered with "
            "rlvr.core.advantages.register_advantage, or your own fn(inputs, settings) as path/file.py:fn "
            "(docs/extending.md) (verl: algorithm.adv_estimator)")


def policy_loss() -> str:
    return (f"the sampled responses' per-token loss: {listed(sorted(POLICY_LOSS_NAMES), POLICY_LOSS_NOTES)}, a name "
            "registered with rlvr.core.losses.register_policy_loss, or your own fn(logprobs, old_logprobs, "
            "advantages, mask, settings) as path/file.py:fn (docs/extending.md)")


def loss_type() -> str:
    aliases = ", ".join(f"{alias} = {mode}" for alias, mode in AGGREGATION_ALIASES.items())
    return (f"the loss aggregation: {listed(AGGREGATION_MODES, AGGREGATION_NOTES, ' | ')} (verl: loss_agg_mode), or "
            f"one of their TRL/verl names ({aliases}), or TRL's {' | '.join(TRL_LOSS_TYPES)} (which choose the "
            "policy loss too) (docs/training.md, 'Conventions'), or your own fn(per_token, mask, denominators) as "
            "path/file.py:fn (docs/extending.md)")


def algo() -> str:
    return f"preset: {', '.join(PRESETS)} (sets the defaults below)"


reward_funcs = reward_funcs_help


def data() -> str:
    from rlvr.data.sources import spec_forms  # (registers the built-in sources; light: no torch, no datasets)

    return (f"training data: {spec_forms()} (verl's parquet rows as they are; a folder as datasets.load_dataset or "
            "load_from_disk reads it; from Python also a list of row dicts or a datasets.Dataset) (TRL: dataset_name, "
            "dataset_config, dataset_train_split)")
