"""Policy-gradient losses per token, and the one named reduction :func:`aggregate`.

Every loss here returns a per-token tensor [N, T]; nothing reduces except :func:`aggregate`.

Safety (docs/design/pitfalls.md #4): the log-ratio is masked at padding and clamped to ±``log_ratio_clamp``
*before* ``exp``, so a padded position can never produce inf, and 0·inf = NaN can never leak
through the unselected branch of ``min``/``max``.
"""

from __future__ import annotations

import math

import torch

from rlvr.core.names import IMPORTANCE_LEVELS, resolve_aggregation


def log_ratio(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    importance_level: str = "token",
    log_ratio_clamp: float = 20.0,
) -> torch.Tensor:
    """Masked, clamped log importance ratio log π_θ − log π_old.

    ``sequence`` (GSPO): the length-normalised sequence log-ratio
    (1/|o|) Σ_t (log π_θ − log π_old), broadcast over the sequence's tokens.

    Args:
        logprobs: [N, T] current policy log-probs (with grad).
        old_logprobs: [N, T] behaviour log-probs (no grad).
        response_mask: [N, T] bool/0-1, True on response tokens.

    Returns:
        [N, T] log-ratio, 0 at masked positions, within ±log_ratio_clamp.
    """
    mask = response_mask.bool()
    diff = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))  # [N, T]
    if importance_level == "sequence":
        lengths = mask.sum(-1, keepdim=True).clamp(min=1)  # [N, 1]
        diff = (diff.sum(-1, keepdim=True) / lengths).expand_as(diff)  # [N, T]
        diff = torch.where(mask, diff, torch.zeros_like(diff))
    elif importance_level != "token":
        raise ValueError(f"importance_level={importance_level!r}; valid: {IMPORTANCE_LEVELS}")
    return diff.clamp(-log_ratio_clamp, log_ratio_clamp)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    dual_clip: float | None = None,
    importance_level: str = "token",
    log_ratio_clamp: float = 20.0,
    ratio_cap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per token.

    L_t = −min(ρ_t A, clip(ρ_t, 1−ε_low, 1+ε_high) A); with dual clip c (A < 0 only):
    L_t = min(L_t, −c·A). With ``ratio_cap`` C, ρ_t is first truncated to min(ρ_t, C)
    (truncated importance sampling, e.g. TA-GRPO's ``truncated_is``).

    Args:
        logprobs: [N, T] log π_θ (with grad).
        old_logprobs: [N, T] log π_old.
        advantages: [N] per sequence (broadcast over tokens) or [N, T].
        response_mask: [N, T].

    Returns:
        (loss [N, T] zero at masked tokens, clipped [N, T] bool: tokens whose gradient the clip
        removed).

    Convention: ε_high defaults to ε (symmetric); ratio = exp(clamped, masked log-ratio).
    """
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    mask = response_mask.bool()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # [N, 1] or [N, T]
    log_rho = log_ratio(
        logprobs,
        old_logprobs,
        mask,
        importance_level=importance_level,
        log_ratio_clamp=log_ratio_clamp,
    )  # [N, T]
    if ratio_cap is not None:
        log_rho = log_rho.clamp(max=math.log(ratio_cap))
    ratio = torch.exp(log_rho)  # [N, T]
    unclipped = -ratio * adv  # [N, T]
    clipped_ratio = ratio.clamp(1.0 - epsilon, 1.0 + epsilon_high)
    clipped = -clipped_ratio * adv  # [N, T]
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (verl default 3.0), got {dual_clip}")
        cap = -dual_clip * adv
        capped = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
        was_clipped = was_clipped | capped
    zeros = torch.zeros_like(loss)
    return torch.where(mask, loss, zeros), was_clipped & mask


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    max_completion_length: int | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_sequences: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar by a named mode.

    - ``token_mean``: Σ_{i,t} m·ℓ / Σ m (verl "token-mean").
    - ``seq_mean_token_mean``: (1/N) Σ_i (Σ_t m·ℓ / Σ_t m) (TRL "grpo").
    - ``seq_mean_token_sum_norm``: Σ_{i,t} m·ℓ / (N · L_max) (Dr. GRPO as in TRL).
    - ``dapo`` (TRL's): Σ_{i,t} m·ℓ / ``num_tokens``, where the caller passes TRL's normaliser, the
      step's tokens ÷ its optimiser steps per pass (the same as token_mean with one optimiser step).
    - ``bnpo`` (TRL's): this micro-batch's own token mean, times n / ``num_sequences`` (1/A with
      A equal micro-batches, as TRL divides by gradient_accumulation_steps).

    Under gradient accumulation or data parallelism pass the *global* denominators
    (``num_tokens`` = response tokens in the whole optimiser batch, ``num_sequences`` = its
    sequences); then summing the per-micro-batch results gives exactly the full-batch value.

    Args:
        per_token: [N, T] losses.
        mask: [N, T] response mask.
        mode: an aggregation name or a TRL/verl alias (``rlvr.core.names.AGGREGATION_ALIASES``).
        max_completion_length: L_max, required by ``seq_mean_token_sum_norm``.
        num_tokens: global token count (default: this batch's).
        num_sequences: global sequence count (default: this batch's N).

    Returns:
        scalar tensor.

    Convention: a sequence with no response tokens contributes 0 to ``seq_mean_token_mean`` but
    still counts in N; a zero denominator is treated as 1 (the numerator is then 0).
    """
    mode = resolve_aggregation(mode)
    m = mask.to(per_token.dtype)  # [N, T]
    masked = per_token * m
    if num_sequences is None:
        num_sequences = per_token.shape[0]
    if mode in ("token_mean", "dapo"):
        denom = m.sum() if num_tokens is None else num_tokens
        return masked.sum() / _at_least_one(denom, per_token)
    if mode == "bnpo":
        share = per_token.shape[0] / _at_least_one(num_sequences, per_token)
        return masked.sum() / _at_least_one(m.sum(), per_token) * share
    if mode == "seq_mean_token_mean":
        per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1)  # [N]
        return per_seq.sum() / _at_least_one(num_sequences, per_token)
    if max_completion_length is None or max_completion_length <= 0:
        raise ValueError("seq_mean_token_sum_norm needs max_completion_length > 0")
    denom = _at_least_one(num_sequences, per_token) * max_completion_length
    return masked.sum() / denom


