"""TRL's log: the entries TRL's ``GRPOTrainer`` writes through transformers' ``Trainer.log`` (``trainer.state.
log_history``, trainer_state.json, the trackers' TRL series, a ``TrainerCallback``'s ``on_log``), made from rlvr's
steps. metrics.jsonl is rlvr's own record, one line per step; this is TRL's, one entry per logging interval.

Which steps log is transformers' ``DefaultFlowCallback``: the first with ``logging_first_step``, every
``logging_steps``-th with ``logging_strategy: steps`` (a fraction below 1: of the run, rounded up), each epoch's
end with ``epoch`` (the run's last step ends one too), none with ``no``. An entry holds
(``Trainer._maybe_log_save_evaluate``, TRL's ``GRPOTrainer.log``):

    loss            the mean loss per optimiser step since the last entry
    grad_norm       the last optimiser step's; learning_rate the rate it used
    <TRL's metric>  the mean of the values TRL appended to it since the last entry, NaN left out (None when all
                    were): a generation's metrics (reward, completions/..., a reward's log_metric) once per
                    generation, at its first optimiser step; the per-micro-batch ones (entropy, clip_ratio/..., kl)
                    once per micro-batch; step_time once per optimiser step. One nothing was appended to is absent
                    (an optimiser step that did not generate logs no reward). num_tokens is the count so far.
    epoch, step     at the entry's optimiser step (include_num_input_tokens_seen: num_input_tokens_seen,
                    train_runtime, train_tokens_per_second too)

and at the end of ``train`` (``Trainer._finalize_training``) one more: train_runtime, train_samples_per_second,
train_steps_per_second, total_flos (0: TRL gives transformers no ``input_ids`` to count), train_loss (the mean
loss per optimiser step of this ``train`` call), transformers' memory metrics (``skip_memory_metrics: false``),
the TRL metrics appended since the last entry (TRL's ``log`` adds them to this entry too), epoch, step.

The unit a count counts: with preset=trl an optimiser step (TRL's global_step); with rlvr's preset an rlvr step
(one generation, its optimiser steps' loss and grad_norm averaged as in its metrics.jsonl line), so that
``logging_steps`` counts what ``save_steps`` and the trackers' step count (docs/training.md, "Steps and optimiser
steps"). An entry's ``step`` is in optimiser steps either way, as trainer_state.json's ``global_step``.

Convention: values are those of the metrics.jsonl line, which computes TRL's names as TRL does
(``rlvr.train.metrics``); the per-micro-batch ones are re-averaged here over the interval's micro-batches from the
update's sums (``rlvr.train.metrics.UpdateResult.steps``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.train.rewarding import LOGGED_METRIC_PREFIX
from rlvr.train.run_plan import LoggingPlan
from rlvr.train.trl_metric_names import TRL_SUMMARY, trl_log_name

# the TRL metrics a generation appends once (TRL's _generate_and_score_completions), at its first optimiser step
GENERATION_NAMES = ("num_tokens", "reward", "reward_std", "frac_reward_zero_std")
GENERATION_PREFIXES = ("completions/", "rewards/", "tools/", "sampling/")
INTERVAL_KEYS = ("loss", "grad_norm", "learning_rate")  # transformers' own three, not TRL's metric lists


@dataclass
class LogUnit:
    """One count of TRL's log (an optimiser step, or with rlvr's preset an rlvr step) and what it appended."""

    counter: int  # the run's count at its end (logging_steps counts it; the trackers' step)
    global_step: int  # optimiser steps done (the entry's ``step``)
    epoch: float
    epoch_end: bool
    loss: float | None  # its mean loss per optimiser step (None: no update)
    grad_norm: float | None
    learning_rate: float | None
    sums: dict[str, float] = field(default_factory=dict)  # its micro-batches' statistics (update.TOKEN_SUMS)
    values: dict[str, float | None] = field(default_factory=dict)  # TRL's metrics it appended once each


def split_line(line: dict, train_keys: set[str]) -> tuple[dict, dict]:
    """(a generation's TRL metrics, the ones every optimiser step appends) of a metrics.jsonl line, under TRL's
    names; ``train_keys``: the names re-averaged from the update's sums (loss, entropy, clip_ratio/..., kl)."""
    generation, every = {}, {}
    for key, value in line.items():
        name = trl_log_name(key)
        if name is None or name.startswith("eval_") or name in train_keys or name in TRL_SUMMARY:
            continue  # rlvr's own series, evaluation (its own entries), the update's, epoch
        if name in GENERATION_NAMES or name.startswith(GENERATION_PREFIXES) or key.startswith(LOGGED_METRIC_PREFIX):
            generation[name] = value
        else:  # step_time, entropy_coef, ...
            every[name] = value
    return generation, every


def step_units(step: int, line: dict, update, length, *, by_optimizer_step: bool,
               train_keys: set[str]) -> list[LogUnit]:
    """The units of rlvr step ``step`` (``line``: its metrics.jsonl line; ``update``: its UpdateResult or None;
    ``length``: the RunLength): each optimiser step (preset=trl), or the step as one (rlvr's preset)."""
    done = length.optimizer_steps_done
    first, last = done(step - 1), done(step)
    generation, every = split_line(line, train_keys)
    records = list(update.steps) if update is not None else []
    if not by_optimizer_step:  # the step as one: its optimiser steps' mean loss and grad norm, as metrics.jsonl's
        norms = [r.grad_norm for r in records if math.isfinite(r.grad_norm)]
        return [LogUnit(step, last, length.epoch(step), step % length.steps_per_epoch == 0 or step == length.steps,
                        sum(r.loss for r in records) / len(records) if records else None,
                        sum(norms) / len(norms) if norms else None,
                        records[-1].learning_rate if records else line.get("learning_rate"),
                        dict(update.sums) if update is not None else {}, generation | every)]
    coefs = update.entropy_coefs if update is not None else []  # each optimiser step's entropy bonus coefficient
    per_epoch = length.steps_per_epoch * length.optimizer_steps_per_step
    units = []
    for i, n in enumerate(range(first + 1, last + 1)):
        record = records[i] if i < len(records) else None  # None: no update
        values = (generation if i == 0 else {}) | every
        if "entropy_coef" in values and len(coefs) == len(records) and record is not None:
            values["entropy_coef"] = coefs[i]
        units.append(LogUnit(
            n, n, n / per_epoch, n % per_epoch == 0 or n == length.optimizer_steps,
            record.loss if record else None, record.grad_norm if record else None,
            record.learning_rate if record else line.get("learning_rate"), dict(record.sums) if record else {},
            values))
    return units


class TrlLog:
    """TRL's log of a run: ``entries`` (the training entries, a checkpoint's log_history with the evaluations'),
    ``summary_entry`` (the end-of-training one, once ``train`` ended), and the interval since the last entry
    (transformers' ``tr_loss``, TRL's ``_metrics['train']``).

    ``train_metrics(sums, loss=, grad_norm=, learning_rate=)``: TRL's training metrics from an update's sums
    (``rlvr.train.metrics.trl_train_metrics`` with the run's plan); ``units``: the run's units (a fractional
    ``logging_steps`` is of them)."""

    def __init__(self, plan: LoggingPlan, *, units: int, train_metrics: Callable[..., dict]):
        self.plan, self.every, self.train_metrics = plan, plan.every(units), train_metrics
        self.train_keys = set(train_metrics({}, loss=None, grad_norm=None, learning_rate=None))
        self.entries: list[dict] = []
        self.summary_entry: dict | None = None
        self.start(counter=0, global_step=0, epoch=0.0, tokens=0)

    @property
    def history(self) -> list[dict]:
        """Every entry this process made or resumed with (evaluations aside), as ``trainer.state.log_history``."""
        return self.entries + ([self.summary_entry] if self.summary_entry is not None else [])

    def restore(self, log_history: list[dict]) -> None:
        """A resumed run's entries: a checkpoint's log_history without its evaluations (``eval_*`` entries, which
        rlvr keeps apart: evaluations.jsonl)."""
        self.entries = [dict(e) for e in log_history if not any(key.startswith("eval_") for key in e)]

    def start(self, *, counter: int, global_step: int, epoch: float, tokens: int) -> None:
        """A ``train`` call starts at ``counter`` (0, or the resumed step's): the interval starts there, as
        transformers' ``_globalstep_last_logged``; runtime, train_loss and tokens per second count from here."""
        self.last_logged, self.first_step, self.global_step, self.epoch = counter, global_step, global_step, epoch
        self.tokens = self.initial_tokens = tokens
        self.started, self.total_loss = time.time(), 0.0
        self._new_interval()

    def _new_interval(self) -> None:
        self.pending: dict[str, list[float]] = {}  # name -> [sum of valid values, their count]; present: appended
        self.sums: dict[str, float] = {}
        self.loss_sum, self.loss_steps, self.units = 0.0, 0, 0

    def add(self, unit: LogUnit) -> dict | None:
        """Count ``unit``; the entry it logs (appended to ``entries``), or None when no entry is due."""
        steps = unit.global_step - self.global_step
        self.global_step, self.epoch, self.units = unit.global_step, unit.epoch, self.units + 1
        if unit.loss is not None:
            self.loss_sum, self.loss_steps = self.loss_sum + unit.loss * steps, self.loss_steps + steps
            self.total_loss += unit.loss * steps
        for key, value in unit.sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        for name, value in unit.values.items():
            if name == "num_tokens":  # TRL sets it (the count so far), it does not append to it
                self.pending.pop(name, None)
                self.tokens = int(value)
            total = self.pending.setdefault(name, [0.0, 0])
            if value is not None and not math.isnan(value):
                total[0], total[1] = total[0] + value, total[1] + 1
        if not self._due(unit) or unit.counter <= self.last_logged:
            return None
        entry = {"loss": self.loss_sum / self.loss_steps if self.loss_steps else None}
        if unit.grad_norm is not None:
            entry["grad_norm"] = unit.grad_norm
        entry |= {"learning_rate": unit.learning_rate, **self._metrics(), "epoch": unit.epoch,
                  **self._tokens(speed=True), "step": unit.global_step}
        self.entries.append(entry)
        self.last_logged = unit.counter
        self._new_interval()
        return entry

    def _due(self, unit: LogUnit) -> bool:
        """transformers' DefaultFlowCallback: on_step_end (first step, every logging_steps) and on_epoch_end."""
        plan = self.plan
        return ((unit.counter == 1 and plan.first_step) or (plan.strategy == "steps" and unit.counter % self.every == 0)
                or (plan.strategy == "epoch" and unit.epoch_end))

    def _metrics(self) -> dict:
        """TRL's metrics averaged over the interval (NaN out; None when only NaN was appended)."""
        out = {name: total / count if count else None for name, (total, count) in self.pending.items()}
        if self.sums.get("micro_batches", 0.0) > 0:  # TRL's per-micro-batch lists, over the interval's micro-batches
            trained = self.train_metrics(self.sums, loss=None, grad_norm=None, learning_rate=None)
            out |= {key: value for key, value in trained.items() if key not in INTERVAL_KEYS}
        return out

    def _tokens(self, *, speed: bool) -> dict:
        """transformers' ``Trainer.log`` with include_num_input_tokens_seen: the count (TRL's: prompt + completion
        tokens), and during training the session's runtime and tokens per second (``speed_metrics``)."""
        if not self.plan.tokens_seen:
            return {}
        out = {"num_input_tokens_seen": self.tokens}
        if speed:
            runtime = time.time() - self.started
            out["train_runtime"] = round(runtime, 4)
            if runtime > 0:
                out["train_tokens_per_second"] = round((self.tokens - self.initial_tokens) / runtime, 3)
        return out

    def summary(self, *, samples_per_step: int, memory: dict) -> dict:
        """transformers' end-of-training entry (``summary_entry``); returned without ``step``: the metrics
        of ``train``'s ``TrainOutput``. ``samples_per_step``: completions per optimiser step (TRL's
        per_device_train_batch_size x accumulation x processes); ``memory``: transformers' memory metrics ({})."""
        runtime, steps = time.time() - self.started, self.global_step - self.first_step
        out = {"train_runtime": round(runtime, 4)}
        if runtime > 0:
            out |= {"train_samples_per_second": round(steps * samples_per_step / runtime, 3),
                    "train_steps_per_second": round(steps / runtime, 3)}
        out |= {"total_flos": 0.0, "train_loss": self.total_loss / max(steps, 0.001), **memory}
        if self.units:  # what TRL appended since the last entry: its log adds it to this one
            out |= self._metrics()
        out |= {"epoch": self.epoch, **self._tokens(speed=False)}
        self.summary_entry = {**out, "step": self.global_step}
        self._new_interval()
        return out
