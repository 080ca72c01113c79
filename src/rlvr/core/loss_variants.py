"""The policy losses beyond PPO's clip, each as TRL 1.16 or verl 0.9 computes it, and the token masks of TRL's
``top_entropy_quantile`` and ``off_policy_mask_threshold``. Registered in ``rlvr.core.losses.POLICY_LOSSES``
(``policy_loss=<name>``; TRL's ``loss_type`` cispo / sapo / vespo choose them, rlvr.core.names.TRL_LOSS_TYPES).

With ρ_t = π_θ / π_old per token (``importance_sampling_level=sequence``: GSPO's length-normalised sequence ratio),
A the advantage, and ``sg`` a stop-gradient:

    cispo     ℓ_t = −sg(min(ρ_t, ε_high)) · A · log π_θ                 TRL's CISPO: ε_high caps the ratio itself
    sapo      ℓ_t = −σ(τ (ρ_t − 1)) · 4/τ · A,  τ = τ_pos if A > 0 else τ_neg       (SAPO, TRL's and verl's)
    vespo     ℓ_t = −sg(φ(w)) · A · log π_θ,  φ(w) = e^λ w^k e^{−λw},  w = Π_t ρ_t (· the sampler correction)
    clip_cov  PPO's clip, and the gradient of a random few unclipped tokens whose centred A · log π covariance lies
              in (lb, ub) removed (verl's Clip-Cov)
    kl_cov    −ρ_t A, plus ppo_kl_coef · |log ρ_t| on the top kl_cov_ratio tokens by that covariance (verl's KL-Cov)

[paper] CISPO: MiniMax-M1 (arXiv 2506.13585); SAPO: arXiv 2511.20347; VESPO's γ-weights: TRL 1.16's
``get_gamma_weights``; Clip-Cov / KL-Cov: "The Entropy Mechanism of RL for Reasoning LMs" (arXiv 2505.22617).
tests/conformance/test_trl_loss.py and test_verl_core_algos.py run TRL's and verl's own code beside these; each
is registered with its float64 reference (rlvr.core.references), which tests/contracts/test_loss_contract.py
holds it to. The advantages and old log-probs are constants of the update: no gradient reaches them.
"""

from __future__ import annotations

import math

import torch

from rlvr.core import references
from rlvr.core.logprobs import LOG_RATIO_CLAMP, log_ratio
from rlvr.core.loss_registry import LossSettings, register_policy_loss

VESPO_LOG_FLOOR = math.log(1e-8)  # TRL's clamp of log w (and of the sampler correction's log-weights)


def _adv(advantages: torch.Tensor) -> torch.Tensor:
    """[N, 1] or [N, T], detached: an advantage is a constant of the update."""
    return (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages).detach()


