"""The loss of every algorithm here: per-token policy losses (a registry, one signature), the anchor
term, the KL penalty, the composed objective :func:`policy_loss`, the aggregation by name and TRL's
entropy bonus.

    ℓ_t = w_t · POLICY_LOSSES[policy_loss](log π_θ, log π_old, A, mask, settings)   sampled responses
        = −A · ψ(π_θ(a_t))                                  anchors (expert responses): no ratio, never clipped
        + β · KL_k3(log π_θ, log π_ref) [· ρ_t]             when β > 0 (· ρ_t: TRL's use_bias_correction_kl)
    loss = AGGREGATIONS[aggregation](ℓ, mask, denominators)
    loss −= entropy_bonus(...)                             when entropy_coef > 0 (TRL's L = L_policy − c·H)

GRPO, Dr. GRPO, DAPO, GSPO, RLOO differ only in the advantages and the settings; DaGRPO's anchors
are the ``is_anchor`` rows; TA-GRPO's choice of prompts is made before (which log-probs are passed).
w_t is the sampler/trainer importance weight (``rlvr.core.importance``; 1 without the correction):
as in TRL it weights the policy term only, before β·KL is added. Adding a policy loss is one
decorated function (docs/design/architecture.md, "Add a loss"). The settings are validated once, by
the config (an aggregation name is canonical here: the config resolves TRL's and verl's aliases).
Every registered loss and aggregation declares a float64 reference (``rlvr.core.references``) where it
is registered; tests/contracts/ holds it to that reference.

Safety (docs/design/pitfalls.md #4): the log-ratio is masked at padding and clamped to ±``LOG_RATIO_CLAMP``
*before* ``exp``, so a padded position can never produce inf, and 0·inf = NaN can never leak
through the unselected branch of ``min``/``max``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.core import loss_variants as _variants  # noqa: F401  (TRL's and verl's other losses register themselves)
from rlvr.core import references
from rlvr.core.logprobs import LOG_RATIO_CLAMP, log_ratio
from rlvr.core.loss_registry import (  # noqa: F401  (re-exported: rlvr.core.losses is where losses are found)
    POLICY_LOSSES,
    WEIGHTS_INSIDE,
    LossSettings,
    PolicyLossFn,
    register_policy_loss,
)
from rlvr.core.names import AGGREGATION_MODES


@dataclass
class PolicyLoss:
    """The per-token loss and its statistics, as tensors (nothing is synced to the host here)."""

    per_token: torch.Tensor  # [N, T], zero at masked positions
    clipped_tokens: torch.Tensor  # scalar: masked tokens whose gradient the clip removed (anchors never)
    kl_sum: torch.Tensor | None  # scalar: Σ of the per-token KL over the mask (None when β = 0)
    kl: torch.Tensor | None = None  # [N, T] the per-token KL, detached (None when β = 0)
    low_clipped: torch.Tensor | None = None  # [N, T] bool: ρ < 1 − ε_low with A < 0 (TRL's clip_ratio/low)
    high_clipped: torch.Tensor | None = None  # [N, T] bool: ρ > 1 + ε_high with A > 0 (clip_ratio/high)



@register_policy_loss("clip", reference=references.clip,
                      settings=({}, {"epsilon_high": 0.28}, {"dual_clip": 3.0, "epsilon": 0.1}, {"ratio_cap": 1.5},
                                {"importance_level": "sequence"}))
def clip(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
         s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate: L_t = −min(ρ_t A, clip(ρ_t, 1−ε_low, 1+ε_high) A).

    With ``dual_clip`` c (A < 0 only): L_t = min(L_t, −c·A). With ``ratio_cap`` C, ρ_t is first truncated
    to min(ρ_t, C) (truncated importance sampling, TA-GRPO's ``truncated_is``). ``importance_level``
    sequence: ρ is GSPO's sequence ratio. ``advantages``: [N] (broadcast over tokens) or [N, T]; they and
    ``old_logprobs`` are constants of the update (no gradient reaches them).
    """
    epsilon_high = s.epsilon if s.epsilon_high is None else s.epsilon_high
    mask = mask.bool()
    adv = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages).detach()  # [N, 1] or [N, T]
    log_rho = log_ratio(logprobs, old_logprobs.detach(), mask, importance_level=s.importance_level)  # [N, T]
    if s.ratio_cap is not None:
        log_rho = log_rho.clamp(max=math.log(s.ratio_cap))
    ratio = torch.exp(log_rho)  # [N, T]
    unclipped = -ratio * adv  # [N, T]
    clipped = -ratio.clamp(1.0 - s.epsilon, 1.0 + epsilon_high) * adv  # [N, T]
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if s.dual_clip is not None:
        cap = -s.dual_clip * adv
        was_clipped = was_clipped | ((adv < 0) & (loss > cap))
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
    return torch.where(mask, loss, torch.zeros_like(loss)), was_clipped & mask


