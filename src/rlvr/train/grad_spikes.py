"""Gradient-norm spikes: a step whose pre-clip norm exceeds k× the running median of earlier steps.

DaGRPO's paper claims to mitigate gradient explosion; this counter is how a run shows it.
"""

from __future__ import annotations

import statistics

WINDOW = 50  # running median over the last WINDOW steps
MIN_HISTORY = 5  # no verdict before this many steps


class GradSpikes:
    def __init__(self, *, factor: float):
        self.factor = factor
        self.history: list[float] = []
        self.total = 0

    def update(self, grad_norm: float | None) -> dict[str, float]:
        """Record this step's norm; return train/grad_norm_spike (0/1) and the running count."""
        spike = 0
        if grad_norm is not None:
            if len(self.history) >= MIN_HISTORY and grad_norm > self.factor * statistics.median(self.history):
                spike = 1
            self.history = (self.history + [grad_norm])[-WINDOW:]
        self.total += spike
        return {"train/grad_norm_spike": spike, "train/grad_norm_spikes": self.total}

    def state_dict(self) -> dict:
        return {"history": list(self.history), "total": self.total}

    def load_state_dict(self, state: dict) -> None:
        self.history, self.total = list(state["history"]), int(state["total"])
