"""Per-token log-probabilities and entropy from logits.

Convention: logits are divided by the sampling temperature before log-softmax, so the trainer
scores tokens under the same distribution the sampler drew them from (docs/design/pitfalls.md #5). top_p is not
applied (as in TRL and verl): the ratio is against the tempered, untruncated distribution.

Cost: the logits of a training micro-batch are [N, T, V] (SmolLM2: 32 x 128 x 49152 fp32 = 0.8 GB),
so every full pass over them counts. ``token_logprobs`` makes no [N, T, V] temporary in its forward
at T = 1 with fp32 logits (one logsumexp pass and a gather), and its backward writes the gradient
    d logp_t / d s_v = 1[v = x_t] − softmax(s)_v
into one new [N, T, V] tensor in place (autograd's generic logsumexp + gather backward allocates
four). ``entropy_from_logits`` works a few rows at a time and can reuse the logsumexp.
"""

from __future__ import annotations

import torch

_CHUNK_ELEMENTS = 1 << 24  # entropy temporaries stay below 64 MB of fp32


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
    scaled = logits.float()  # no copy when already fp32
    return scaled if temperature == 1.0 else scaled / temperature


def softmax_entropy(scaled: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """H = Σ_v p_v · (lse − s_v) over the last axis of ``scaled`` (lse: its logsumexp), in fp32 even under autocast.

    Each term p_v · (−log p_v) is non-negative, so nothing cancels (lse − Σ p·s loses ~1e-4 nats to
    cancellation at a 49k vocabulary in fp32; this form is within ~2e-5 of fp64, as TRL's). Under bf16
    autocast ``torch.linalg.vecdot`` would run in bf16 (it is on autocast's matmul list): the entropy then
    came out up to 0.19 nats off; autocast is off here.
    """
    with torch.autocast(device_type=scaled.device.type, enabled=False):
        scaled = scaled.float()
        return torch.linalg.vecdot(torch.softmax(scaled, dim=-1), lse.float().unsqueeze(-1) - scaled)


def token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_logsumexp: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log softmax(logits / T)[token] for every position.

    Computed as gathered logit − logsumexp, so no [N, T, V] log-softmax tensor is kept.

    Args:
        logits: [N, T, V] (any float dtype; computed in fp32).
        tokens: [N, T] long, the token at each position.
        return_logsumexp: also return logsumexp(logits / T) [N, T] (for :func:`entropy_from_logits`).

    Returns:
        [N, T] fp32 log-probs (and the logsumexp).
    """
    scaled = _tempered(logits, temperature)  # [N, T, V]
    logprobs, lse = _TokenLogprob.apply(scaled, tokens)
    return (logprobs, lse) if return_logsumexp else logprobs


class _TokenLogprob(torch.autograd.Function):
    """(s[x] − logsumexp(s), logsumexp(s)) with a fused backward for the first output."""

    @staticmethod
    def forward(ctx, scaled: torch.Tensor, tokens: torch.Tensor):
        lse = torch.logsumexp(scaled, dim=-1)  # [N, T]
        picked = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]
        ctx.save_for_backward(scaled, tokens, lse)
        ctx.mark_non_differentiable(lse)
        return picked - lse, lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_lse: torch.Tensor):
        scaled, tokens, lse = ctx.saved_tensors
        grad_scaled = torch.sub(scaled, lse.unsqueeze(-1)).exp_()  # softmax, [N, T, V]
        grad_scaled.mul_(-grad.unsqueeze(-1))
        grad_scaled.scatter_add_(-1, tokens.unsqueeze(-1), grad.unsqueeze(-1))
        return grad_scaled, None


def entropy_from_logits(
    logits: torch.Tensor, *, temperature: float = 1.0, logsumexp: torch.Tensor | None = None
) -> torch.Tensor:
    """Entropy of softmax(logits / T) at every position: H = Σ_v p_v·(lse − s_v) with s = logits / T.

    Args:
        logits: [N, T, V].
        logsumexp: logsumexp(logits / T) [N, T] if already known.

    Returns:
        [N, T] fp32; under no_grad for a statistic, or differentiable (an entropy bonus): each chunk's
        softmax is then kept for the backward, and ``logsumexp`` must not be detached.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
    n, t, v = logits.shape
    out = torch.empty((n, t), dtype=torch.float32, device=logits.device)
    rows = max(1, _CHUNK_ELEMENTS // max(1, t * v))
    for start in range(0, n, rows):
        scaled = _tempered(logits[start : start + rows], temperature)  # [r, T, V]
        lse = torch.logsumexp(scaled, dim=-1) if logsumexp is None else logsumexp[start : start + rows].float()
        out[start : start + rows] = softmax_entropy(scaled, lse)  # [r, T]
    return out


LOG_RATIO_CLAMP = 20.0  # the log-ratio is clamped to ±this before exp (docs/design/pitfalls.md #4)


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, *,
              importance_level: str = "token") -> torch.Tensor:
    """[N, T] masked, clamped log π_θ − log π_old; ``sequence`` (GSPO): the length-normalised sequence
    log-ratio (1/|o|) Σ_t (log π_θ − log π_old), broadcast over the sequence's tokens. 0 off the mask."""
    mask = mask.bool()
    diff = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))  # [N, T]
    if importance_level == "sequence":
        lengths = mask.sum(-1, keepdim=True).clamp(min=1)  # [N, 1]
        diff = (diff.sum(-1, keepdim=True) / lengths).expand_as(diff)  # [N, T]
        diff = torch.where(mask, diff, torch.zeros_like(diff))
    return diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
