"""Advantages for a step: the configured estimator, or DaGRPO's masked pairwise form.

DaGRPO (pair masking, or anchors in the groups) uses ``masked_pairwise_advantages``; with
τ = 0 and no anchors it equals GRPO exactly, so plain GRPO runs keep using the estimator table.

Unscorable responses (every reward function returned None: ``Experience.scorable`` is False) are
left out: the statistics (group mean, std, size; batch std) are computed over the scorable
responses only, and an unscorable response gets advantage exactly 0 (TRL treats None the same
way: "not applicable", not "wrong").
"""

from __future__ import annotations

import torch

from rlvr.config import ExperimentConfig
from rlvr.core.advantages import get_advantage_estimator
from rlvr.core.pairwise import masked_pairwise_advantages, pair_mask
from rlvr.train.experience import Experience


def compute_advantages(cfg: ExperimentConfig, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages [N] and the dagrpo/ pair metrics (empty when DaGRPO is off)."""
    keep = exp.scorable  # [N] bool
    advantages = torch.zeros_like(exp.rewards)  # [N]; unscorable responses keep 0
    if not bool(keep.any()):
        return advantages, ({"dagrpo/zero_adv_frac": 1.0} if cfg.dagrpo.enabled else {})
    if bool(keep.all()):
        return _advantages(cfg, exp)
    advantages[keep], metrics = _advantages(cfg, exp.subset(keep))
    if "dagrpo/zero_adv_frac" in metrics:
        metrics["dagrpo/zero_adv_frac"] = _zero_frac(advantages)
    return advantages, metrics


def _advantages(cfg: ExperimentConfig, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    a, d = cfg.algorithm, cfg.dagrpo
    if not (d.pair_masking or bool(exp.is_anchor.any())):
        estimator = get_advantage_estimator(a.advantage_estimator)
        advantages = estimator(exp.rewards, exp.group_ids, scale_rewards=a.scale_rewards, eps=a.advantage_eps)
        return advantages, ({"dagrpo/zero_adv_frac": _zero_frac(advantages)} if d.enabled else {})
    tau = d.pair_tau if d.pair_masking else 0.0
    kappa = d.pair_tau_kappa if d.pair_masking else None
    contrast = d.contrast if d.pair_masking else "reward"
    advantages = masked_pairwise_advantages(
        exp.rewards, exp.scores, exp.group_ids, tau=tau, contrast=contrast, eps=a.advantage_eps,
        scale_rewards=a.scale_rewards, adaptive_kappa=kappa,
        stats_mask=None if d.anchor_in_stats else ~exp.is_anchor,
    )
    mask = pair_mask(exp.scores, exp.group_ids, tau=tau, adaptive_kappa=kappa)  # [N, N], for the metrics
    return advantages, pair_metrics(mask, exp, advantages, contrast=contrast)


def pair_metrics(mask: torch.Tensor, exp: Experience, advantages: torch.Tensor, *, contrast: str) -> dict[str, float]:
    """Fractions of within-group pairs that the distinctiveness mask removed."""
    same = exp.group_ids.unsqueeze(0) == exp.group_ids.unsqueeze(1)  # [N, N]
    same &= ~torch.eye(len(exp), dtype=torch.bool)
    c = exp.rewards if contrast == "reward" else exp.scores
    contrasting = same & (c.unsqueeze(0) != c.unsqueeze(1))  # pairs that carry a gradient in GRPO
    masked = same & ~mask
    return {
        "dagrpo/masked_pair_frac": float(masked.sum()) / max(1.0, float(same.sum())),
        "dagrpo/masked_contrast_frac": float((masked & contrasting).sum()) / max(1.0, float(contrasting.sum())),
        "dagrpo/zero_adv_frac": _zero_frac(advantages),
    }


def _zero_frac(advantages: torch.Tensor) -> float:
    return float((advantages == 0).float().mean())
