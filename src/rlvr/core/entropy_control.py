"""TRL's adaptive entropy bonus (``use_adaptive_entropy``): the coefficient c of the bonus −c·H follows the policy's
entropy, one optimiser step behind.

    during a step:   the bonus is c · H_micro-batch if H_last ≤ target, else 0      (H_last: +inf before any step)
    after the step:  H_last = the step's token mean of H over every micro-batch and process
                     c ← min(c + δ, c_max) if H_last ≤ target else max(c − δ, c_min)

As TRL 1.16's ``GRPOTrainer._compute_loss``: the gate and the coefficient applied in a step are the previous
step's, so every micro-batch of an accumulation window gets the same bonus. The state (c, H_last) is a
checkpoint's, so a resumed run continues it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EntropyControl:
    start: float  # entropy_coef: c before the first step
    minimum: float  # entropy_coef_min
    maximum: float  # entropy_coef_max
    delta: float  # entropy_coef_delta
    target: float  # entropy_target (nats)


class EntropyController:
    """The running state: ``coef`` (c) and ``last_entropy`` (H_last)."""

    def __init__(self, control: EntropyControl):
        self.control = control
        self.coef = control.start
        self.last_entropy = math.inf

    def applied(self) -> float:
        """The coefficient this step's micro-batches use (0 while the last step's entropy was above the target)."""
        return self.coef if self.last_entropy <= self.control.target else 0.0

    def step(self, entropy_sum: float, tokens: float) -> None:
        """After an optimiser step: its entropy (Σ H over its trained tokens, their count) moves c."""
        c = self.control
        self.last_entropy = entropy_sum / max(tokens, 1.0)
        if self.last_entropy <= c.target:
            self.coef = min(self.coef + c.delta, c.maximum)
        else:
            self.coef = max(self.coef - c.delta, c.minimum)

    def state_dict(self) -> dict:
        return {"entropy_coef": self.coef, "last_world_entropy": self.last_entropy}  # TRL's entropy_ctrl_state.json

    def load_state_dict(self, state: dict) -> None:
        self.coef, self.last_entropy = float(state["entropy_coef"]), float(state["last_world_entropy"])
