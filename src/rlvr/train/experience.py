"""Experience: the responses of one training step, grouped, with rewards and advantages.

A :class:`Group` is one prompt with its G responses. Every response carries its group's stable
``group_id`` (a run-wide counter assigned when the prompt was drawn), and advantages are computed
from those ids, never from positions in the batch (USERS.md #9).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlvr.rollout import Completion


@dataclass
class Group:
    """One prompt and its sampled responses."""

    group_id: int
    row: dict
    prompt_ids: list[int]
    completions: list[Completion]
    texts: list[str]
    rewards: list[float] = field(default_factory=list)
    reward_parts: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def uniform(self) -> bool:
        return max(self.rewards) == min(self.rewards)


@dataclass
class Experience:
    """Flat per-response view of the groups, in group order. N responses."""

    groups: list[Group]
    group_ids: torch.Tensor  # [N] long
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    sampling_logprobs: list[list[float]]
    truncated: torch.Tensor  # [N] bool
    rewards: torch.Tensor  # [N] float32
    advantages: torch.Tensor | None = None  # [N]
    old_logprobs: list[torch.Tensor] | None = None  # N × [T_i]
    ref_logprobs: list[torch.Tensor] | None = None  # N × [T_i]

    @classmethod
    def from_groups(cls, groups: list[Group]) -> Experience:
        group_ids, prompts, responses, sampled, truncated, rewards = [], [], [], [], [], []
        for group in groups:
            for completion, reward in zip(group.completions, group.rewards):
                group_ids.append(group.group_id)
                prompts.append(group.prompt_ids)
                responses.append(completion.token_ids)
                sampled.append(completion.logprobs)
                truncated.append(completion.truncated)
                rewards.append(reward)
        return cls(
            groups=groups,
            group_ids=torch.tensor(group_ids, dtype=torch.long),
            prompt_ids=prompts,
            response_ids=responses,
            sampling_logprobs=sampled,
            truncated=torch.tensor(truncated, dtype=torch.bool),
            rewards=torch.tensor(rewards, dtype=torch.float32),
        )

    def __len__(self) -> int:
        return len(self.response_ids)


def minibatches(group_ids: torch.Tensor, num_minibatches: int) -> list[list[int]]:
    """Split response indices into ``num_minibatches`` runs of whole groups (never a split group).

    Groups are dealt in order of first appearance; the split balances the number of groups.
    """
    order: list[int] = []
    members: dict[int, list[int]] = {}
    for index, gid in enumerate(group_ids.tolist()):
        if gid not in members:
            members[gid] = []
            order.append(gid)
        members[gid].append(index)
    count = max(1, min(num_minibatches, len(order)))
    bounds = [round(i * len(order) / count) for i in range(count + 1)]
    return [
        [index for gid in order[bounds[i] : bounds[i + 1]] for index in members[gid]]
        for i in range(count)
    ]


def pad_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors into [n, width], zero-padded on the right."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out