def _psi_log(p_log: torch.Tensor, gamma: float) -> torch.Tensor:
    return p_log


def _psi_luffy(p_log: torch.Tensor, gamma: float) -> torch.Tensor:
    p = p_log.exp()
    return p / (p + gamma)


ANCHOR_PSI = {"log": _psi_log, "luffy": _psi_luffy}


def anchor_surrogate(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     s: LossSettings) -> torch.Tensor:
    """[N, T] loss on off-policy anchor tokens (expert solutions), never clipped: L_t = −Â · ψ(π_θ(a_t)).

    ψ(p) = log p (``anchor_psi=log``: an advantage-weighted SFT term, gradient exactly −Â ∇log π) or
    LUFFY's policy shaping ψ(p) = p / (p + γ) (``luffy``), which up-weights low-probability expert
    tokens. Anchors have no behaviour log-prob, so there is no ratio and nothing to clip
    (docs/design/pitfalls.md #11). [design] docs/algorithms/dagrpo.md; LUFFY (arXiv 2504.14945), γ = 0.1.
    """
    mask = mask.bool()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    safe = torch.where(mask, logprobs, torch.zeros_like(logprobs))  # no exp of junk at padding
    loss = -adv * ANCHOR_PSI[s.anchor_psi](safe, s.anchor_gamma)
    return torch.where(mask, loss, torch.zeros_like(loss))


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T] k3 estimate of KL(π_θ ‖ π_ref) per token (Schulman): with δ = log π_ref − log π_θ,
    KL_t ≈ exp(δ) − δ − 1 (≥ 0, unbiased under samples from π_θ). δ is masked at padding and clamped
    to ±LOG_RATIO_CLAMP before ``exp``; 0 off the mask. Aggregated exactly like the policy term."""
    mask = mask.bool()
    delta = torch.where(mask, ref_logprobs - logprobs, torch.zeros_like(logprobs))  # [N, T]
    delta = delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    kl = torch.exp(delta) - delta - 1.0
    return torch.where(mask, kl, torch.zeros_like(kl))


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                s: LossSettings, *, is_anchor: torch.Tensor | None = None, ref_logprobs: torch.Tensor | None = None,
                is_weights: torch.Tensor | None = None, keep: torch.Tensor | None = None) -> PolicyLoss:
    """The per-token objective ℓ (module doc) and its clip and KL statistics.

    Args:
        logprobs: [N, T] log π_θ (with grad).
        old_logprobs: [N, T] log π_old (behaviour; ``logprobs.detach()`` on the on-policy pass).
        advantages: [N].
        mask: [N, T] bool, True on the response tokens that are trained on.
        s: the settings.
        is_anchor: [N] bool, the expert responses (None: the batch has none, and their term is not computed).
        ref_logprobs: [N, T] log π_ref, required when β > 0.
        is_weights: [N, T] detached sampler/trainer weights w_t of the sampled rows (None: 1).
        keep: [N, T] or [N, 1] bool, the sampled tokens whose policy term is kept (TRL's off-policy sequence mask
            and top_entropy_quantile's token mask, applied before w_t and β·KL as TRL does; None: all).

    Convention: the sampled responses' loss sees the sampled rows' mask only (a batch statistic, Clip-Cov's
    covariance, leaves anchors out); anchors keep their tokens out of ``clipped_tokens``; the KL is added to anchor rows
    too (a penalty on the policy, whatever the response); with ``kl_ratio_weighted`` an anchor's ρ is 1.
    """
    fn = POLICY_LOSSES[s.policy_loss]
    inside = s.policy_loss in WEIGHTS_INSIDE
    sampled = mask if is_anchor is None else mask.bool() & ~is_anchor.unsqueeze(-1)  # (a loss's batch statistics)
    per_token, clipped = (fn(logprobs, old_logprobs, advantages, sampled, s, is_weights=is_weights) if inside
                          else fn(logprobs, old_logprobs, advantages, sampled, s))  # [N, T]
    low, high = clip_regions(logprobs.detach(), old_logprobs, advantages, mask, s, is_anchor=is_anchor)
    if keep is not None:
        per_token = per_token * keep.to(per_token.dtype)
        clipped = clipped & keep
    if is_weights is not None and not inside:
        per_token = per_token * is_weights.detach()
    if is_anchor is not None:
        anchor = is_anchor.unsqueeze(-1)  # [N, 1]
        per_token = torch.where(anchor, anchor_surrogate(logprobs, advantages, mask, s), per_token)
        clipped = clipped & ~anchor
    kl_sum = kl_detached = None
    if s.beta > 0:
        kl = kl_k3(logprobs, ref_logprobs, mask)  # [N, T]
        kl_sum = kl.detach()[mask].sum()
        if s.kl_ratio_weighted:
            ratio = log_ratio(logprobs, old_logprobs, mask, importance_level=s.importance_level).exp()  # [N, T]
            if is_anchor is not None:
                ratio = torch.where(is_anchor.unsqueeze(-1), torch.ones_like(ratio), ratio)
            kl = kl * ratio  # (TRL logs the weighted KL)
        kl_detached = kl.detach()
        per_token = per_token + s.beta * kl
    return PolicyLoss(per_token, clipped.sum(), kl_sum, kl_detached, low, high)


def clip_regions(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                 s: LossSettings, *, is_anchor: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's clip statistics per token: (ρ < 1 − ε_low and A < 0, ρ > 1 + ε_high and A > 0), [N, T] bool each,
    False at masked positions and on anchor rows (they have no ratio)."""
    epsilon_high = s.epsilon if s.epsilon_high is None else s.epsilon_high
    ratio = log_ratio(logprobs, old_logprobs, mask, importance_level=s.importance_level).exp()  # [N, T]
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    keep = mask.bool() if is_anchor is None else mask.bool() & ~is_anchor.unsqueeze(-1)
    return (ratio < 1 - s.epsilon) & (adv < 0) & keep, (ratio > 1 + epsilon_high) & (adv > 0) & keep


@dataclass(frozen=True)
class Denominators:
    """The global counts an aggregation divides by (under gradient accumulation or several processes: the
    whole optimiser batch's, so that summing the micro-batches' results gives the full-batch value)."""

    num_tokens: float | torch.Tensor | None = None  # response tokens (None: this batch's)
    num_sequences: float | torch.Tensor | None = None  # sequences (None: this batch's N)
    max_completion_length: int | None = None  # L_max of seq_mean_token_sum_norm


def _at_least_one(value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).clamp(min=1)


# fn(per_token [N, T], mask [N, T] float, denominators) -> scalar loss
AggregationFn = Callable[[torch.Tensor, torch.Tensor, Denominators], torch.Tensor]
AGGREGATIONS: dict[str, AggregationFn] = {}


@dataclass(frozen=True)
class AggregationContract:
    """What an aggregation declares at registration, and the generated suite checks it against."""

    reference: AggregationFn  # float64, a plain loop over sequences and tokens (core/references.py)
    # Σ over micro-batches, each given the step's global Denominators, equals the whole batch's value
    micro_batch_additive: bool = True


AGGREGATION_CONTRACTS: dict[str, AggregationContract] = {}


def register_aggregation(name: str, *, reference: AggregationFn | None = None,
                         micro_batch_additive: bool = True) -> Callable[[AggregationFn], AggregationFn]:
    """Decorator: ``fn(per_token, mask, denominators) -> scalar`` becomes the reduction ``loss_type=name``.

    ``reference`` and ``micro_batch_additive`` are its contract (:class:`AggregationContract`); without a
    reference it has none, and tests/contracts/test_aggregation_contract.py fails on it, saying what to declare.
    """
    contract = None if reference is None else AggregationContract(reference, micro_batch_additive)

    def register(fn: AggregationFn) -> AggregationFn:
        AGGREGATIONS[name] = fn
        if name not in AGGREGATION_MODES:
            AGGREGATION_MODES.append(name)  # the config accepts it from now on
        if contract is None:
            AGGREGATION_CONTRACTS.pop(name, None)
        else:
            AGGREGATION_CONTRACTS[name] = contract
        return fn

    return register


@register_aggregation("token_mean", reference=references.token_mean)
@register_aggregation("dapo", reference=references.token_mean)
def _token_mean(per_token, m, d: Denominators):
    """Σ m·ℓ / Σ m (verl's token-mean); ``dapo``: the caller passes TRL's normaliser as num_tokens."""
    return (per_token * m).sum() / _at_least_one(m.sum() if d.num_tokens is None else d.num_tokens, per_token)


@register_aggregation("bnpo", reference=references.bnpo, micro_batch_additive=False)
def _bnpo(per_token, m, d: Denominators):
    """TRL's bnpo: this micro-batch's own token mean × n / num_sequences (1/A for A equal micro-batches). Not
    micro-batch additive: the micro-batches' results sum to the step's token mean only when each holds as many
    tokens per sequence as the step (TRL's definition)."""
    n = per_token.shape[0]
    share = n / _at_least_one(n if d.num_sequences is None else d.num_sequences, per_token)
    return (per_token * m).sum() / _at_least_one(m.sum(), per_token) * share


@register_aggregation("seq_mean_token_mean", reference=references.seq_mean_token_mean)
def _seq_mean_token_mean(per_token, m, d: Denominators):
    """(1/N) Σ_i (Σ_t m·ℓ / Σ_t m) (TRL's grpo); a sequence with no tokens adds 0 but counts in N."""
    per_seq = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1)  # [N]
    return per_seq.sum() / _at_least_one(per_token.shape[0] if d.num_sequences is None else d.num_sequences, per_token)


