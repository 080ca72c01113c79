"""What stops a run: a cause it cannot go past, or a signal.

- ``TrainingStopped``: the run cannot go on (every recent optimiser step was non-finite, a reward
  function keeps failing, ...); the message names the cause and the fix (the CLI prints it in one
  line, exit code 3).
- Ctrl-C, SIGTERM (SLURM or Kubernetes preemption) and SIGHUP (the terminal of an ssh session
  closed) save the run instead of losing it. The first of them during ``Trainer.train`` asks the loop
  to stop: the step under way is finished and logged, a checkpoint is written, and the run ends with
  ``TrainingInterrupted`` (the CLI prints one line and exits 128 + the signal: 130 for SIGINT, 143
  for SIGTERM, 129 for SIGHUP). ``resume=true`` with the same command continues exactly there. A
  second signal stops at once (``SignalStop``, a ``KeyboardInterrupt``; exit 128 + that signal): the
  step under way is lost, the last checkpoint stays. Handlers are installed only in the main thread
  (``signal`` allows no other) and the previous ones are put back on exit. On several ranks every
  rank's request is summed each step, so all stop after the same step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Self

from rlvr.run.checkpoint_files import list_checkpoints
from rlvr.run.supervise import report_finished


class TrainingStopped(RuntimeError):
    """The run cannot go on: every recent optimiser step was non-finite, a reward function keeps
    failing, ... The message names the cause and the fix."""


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalStop(KeyboardInterrupt):
    """A signal that stops the run at once (a second one, or one before the loop): ``exit_code`` is 128 + it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.exit_code = signum, 128 + signum


def stop_at_once(signum: int, frame) -> None:
    """A signal handler: stop now, as Ctrl-C does (``SignalStop``)."""
    raise SignalStop(signum)


START_OVER = "start over with the same command and overwrite_output_dir=true, or with a new output_dir"


class TrainingInterrupted(RuntimeError):
    """The run stopped on a signal after saving; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None, output_dir: Path):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + signum
        if checkpoint is not None:
            where = f"saved {checkpoint}; continue with the same command and resume=true"
        else:
            where = f"nothing saved; {START_OVER}"
        super().__init__(f"{signal.Signals(signum).name} after step {step}: {where} (output_dir={output_dir})")


class StopOnSignal:
    """Context manager: ``requested`` is the first SIGINT/SIGTERM/SIGHUP received inside it (or None)."""

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
            raise SignalStop(signum)  # the second signal: stop now
        self.requested = signum
        print(f"\nrlvr: {signal.Signals(signum).name} received: finishing this step and saving a checkpoint "
              "(send it again to stop at once, losing this step)", file=sys.stderr, flush=True)


def stopped_at_once_advice(output_dir: Path | None) -> str:
    """What to do after a run stopped at once (a second signal, or one during set-up), true in every state:
    resume=true when a checkpoint exists, else how to start over (resume=true would be refused)."""
    if output_dir is None:
        return "nothing was trained yet: run the same command again"
    if list_checkpoints(output_dir):
        return f"the last checkpoint is intact: continue with the same command and resume=true (output_dir={output_dir})"
    return f"no checkpoint was written yet: {START_OVER} (output_dir={output_dir})"


class StopAtOnceOnSignal:
    """Context manager for the whole of ``rlvr train``: SIGTERM and SIGHUP outside the training loop (the
    model loading, say) stop at once as Ctrl-C does (``SignalStop``), with the line and the exit code of
    a signal, instead of killing the process without a word. Main thread only.

    ``then_leave`` (the ``rlvr train`` program, not ``main(argv)`` called from Python): leaving it, the run is
    over (finished, stopped or interrupted) and the process on its way out, so from then on a signal ends it
    at once with 128 + the signal (:func:`leave_at_once`) — a Ctrl-C pressed twice used to land in one of
    torch's exit handlers and print a KeyboardInterrupt traceback. Otherwise the old handlers return."""

    def __init__(self, *, then_leave: bool = False):
        self.then_leave = then_leave
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, stop_at_once)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, leave_at_once if self.then_leave else handler)


def leave_at_once(signum: int, frame) -> None:
    """A signal handler for a process whose run is over: exit now with 128 + the signal, skipping the exit
    handlers left (torch's, a tracker's upload); what the run wrote is already on disk."""
    report_finished()  # `rlvr train` (the parent) reports this status as is
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(128 + signum)


def count_skipped_steps(in_a_row: int, *, step: int, taken: int, trailing: int, limit: int) -> int:
    """Optimiser steps skipped in a row for a non-finite loss or gradient after ``step`` (``taken`` steps were
    taken in it, ``trailing`` skipped after the last one taken); TrainingStopped once ``limit`` are reached."""
    in_a_row = trailing if taken else in_a_row + trailing
    if in_a_row >= limit:
        raise TrainingStopped(
            f"step {step}: {in_a_row} optimiser steps in a row had a non-finite loss or "
            f"gradient norm (limit max_skipped_steps={limit}); the weights are those of the last finite "
            "step. Look at train/loss and train/grad_norm in metrics.jsonl; lower learning_rate, set "
            "max_grad_norm, use float32, or check the reward function for NaN/inf"
        )
    return in_a_row


def requested_stop(stop: StopOnSignal, dist) -> int:
    """The signal that asked this run to stop (0: none); on several ranks (``dist``, a DistContext), any rank's."""
    if not dist.enabled:
        return stop.requested or 0
    (largest,) = dist.max_floats([float(stop.requested or 0)])
    return int(largest)
