"""Per-token log-probabilities and entropy from logits.

Convention: logits are divided by the sampling temperature before log-softmax, so the trainer
scores tokens under the same distribution the sampler drew them from (USERS.md #5). top_p is not
applied (as in TRL and verl): the ratio is against the tempered, untruncated distribution.
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[token] for every position.

    Computed as gathered logit − logsumexp, so no [N, T, V] log-softmax tensor is kept.

    Args:
        logits: [N, T, V] (any float dtype; computed in fp32).
        tokens: [N, T] long, the token at each position.

    Returns:
        [N, T] fp32 log-probs.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
    scaled = logits.float() / temperature  # [N, T, V]
    picked = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]
    return picked - torch.logsumexp(scaled, dim=-1)


def entropy_from_logits(logits: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / T) at every position: −Σ_v p log p.

    Args:
        logits: [N, T, V].

    Returns:
        [N, T] fp32.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
    scaled = logits.float() / temperature  # [N, T, V]
    logp = torch.log_softmax(scaled, dim=-1)
    return -(logp.exp() * logp).sum(-1)
