"""When a run evaluates during training, as transformers decides it (rlvr's pass@k and TRL's evaluation alike)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlvr.train.plan import RunLength


@dataclass(frozen=True)
class EvalSchedule:
    """When the run evaluates, as transformers' ``DefaultFlowCallback`` decides it, in the run's counter (optimiser
    steps for a TRL-shaped config: TRL's global_step). Built once at start-up.

    ``steps``: at each multiple of ``every`` (TRL evaluates at that optimiser step; rlvr at the end of the step
    holding it) and at the last step, from ``delay`` on; ``epoch``: at each epoch's end and at the last step, once
    ``delay`` epochs are done; ``on_start``: also before the first step (also on resume), whatever the strategy.
    """

    strategy: str  # steps | epoch | no
    every: int = 0  # strategy=steps: every this many, in the run's counter (a fraction of TRL's resolved)
    delay: float = 0.0  # eval_delay: steps (strategy=steps) or epochs (epoch) before the first evaluation
    on_start: bool = False  # eval_on_start

    def due(self, length: RunLength, step: int) -> bool:
        """An evaluation at the end of ``step`` (rlvr's step; ``length``: the run's RunLength)."""
        last = step == length.steps
        if self.strategy == "epoch":
            return (step % length.steps_per_epoch == 0 or last) and length.epoch(step) >= self.delay
        if self.strategy != "steps" or not self.every:
            return False
        done, before = length.counter(step), length.counter(step - 1)
        reached = done // self.every * self.every  # the last multiple of every reached during the step
        return (reached > before and reached >= self.delay) or (last and done >= self.delay)


def eval_every(eval_steps: float, run_count: int) -> int:
    """``eval_steps`` in whole steps of the run's counter: a fraction below 1 is ``ceil(fraction × run_count)``
    (transformers' ``TrainerState.compute_steps`` of max_steps; ``run_count``: the run's length in its counter,
    TRL's max_steps for a TRL-shaped config); 0: never."""
    return math.ceil(run_count * eval_steps) if 0 < eval_steps < 1 else int(eval_steps)
