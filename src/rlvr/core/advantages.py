"""Advantage estimators: a registry, one signature.

    estimator(inputs: AdvantageInputs, settings: AdvantageSettings) -> advantages [N]

``grpo``, ``rloo`` and DaGRPO's masked pairwise form (``dagrpo``) are registered below; adding an
estimator is one decorated function (docs/design/architecture.md, "Add an advantage estimator"). The
settings are validated once, by the config; the estimators trust them. Each declares its contract where it
is registered (:class:`EstimatorContract`: a float64 reference from ``rlvr.core.references`` and the
invariants it claims), which tests/contracts/test_estimator_contract.py holds it to.

Groups are found from ``group_ids`` (a stable id carried with each response), never from positions
in the batch: responses of one group may sit anywhere in the batch. Every group statistic comes
from :func:`group_statistics` (one function, with 0/1 member weights).

Convention: unbiased (n−1) standard deviation; ε is added to the std (``std + eps``), default
ε = 1e-6 as in verl (TRL uses 1e-4). A group of one response has advantage 0. A group whose
rewards are all equal has advantage exactly 0 (set explicitly, not left to rounding).

DaGRPO (our reconstruction, docs/algorithms/dagrpo.md, labels [design]; the paper's abstract only
says that fine-grained scoring "dynamically masks sample pairs with low distinctiveness"). With r̄
the group mean, r_i − r̄ = (1/G) Σ_j (r_i − r_j), so GRPO is a sum of pair contrasts and masking a
pair removes exactly its contrast:

    Â_i = 1/(G·(σ + ε)) · Σ_j m_ij (c_i − c_j),    m_ij = 1[|s_i − s_j| ≥ τ], m_ii = 0

with c = r (``contrast="reward"``) or c = s (``contrast="score"``), σ the group's std of c over the
``stats_mask`` members, and the division by the group size G — never by Σ_j m_ij. With τ = 0 every
pair is kept and Â equals the GRPO advantage. Comparisons are exact up to ``SCORE_TOL`` = 1e-6
(scores are float32, so 0.5·1 + 0.5·0.3 carries ~1e-7 of rounding): a gap within SCORE_TOL of τ
counts as equal to τ and is kept; a gap of at most SCORE_TOL is equal scores and never kept,
whatever τ (also an adaptive τ = κ·std on a group of equal scores).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import torch

from rlvr.core import references
from rlvr.core.names import ADVANTAGE_ESTIMATOR_NAMES

SCORE_TOL = 1e-6


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator reads, per response."""

    rewards: torch.Tensor  # [N] r
    group_ids: torch.Tensor  # [N] int; equal ids form one group
    scores: torch.Tensor | None = None  # [N] DaGRPO's s = α·r + (1−α)·q (None: s = r)
    stats_mask: torch.Tensor | None = None  # [N] bool: the responses whose values enter σ (None: all)


@dataclass(frozen=True)
class AdvantageSettings:
    """The estimator's settings (the plan builds them from the config, which validated them)."""

    estimator: str = "grpo"  # a name of ADVANTAGE_ESTIMATORS
    scale_rewards: str = "group"  # group: σ of the group | batch: σ of the batch (Lite PPO) | none: Dr. GRPO
    eps: float = 1e-6
    tau: float = 0.0  # DaGRPO: the distinctiveness threshold (0: every pair kept)
    tau_kappa: float | None = None  # DaGRPO: adaptive τ_g = κ·std_g(s) (None: the fixed τ)
    contrast: str = "reward"  # DaGRPO: c = r (reward) or c = s (score)


@dataclass(frozen=True)
class GroupStats:
    """Per-response statistics of its group (each [N], float64)."""

    mean: torch.Tensor  # over the weighted members
    std: torch.Tensor  # unbiased, over the weighted members; 0 with fewer than two
    size: torch.Tensor  # every member, weighted or not (G)
    uniform: torch.Tensor  # bool: every member's value is equal


AdvantageFn = Callable[[AdvantageInputs, AdvantageSettings], torch.Tensor]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}

