"""TRL's evaluation during training and its entries, for ``rlvr.GRPOTrainer`` (rlvr.trl_api.evaluation reads a
GRPOConfig's evaluation keys) and for a TRL recipe run by ``rlvr train`` (``eval_mode=trl``, rlvr.train.setup):
when it runs (rlvr.train.evaluation.EvalSchedule), what it computes (rlvr.train.evaluation_trl.trl_evaluation) and
how its entry is logged, as transformers' ``Trainer.evaluate`` logs one.

An evaluation's entry — ``eval_loss``, the speed metrics, TRL's ``eval_<name>`` batch metrics and ``epoch`` — is
an entry of its own, as transformers' ``Trainer.log`` writes it: in ``log_history`` with ``step`` (TRL's
global_step; during training also in the run folder's ``evaluations.jsonl``, which checkpoints' trainer_state.json
merge), to the trackers under transformers' tags (``eval/<name>``, ``train/epoch``) at that step, and to the
callbacks' ``on_log`` then ``on_evaluate``; during training, after the step's own line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rlvr.data.rows import as_chat, select_prompt_column
from rlvr.data.sources import load_python_rows, load_rows

# (torch and the trainer's modules are imported where used: ``from rlvr import GRPOTrainer`` stays light)

# transformers' evaluation loop prepares the model itself when an evaluate() comes before accelerate has prepared any
# (before train(), without a reference model: beta 0 or LoRA) and from then on logs <prefix>_model_preparation_time
# with every evaluation; rlvr's model needs no preparation: 0.0, kept on rlvr's Trainer under this attribute
MODEL_PREPARATION = "trl_model_preparation_time"



@dataclass(frozen=True)
class EvalRows:
    """How an evaluation's data (a dataset spec, row dicts or a Dataset) becomes rows, as the training rows do: the
    same row rules, ``dataset_prompt_column`` and open-r1's chats (decided at set-up: ``rlvr.train.setup.eval_rows``)."""

    rules: dict  # rlvr.data.rows.normalize_row's: gold, environment, keep_row
    prompt_column: str | None  # dataset_prompt_column (None: the row's prompt)
    source: str  # the training data's name, in messages about the prompt column
    system_prompt: str | None
    chat: bool  # open-r1's [system?, user] chats

    def __call__(self, data) -> list[dict]:
        rows = load_rows(data, **self.rules) if isinstance(data, str) else load_python_rows(data, **self.rules)
        if self.prompt_column is not None:
            rows = select_prompt_column(rows, self.prompt_column, self.source)
        return as_chat(rows, self.system_prompt) if self.chat else rows


@dataclass(frozen=True)
class TrlEvalSettings:
    """How TRL's evaluation samples (its GRPOConfig's evaluation keys, checked by the caller)."""

    num_generations: int  # completions per prompt (num_generations_eval, default num_generations)
    batch_size: int  # completions per batch (per_device_eval_batch_size): whole groups
    seed: int  # the eval sampler's permutation (TRL: args.seed)


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
        from rlvr.train.eval_schedule import EvalSchedule, eval_every


        every = eval_every(self.steps, max_steps) if self.strategy == "steps" else 0
        return EvalSchedule(self.strategy, every=every, delay=self.delay, on_start=self.on_start)

    @property
    def settings(self):
        """How an evaluation samples (:class:`TrlEvalSettings`)."""
        return TrlEvalSettings(num_generations=self.num_generations, batch_size=self.batch_size, seed=self.seed)


class TrainingEvaluation:
    """TRL's evaluation during an rlvr.GRPOTrainer's training, in the trainer loop's evaluation slot (its protocol:
    ``on_start``, ``in_line``, ``due``, ``run``; rlvr.train.trainer). ``run`` logs the entry itself
    (:func:`log_entry`), after the step's own line (``in_line`` False), and returns it."""

    in_line = False

    def __init__(self, trainer, options: EvalOptions, dataset, evaluate):
        """``evaluate``: rlvr.train.evaluation_trl.trl_evaluation (given: that module builds on rlvr.train.setup,
        which builds this)."""
        one_process(trainer)
        self.trainer, self.options, self.dataset, self.evaluate = trainer, options, dataset, evaluate
        self.schedule = options.schedule(trainer.length.counter(trainer.length.steps))  # (TRL's max_steps)

    @property
    def on_start(self) -> bool:
        return self.schedule.on_start

    def due(self, step: int) -> bool:
        return self.schedule.due(self.trainer.length, step)

    def run(self, policy, tokenizer, output_dir, step: int) -> dict:
        """Evaluate and log the entry; its metrics as ``eval/<name>`` (what save_strategy=best reads)."""
        entries = evaluate_datasets(self.trainer, self.dataset, self.options.settings, self.evaluate, step=step,
                                    preparation_time=getattr(self.trainer, MODEL_PREPARATION, None))
        for entry in entries:
            log_entry(self.trainer, entry, step=step, live=True)
        return {"eval/" + key.removeprefix("eval_"): value for key, value in merged(entries).items()
                if key.startswith("eval_")}


def evaluate_datasets(trainer, dataset, settings, evaluate, *, step: int, prefix: str = "eval",
                      preparation_time: float | None = None) -> list[dict]:
    """One entry per dataset (a dict of datasets: ``<prefix>_<name>_...``, as transformers' ``evaluate`` does it),
    each with the ``epoch`` at the end of ``step``; ``settings``: :class:`TrlEvalSettings`; ``evaluate``:
    rlvr.train.evaluation_trl.trl_evaluation;
    ``preparation_time``: transformers' ``<prefix>_model_preparation_time`` (:data:`MODEL_PREPARATION`)."""
    one_process(trainer)
    named = dataset if _is_named(dataset) else {None: dataset}
    return [{**evaluate(trainer, data, settings, prefix=prefix if name is None else f"{prefix}_{name}",
                              preparation_time=preparation_time),
             "epoch": trainer.length.epoch(step)} for name, data in named.items()]


def one_process(trainer) -> None:
    """TRL's evaluation runs on one process here (TRL shares its batches out over the processes): refused on more,
    on every rank alike (before training, so that no rank waits for another)."""
    if trainer.dist.world_size > 1:
        raise ValueError(f"TRL's evaluation (GRPOTrainer's eval_dataset, or a config's eval_mode=trl) with "
                         f"{trainer.dist.world_size} processes: it runs on one process; evaluate from a one-process "
                         "script (trainer.evaluate() after loading the checkpoint), use eval_mode=passk (rlvr's pass@k "
                         "runs on any number), or drop the evaluation for the multi-process run")


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
