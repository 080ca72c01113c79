"""What the generated contract suites (tests/contracts/) share: the cases read from the registries, the
failure a registration without a contract gets, and the seeded batches every contract is checked on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from rlvr.core.advantages import ESTIMATOR_CONTRACTS, ESTIMATOR_INVARIANTS, AdvantageInputs
from rlvr.core.loss_registry import LOSS_CONTRACTS
from rlvr.core.losses import AGGREGATION_CONTRACTS

# What each family must declare, said by the failure of a registration without it (docs/design/architecture.md
# quotes these).
WHAT_TO_DECLARE = {
    "advantage estimator": (
        ESTIMATOR_CONTRACTS, "register_advantage",
        ("reference=<fn(inputs, settings) -> [N] float64, a plain loop per group written apart from the estimator, "
         f"e.g. in rlvr/core/references.py>, invariants=<those it claims, of {sorted(ESTIMATOR_INVARIANTS)}>, "
         "needs=<the optional AdvantageInputs it reads>, settings=<AdvantageSettings overrides to check it under>"),
        "Add an advantage estimator"),
    "policy loss": (
        LOSS_CONTRACTS, "register_policy_loss",
        ("reference=<fn(logprobs, old_logprobs, advantages, mask, settings) -> (loss [N, T], clipped [N, T]) in "
         "float64, a plain loop per token written apart from the loss, e.g. in rlvr/core/references.py>, "
         "on_policy=<its value at ratio 1 if not the plain policy gradient's -A>, settings=<LossSettings "
         "overrides to check it under>"),
        "Add a loss"),
    "aggregation": (
        AGGREGATION_CONTRACTS, "register_aggregation",
        ("reference=<fn(per_token, mask, denominators) -> 0-d float64, a plain loop over sequences and tokens, "
         "e.g. in rlvr/core/references.py>, micro_batch_additive=<False if the micro-batches' results, each "
         "given the step's Denominators, do not sum to the whole batch's>"),
        "Add a loss aggregation"),
}


def missing_contract_message(family: str, name: str) -> str:
    """The failure of a registered ``name`` of ``family`` that declares no contract: what to declare, and where."""
    _, decorator, declare, section = WHAT_TO_DECLARE[family]
    return (f"{family} {name!r} declares no contract: register it as @{decorator}({name!r}, {declare}) "
            f"(docs/design/architecture.md, \"{section}\")")


def contract_of(family: str, name: str):
    """The contract ``name`` declared; the test fails, saying what to declare, when it declared none."""
    contract = WHAT_TO_DECLARE[family][0].get(name)
    if contract is None:
        pytest.fail(missing_contract_message(family, name), pytrace=False)
    return contract


def settings_label(overrides: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "default"


def cases(registry: dict, contracts: dict) -> list:
    """pytest params (name, settings overrides), one per registered name and settings it declared (a name
    without a contract: one case, which fails saying what to declare)."""
    out = []
    for name in registry:
        contract = contracts.get(name)
        for overrides in (contract.settings if contract is not None else ({},)):
            out.append(pytest.param(name, overrides, id=f"{name}-{settings_label(overrides)}"))
    return out


# ---------------------------------------------------------------------------------------------
# Estimators: groups of several sizes (one response to eight), binary rewards (ties), rewards on a three-value
# grid (ties), continuous rewards, uniform groups; group ids arbitrary integers, responses shuffled across groups.

ESTIMATOR_BATCHES = {
    "mixed": [(4, "binary"), (1, "continuous"), (3, "grid"), (8, "continuous"), (2, "binary"), (5, "uniform")],
    "ties": [(6, "grid"), (6, "binary"), (4, "uniform"), (2, "grid"), (3, "binary")],
    "sizes": [(2, "continuous"), (3, "continuous"), (7, "grid"), (1, "binary"), (1, "uniform"), (5, "binary")],
    "one_group": [(8, "continuous")],
    "all_uniform": [(3, "uniform"), (4, "uniform"), (1, "uniform"), (2, "uniform")],
}


def _group_values(kind: str, size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, q) of one group, float64: q the quality that DaGRPO's scores mix in (equal in a uniform group)."""
    if kind == "uniform":
        value = torch.tensor([0.1, 1.0, 0.0, 0.7])[torch.randint(0, 4, (1,), generator=gen)]
        return value.expand(size).to(torch.float64), torch.full((size,), 0.4, dtype=torch.float64)
    if kind == "binary":
        rewards = torch.randint(0, 2, (size,), generator=gen).to(torch.float64)
    elif kind == "grid":
        rewards = torch.randint(0, 3, (size,), generator=gen).to(torch.float64) / 2
    else:
        rewards = torch.rand(size, generator=gen, dtype=torch.float64)
    return rewards, torch.randint(0, 4, (size,), generator=gen).to(torch.float64) / 3


