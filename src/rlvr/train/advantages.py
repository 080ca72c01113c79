"""Advantages for a step: the configured estimator, or DaGRPO's masked pairwise form.

DaGRPO (pair masking, or anchors in the groups) uses ``masked_pairwise_advantages``; with
τ = 0 and no anchors it equals GRPO exactly, so plain GRPO runs keep using the estimator table.
A DaGRPO run logs the pair metrics on every step (on a step without pairwise advantages, what the
τ = 0 mask removes: pairs of equal scores), so its metrics have the same keys throughout.

Unscorable responses (every reward function returned None: ``Experience.scorable`` is False) are
left out: the statistics (group mean, std, size; batch std) are computed over the scorable
responses only, and an unscorable response gets advantage exactly 0 (TRL treats None the same
way: "not applicable", not "wrong").
"""

from __future__ import annotations

import torch

from rlvr.core.advantages import get_advantage_estimator
from rlvr.core.pairwise import masked_pairwise_advantages, pair_mask
from rlvr.train.experience import Experience
from rlvr.train.plan import AdvantageSettings


def compute_advantages(settings: AdvantageSettings, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages [N] and the dagrpo/ pair metrics (the same keys on every step of a DaGRPO run; none otherwise)."""
    keep = exp.scorable  # [N] bool
    advantages = torch.zeros_like(exp.rewards)  # [N]; unscorable responses keep 0
    if not bool(keep.any()):
        return advantages, ({"dagrpo/masked_pair_frac": 0.0, "dagrpo/masked_contrast_frac": 0.0,
                             "dagrpo/zero_adv_frac": 1.0} if settings.report_pairs else {})
    if bool(keep.all()):
        return _advantages(settings, exp)
    advantages[keep], metrics = _advantages(settings, exp.subset(keep))
    if metrics:
        metrics["dagrpo/zero_adv_frac"] = _zero_frac(advantages)
    return advantages, metrics


def _advantages(s: AdvantageSettings, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    if s.pair_masking or bool(exp.is_anchor.any()):
        advantages = masked_pairwise_advantages(
            exp.rewards, exp.scores, exp.group_ids, tau=s.tau, contrast=s.contrast, eps=s.eps,
            scale_rewards=s.scale_rewards, adaptive_kappa=s.tau_kappa,
            stats_mask=None if s.anchor_in_stats else ~exp.is_anchor,
        )
    else:
        estimator = get_advantage_estimator(s.estimator)
        advantages = estimator(exp.rewards, exp.group_ids, scale_rewards=s.scale_rewards, eps=s.eps)
    if not s.report_pairs:
        return advantages, {}
    mask = pair_mask(exp.scores, exp.group_ids, tau=s.tau, adaptive_kappa=s.tau_kappa)  # [N, N], for the metrics
    return advantages, pair_metrics(mask, exp, advantages, contrast=s.contrast)


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
