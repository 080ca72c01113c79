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
    scores: list[float] | None = None  # DaGRPO combined scores s (None: s = r)

    @property
    def uniform(self) -> bool:
        """All rewards equal (anchors included): no group-relative signal."""
        return max(self.rewards) == min(self.rewards)

    @property
    def correct(self) -> list[bool]:
        """Per response: the ``accuracy`` reward gave 1.0 (if used), else the total reward is > 0."""
        if "accuracy" in self.reward_parts:
            return [value == 1.0 for value in self.reward_parts["accuracy"]]
        return [reward > 0 for reward in self.rewards]

    @property
    def on_policy(self) -> list[int]:
        """Indices of the responses sampled from the policy (not anchors)."""
        return [i for i, c in enumerate(self.completions) if not c.is_anchor]


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
    scores: torch.Tensor  # [N] float32, DaGRPO's s (= rewards without a scorer)
    is_anchor: torch.Tensor  # [N] bool
    advantages: torch.Tensor | None = None  # [N]
    old_logprobs: list[torch.Tensor] | None = None  # N × [T_i]
    ref_logprobs: list[torch.Tensor] | None = None  # N × [T_i]

    @classmethod
    def from_groups(cls, groups: list[Group]) -> Experience:
        group_ids, prompts, responses, sampled, truncated, rewards, scores, anchor = ([] for _ in range(8))
        for group in groups:
            group_scores = group.scores if group.scores is not None else group.rewards
            for completion, reward, score in zip(group.completions, group.rewards, group_scores):
                group_ids.append(group.group_id)
                prompts.append(group.prompt_ids)
                responses.append(completion.token_ids)
                sampled.append(completion.logprobs)
                truncated.append(completion.truncated)
                rewards.append(reward)
                scores.append(score)
                anchor.append(completion.is_anchor)
        return cls(
            groups=groups,
            group_ids=torch.tensor(group_ids, dtype=torch.long),
            prompt_ids=prompts,
            response_ids=responses,
            sampling_logprobs=sampled,
            truncated=torch.tensor(truncated, dtype=torch.bool),
            rewards=torch.tensor(rewards, dtype=torch.float32),
            scores=torch.tensor(scores, dtype=torch.float32),
            is_anchor=torch.tensor(anchor, dtype=torch.bool),
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
