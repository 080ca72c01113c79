"""TRL's evaluation in ``rlvr.GRPOTrainer``: the GRPOConfig's evaluation keys read once, ``evaluate()``, and the
evaluations during training, each logged as transformers' ``Trainer.evaluate`` logs one.

TRL's keys: ``eval_strategy`` (steps | epoch | no), ``eval_steps`` (default ``logging_steps``; a fraction below 1
of max_steps), ``eval_delay``, ``eval_on_start``, ``per_device_eval_batch_size`` (completions per batch) and
``num_generations_eval`` (completions per prompt, default ``num_generations``). What an evaluation computes is
rlvr.train.evaluation_trl; when it runs during training, rlvr.train.evaluation.EvalSchedule.

An evaluation's entry — ``eval_loss``, the speed metrics, TRL's ``eval_<name>`` batch metrics and ``epoch`` — is
an entry of its own, as transformers' ``Trainer.log`` writes it: in ``log_history`` with ``step`` (TRL's
global_step; during training also in the run folder's ``evaluations.jsonl``, which checkpoints' trainer_state.json
merge), to the trackers under transformers' tags (``eval/<name>``, ``train/epoch``) at that step, and to the
callbacks' ``on_log`` then ``on_evaluate``; during training, after the step's own line. An ``evaluate()`` after
``train()`` reopens TensorBoard as transformers' callback does (the other trackers' runs ended with training).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# (rlvr.train is imported where it is used: ``from rlvr import GRPOTrainer`` stays light until training)

# the GRPOConfig keys read here (not by rlvr's config), with TRL's defaults (do_eval: read by scripts; TRL's trainer
# does nothing with it, nor does this one)
EVAL_DEFAULTS = {"eval_strategy": "no", "eval_steps": None, "eval_delay": 0, "eval_on_start": False, "do_eval": False,
                 "per_device_eval_batch_size": 8, "num_generations_eval": None}
STRATEGIES = ("no", "steps", "epoch")
# transformers' evaluation loop prepares the model itself when an evaluate() comes before accelerate has prepared any
# (before train(), without a reference model: beta 0 or LoRA) and from then on logs <prefix>_model_preparation_time
# with every evaluation; rlvr's model needs no preparation: 0.0, kept on rlvr's Trainer under this attribute
MODEL_PREPARATION = "trl_model_preparation_time"


@dataclass(frozen=True)
class EvalOptions:
    """A GRPOConfig's evaluation keys, checked as TRL's GRPOConfig and transformers' Trainer check them."""

    strategy: str  # steps | epoch | no
    steps: float  # eval_steps (a fraction below 1: of max_steps)
    delay: float
    on_start: bool
    num_generations: int  # num_generations_eval (default num_generations)
    batch_size: int  # per_device_eval_batch_size
    seed: int  # the eval sampler's permutation (args.seed)

    def schedule(self, max_steps: int):
        """When to evaluate (rlvr.train.evaluation.EvalSchedule) in a run of ``max_steps`` optimiser steps."""
        from rlvr.train.evaluation import EvalSchedule, eval_every

        every = eval_every(self.steps, max_steps) if self.strategy == "steps" else 0
        return EvalSchedule(self.strategy, every=every, delay=self.delay, on_start=self.on_start)

    @property
    def settings(self):
        """How an evaluation samples (rlvr.train.evaluation_trl.TrlEvalSettings)."""
        from rlvr.train.evaluation_trl import TrlEvalSettings

        return TrlEvalSettings(num_generations=self.num_generations, batch_size=self.batch_size, seed=self.seed)


def eval_options(given: dict, overrides: dict, *, has_dataset: bool) -> EvalOptions:
    """The evaluation keys ``given`` (those of :data:`EVAL_DEFAULTS` that differ from TRL's default); ``overrides``:
    the config's other keys (``num_generations``, ``logging_steps``, ``seed``). Refused as TRL refuses them, with
    the fix."""
    value = {**EVAL_DEFAULTS, **given}
    strategy = str(getattr(value["eval_strategy"], "value", value["eval_strategy"])).lower()
    if strategy not in STRATEGIES:
        raise ValueError(f"eval_strategy={strategy!r}: choose one of {STRATEGIES}")
    steps = value["eval_steps"] if value["eval_steps"] not in (None, 0) else overrides.get("logging_steps", 10)
    if not 0 < steps < math.inf or (steps > 1 and steps != int(steps)):
        raise ValueError(f"eval_steps={steps!r}: use a whole number of steps, or a fraction below 1 of max_steps")
    if not 0 <= value["eval_delay"] < math.inf:
        raise ValueError(f"eval_delay={value['eval_delay']!r}: use 0 or a positive number of steps (epochs with "
                         "eval_strategy=epoch)")
    if (strategy != "no" or value["eval_on_start"]) and not has_dataset:
        raise ValueError(f"eval_strategy={strategy}, eval_on_start={value['eval_on_start']}: evaluation needs an "
                         "eval_dataset; pass GRPOTrainer(eval_dataset=...), or set eval_strategy='no' and "
                         "eval_on_start=False")
    generations = value["num_generations_eval"] or overrides.get("num_generations", 8)
    batch = value["per_device_eval_batch_size"]
    if generations < 1 or batch < 1 or batch % generations:
        raise ValueError(f"per_device_eval_batch_size={batch} must be a positive multiple of num_generations_eval="
                         f"{generations} (an eval batch holds whole groups, as TRL requires); change either")
    return EvalOptions(strategy, float(steps), float(value["eval_delay"]), bool(value["eval_on_start"]),
                       num_generations=generations, batch_size=batch, seed=overrides.get("seed", 42))


