"""The policy objective of every algorithm here, per token, in one pure function.

    ℓ_t = w_t · clipped_surrogate(log π_θ, log π_old, A)  sampled responses (PPO clip, GSPO, truncated IS)
        = −A · ψ(π_θ(a_t))                                 anchors (expert responses): no ratio, never clipped
        + β · KL_k3(log π_θ, log π_ref)                    when β > 0
        − c · H_t                                           sampled responses, when entropy_coef c > 0

GRPO, Dr. GRPO, DAPO, GSPO, RLOO differ only in the advantages and the keyword settings; DaGRPO's
anchors are the ``is_anchor`` rows; TA-GRPO's choice of prompts is made before (which log-probs are
passed). The caller reduces ℓ with :func:`rlvr.core.losses.aggregate`, so the entropy bonus
(TRL's ``entropy_coef``, DaGRPO's optional entropy bonus) is −c × the aggregated entropy, with the
loss's own denominators. w_t is the sampler/trainer importance weight (``rlvr.core.importance``;
1 without the correction): as in TRL it weights the policy term only, before β·KL is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.core.kl import kl_k3
from rlvr.core.losses import anchor_surrogate, clipped_surrogate


@dataclass
class PolicyLoss:
    """The per-token loss and its statistics, as tensors (nothing is synced to the host here)."""

    per_token: torch.Tensor  # [N, T], zero at masked positions
    clipped_tokens: torch.Tensor  # scalar: masked tokens whose gradient the clip removed (anchors never)
    kl_sum: torch.Tensor | None  # scalar: Σ of the per-token KL over the mask (None when β = 0)


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
    anchor_psi: str = "log",
    anchor_gamma: float = 0.1,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
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
        entropy: [N, T] H(π_θ(·|prefix)) at each position (with grad), required when ``entropy_coef > 0``.
        entropy_coef: c of the entropy bonus −c·H_t (0: off, and ``entropy`` is not read).
        is_weights: [N, T] detached sampler/trainer importance weights w_t of the sampled rows' clipped
            term (None: 1). TRL multiplies its per-token policy loss by them before adding β·KL, and its
            entropy bonus is a separate term: neither the KL, the entropy bonus nor the anchors' term is
            weighted here either.

    Convention: anchors keep their tokens out of ``clipped_tokens``; the KL is added to anchor rows
    too (it is a penalty on the policy, whatever the response); the entropy bonus is not (it keeps
    the policy's own sampling broad; an anchor is not sampled from it), but anchor tokens still count
    in the aggregation's denominators, as for the rest of the loss.
    """
    per_token, clipped = clipped_surrogate(
        logprobs, old_logprobs, advantages, mask,
        epsilon=epsilon, epsilon_high=epsilon_high, dual_clip=dual_clip,
        importance_level=importance_level, ratio_cap=ratio_cap,
    )  # [N, T]
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    if is_anchor is not None:  # computed for every row and selected: no host sync on is_anchor.any()
        anchor = is_anchor.unsqueeze(-1)  # [N, 1]
        anchor_loss = anchor_surrogate(logprobs, advantages, mask, psi=anchor_psi, gamma=anchor_gamma)
        per_token = torch.where(anchor, anchor_loss, per_token)
        clipped = clipped & ~anchor
    kl_sum = None
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs (log-probs of the reference policy)")
        kl = kl_k3(logprobs, ref_logprobs, mask)  # [N, T]
        per_token = per_token + beta * kl
        kl_sum = kl.detach()[mask].sum()
    if entropy_coef > 0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs entropy (the policy's per-token entropy, with grad)")
        sampled = mask.bool() if is_anchor is None else mask.bool() & ~is_anchor.unsqueeze(-1)  # [N, T]
        per_token = per_token - entropy_coef * torch.where(sampled, entropy, torch.zeros_like(entropy))
    return PolicyLoss(per_token, clipped.sum(), kl_sum)
