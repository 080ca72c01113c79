"""DaGRPO's Sequence-level Gradient Rectification: pair masks and masked pairwise advantages.

Our reconstruction (docs/algorithms/dagrpo.md, labels [design]); the paper's abstract only says that fine-grained
scoring "dynamically masks sample pairs with low distinctiveness".

Why pairs (exact algebra): with r̄ the group mean, r_i − r̄ = (1/G) Σ_j (r_i − r_j), so

    Σ_i A_i ∇log π(o_i) = 1/(G(σ+ε)) Σ_{i<j} (r_i − r_j)(∇log π(o_i) − ∇log π(o_j)).

GRPO is a sum of pair contrasts; masking a pair removes exactly its contrast:

    Â_i = 1/(G·(σ + ε)) · Σ_j m_ij (c_i − c_j),    m_ij = 1[|s_i − s_j| ≥ τ], m_ii = 0

with c = r (``contrast="reward"``, default) or c = s (``contrast="score"``), σ the group's std of
c, and the division by the group size G — never by Σ_j m_ij. With τ = 0 every pair is kept and
Â equals the GRPO advantage.

Convention: unbiased std (ddof 1), std + ε (as ``grpo_advantages``); groups of one get 0.
Comparisons are exact up to ``SCORE_TOL`` = 1e-6 (scores are float32, so a sum such as
0.5·1 + 0.5·0.3 carries ~1e-7 of rounding): a pair whose gap is within SCORE_TOL of τ counts as
|s_i − s_j| = τ and is kept (m = 1[d ≥ τ]); a pair whose gap is at most SCORE_TOL has equal
scores and is never kept, whatever τ (also adaptive τ = κ·std on a group of equal scores, where
τ ≈ 0 would otherwise let rounding decide).
"""

from __future__ import annotations

import torch

from rlvr.core.advantages import SCALE_REWARDS, group_index, group_statistics

CONTRASTS = ("reward", "score")
SCORE_TOL = 1e-6


def pair_mask(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    tau: float,
    adaptive_kappa: float | None = None,
) -> torch.Tensor:
    """Pairs of distinct responses in one group whose scores differ by at least τ, and at all.

    m_ij = 1[d_ij ≥ τ − SCORE_TOL and d_ij > SCORE_TOL], d_ij = |s_i − s_j|; τ is fixed, or per
    group τ_g = κ·std_g(s) when ``adaptive_kappa`` = κ is given.

    Args:
        scores: [N] combined scores s.
        group_ids: [N] int.

    Returns:
        [N, N] bool, symmetric, False on the diagonal and across groups.
    """
    s = scores.to(torch.float64)
    same = group_ids.unsqueeze(0) == group_ids.unsqueeze(1)  # [N, N]
    distinct = ~torch.eye(len(s), dtype=torch.bool, device=s.device)
    gap = (s.unsqueeze(0) - s.unsqueeze(1)).abs()  # [N, N]
    if adaptive_kappa is None:
        threshold = torch.full_like(s, float(tau))  # [N]
    else:
        index, num_groups = group_index(group_ids)
        _, std, _, _ = group_statistics(s, index, num_groups)
        threshold = adaptive_kappa * std  # [N]; equal within a group, so the mask stays symmetric
    distinct_scores = gap > SCORE_TOL  # equal scores never form a pair (docs/algorithms/dagrpo.md)
    return same & distinct & distinct_scores & (gap >= threshold.unsqueeze(1) - SCORE_TOL)


def masked_pairwise_advantages(
    rewards: torch.Tensor,
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    tau: float,
    contrast: str = "reward",
    eps: float = 1e-6,
    scale_rewards: str = "group",
    adaptive_kappa: float | None = None,
    stats_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Masked pairwise advantages Â_i = Σ_j m_ij (c_i − c_j) / (G (σ + ε)).

    Args:
        rewards: [N] verifier rewards r.
        scores: [N] combined scores s = α·r + (1−α)·q (the distinctiveness measure).
        group_ids: [N] int.
        tau: distinctiveness threshold (ignored when ``adaptive_kappa`` is given).
        contrast: ``reward`` (c = r) or ``score`` (c = s; dense signal inside all-correct groups).
        scale_rewards: ``group`` (σ of the group), ``batch`` (σ of the batch), ``none`` (σ+ε → 1).
        stats_mask: [N] bool, the responses whose c enters σ (default all). DaGRPO's
            ``anchor_in_stats=false`` leaves the anchors out.

    Returns:
        advantages [N] in the dtype of ``rewards`` (the mask itself: :func:`pair_mask`).

    Convention: unbiased std, std + ε; G is the group's size (anchors included); a group whose
    σ over ``stats_mask`` is 0 while its contrasts are not (anchor_in_stats=false on an all-wrong
    group) is not scaled (σ + ε → 1), instead of being blown up by 1/ε.
    """
    if contrast not in CONTRASTS:
        raise ValueError(f"contrast={contrast!r}; valid: {CONTRASTS}")
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards={scale_rewards!r}; valid: {SCALE_REWARDS}")
    c = (rewards if contrast == "reward" else scores).to(torch.float64)  # [N]
    mask = pair_mask(scores, group_ids, tau=tau, adaptive_kappa=adaptive_kappa)  # [N, N]
    index, num_groups = group_index(group_ids)
    _, _, size, _ = group_statistics(c, index, num_groups)  # size: [N] group size G
    diff = c.unsqueeze(1) - c.unsqueeze(0)  # [N, N]: c_i − c_j
    summed = (diff * mask).sum(dim=1)  # [N]
    scale = _scale(c, group_ids, scale_rewards, eps, stats_mask)  # [N]
    advantages = summed / (size * scale)
    advantages = torch.where(size < 2, torch.zeros_like(advantages), advantages)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return advantages.to(out_dtype)


def _scale(c, group_ids, scale_rewards, eps, stats_mask) -> torch.Tensor:
    """σ + ε per response (1 for ``none``); σ over the ``stats_mask`` members only."""
    if scale_rewards == "none":
        return torch.ones_like(c)
    keep = torch.ones_like(c) if stats_mask is None else stats_mask.to(c.dtype)  # [N] 0/1
    if scale_rewards == "batch":
        std = _weighted_std(c, keep, torch.zeros_like(group_ids), 1)  # [N]
    else:
        index, num_groups = group_index(group_ids)
        std = _weighted_std(c, keep, index, num_groups)  # [N]
    if stats_mask is None:
        return std + eps
    return torch.where(std > 0, std + eps, torch.ones_like(std))


def _weighted_std(values, keep, index, num_groups) -> torch.Tensor:
    """Unbiased std of ``values`` over the kept members of each group, per response."""
    zeros = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count = zeros.index_add(0, index, keep)  # [K]
    mean = zeros.index_add(0, index, values * keep) / count.clamp(min=1)  # [K]
    centred = (values - mean[index]) * keep  # [N]
    sq = zeros.index_add(0, index, centred * centred)  # [K]
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1)).sqrt(), zeros)  # [K]
    return std[index]