# The invariants an estimator may claim (tests/contracts/test_estimator_contract.py checks each one claimed).
ESTIMATOR_INVARIANTS = {
    "zero_mean_per_group": "the advantages of each group sum to 0",
    "shift_invariant": "adding a constant to every reward (and score) leaves the advantages unchanged",
    "permutation_equivariant": "permuting the responses (within and across groups) permutes the advantages",
    "uniform_group_zero": "a group whose rewards (and scores) are all equal gets exactly 0",
    "singleton_zero": "a group of one response gets exactly 0",
}
OPTIONAL_INPUTS = tuple(f.name for f in fields(AdvantageInputs) if f.name not in ("rewards", "group_ids"))


@dataclass(frozen=True)
class EstimatorContract:
    """What an estimator declares at registration, and the generated suite checks it against."""

    reference: AdvantageFn  # float64, a plain loop per group, written apart from the estimator (core/references.py)
    invariants: tuple[str, ...] = ()  # names of ESTIMATOR_INVARIANTS it claims
    needs: tuple[str, ...] = ()  # the optional AdvantageInputs fields it reads (the suite fills them)
    settings: tuple[dict, ...] = ({},)  # AdvantageSettings overrides the suite checks it under

    def __post_init__(self) -> None:
        unknown = [n for n in self.invariants if n not in ESTIMATOR_INVARIANTS]
        if unknown:
            raise ValueError(f"unknown invariants {unknown}; claim some of {sorted(ESTIMATOR_INVARIANTS)}")
        if any(n not in OPTIONAL_INPUTS for n in self.needs):
            raise ValueError(f"needs={self.needs}: name AdvantageInputs fields among {OPTIONAL_INPUTS}")


ESTIMATOR_CONTRACTS: dict[str, EstimatorContract] = {}


def register_advantage(name: str, *, reference: AdvantageFn | None = None, invariants: Iterable[str] = (),
                       needs: Iterable[str] = (),
                       settings: Iterable[dict] = ({},)) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: ``fn(inputs, settings) -> [N]`` becomes the estimator ``advantage_estimator=name``.

    ``reference`` (float64, one group at a time), ``invariants`` (names of :data:`ESTIMATOR_INVARIANTS`),
    ``needs`` (the optional :class:`AdvantageInputs` it reads) and ``settings`` (overrides of
    :class:`AdvantageSettings` to check it under) are its contract (:class:`EstimatorContract`); without a
    reference it has none, and tests/contracts/test_estimator_contract.py fails on it, saying what to declare.
    """
    contract = None if reference is None else EstimatorContract(reference, tuple(invariants), tuple(needs),
                                                                tuple(settings))

    def register(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGE_ESTIMATORS[name] = fn
        ADVANTAGE_ESTIMATOR_NAMES.add(name)  # the config accepts it from now on
        if contract is None:
            ESTIMATOR_CONTRACTS.pop(name, None)
        else:
            ESTIMATOR_CONTRACTS[name] = contract
        return fn

    return register


def advantage_estimator(name: str) -> AdvantageFn:
    """The estimator registered as ``name``."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage_estimator {name!r}; registered: {sorted(ADVANTAGE_ESTIMATORS)}") from None


def group_statistics(values: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor | None = None) -> GroupStats:
    """Each response's group mean, unbiased std, size and uniform flag.

    Args:
        values: [N].
        group_ids: [N] int; equal ids form one group (all zeros: the batch is one group).
        weights: [N] 0/1, the members that enter the mean and std (None: all).

    Convention: std uses ddof = 1 over the weighted members, 0 when fewer than two.
    """
    index, num_groups = _group_index(group_ids)
    values = values.to(torch.float64)
    keep = torch.ones_like(values) if weights is None else weights.to(torch.float64)  # [N]
    zeros = torch.zeros(num_groups, dtype=torch.float64, device=values.device)
    size = zeros.index_add(0, index, torch.ones_like(values))  # [K]
    count = zeros.index_add(0, index, keep)  # [K]
    mean = zeros.index_add(0, index, values * keep) / count.clamp(min=1)  # [K]
    centred = (values - mean[index]) * keep  # [N]
    sq = zeros.index_add(0, index, centred * centred)  # [K]
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1)).sqrt(), zeros)  # [K]
    vmax = torch.full_like(zeros, -torch.inf).scatter_reduce(0, index, values, "amax")
    vmin = torch.full_like(zeros, torch.inf).scatter_reduce(0, index, values, "amin")
    return GroupStats(mean[index], std[index], size[index], (vmax == vmin)[index])


