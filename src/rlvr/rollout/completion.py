"""What an engine returns for one prompt."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Completion:
    """One sampled response."""

    token_ids: list[int]
    logprobs: list[float]  # sampling log-probs, one per token (empty for off-policy anchors)
    truncated: bool
    is_anchor: bool = False  # an expert solution injected by DaGRPO, not sampled from the policy