@register_aggregation("seq_mean_token_sum", reference=references.seq_mean_token_sum)
def _seq_mean_token_sum(per_token, m, d: Denominators):
    """(1/N) Σ_i Σ_t m·ℓ (verl's seq-mean-token-sum; TRL's luspo): a sequence's summed loss, averaged over N."""
    return (per_token * m).sum() / _at_least_one(per_token.shape[0] if d.num_sequences is None else d.num_sequences,
                                                 per_token)


@register_aggregation("seq_mean_token_sum_norm", reference=references.seq_mean_token_sum_norm)
def _seq_mean_token_sum_norm(per_token, m, d: Denominators):
    """Σ m·ℓ / (N · L_max) (Dr. GRPO, as TRL's dr_grpo)."""
    if d.max_completion_length is None or d.max_completion_length <= 0:
        raise ValueError("seq_mean_token_sum_norm needs max_completion_length > 0")
    n = _at_least_one(per_token.shape[0] if d.num_sequences is None else d.num_sequences, per_token)
    return (per_token * m).sum() / (n * d.max_completion_length)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, *, max_completion_length: int | None = None,
              num_tokens: float | torch.Tensor | None = None,
              num_sequences: float | torch.Tensor | None = None) -> torch.Tensor:
    """A per-token loss [N, T] reduced to a scalar by the aggregation ``mode`` (a canonical name of
    :data:`AGGREGATIONS`; ``rlvr.core.names.resolve_aggregation`` maps TRL's and verl's aliases), dividing
    by the given global denominators (:class:`Denominators`); a zero denominator counts as 1."""
    denominators = Denominators(num_tokens, num_sequences, max_completion_length)
    return AGGREGATIONS[mode](per_token, mask.to(per_token.dtype), denominators)


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


