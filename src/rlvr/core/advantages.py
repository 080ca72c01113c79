"""Group-relative advantage estimators (GRPO, RLOO).

Every estimator has one signature,
``fn(rewards, group_ids, *, scale_rewards, eps) -> advantages``, so a config name maps to a
function through :data:`ADVANTAGE_ESTIMATORS`.

Groups are found from ``group_ids`` (a stable id carried with each response), never from positions
in the batch: responses of one group may sit anywhere in the batch.

Convention: unbiased (n−1) standard deviation; ε is added to the std (``std + eps``), default
ε = 1e-6 as in verl (TRL uses 1e-4). A group of one response has advantage 0. A group whose
rewards are all equal has advantage exactly 0 (set explicitly, not left to rounding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.core.names import SCALE_REWARDS  # defined without torch, for config


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to dense indices 0..K-1.

    Args:
        group_ids: [N] integer ids; equal ids mean the same group.

    Returns:
        (index [N] long in 0..K-1, K).
    """
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [N], got shape {tuple(group_ids.shape)}")
    uniques, index = torch.unique(group_ids, return_inverse=True)
    return index, int(uniques.numel())


def group_statistics(
    values: torch.Tensor, index: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-response group mean, unbiased std, size and a uniform-group flag.

    Args:
        values: [N] float.
        index: [N] dense group index (from :func:`group_index`).
        num_groups: K.

    Returns:
        mean [N], std [N] (0 for groups of one), count [N], uniform [N] bool (max == min).

    Convention: std uses ddof = 1.
    """
    values = values.to(torch.float64)
    zeros = torch.zeros(num_groups, dtype=torch.float64, device=values.device)
    count = zeros.index_add(0, index, torch.ones_like(values))  # [K]
    mean = zeros.index_add(0, index, values) / count  # [K]
    centred = values - mean[index]  # [N]
    sq = zeros.index_add(0, index, centred * centred)  # [K]
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1)).sqrt(), zeros)  # [K]
    vmax = torch.full_like(zeros, -torch.inf).scatter_reduce(0, index, values, "amax")
    vmin = torch.full_like(zeros, torch.inf).scatter_reduce(0, index, values, "amin")
    uniform = vmax == vmin  # [K]
    return mean[index], std[index], count[index], uniform[index]


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    scale_rewards: str = "group",
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantages: A_i = (r_i − mean_g r) / (std + ε).

    ``scale_rewards``: ``group`` divides by the group's std (GRPO), ``batch`` by the std of all
    rewards in the batch (TRL's "batch", as in Lite PPO), ``none`` does not divide (Dr. GRPO).

    Args:
        rewards: [N] float.
        group_ids: [N] int; responses with equal ids form one group.

    Returns:
        advantages [N], same dtype as ``rewards`` (default float dtype for int/bool rewards).

    Convention: unbiased std (ddof 1), std + ε; groups of one and uniform groups get exactly 0.
    """
    return _relative_advantages(rewards, group_ids, scale_rewards=scale_rewards, eps=eps, leave_one_out=False)


def rloo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    scale_rewards: str = "none",
    eps: float = 1e-6,
) -> torch.Tensor:
    """RLOO advantages: A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean_g r).

    ``scale_rewards`` = ``group``/``batch`` additionally divides by that std (+ ε), as for GRPO.

    Args:
        rewards: [N] float.
        group_ids: [N] int.

    Returns:
        advantages [N].

    Convention: leave-one-out baseline; groups of one and uniform groups get exactly 0.
    """
    return _relative_advantages(rewards, group_ids, scale_rewards=scale_rewards, eps=eps, leave_one_out=True)


def _relative_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, scale_rewards: str, eps: float, leave_one_out: bool
) -> torch.Tensor:
    """(r − group mean) [× G/(G−1) for leave-one-out], optionally ÷ (std + ε); dead groups → 0."""
    _check_scale(scale_rewards)
    index, num_groups = group_index(group_ids)
    mean, std, count, uniform = group_statistics(rewards, index, num_groups)
    centred = rewards.to(torch.float64) - mean  # [N]
    if leave_one_out:
        centred = centred * count / (count - 1).clamp(min=1)
    if scale_rewards == "group":
        centred = centred / (std + eps)
    elif scale_rewards == "batch":
        batch_std = rewards.to(torch.float64).std() if rewards.numel() > 1 else centred.new_zeros(())
        centred = centred / (batch_std + eps)
    dead = uniform | (count < 2)
    return torch.where(dead, torch.zeros_like(centred), centred).to(_out_dtype(rewards))


def _out_dtype(rewards: torch.Tensor) -> torch.dtype:
    # Integer rewards (torch.tensor([1, 0, 0, 1])) must not truncate advantages to integers.
    return rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()


def _check_scale(scale_rewards: str) -> None:
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(
            f"scale_rewards={scale_rewards!r} is not one of {SCALE_REWARDS} "
            "(group: GRPO; batch: one std for the batch; none: Dr. GRPO, no std scaling)"
        )


AdvantageFn = Callable[..., torch.Tensor]

ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
}


def get_advantage_estimator(name: str) -> AdvantageFn:
    """Look up an advantage estimator by config name."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage_estimator {name!r}; valid: {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
