"""The policy objective of every algorithm here, per token, in one pure function, and the entropy bonus.

    ℓ_t = w_t · clipped_surrogate(log π_θ, log π_old, A)  sampled responses (PPO clip, GSPO, truncated IS)
        = −A · ψ(π_θ(a_t))                                 anchors (expert responses): no ratio, never clipped
        + β · KL_k3(log π_θ, log π_ref) [· ρ_t]            when β > 0 (· ρ_t: TRL's use_bias_correction_kl)

GRPO, Dr. GRPO, DAPO, GSPO, RLOO differ only in the advantages and the keyword settings; DaGRPO's
anchors are the ``is_anchor`` rows; TA-GRPO's choice of prompts is made before (which log-probs are
passed). The caller reduces ℓ with :func:`rlvr.core.losses.aggregate`. w_t is the sampler/trainer
importance weight (``rlvr.core.importance``; 1 without the correction): as in TRL it weights the
policy term only, before β·KL is added.

The entropy bonus (TRL's ``entropy_coef``) is a term of its own, :func:`entropy_bonus`: −c × the mean
entropy over the micro-batch's sampled tokens, scaled by the micro-batch's share of the optimiser
step, whatever the loss's aggregation — TRL's definition (L = L_policy − c·H).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.core.kl import kl_k3
from rlvr.core.losses import anchor_surrogate, clipped_surrogate, log_ratio


@dataclass
class PolicyLoss:
    """The per-token loss and its statistics, as tensors (nothing is synced to the host here)."""

    per_token: torch.Tensor  # [N, T], zero at masked positions
    clipped_tokens: torch.Tensor  # scalar: masked tokens whose gradient the clip removed (anchors never)
    kl_sum: torch.Tensor | None  # scalar: Σ of the per-token KL over the mask (None when β = 0)
    kl: torch.Tensor | None = None  # [N, T] the per-token KL, detached (None when β = 0)
    low_clipped: torch.Tensor | None = None  # [N, T] bool: ρ < 1 − ε_low with A < 0 (TRL's clip_ratio/low)
    high_clipped: torch.Tensor | None = None  # [N, T] bool: ρ > 1 + ε_high with A > 0 (clip_ratio/high)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    is_anchor: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    dual_clip: float | None = None,
    importance_level: str = "token",
    ratio_cap: float | None = None,
    beta: float = 0.0,
    kl_ratio_weighted: bool = False,
    anchor_psi: str = "log",
    anchor_gamma: float = 0.1,
    is_weights: torch.Tensor | None = None,
) -> PolicyLoss:
    """Per-token policy loss with clipping, anchor rows and the KL penalty.

    Args:
        logprobs: [N, T] log π_θ (with grad).
        old_logprobs: [N, T] log π_old (behaviour; ``logprobs.detach()`` on the on-policy pass).
        advantages: [N].
        mask: [N, T] bool, True on the response tokens that are trained on.
        is_anchor: [N] bool, rows that are expert responses (None: none are).
        ref_logprobs: [N, T] log π_ref, required when ``beta > 0``.
        kl_ratio_weighted: multiply the KL by the importance ratio ρ_t = π_θ/π_old (with its gradient;
            sequence level: the sequence's ratio), TRL's ``use_bias_correction_kl``; anchors: ρ = 1.
        is_weights: [N, T] detached sampler/trainer importance weights w_t of the sampled rows' clipped
            term (None: 1). TRL multiplies its per-token policy loss by them before adding β·KL: neither
            the KL nor the anchors' term is weighted here either.

    Convention: anchors keep their tokens out of ``clipped_tokens``; the KL is added to anchor rows
    too (it is a penalty on the policy, whatever the response).
    """
    per_token, clipped = clipped_surrogate(
        logprobs, old_logprobs, advantages, mask,
        epsilon=epsilon, epsilon_high=epsilon_high, dual_clip=dual_clip,
        importance_level=importance_level, ratio_cap=ratio_cap,
    )  # [N, T]
    low, high = clip_regions(logprobs.detach(), old_logprobs, advantages, mask, epsilon=epsilon,
                             epsilon_high=epsilon_high, importance_level=importance_level, is_anchor=is_anchor)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    if is_anchor is not None:  # computed for every row and selected: no host sync on is_anchor.any()
        anchor = is_anchor.unsqueeze(-1)  # [N, 1]
        anchor_loss = anchor_surrogate(logprobs, advantages, mask, psi=anchor_psi, gamma=anchor_gamma)
        per_token = torch.where(anchor, anchor_loss, per_token)
        clipped = clipped & ~anchor
    kl_sum = kl_detached = None
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs (log-probs of the reference policy)")
        kl = kl_k3(logprobs, ref_logprobs, mask)  # [N, T]
        kl_detached = kl.detach()
        kl_sum = kl_detached[mask].sum()
        if kl_ratio_weighted:
            ratio = log_ratio(logprobs, old_logprobs, mask, importance_level=importance_level).exp()  # [N, T]
            if is_anchor is not None:
                ratio = torch.where(is_anchor.unsqueeze(-1), torch.ones_like(ratio), ratio)
            kl = kl * ratio
            kl_detached = kl.detach()  # TRL logs the weighted KL
        per_token = per_token + beta * kl
    return PolicyLoss(per_token, clipped.sum(), kl_sum, kl_detached, low, high)


def clip_regions(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                 epsilon: float, epsilon_high: float | None, importance_level: str = "token",
                 is_anchor: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's clip statistics per token: (ρ < 1 − ε_low and A < 0, ρ > 1 + ε_high and A > 0), [N, T] bool each,
    False at masked positions and on anchor rows (they have no ratio)."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    ratio = log_ratio(logprobs, old_logprobs, mask, importance_level=importance_level).exp()  # [N, T]
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    keep = mask.bool() if is_anchor is None else mask.bool() & ~is_anchor.unsqueeze(-1)
    return (ratio < 1 - epsilon) & (adv < 0) & keep, (ratio > 1 + epsilon_high) & (adv > 0) & keep


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, *, coef: float, share: float | torch.Tensor,
                  is_anchor: torch.Tensor | None = None) -> torch.Tensor:
    """TRL's entropy bonus of one micro-batch, to subtract from its loss: c · (Σ m·H / Σ m) · share.

    Args:
        entropy: [N, T] H(π_θ(·|prefix)) at each position (with grad).
        mask: [N, T] the tokens trained on.
        coef: c (entropy_coef).
        share: the micro-batch's share of the optimiser step, n / (the step's sequences): 1/A for A equal
            micro-batches, as TRL divides by gradient_accumulation_steps.
        is_anchor: [N] rows that are expert responses: not sampled from the policy, so left out.

    Convention: TRL's definition (L = L_policy − c·H): the mean is over the micro-batch's sampled tokens,
    whatever the loss's aggregation ("never by a loss-type-specific normalizer", TRL 1.16). So, as in TRL,
    with several micro-batches per step the bonus depends on which completions share one.
    """
    sampled = mask.bool() if is_anchor is None else mask.bool() & ~is_anchor.unsqueeze(-1)  # [N, T]
    kept = torch.where(sampled, entropy, torch.zeros_like(entropy))  # padding may hold junk (inf): never 0·inf
    return coef * kept.sum() / sampled.sum().clamp(min=1).to(entropy.dtype) * share