def _masked(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


@register_policy_loss("cispo", reference=references.cispo, on_policy=references.on_policy_logprob,
                      settings=({"epsilon_high": 5.0}, {"epsilon_high": 1.25},
                                {"epsilon_high": 1.25, "importance_level": "sequence"}))
def cispo(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """TRL's CISPO: ℓ_t = −sg(min(ρ_t, ε_high)) · A · log π_θ (module doc); clipped: ρ_t > ε_high with A > 0
    (TRL's ``cispo_clip_ratio``). ``epsilon_high`` (ε when not given, as TRL) is the cap on ρ itself, not
    1 + ε_high: TRL's docs suggest epsilon_high = 5.0 with CISPO (verl's cispo clips to [1 − ε, 1 + ε_high])."""
    adv = _adv(advantages)
    ratio = log_ratio(logprobs, old_logprobs.detach(), mask, importance_level=s.importance_level).exp()
    loss = -ratio.clamp(max=s.epsilon if s.epsilon_high is None else s.epsilon_high).detach() * adv * logprobs
    return _masked(loss, mask), cispo_clipped(ratio, adv, mask, s)


def cispo_clipped(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """[N, T] bool: the tokens whose ratio CISPO caps (ρ > ε_high with A > 0), on the mask."""
    cap = s.epsilon if s.epsilon_high is None else s.epsilon_high
    return (ratio > cap) & (adv > 0) & mask.bool()


@register_policy_loss("sapo", reference=references.sapo, on_policy=references.on_policy_sapo,
                      settings=({}, {"importance_level": "sequence", "sapo_temperature_neg": 2.0}))
def sapo(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """SAPO's soft gate instead of the clip: ℓ_t = −σ(τ (ρ_t − 1)) · 4/τ · A (module doc); nothing is clipped."""
    adv = _adv(advantages)
    ratio = log_ratio(logprobs, old_logprobs.detach(), mask, importance_level=s.importance_level).exp()
    tau = torch.where(adv > 0, s.sapo_temperature_pos, s.sapo_temperature_neg).to(ratio.dtype)
    loss = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv
    return _masked(loss, mask), torch.zeros_like(mask, dtype=torch.bool)


def vespo_weights(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  s: LossSettings, is_weights: torch.Tensor | None = None) -> torch.Tensor:
    """[N, 1] VESPO's detached γ-weights φ(w) = exp(λ + k log w − λ w), with w the sequence's product of token
    ratios Π_t ρ_t (a sum of log-ratios, not GSPO's mean) times the sampler correction's weights (``is_weights``
    [N, T], 0 off the mask; ``s.is_level`` sequence: one weight per sequence), each log clamped to
    [log 1e-8, 20] as TRL's ``get_gamma_weights``; (k, λ) = (vespo_k_pos, vespo_lambda_pos) for A ≥ 0, else the
    _neg pair. A non-finite φ is 0."""
    with torch.no_grad():
        m = mask.bool()
        diff = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs)).clamp(-LOG_RATIO_CLAMP,
                                                                                      LOG_RATIO_CLAMP)
        log_w = diff.sum(-1, keepdim=True)  # [N, 1]
        if is_weights is not None:
            log_is = torch.log(is_weights).clamp(VESPO_LOG_FLOOR, 20.0)  # [N, T]
            if s.is_level == "sequence":  # one weight per sequence (0 rows: no valid token, TRL's ratio 1)
                has = m.any(-1, keepdim=True)
                first = torch.where(has, log_is.gather(-1, m.float().argmax(-1, keepdim=True)), 0.0)
                log_w = log_w + first
            else:
                log_w = log_w + torch.where(m, log_is, torch.zeros_like(log_is)).sum(-1, keepdim=True)
        log_w = log_w.clamp(VESPO_LOG_FLOOR, 20.0)
        adv = _adv(advantages)[:, :1]  # [N, 1]: a response's advantage
        nonneg = adv >= 0
        k = torch.where(nonneg, s.vespo_k_pos, s.vespo_k_neg).to(log_w.dtype)
        lam = torch.where(nonneg, s.vespo_lambda_pos, s.vespo_lambda_neg).to(log_w.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@register_policy_loss("vespo", weights_inside=True, reference=references.vespo,
                      on_policy=references.on_policy_logprob,
                      settings=({}, {"is_level": "token"}, {"is_level": "sequence", "vespo_k_pos": 1.0}))
def vespo(logprobs, old_logprobs, advantages, mask, s: LossSettings, *, is_weights=None):
    """VESPO: ℓ_t = −φ(w) · A · log π_θ, φ of :func:`vespo_weights` (which takes the sampler correction's weights
    into w: they are not multiplied into ℓ again, as in TRL). Nothing is clipped."""
    phi = vespo_weights(logprobs.detach(), old_logprobs, advantages, mask, s, is_weights)
    loss = -phi * _adv(advantages) * logprobs
    return _masked(loss, mask), torch.zeros_like(mask, dtype=torch.bool)


def _centred_covariance(logprobs: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T] (A − mean A) · (log π_θ − mean log π_θ), the means over the mask (verl's masked_mean)."""
    m = mask.to(logprobs.dtype)
    adv = adv.expand_as(logprobs)
    mean_adv = (adv * m).sum() / m.sum()
    mean_logp = (logprobs.detach() * m).sum() / m.sum()
    return (adv - mean_adv) * (logprobs - mean_logp)


@register_policy_loss("clip_cov", reference=references.clip_cov,
                      settings=({}, {"clip_cov_ratio": 0.2, "clip_cov_lb": 0.0}))
def clip_cov(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """verl's Clip-Cov: PPO's clipped surrogate (ε_low, ε_high; no dual clip), with the gradient of
    ⌊clip_cov_ratio · tokens⌋ (≥ 1) tokens removed, drawn at random (torch's generator, as verl's randperm) from
    the unclipped tokens whose covariance (A − Ā)(log π − mean log π) lies in (clip_cov_lb, clip_cov_ub).
    clipped: the tokens it removed (verl's pg_clipfrac)."""
    epsilon_high = s.epsilon if s.epsilon_high is None else s.epsilon_high
    m = mask.bool()
    adv = _adv(advantages).expand_as(logprobs)
    ratio = (logprobs - old_logprobs.detach()).exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - s.epsilon, 1 + epsilon_high)
    by_clip = (clipped > unclipped) & m
    cov = _centred_covariance(logprobs, adv, mask).detach()
    cov = cov.masked_fill(~m | by_clip, -math.inf)
    count = max(int(s.clip_cov_ratio * float(m.sum())), 1)
    candidates = torch.nonzero((cov < s.clip_cov_ub) & (cov > s.clip_cov_lb) & m)
    corr = torch.ones_like(adv)
    if len(candidates) > 0:
        chosen = candidates[torch.randperm(len(candidates))[:min(count, len(candidates))]]
        corr[chosen[:, 0], chosen[:, 1]] = 0
    loss = torch.maximum(unclipped, clipped) * corr
    return _masked(loss, mask), (corr == 0) & m


@register_policy_loss("kl_cov", reference=references.kl_cov, settings=({}, {"kl_cov_ratio": 0.2}))
def kl_cov(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """verl's KL-Cov: ℓ_t = −A ρ_t, plus ppo_kl_coef · |log ρ_t| on the max(1, ⌊kl_cov_ratio · tokens⌋) tokens
    of the largest covariance (A − Ā)(log π − mean log π) (means over the mask); no clip, nothing clipped."""
    m = mask.bool()
    adv = _adv(advantages).expand_as(logprobs)
    diff = logprobs - old_logprobs.detach()
    loss = -adv * diff.exp()
    cov = _centred_covariance(logprobs.detach(), adv.detach(), mask)[m]  # the valid tokens, row-major
    if cov.numel():
        top = torch.topk(cov, max(1, int(cov.numel() * s.kl_cov_ratio)), largest=True).indices
        chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
        chosen[top] = True
        penalised = torch.zeros_like(m)
        penalised[m] = chosen
        loss = torch.where(penalised, loss + s.ppo_kl_coef * diff.abs(), loss)
    return _masked(loss, mask), torch.zeros_like(m)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float,
                      threshold: torch.Tensor | None = None) -> torch.Tensor:
    """[N, T] bool: TRL's ``top_entropy_quantile`` — the masked tokens whose entropy is at least the
    (1 − quantile)-quantile of the masked tokens' entropies (``threshold``: that value when computed over
    several processes' tokens). No masked token: none kept."""
    m = mask.bool()
    if threshold is None:
        values = entropy.detach()[m].float()
        if values.numel() == 0:
            return torch.zeros_like(m)
        threshold = torch.quantile(values, 1 - quantile)
    return (entropy.detach() * m >= threshold) & m


def off_policy_mask(logprobs: torch.Tensor, sampling_logprobs: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """[N, 1] TRL's ``off_policy_mask_threshold`` (DeepSeek-V3.2's off-policy sequence mask): keep a response
    when A ≥ 0 or its mean KL estimate over the mask, mean(log π_sampler − log π_θ), is at most the threshold.
    A token with a NaN sampler log-prob adds 0."""
    m = mask.to(logprobs.dtype)
    kl = torch.nan_to_num(sampling_logprobs - logprobs.detach(), nan=0.0)
    mean_kl = (kl * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    return (_adv(advantages)[:, :1] >= 0) | (mean_kl <= threshold)
