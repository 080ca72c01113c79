"""User callbacks of the Python API: ``Trainer(cfg, callbacks=[...])``, called on rank 0.

A callback is any object with one or both of

    on_step_end(step, metrics)   after step ``step``'s line was written to metrics.jsonl
    on_save(step, path)          after the checkpoint of step ``step`` was written to ``path``

or a ``transformers.TrainerCallback`` (TRL's callbacks), which is called TRL-style:
``on_step_end(args, state, control, ...)`` then ``on_log(args, state, control, logs=metrics)``
after each step, and ``on_save(args, state, control, ...)`` after each checkpoint, with a
``TrainingArguments(output_dir=<run dir>, max_steps=...)``, a ``TrainerState`` whose
``global_step`` is the step just finished and ``log_history`` the steps' metrics, and a
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
        """``objects``: the keyword arguments a TrainerCallback receives (model, processing_class, ...)."""
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
        for callback in self.plain:
            if callable(getattr(callback, "on_step_end", None)):
                callback.on_step_end(step, dict(metrics))
        if self.trl:
            args, state, control = self._trl_context(step)
            state.log_history.append(dict(metrics))
            for callback in self.trl:
                callback.on_step_end(args, state, control, **self.objects)
                callback.on_log(args, state, control, logs=dict(metrics), **self.objects)
            self._check_control(control)

    def event(self, name: str, *, state=None, **kwargs) -> None:
        """A TrainerCallback event with no rlvr counterpart (on_train_begin, on_train_end, on_evaluate), called
        on the TrainerCallbacks with ``state`` (default: the one of the last step) and ``kwargs``."""
        if not self.trl:
            return
        args, current, control = self._trl_context(self._state.global_step if self._trl_args else 0)
        for callback in self.trl:
            getattr(callback, name)(args, state or current, control, **self.objects, **kwargs)
        self._check_control(control)

    def saved(self, step: int, path) -> None:
        for callback in self.plain:
            if callable(getattr(callback, "on_save", None)):
                callback.on_save(step, path)
        if self.trl:
            args, state, control = self._trl_context(step)
            for callback in self.trl:
                callback.on_save(args, state, control, **self.objects)
            self._check_control(control)

    def _trl_context(self, step: int):
        from transformers import TrainerControl, TrainerState, TrainingArguments

        if self._trl_args is None:
            self._trl_args = TrainingArguments(output_dir=str(self.output_dir), max_steps=self.max_steps,
                                               report_to="none")
            self._state = TrainerState(max_steps=self.max_steps)
        self._state.global_step = step
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
