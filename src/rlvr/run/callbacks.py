"""User callbacks of the Python API: ``Trainer(cfg, callbacks=[...])``, called on rank 0.

A callback is any object with one or both of

    on_step_end(step, metrics)   after step ``step``'s line was written to metrics.jsonl
    on_save(step, path)          after the checkpoint of step ``step`` was written to ``path``

or a ``transformers.TrainerCallback`` (TRL's callbacks), which is called as transformers' Trainer calls it:
``on_step_end(args, state, control, ...)`` after each optimiser step (with rlvr's own preset: each step),
``on_log(args, state, control, logs=entry)`` for each entry of TRL's log (``rlvr.train.trl_log``: at
``logging_steps``, and the end-of-training entry), and ``on_save(args, state, control, ...)`` after each
checkpoint, with a ``TrainingArguments(output_dir=<run dir>, max_steps=...)``, a ``TrainerState`` whose
``global_step`` is the optimiser step just finished (``epoch`` its epoch) and ``log_history`` TRL's log, and a
``TrainerControl``; the keyword arguments are ``model``, ``processing_class``, ``optimizer`` and
``lr_scheduler``. A ``control.should_training_stop`` a callback sets is not acted on (a warning
says so); stop with ``max_steps`` instead. A callback's exception propagates: it is the caller's code.
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

HOOKS = ("on_step_end", "on_save")


class Callbacks:
    """The run's callbacks, checked at set-up, called by the trainer on rank 0."""

    def __init__(self, callbacks, *, output_dir: Path, max_steps: int, objects: dict):
        """``objects``: the keyword arguments a TrainerCallback receives (model, processing_class, ...);
        ``max_steps``: the run's optimiser steps."""
        self.plain, self.trl = [], []
        for callback in callbacks or ():
            if _is_trainer_callback(callback):
                self.trl.append(callback)
            elif any(callable(getattr(callback, hook, None)) for hook in HOOKS):
                self.plain.append(callback)
            else:
                raise TypeError(f"callback {callback!r} has neither on_step_end(step, metrics) nor "
                                "on_save(step, path); give an object with one of them, or a "
                                "transformers.TrainerCallback")
        self.output_dir, self.max_steps, self.objects = output_dir, max_steps, objects
        self._trl_args = None
        self._warned_stop = False

    def __bool__(self) -> bool:
        return bool(self.plain or self.trl)

    def step_end(self, step: int, metrics: dict) -> None:
        """The plain callbacks' ``on_step_end(step, metrics)``: step ``step``'s metrics.jsonl line."""
        for callback in self.plain:
            if callable(getattr(callback, "on_step_end", None)):
                callback.on_step_end(step, dict(metrics))

    def optimizer_step_end(self, global_step: int, epoch: float) -> None:
        """The TrainerCallbacks' ``on_step_end`` after optimiser step ``global_step`` (with rlvr's preset: a step)."""
        if self.trl:
            args, state, control = self._trl_context(global_step, epoch)
            for callback in self.trl:
                callback.on_step_end(args, state, control, **self.objects)
            self._check_control(control)

    def log(self, entry: dict) -> None:
        """The TrainerCallbacks' ``on_log`` with an entry of TRL's log, without its ``step`` (appended to the state's
        log_history first, as transformers' ``Trainer.log`` does)."""
        if self.trl:
            args, state, control = self._trl_context()
            state.log_history.append(dict(entry))
            for callback in self.trl:
                callback.on_log(args, state, control, logs={k: v for k, v in entry.items() if k != "step"},
                                **self.objects)
            self._check_control(control)

    def event(self, name: str, *, state=None, **kwargs) -> None:
        """A TrainerCallback event with no rlvr counterpart (on_train_begin, on_train_end, on_evaluate), called
        on the TrainerCallbacks with ``state`` (default: the one of the last step) and ``kwargs``."""
        if not self.trl:
            return
        args, current, control = self._trl_context()
        for callback in self.trl:
            getattr(callback, name)(args, state or current, control, **self.objects, **kwargs)
        self._check_control(control)

    def evaluated(self, global_step: int, logs: dict) -> None:
        """An evaluation's entry (TRL's ``eval_*`` line, with its ``epoch``) at ``global_step``, as transformers'
        ``Trainer.evaluate`` reports it: into the state's log_history with ``step``, then ``on_log(logs=...)`` and
        ``on_evaluate(metrics=...)`` on the TrainerCallbacks (plain callbacks have no such hook)."""
        if not self.trl:
            return
        args, state, control = self._trl_context(global_step)
        state.epoch = logs.get("epoch", state.epoch)
        state.log_history.append({**logs, "step": global_step})
        for callback in self.trl:
            callback.on_log(args, state, control, logs=dict(logs), **self.objects)
        for callback in self.trl:
            callback.on_evaluate(args, state, control, metrics=dict(logs), **self.objects)
        self._check_control(control)

    def saved(self, step: int, path) -> None:
        for callback in self.plain:
            if callable(getattr(callback, "on_save", None)):
                callback.on_save(step, path)
        if self.trl:
            args, state, control = self._trl_context()
            for callback in self.trl:
                callback.on_save(args, state, control, **self.objects)
            self._check_control(control)

    def _trl_context(self, global_step: int | None = None, epoch: float | None = None):
        """(args, state, a new control); the state moves to ``global_step`` and ``epoch`` where given."""
        from transformers import TrainerControl, TrainerState, TrainingArguments

        if self._trl_args is None:
            self._trl_args = TrainingArguments(output_dir=str(self.output_dir), max_steps=self.max_steps,
                                               report_to="none")
            self._state = TrainerState(max_steps=self.max_steps)
        if global_step is not None:
            self._state.global_step = global_step
        if epoch is not None:
            self._state.epoch = epoch
        return self._trl_args, self._state, TrainerControl()

    def _check_control(self, control) -> None:
        if control.should_training_stop and not self._warned_stop:
            self._warned_stop = True
            logger.warning("a TrainerCallback set control.should_training_stop; rlvr does not act on it and trains "
                           "to max_steps=%d (set max_steps to stop earlier)", self.max_steps)


def _is_trainer_callback(callback) -> bool:
    try:
        from transformers import TrainerCallback
    except ImportError:
        return False
    return isinstance(callback, TrainerCallback)