class TrainingEvaluation:
    """TRL's evaluation during an rlvr.GRPOTrainer's training, in the trainer loop's evaluation slot (its protocol:
    ``on_start``, ``in_line``, ``due``, ``run``; rlvr.train.trainer). ``run`` logs the entry itself
    (:func:`log_entry`), after the step's own line (``in_line`` False), and returns it."""

    in_line = False

    def __init__(self, trainer, options: EvalOptions, dataset):
        one_process(trainer)
        self.trainer, self.options, self.dataset = trainer, options, dataset
        self.schedule = options.schedule(trainer.length.counter(trainer.length.steps))  # (TRL's max_steps)

    @property
    def on_start(self) -> bool:
        return self.schedule.on_start

    def due(self, step: int) -> bool:
        return self.schedule.due(self.trainer.length, step)

    def run(self, policy, tokenizer, output_dir, step: int) -> dict:
        """Evaluate and log the entry; its metrics as ``eval/<name>`` (what save_strategy=best reads)."""
        entries = evaluate_datasets(self.trainer, self.dataset, self.options.settings, step=step,
                                    preparation_time=getattr(self.trainer, MODEL_PREPARATION, None))
        for entry in entries:
            log_entry(self.trainer, entry, step=step, live=True)
        return {"eval/" + key.removeprefix("eval_"): value for key, value in merged(entries).items()
                if key.startswith("eval_")}


def evaluate_datasets(trainer, dataset, settings, *, step: int, prefix: str = "eval",
                      preparation_time: float | None = None) -> list[dict]:
    """One entry per dataset (a dict of datasets: ``<prefix>_<name>_...``, as transformers' ``evaluate`` does it),
    each with the ``epoch`` at the end of ``step``; ``settings``: rlvr.train.evaluation_trl.TrlEvalSettings;
    ``preparation_time``: transformers' ``<prefix>_model_preparation_time`` (:data:`MODEL_PREPARATION`)."""
    from rlvr.train.evaluation_trl import trl_evaluation

    one_process(trainer)
    named = dataset if _is_named(dataset) else {None: dataset}
    return [{**trl_evaluation(trainer, data, settings, prefix=prefix if name is None else f"{prefix}_{name}",
                              preparation_time=preparation_time),
             "epoch": trainer.length.epoch(step)} for name, data in named.items()]


def one_process(trainer) -> None:
    """TRL's evaluation runs on one process here (TRL shares its batches out over the processes): refused on more,
    on every rank alike (before training, so that no rank waits for another)."""
    if trainer.dist.world_size > 1:
        raise ValueError(f"eval_dataset with {trainer.dist.world_size} processes: rlvr.GRPOTrainer's TRL evaluation "
                         "runs on one process; evaluate from a one-process script (trainer.evaluate() after loading "
                         "the checkpoint), or drop eval_dataset / eval_strategy for the multi-process run")


def merged(entries: list[dict]) -> dict:
    """``evaluate()``'s return: the entries' metrics, a later dataset's overwriting TRL's shared ``eval_<name>``."""
    out = {}
    for entry in entries:
        out.update(entry)
    return out


def log_entry(trainer, entry: dict, *, step: int, live: bool, history: list | None = None) -> dict:
    """Log an evaluation's ``entry`` at the end of rlvr ``step`` as transformers' ``Trainer.log`` does; return its
    log_history record (``step``: TRL's global_step). ``live``: during training (the run folder's
    ``evaluations.jsonl`` and the run's trackers); else into ``history`` and TensorBoard reopened."""
    global_step = trainer.length.counter(step)
    record = {**entry, "step": global_step}
    if live:
        trainer.checkpoints.eval_log.write([{"step": step, "log": record}])
        trainer.trackers.log_entry(global_step, entry)
    else:
        history.append(record)
        with _tensorboard(trainer) as trackers:
            trackers.log_entry(global_step, entry)
    trainer.callbacks.evaluated(global_step, dict(entry))
    return record


class _tensorboard:
    """The run's TensorBoard writer opened again (``report_to`` has it), as transformers' TensorBoardCallback opens
    one on a log after training; no tracker otherwise."""

    def __init__(self, trainer):
        from rlvr.run.trackers import TensorBoardTracker, Trackers

        run = trainer.run
        folder = Path(os.path.abspath(run.logging_dir)) if run.logging_dir else trainer.output_dir / "runs"
        self.trackers = Trackers({"tensorboard": TensorBoardTracker(logging_dir=folder)}
                                 if "tensorboard" in run.report_to else {})

    def __enter__(self):
        return self.trackers

    def __exit__(self, *exc) -> None:
        self.trackers.close()


def _is_named(data) -> bool:
    """A dict of datasets (``{name: dataset}``), not one dataset."""
    return isinstance(data, dict) or (hasattr(data, "keys") and not hasattr(data, "column_names"))
