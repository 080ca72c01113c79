"""KL penalty to a reference policy, per token.

k3 estimator (Schulman, "Approximating KL divergence"): with δ = log π_ref − log π_θ,

    KL_t ≈ exp(δ) − δ − 1   (≥ 0, unbiased for KL(π_θ ‖ π_ref) under samples from π_θ)

It is aggregated exactly like the policy term (see ``losses.aggregate``).

Convention: δ is masked at padding and clamped to ±``log_ratio_clamp`` before ``exp``.
"""

from __future__ import annotations

import torch


def kl_k3(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    log_ratio_clamp: float = 20.0,
) -> torch.Tensor:
    """Per-token k3 KL estimate exp(ref − logp) − (ref − logp) − 1.

    Args:
        logprobs: [N, T] log π_θ.
        ref_logprobs: [N, T] log π_ref.
        response_mask: [N, T].

    Returns:
        [N, T], zero at masked positions.
    """
    mask = response_mask.bool()
    delta = torch.where(mask, ref_logprobs - logprobs, torch.zeros_like(logprobs))  # [N, T]
    delta = delta.clamp(-log_ratio_clamp, log_ratio_clamp)
    kl = torch.exp(delta) - delta - 1.0
    return torch.where(mask, kl, torch.zeros_like(kl))