def micro_means(out: PolicyLoss, entropy: torch.Tensor, mask: torch.Tensor, is_anchor: torch.Tensor, *,
                sequence_level: bool) -> dict[str, torch.Tensor]:
    """One micro-batch's means of TRL's train metrics (float64 scalars on the device, no host sync).

    ``out``: the micro-batch's ``rlvr.core.losses.PolicyLoss``; ``entropy`` [n, T]; ``mask`` [n, T];
    ``is_anchor`` [n]. Anchors have no ratio and were not sampled: they are left out of every mean.
    As TRL's ``global_masked_mean``: token means over the trained tokens; with a ratio per sequence (GSPO)
    the clip fractions are means over the sequences, every one of them (one with no trained token counts 0).
    """
    sampled = mask.bool() & ~is_anchor.unsqueeze(-1)  # [n, T]
    rows = ~is_anchor  # [n]
    tokens = sampled.sum(-1)  # [n]
    d = lambda value: value.detach().to(torch.float64)
    token_mean = lambda x: d(torch.where(sampled, x, torch.zeros_like(x)).sum() / sampled.sum().clamp(min=1))
    zero = torch.zeros((), dtype=torch.float64, device=mask.device)

    def per_sequence(flags: torch.Tensor) -> torch.Tensor:
        """Each row's clipped fraction; a GSPO row's flag is its sequence's (0 when it has no trained token)."""
        fraction = (flags & sampled).sum(-1).double() / tokens.clamp(min=1)
        return fraction[rows] if sequence_level else fraction[rows & (tokens > 0)]  # token level: NaN rows out

    def mean(flags: torch.Tensor) -> torch.Tensor:
        if sequence_level:
            values = per_sequence(flags)
            return values.mean() if values.numel() else zero
        return token_mean(flags.double())

    low, high = out.low_clipped, out.high_clipped
    low_seq, high_seq = per_sequence(low), per_sequence(high)
    return {
        "micro_batches": torch.ones((), dtype=torch.float64, device=mask.device),
        "entropy_micro": token_mean(entropy.double()),
        "kl_micro": token_mean(out.kl.double()) if out.kl is not None else zero,
        "clip_low_micro": mean(low), "clip_high_micro": mean(high), "clip_region_micro": mean(low | high),
        "clip_low_min_micro": low_seq.min() if low_seq.numel() else zero,
        "clip_high_max_micro": high_seq.max() if high_seq.numel() else zero,
        "clip_extreme_micro": torch.ones((), dtype=torch.float64, device=mask.device) if low_seq.numel() else zero,
    }