def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Arbitrary group ids as dense indices 0..K-1, and K."""
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [N], got shape {tuple(group_ids.shape)}")
    uniques, index = torch.unique(group_ids, return_inverse=True)
    return index, int(uniques.numel())


RELATIVE_INVARIANTS = ("zero_mean_per_group", "shift_invariant", "permutation_equivariant", "uniform_group_zero",
                       "singleton_zero")
SCALES = tuple({"scale_rewards": scale} for scale in ("group", "batch", "none"))


@register_advantage("grpo", reference=references.grpo, invariants=RELATIVE_INVARIANTS, settings=SCALES)
def grpo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """GRPO: A_i = (r_i − mean_g r) / (σ + ε), σ per ``scale_rewards`` (none: no division, Dr. GRPO)."""
    return _relative(inputs, s, leave_one_out=False)


@register_advantage("rloo", reference=references.rloo, invariants=RELATIVE_INVARIANTS, settings=SCALES)
def rloo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """RLOO: A_i = r_i − mean_{j≠i} r_j = G/(G−1)·(r_i − mean_g r), divided by σ + ε unless scale_rewards=none."""
    return _relative(inputs, s, leave_one_out=True)


def _relative(inputs: AdvantageInputs, s: AdvantageSettings, *, leave_one_out: bool) -> torch.Tensor:
    """(r − group mean) [× G/(G−1)], ÷ (σ + ε); groups of one and uniform groups → exactly 0."""
    rewards = inputs.rewards
    stats = group_statistics(rewards, inputs.group_ids)
    centred = rewards.to(torch.float64) - stats.mean  # [N]
    if leave_one_out:
        centred = centred * stats.size / (stats.size - 1).clamp(min=1)
    if s.scale_rewards != "none":
        centred = centred / (sigma(rewards, inputs.group_ids, s.scale_rewards, stats) + s.eps)
    dead = stats.uniform | (stats.size < 2)
    return torch.where(dead, torch.zeros_like(centred), centred).to(_out_dtype(rewards))


def sigma(values: torch.Tensor, group_ids: torch.Tensor, scale_rewards: str, stats: GroupStats | None = None,
          weights: torch.Tensor | None = None) -> torch.Tensor:
    """σ per response as ``scale_rewards`` says: of its group (``group``) or of the whole batch (``batch``), over
    the weighted members (an estimator divides by σ + ε unless ``scale_rewards`` is ``none``). ``stats``: the
    group statistics already computed for ``values`` (reused for ``group``)."""
    if scale_rewards == "batch":
        return group_statistics(values, torch.zeros_like(group_ids), weights).std
    return (stats if stats is not None else group_statistics(values, group_ids, weights)).std


@register_advantage("dagrpo", reference=references.dagrpo, invariants=RELATIVE_INVARIANTS,
                    needs=("scores", "stats_mask"),
                    settings=({}, {"tau": 0.3}, {"tau_kappa": 0.5}, {"tau": 0.2, "contrast": "score"},
                              {"tau": 0.3, "scale_rewards": "batch"}, {"tau": 0.3, "scale_rewards": "none"}))
def dagrpo(inputs: AdvantageInputs, s: AdvantageSettings) -> torch.Tensor:
    """DaGRPO's masked pairwise advantages Â_i = Σ_j m_ij (c_i − c_j) / (G (σ + ε)) (see the module's doc).

    σ is over the ``stats_mask`` members (DaGRPO's ``anchor_in_stats=false`` leaves the anchors out); a
    group whose σ over them is 0 while its contrasts are not (an all-wrong group and its anchor) is not
    scaled (σ + ε → 1) instead of being blown up by 1/ε.
    """
    scores = inputs.rewards if inputs.scores is None else inputs.scores
    c = (inputs.rewards if s.contrast == "reward" else scores).to(torch.float64)  # [N]
    mask = pair_mask(scores, inputs.group_ids, tau=s.tau, tau_kappa=s.tau_kappa)  # [N, N]
    size = group_statistics(c, inputs.group_ids).size  # [N] G, anchors included
    summed = ((c.unsqueeze(1) - c.unsqueeze(0)) * mask).sum(dim=1)  # [N]: Σ_j m_ij (c_i − c_j)
    if s.scale_rewards == "none":
        scale = torch.ones_like(c)
    else:
        std = sigma(c, inputs.group_ids, s.scale_rewards, weights=inputs.stats_mask)  # [N]
        scale = std + s.eps if inputs.stats_mask is None else torch.where(std > 0, std + s.eps, torch.ones_like(std))
    advantages = summed / (size * scale)
    advantages = torch.where(size < 2, torch.zeros_like(advantages), advantages)
    return advantages.to(_out_dtype(inputs.rewards))


def pair_mask(scores: torch.Tensor, group_ids: torch.Tensor, *, tau: float,
              tau_kappa: float | None = None) -> torch.Tensor:
    """DaGRPO's mask: pairs of distinct responses of one group whose scores differ by at least τ, and at all.

    m_ij = 1[d_ij ≥ τ − SCORE_TOL and d_ij > SCORE_TOL], d_ij = |s_i − s_j|; τ is fixed, or per group
    τ_g = κ·std_g(s) when ``tau_kappa`` = κ is given. Returns [N, N] bool, symmetric, False on the
    diagonal and across groups.
    """
    s = scores.to(torch.float64)
    same = group_ids.unsqueeze(0) == group_ids.unsqueeze(1)  # [N, N]
    distinct = ~torch.eye(len(s), dtype=torch.bool, device=s.device)
    gap = (s.unsqueeze(0) - s.unsqueeze(1)).abs()  # [N, N]
    if tau_kappa is None:
        threshold = torch.full_like(s, float(tau))  # [N]
    else:
        threshold = tau_kappa * group_statistics(s, group_ids).std  # [N]; equal within a group: symmetric
    return same & distinct & (gap > SCORE_TOL) & (gap >= threshold.unsqueeze(1) - SCORE_TOL)


def _out_dtype(rewards: torch.Tensor) -> torch.dtype:
    # Integer rewards (torch.tensor([1, 0, 0, 1])) must not truncate advantages to integers.
    return rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()


def _nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The unbiased std ignoring NaNs (NaN with fewer than two values), over ``dim`` (None: all), kept dims."""
    dims = tuple(range(values.dim())) if dim is None else (dim,)
    mean = torch.nanmean(values, dim=dims, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dims, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dims, keepdim=True) * count / (count - 1)
    return torch.where(count > 1, variance, torch.full_like(variance, float("nan"))).sqrt()


def normalize_then_sum(parts: torch.Tensor, weights: torch.Tensor, group_ids: torch.Tensor, *,
                       eps: float) -> torch.Tensor:
    """TRL's ``multi_objective_aggregation=normalize_then_sum`` (GDPO): [N] advantages from each reward function's
    rewards ``parts`` [N, K] (NaN where a function gave none) and their ``weights`` [K]:

        r̃_i = Σ_k w_k (r_ik − mean_g r_k) / (std_g r_k + ε)      over the k with a value (std: of the group g)
        Â_i = (r̃_i − mean r̃) / (std r̃ + ε)                      over the batch

    A group of one (or a function with fewer than two values in the group) adds nothing for that function; a
    response with no value at all gets 0. Stds are unbiased. Independent of scale_rewards, as in TRL."""
    x = parts.to(torch.float64)
    normalised = torch.empty_like(x)
    for gid in torch.unique(group_ids):
        rows = group_ids == gid
        group = x[rows]  # [n, K]
        std = _nanstd(group, 0) if group.shape[0] > 1 else torch.full((1, x.shape[1]), float("nan"), dtype=x.dtype)
        normalised[rows] = (group - torch.nanmean(group, dim=0, keepdim=True)) / (std + eps)
    combined = (normalised * weights.to(x.dtype)).nansum(dim=1)  # [N]
    combined[torch.isnan(x).all(dim=1)] = float("nan")
    spread = _nanstd(combined).reshape(()) if combined.numel() > 1 else torch.zeros((), dtype=x.dtype)
    advantages = (combined - torch.nanmean(combined)) / (spread + eps)
    return torch.nan_to_num(advantages, nan=0.0).to(_out_dtype(parts))
