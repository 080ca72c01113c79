"""Float64 references of the registered advantage estimators, policy losses and loss aggregations: the oracles
that the generated contract suites (tests/contracts/) hold each registered function to.

Each estimator, loss and aggregation declares its reference where it is registered (``reference=`` of
``register_advantage``, ``register_policy_loss``, ``register_aggregation``); the suites find them there.

Why a module of their own, rather than beside each implementation:

- they are written apart, on purpose: a plain Python loop per group, per sequence or per token over values
  read with ``.tolist()``, sharing no helper with the vectorised code (not ``group_statistics``, not
  ``log_ratio``, not ``_at_least_one``), so that a bug in the fast version cannot be copied into its check;
- they are written in the textbook form where one exists (PPO's clip as its case analysis on the sign of A,
  RLOO as "r_i minus the mean of the others", the sigmoid as 1/(1 + e^−x)), not as a transcription;
- the implementation files stay the algorithm only, and a reader can set the two versions side by side.

They are never on the training path: speed does not matter, and their host syncs (``.tolist()``) are harmless.
A loss's reference builds its [N, T] loss from 0-d float64 tensors of the current log-probs, so autograd on it
gives the reference gradient; the old log-probs and advantages are constants (read detached). A loss that
draws at random (``clip_cov``) draws from torch's global generator in the same order as its implementation:
the suite seeds it before each call.

Convention: float64 throughout; std unbiased (n − 1), 0 with fewer than two values; constants of the
implementations that are conventions, not code (SCORE_TOL, VESPO's clamps), restated here from their docs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from rlvr.core.logprobs import LOG_RATIO_CLAMP

if TYPE_CHECKING:
    from rlvr.core.advantages import AdvantageInputs, AdvantageSettings
    from rlvr.core.loss_registry import LossSettings

F64 = torch.float64
SCORE_TOL = 1e-6  # DaGRPO's tolerance on score gaps (rlvr.core.advantages' module doc)
VESPO_LOG_CLAMP = (math.log(1e-8), 20.0)  # TRL's get_gamma_weights clamps log w to this


# ---------------------------------------------------------------------------------------------
# Advantage estimators: (inputs, settings) -> [N] float64


def _groups(group_ids: list[int]) -> list[list[int]]:
    """The positions of each group, in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, gid in enumerate(group_ids):
        groups.setdefault(gid, []).append(i)
    return list(groups.values())


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _std(values: list[float]) -> float:
    """Unbiased std; 0 with fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def grpo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """A_i = (r_i − mean_g r) / (σ + ε), σ the group's or the batch's std (none: no division); 0 for a group of
    one or of equal rewards."""
    return _relative(inputs, s, leave_one_out=False)


def rloo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """A_i = (r_i − mean_{j≠i} r_j) / (σ + ε) (the mean of the others, as RLOO's paper writes it)."""
    return _relative(inputs, s, leave_one_out=True)


def _relative(inputs: AdvantageInputs, s: AdvantageSettings, *, leave_one_out: bool) -> torch.Tensor:
    rewards = [float(r) for r in inputs.rewards.tolist()]
    out = [0.0] * len(rewards)
    batch_std = _std(rewards)
    for members in _groups(inputs.group_ids.tolist()):
        values = [rewards[i] for i in members]
        if len(values) < 2 or len(set(values)) == 1:
            continue
        for i in members:
            if leave_one_out:
                baseline = _mean([rewards[j] for j in members if j != i])
            else:
                baseline = _mean(values)
            advantage = rewards[i] - baseline
            if s.scale_rewards != "none":
                advantage /= (_std(values) if s.scale_rewards == "group" else batch_std) + s.eps
            out[i] = advantage
    return torch.tensor(out, dtype=F64)


def dagrpo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """Â_i = Σ_{j≠i} m_ij (c_i − c_j) / (G · scale), pair by pair (rlvr.core.advantages' module doc): m_ij keeps
    a pair whose score gap exceeds SCORE_TOL and is at least τ − SCORE_TOL (τ_g = κ·std_g(s) when κ is given);
    scale = σ + ε with σ the std of c over the ``stats_mask`` members (of the group, or of the batch), or 1 when
    that σ is 0 while ``stats_mask`` is given, or 1 under scale_rewards=none."""
    rewards = [float(r) for r in inputs.rewards.tolist()]
    scores = rewards if inputs.scores is None else [float(x) for x in inputs.scores.tolist()]
    c = rewards if s.contrast == "reward" else scores
    in_stats = [True] * len(c) if inputs.stats_mask is None else [bool(b) for b in inputs.stats_mask.tolist()]
    batch_sigma = _std([c[i] for i in range(len(c)) if in_stats[i]])
    out = [0.0] * len(c)
    for members in _groups(inputs.group_ids.tolist()):
        size = len(members)
        if size < 2:
            continue
        tau = s.tau if s.tau_kappa is None else s.tau_kappa * _std([scores[i] for i in members])
        if s.scale_rewards == "none":
            scale = 1.0
        else:
            sigma = _std([c[i] for i in members if in_stats[i]]) if s.scale_rewards == "group" else batch_sigma
            scale = sigma + s.eps if inputs.stats_mask is None or sigma > 0 else 1.0
        for i in members:
            total = 0.0
            for j in members:
                gap = abs(scores[i] - scores[j])
                if j != i and gap > SCORE_TOL and gap >= tau - SCORE_TOL:
                    total += c[i] - c[j]
            out[i] = total / (size * scale)
    return torch.tensor(out, dtype=F64)


# ---------------------------------------------------------------------------------------------
# Policy losses: (logprobs, old_logprobs, advantages [N], mask, settings) -> (loss [N, T] float64, clipped [N, T])


def _token_table(logprobs: torch.Tensor, mask: torch.Tensor, token) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, T] loss and clipped flags: ``token(i, t) -> (0-d loss, clipped)`` at the masked tokens; 0 and False
    elsewhere. Stacked from 0-d tensors, so autograd reaches ``logprobs``."""
    zero = torch.zeros((), dtype=F64)
    losses, flags = [], []
    for i, row in enumerate(mask.bool().tolist()):
        cells = [token(i, t) if on else (zero, False) for t, on in enumerate(row)]
        losses.append(torch.stack([loss.to(F64) for loss, _ in cells]))
        flags.append([flag for _, flag in cells])
    return torch.stack(losses), torch.tensor(flags, dtype=torch.bool).reshape(mask.shape)


def _log_rhos(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, level: str,
              clamp: float | None = LOG_RATIO_CLAMP) -> dict[tuple[int, int], torch.Tensor]:
    """{(i, t): log ρ_it} at the masked tokens: log π_θ − log π_old (``sequence``: the mean of the row's),
    then clamped to ±``clamp`` (None: not clamped, as verl's Clip-Cov and KL-Cov)."""
    old = old_logprobs.detach().to(F64)
    out = {}
    for i, row in enumerate(mask.bool().tolist()):
        tokens = [t for t, on in enumerate(row) if on]
        diffs = {t: logprobs[i, t] - old[i, t] for t in tokens}
        if level == "sequence" and tokens:
            mean = sum(diffs.values()) / len(tokens)
            diffs = dict.fromkeys(tokens, mean)
        for t in tokens:
            out[i, t] = diffs[t] if clamp is None else diffs[t].clamp(-clamp, clamp)
    return out


def _advantages(advantages: torch.Tensor) -> list[float]:
    if advantages.dim() != 1:
        raise ValueError("the loss references take advantages [N]")
    return [float(a) for a in advantages.detach().tolist()]


def clip(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """PPO's clip by the sign of A: A > 0: −A·min(ρ, 1 + ε_high); A < 0: −A·max(ρ, 1 − ε_low), then at most
    −c·A with the dual clip c; ρ first capped at ``ratio_cap``. Clipped: the tokens where the bound was taken."""
    low, high = 1 - s.epsilon, 1 + (s.epsilon if s.epsilon_high is None else s.epsilon_high)
    log_rho, adv = _log_rhos(logprobs, old_logprobs, mask, s.importance_level), _advantages(advantages)

    def token(i, t):
        lr = log_rho[i, t] if s.ratio_cap is None else torch.clamp(log_rho[i, t], max=math.log(s.ratio_cap))
        rho, a = torch.exp(lr), adv[i]
        if a > 0:
            return -a * torch.clamp(rho, max=high), bool(rho > high)
        if a < 0:
            taken = torch.clamp(rho, min=low)
            if s.dual_clip is not None and taken > s.dual_clip:
                return torch.tensor(-a * s.dual_clip, dtype=F64), True
            return -a * taken, bool(rho < low)
        return 0 * rho, False

    return _token_table(logprobs, mask, token)


def cispo(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """ℓ = −w·A·log π_θ with the constant w = min(ρ, ε_high) (ε when ε_high is not given); clipped: ρ > ε_high
    with A > 0."""
    cap = s.epsilon if s.epsilon_high is None else s.epsilon_high
    log_rho, adv = _log_rhos(logprobs, old_logprobs, mask, s.importance_level), _advantages(advantages)

    def token(i, t):
        rho = math.exp(float(log_rho[i, t].detach()))  # a number: no gradient through the weight
        return -min(rho, cap) * adv[i] * logprobs[i, t], rho > cap and adv[i] > 0

    return _token_table(logprobs, mask, token)


def sapo(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """ℓ = −sigmoid(τ(ρ − 1)) · 4/τ · A, sigmoid(x) = 1/(1 + e^−x), τ = τ_pos for A > 0 else τ_neg; none clipped."""
    log_rho, adv = _log_rhos(logprobs, old_logprobs, mask, s.importance_level), _advantages(advantages)

    def token(i, t):
        tau = s.sapo_temperature_pos if adv[i] > 0 else s.sapo_temperature_neg
        gate = 1 / (1 + torch.exp(-tau * (torch.exp(log_rho[i, t]) - 1)))
        return -gate * 4 / tau * adv[i], False

    return _token_table(logprobs, mask, token)


def vespo(logprobs, old_logprobs, advantages, mask, s: LossSettings, *, is_weights=None):
    """ℓ_t = −φ·A·log π_θ with the constant φ = exp(λ + k·log w − λ·w) per sequence, log w = Σ_t log ρ_t (+ the
    sampler weights' logs: every token's, or the first token's with is_level=sequence), each sum's terms and
    log w clamped as TRL; (k, λ) by A ≥ 0; a non-finite φ is 0. None clipped."""
    floor, ceiling = VESPO_LOG_CLAMP
    adv, rows = _advantages(advantages), mask.bool().tolist()
    diffs = (logprobs.detach() - old_logprobs.detach()).to(F64).tolist()
    phis = []
    for i, row in enumerate(rows):
        tokens = [t for t, on in enumerate(row) if on]
        log_w = sum(min(max(diffs[i][t], -LOG_RATIO_CLAMP), LOG_RATIO_CLAMP) for t in tokens)
        if is_weights is not None:
            logs = [min(max(math.log(w), floor), ceiling) if w > 0 else floor for w in is_weights[i].tolist()]
            log_w += (logs[tokens[0]] if tokens else 0.0) if s.is_level == "sequence" else sum(logs[t] for t in tokens)
        log_w = min(max(log_w, floor), ceiling)
        k, lam = (s.vespo_k_pos, s.vespo_lambda_pos) if adv[i] >= 0 else (s.vespo_k_neg, s.vespo_lambda_neg)
        lam = max(lam, 1e-4)
        try:
            phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
        except OverflowError:
            phi = 0.0
        phis.append(phi if math.isfinite(phi) else 0.0)
    return _token_table(logprobs, mask, lambda i, t: (-phis[i] * adv[i] * logprobs[i, t], False))


def _covariances(logprobs: torch.Tensor, adv: list[float], mask: torch.Tensor) -> dict[tuple[int, int], float]:
    """{(i, t): (A_i − Ā)(log π_it − mean log π)} at the masked tokens, both means over the masked tokens."""
    values = logprobs.detach().to(F64).tolist()
    tokens = [(i, t) for i, row in enumerate(mask.bool().tolist()) for t, on in enumerate(row) if on]
    mean_adv = _mean([adv[i] for i, _ in tokens])
    mean_logp = _mean([values[i][t] for i, t in tokens])
    return {(i, t): (adv[i] - mean_adv) * (values[i][t] - mean_logp) for i, t in tokens}


def clip_cov(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """PPO's clip (unclamped ρ, no dual clip), and ⌊ratio·tokens⌋ (≥ 1) tokens set to 0 in value and gradient:
    drawn by ``torch.randperm`` from the row-major list of tokens the clip left alone whose covariance lies in
    (lb, ub). Clipped: those tokens."""
    low, high = 1 - s.epsilon, 1 + (s.epsilon if s.epsilon_high is None else s.epsilon_high)
    log_rho, adv = _log_rhos(logprobs, old_logprobs, mask, "token", clamp=None), _advantages(advantages)
    cov = _covariances(logprobs, adv, mask)

    def ppo(i, t):
        rho, a = torch.exp(log_rho[i, t]), adv[i]
        if a > 0 and rho > high:
            return torch.tensor(-a * high, dtype=F64), True
        if a < 0 and rho < low:
            return torch.tensor(-a * low, dtype=F64), True
        return -a * rho, False

    candidates = [(i, t) for (i, t), value in cov.items() if not ppo(i, t)[1] and s.clip_cov_lb < value < s.clip_cov_ub]
    count = max(int(s.clip_cov_ratio * len(cov)), 1)
    removed = set()
    if candidates:
        removed = {candidates[k] for k in torch.randperm(len(candidates)).tolist()[:count]}

    def token(i, t):
        return (torch.zeros((), dtype=F64), True) if (i, t) in removed else (ppo(i, t)[0], False)

    return _token_table(logprobs, mask, token)


def kl_cov(logprobs, old_logprobs, advantages, mask, s: LossSettings):
    """ℓ = −A·ρ (unclamped ρ), plus ppo_kl_coef·|log ρ| on the max(1, ⌊kl_cov_ratio·tokens⌋) tokens of the
    largest covariance; none clipped."""
    log_rho, adv = _log_rhos(logprobs, old_logprobs, mask, "token", clamp=None), _advantages(advantages)
    cov = _covariances(logprobs, adv, mask)
    ranked = sorted(cov, key=lambda token: cov[token], reverse=True)
    penalised = set(ranked[:max(1, int(len(cov) * s.kl_cov_ratio))])

    def token(i, t):
        loss = -adv[i] * torch.exp(log_rho[i, t])
        return (loss + s.ppo_kl_coef * log_rho[i, t].abs() if (i, t) in penalised else loss), False

    return _token_table(logprobs, mask, token)


def on_policy_ratio(logprobs: torch.Tensor, advantages: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """[N, T] the plain policy gradient's value at ρ = 1: −A·ρ = −A (every loss's default on-policy claim)."""
    return -advantages.detach().to(F64).unsqueeze(-1).expand(logprobs.shape)


def on_policy_logprob(logprobs: torch.Tensor, advantages: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """[N, T] −A·log π_θ: the REINFORCE form's value (CISPO with ε_high ≥ 1, VESPO), whose gradient at ρ = 1 is
    the plain policy gradient's, −A·∇log π_θ."""
    return -advantages.detach().to(F64).unsqueeze(-1) * logprobs.detach().to(F64)


def on_policy_sapo(logprobs: torch.Tensor, advantages: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """[N, T] SAPO at ρ = 1: −sigmoid(0)·4/τ·A = −2A/τ (its gradient there is −A·∇log π_θ: sigmoid'(0) = 1/4)."""
    adv = advantages.detach().to(F64).unsqueeze(-1)
    tau = torch.where(adv > 0, s.sapo_temperature_pos, s.sapo_temperature_neg).to(F64)
    return (-2 * adv / tau).expand(logprobs.shape)


# ---------------------------------------------------------------------------------------------
# Aggregations: (per_token [N, T], mask [N, T], denominators) -> 0-d float64


def _rows(per_token: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Each sequence's masked per-token losses."""
    values = per_token.detach().to(F64).tolist()
    return [[v for v, on in zip(row, keep, strict=True) if on > 0] for row, keep in zip(values, mask.tolist(),
                                                                                         strict=True)]


def _given(value, otherwise: float) -> float:
    """A denominator: the given global count, else this batch's; at least 1."""
    return max(1.0, otherwise if value is None else float(value))


def token_mean(per_token, mask, d) -> torch.Tensor:
    """Σ over the masked tokens / num_tokens (this batch's count when not given)."""
    rows = _rows(per_token, mask)
    return torch.tensor(sum(map(sum, rows)) / _given(d.num_tokens, sum(map(len, rows))), dtype=F64)


def bnpo(per_token, mask, d) -> torch.Tensor:
    """This batch's own token mean × n / num_sequences."""
    rows = _rows(per_token, mask)
    own = sum(map(sum, rows)) / max(1, sum(map(len, rows)))
    return torch.tensor(own * len(rows) / _given(d.num_sequences, len(rows)), dtype=F64)


def seq_mean_token_mean(per_token, mask, d) -> torch.Tensor:
    """Σ over sequences of the sequence's token mean (0 for an empty one) / num_sequences."""
    rows = _rows(per_token, mask)
    means = [sum(row) / len(row) if row else 0.0 for row in rows]
    return torch.tensor(sum(means) / _given(d.num_sequences, len(rows)), dtype=F64)


def seq_mean_token_sum(per_token, mask, d) -> torch.Tensor:
    """Σ over sequences of the sequence's token sum / num_sequences."""
    rows = _rows(per_token, mask)
    return torch.tensor(sum(sum(row) for row in rows) / _given(d.num_sequences, len(rows)), dtype=F64)


def seq_mean_token_sum_norm(per_token, mask, d) -> torch.Tensor:
    """Σ over sequences of the sequence's token sum / (num_sequences · L_max)."""
    if d.max_completion_length is None or d.max_completion_length <= 0:
        raise ValueError("seq_mean_token_sum_norm needs max_completion_length > 0")
    rows = _rows(per_token, mask)
    return torch.tensor(sum(sum(row) for row in rows) / (_given(d.num_sequences, len(rows)) * d.max_completion_length),
                        dtype=F64)
