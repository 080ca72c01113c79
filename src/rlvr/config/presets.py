"""``algo=`` presets: the defaults that differ from GRPO's. The user's own keys always win."""

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
