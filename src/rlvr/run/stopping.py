"""What stops a run: a cause it cannot go past, or a signal.

- ``TrainingStopped``: the run cannot go on (every recent optimiser step was non-finite, a reward
  function keeps failing, ...); the message names the cause and the fix (the CLI prints it in one
  line, exit code 3).
- Ctrl-C and SIGTERM (SLURM or Kubernetes preemption) save the run instead of losing it. The first
  SIGINT or SIGTERM during ``Trainer.train`` asks the loop to stop: the step under way is finished and
  logged, a checkpoint is written, and the run ends with ``TrainingInterrupted`` (the CLI prints one
  line and exits 128 + the signal: 130 for SIGINT, 143 for SIGTERM). ``resume=true`` with the same
  command continues exactly there. A second signal stops at once (``KeyboardInterrupt``): the step
  under way is lost, the last checkpoint stays. Handlers are installed only in the main thread
  (``signal`` allows no other) and the previous ones are put back on exit. On several ranks every
  rank's request is summed each step, so all stop after the same step.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Self


class TrainingStopped(RuntimeError):
    """The run cannot go on: every recent optimiser step was non-finite, a reward function keeps
    failing, ... The message names the cause and the fix."""


SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(RuntimeError):
    """The run stopped on a signal after saving; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None, output_dir: Path):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + signum
        where = f"saved {checkpoint}" if checkpoint is not None else "nothing to save"
        super().__init__(f"{signal.Signals(signum).name} after step {step}: {where}; continue with the same "
                         f"command and resume=true (output_dir={output_dir})")


class StopOnSignal:
    """Context manager: ``requested`` is the first SIGINT/SIGTERM received inside it (or None)."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.requested is not None:
            raise KeyboardInterrupt  # the second signal: stop now
        self.requested = signum
        print(f"\nrlvr: {signal.Signals(signum).name} received: finishing this step and saving a checkpoint "
              "(send it again to stop at once, losing this step)", file=sys.stderr, flush=True)




