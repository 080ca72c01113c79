"""What one training step produced: the loop's unit (``trainer.py``; SFT's step, ``sft.py``, returns one too)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.train.metrics import UpdateResult
from rlvr.train.rollout_phase import RolloutResult


@dataclass
class StepResult:
    """What one training step produced: its metrics line, sample records, rollout and update."""

    metrics: dict
    samples: list[dict]
    rollout: RolloutResult | None = None
    update: UpdateResult | None = None  # None: no update (every group uniform)