def estimator_batch(label: str, needs: tuple[str, ...], *, dtype: torch.dtype = torch.float32,
                    seed: int = 0) -> AdvantageInputs:
    """The batch ``label`` of :data:`ESTIMATOR_BATCHES`, its rewards (and scores) in ``dtype``, with the optional
    inputs the estimator ``needs``: scores = ½r + ½q, stats_mask leaving one member (an anchor) of some groups
    out of σ."""
    gen = torch.Generator().manual_seed(seed)
    groups = ESTIMATOR_BATCHES[label]
    ids = (torch.randperm(1000, generator=gen)[:len(groups)] - 500).tolist()  # arbitrary, negative too
    rewards, q, group_ids, stats = [], [], [], []
    for (size, kind), gid in zip(groups, ids, strict=True):
        r, quality = _group_values(kind, size, gen)
        rewards.append(r)
        q.append(quality)
        group_ids += [gid] * size
        stats += [not (k == 0 and size >= 3 and gid % 2 == 0) for k in range(size)]
    order = torch.randperm(len(group_ids), generator=gen)  # groups interleaved in the batch
    r, quality = torch.cat(rewards)[order], torch.cat(q)[order]
    return AdvantageInputs(
        rewards=r.to(dtype), group_ids=torch.tensor(group_ids)[order],
        scores=(0.5 * r + 0.5 * quality).to(dtype) if "scores" in needs else None,
        stats_mask=torch.tensor(stats)[order] if "stats_mask" in needs else None)


# ---------------------------------------------------------------------------------------------
# Losses: N = 6 responses of T = 5 tokens; ratios spread wide enough to clip (log-ratio ~ N(0, 0.6²)); one
# advantage 0; masks of unequal lengths, one batch with holes and an empty row; finite log-probs at padding.


@dataclass(frozen=True)
class LossBatch:
    logprobs: torch.Tensor  # [N, T] float32
    old_logprobs: torch.Tensor  # [N, T]
    advantages: torch.Tensor  # [N]
    mask: torch.Tensor  # [N, T] bool
    is_weights: torch.Tensor  # [N, T] sampler/trainer weights, 0 off the mask


LOSS_SEEDS = (0, 1, 2)


def loss_batch(seed: int, n: int = 6, t: int = 5) -> LossBatch:
    gen = torch.Generator().manual_seed(seed)
    logprobs = -(0.05 + 3.5 * torch.rand(n, t, generator=gen))
    old = logprobs + 0.6 * torch.randn(n, t, generator=gen)
    advantages = 1.5 * torch.randn(n, generator=gen)
    advantages[seed % n] = 0.0
    if seed == 2:  # holes, and a response with no trained token
        mask = torch.rand(n, t, generator=gen) < 0.7
        mask[1] = False
    else:
        lengths = torch.tensor([5, 1, 3, 4, 2, 5]).roll(seed)[:n]
        mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    weights = torch.where(mask, 0.5 + torch.rand(n, t, generator=gen), torch.zeros(n, t))
    return LossBatch(logprobs, old, advantages, mask, weights)


# ---------------------------------------------------------------------------------------------
# Aggregations: per-token losses with finite garbage (99) at padding, unequal lengths, an empty sequence.


def aggregation_batch(seed: int, n: int = 6, t: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """(per_token [N, T] float32, mask [N, T] float 0/1)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, t, generator=gen) < 0.6
    mask[seed % n] = False
    mask[(seed + 1) % n] = True
    per_token = torch.where(mask, torch.randn(n, t, generator=gen), torch.full((n, t), 99.0))
    return per_token, mask.float()
