"""What the loop logs of each step: TRL's log (kept on every rank, ``trl_log.py``) and rank 0's records of it.

    record(step, result)            the step's units into TRL's log; a TrainerCallback's on_step_end after each
                                    optimiser step and on_log for each entry it makes (transformers' order)
    write(step, result, trackers)   rank 0: the trackers (each entry at its step under TRL's tags; rlvr's own
                                    series, ``rlvr/<name>``, and rlvr's evaluation at the step's count, with the
                                    step's samples), metrics.jsonl, samples.jsonl, the plain callbacks' on_step_end
    finish(trackers, memory)        transformers' end-of-training entry: into TRL's log, on_log, the trackers

metrics.jsonl keeps one line per step (rlvr's names and TRL's, the step's values); TRL's log is what a TRL user's
``trainer.state.log_history``, trainer_state.json, dashboards and callbacks see (``logging_steps``).
"""

from __future__ import annotations

from transformers.trainer_utils import TrainerMemoryTracker

from rlvr.train.metrics import trl_train_metrics
from rlvr.train.trl_log import TrlLog, step_units
from rlvr.train.trl_metric_names import trl_log_name


class MemoryMetrics(TrainerMemoryTracker):
    """transformers' memory metrics (``skip_memory_metrics: false``; psutil's RSS and its peak, the GPU's allocated
    memory), measured by transformers' own tracker over the stages ``init`` (the trainer's set-up) and ``train``;
    the stage is named by the caller (transformers reads it off the calling function's name)."""

    def __init__(self, *, skip: bool):
        super().__init__(skip_memory_metrics=skip)
        self.stage, self.running = "init", False

    def derive_stage(self) -> str:
        return self.stage

    def begin(self, stage: str) -> None:
        self.stage, self.running = stage, True
        self.start()

    def end(self) -> dict:
        """The stage's metrics ({} when skipped; the init stage's are reported with train's, as transformers
        does); the peak-memory thread stops. Once per ``begin``."""
        metrics: dict = {}
        if self.running:
            self.running = False
            self.stop_and_update_metrics(None if self.stage == "init" else metrics)
        return metrics


class RunLogs:
    """The run's logs (built at set-up). ``plan``: the StepPlan; ``length``: the RunLength; ``run``: the RunPlan
    (its ``logging`` and ``log_completions``); ``main``: rank 0, which writes."""

    def __init__(self, plan, length, run, *, callbacks, metrics_log, samples_log, main: bool):
        self.trl_log = TrlLog(run.logging, units=length.counter(length.steps),
                              train_metrics=lambda sums, **values: trl_train_metrics(sums, plan, **values))
        b = plan.batch
        self.samples_per_step = b.micro_batch * b.accumulation * b.world_size  # TRL's total_train_batch_size
        self.length, self.callbacks, self.main = length, callbacks, main
        self.metrics_log, self.samples_log, self.log_completions = metrics_log, samples_log, run.log_completions
        self.entries: list[tuple[int, dict]] = []  # the step's entries of TRL's log, with their count
        self.counter, self.summary = 0, None

    def start(self, step: int, *, tokens: int) -> None:
        """``train`` starts after ``step`` (0, or the step resumed from) with ``tokens`` seen so far."""
        length = self.length
        self.counter = length.counter(step)
        self.trl_log.start(counter=self.counter, global_step=length.optimizer_steps_done(step), epoch=length.epoch(step),
                           tokens=tokens)

    def record(self, step: int, result) -> None:
        """Step ``step``'s units into TRL's log (``result``: its StepResult), and the TrainerCallbacks' calls."""
        units = step_units(step, result.metrics, result.update, self.length,
                           by_optimizer_step=self.length.counts_optimizer_steps, train_keys=self.trl_log.train_keys)
        self.entries = []
        for unit in units:
            entry = self.trl_log.add(unit)
            if self.main:
                self.callbacks.optimizer_step_end(unit.global_step, unit.epoch)
            if entry is not None:
                self.entries.append((unit.counter, entry))
                if self.main:
                    self.callbacks.log(entry)
            self.counter = unit.counter

    def write(self, step: int, result, trackers) -> None:
        """Rank 0: the step's entries and its line to the trackers (one call where they share the step's count),
        the line (with the trackers' counts) to metrics.jsonl, its samples, the plain callbacks."""
        metrics, counter = result.metrics, self.length.counter(step)
        entries = [(at, _without_step(entry)) for at, entry in self.entries]
        last = entries.pop()[1] if entries and entries[-1][0] == counter else None
        for at, entry in entries:
            trackers.log_entry(at, entry)
        own = {key: value for key, value in metrics.items() if not _in_trl_log(key)}
        samples = result.samples if self.log_completions else []
        metrics.update(trackers.log_step(counter, own, samples, trl=last))
        self.metrics_log.write([metrics])
        if self.log_completions:
            self.samples_log.write(result.samples)
        self.callbacks.step_end(step, metrics)

    def finish(self, trackers, memory: dict) -> dict:
        """transformers' end-of-training entry (``memory``: its memory metrics, {} unless asked); returns its
        metrics, ``train``'s ``TrainOutput.metrics``."""
        self.summary = self.trl_log.summary(samples_per_step=self.samples_per_step, memory=memory)
        if self.main:
            self.callbacks.log(self.trl_log.summary_entry)
            trackers.log_summary(self.counter, self.summary)
        return self.summary


def _in_trl_log(key: str) -> bool:
    """A metrics.jsonl key whose series the trackers get from TRL's log (TRL's training names, a reward's
    log_metric), not from the step's line (rlvr's own, rlvr's evaluation ``eval/<name>``)."""
    name = trl_log_name(key)
    return name is not None and not name.startswith("eval_")


def _without_step(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key != "step"}