def _at_least_one(value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).clamp(min=1)


ANCHOR_PSI = ("log", "luffy")


def anchor_surrogate(
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    psi: str = "log",
    gamma: float = 0.1,
) -> torch.Tensor:
    """Loss on off-policy anchor tokens (expert solutions), never clipped.

    L_t = −Â · ψ(π_θ(a_t)), with ψ(p) = log p (default: an advantage-weighted SFT term, whose
    gradient is exactly −Â ∇log π) or LUFFY's policy shaping ψ(p) = p / (p + γ), which up-weights
    low-probability expert tokens (gradient −Â · γ/(p+γ)² · p ∇log p).

    Anchors have no behaviour log-prob, so there is no ratio and nothing to clip (docs/design/pitfalls.md #11:
    clipping is what made expert tokens contribute little in TRL's experiments).

    Args:
        logprobs: [N, T] log π_θ of the anchor tokens (with grad).
        advantages: [N] or [N, T].
        response_mask: [N, T].

    Returns:
        [N, T] per-token loss, zero at masked positions.

    Convention: [design] docs/algorithms/dagrpo.md; LUFFY (arXiv 2504.14945) for ψ(p) = p/(p+γ), γ = 0.1.
    """
    mask = response_mask.bool()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    safe = torch.where(mask, logprobs, torch.zeros_like(logprobs))  # no exp of junk at padding
    if psi == "log":
        shaped = safe
    elif psi == "luffy":
        p = safe.exp()
        shaped = p / (p + gamma)
    else:
        raise ValueError(f"anchor psi={psi!r}; valid: {ANCHOR_PSI}")
    loss = -adv * shaped
    return torch.where(mask, loss, torch.zeros_like(loss))
