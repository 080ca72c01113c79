"""The trainer's state in a checkpoint: written at the end of a step when the save plan asks (``end_of_step``:
``save_strategy`` steps, epoch, best or no, and a signal), read back on resume (``restore``), and transformers'
TrainerState of it (``hf_state``); the final model at output_dir (``rlvr train``: after the last step; TRL's
GRPOTrainer: ``save_model()``, :class:`Outputs`), and the model card at each checkpoint, as TRL writes it. The
layout and the files are ``rlvr/run/``'s (checkpoints.py, export.py); this module knows what the loop keeps: the
weights, the optimiser and schedule, the data order, the group counter, a round sampled ahead (async
generation), the gradient-spike and skipped-step counters, save_strategy=best's best value."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.parallel.runtime import DistContext, is_sharded
from rlvr.parallel.setup import full_state_dicts
from rlvr.run import checkpoints as ckpt
from rlvr.run.export import export_final_model, save_final_model, save_training_args, write_model
from rlvr.run.folder import JsonlLog, write_config
from rlvr.run.model_card import write_model_card
from rlvr.run.resume import check_logged_steps
from rlvr.train.plan import RunLength
from rlvr.train.run_plan import SavePlan

logger = logging.getLogger(__name__)


@dataclass
class Counters:
    """The loop's counters a checkpoint keeps."""

    skipped_in_a_row: int = 0  # optimiser steps since the last finite one
    num_tokens: int = 0  # prompt + completion tokens seen (TRL's num_tokens)


@dataclass(frozen=True)
class Outputs:
    """What the run writes for whoever runs it: ``rlvr train`` (rlvr's Trainer) puts the final model at output_dir
    after the last step; TRL's GRPOTrainer leaves that to the script's ``save_model()``, as TRL does.
    ``training_args``: the object training_args.bin holds (TRL: the script's GRPOConfig; rlvr: its config dict).
    ``folder_check_first``: a folder holding a run is refused at set-up, before the model loads (rlvr's); False for
    a TRL script's ``trainer.model`` before ``train()``, whose resume is only known then (the folder is checked
    when training starts, as always)."""

    training_args: Any
    final_model: bool = True
    folder_check_first: bool = True


@dataclass
class Checkpointed:
    """The objects whose state a checkpoint holds (or, the engine, takes again on resume)."""

    policy: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    engine: Any  # takes the restored weights (sync_weights)
    generation: Any  # Rollouts: the data order before a round sampled ahead, and that round
    sampler: Any
    group_ids: Any
    grad_spikes: Any
    update: Any = None  # the policy update (its adaptive entropy state, a synchronised reference)


class RunCheckpoints:
    """Saves and restores the run's state; every rank calls, rank 0 writes (atomically), the others wait."""

    def __init__(self, objects: Checkpointed, *, output_dir: Path, dist: DistContext, length: RunLength,
                 save: SavePlan, train_batch_size: int, hub, logs: tuple[JsonlLog, JsonlLog], outputs: Outputs,
                 trl_log):
        """``logs``: metrics.jsonl's and samples.jsonl's (a resume cuts them back to its step); ``trl_log``: the run's
        TRL log (``rlvr.train.trl_log.TrlLog``), whose entries trainer_state.json holds."""
        self.output_dir, self.dist, self.length, self.plan = output_dir, dist, length, save
        self.trl_log = trl_log
        self.train_batch_size, self.hub, self.outputs = train_batch_size, hub, outputs
        self.metrics_log, self.samples_log = logs
        self.eval_log = JsonlLog(output_dir / "evaluations.jsonl")  # evaluations logged as entries of their own
        o = objects
        self.policy, self.tokenizer, self.optimizer, self.scheduler = o.policy, o.tokenizer, o.optimizer, o.scheduler
        self.engine, self.generation, self.sampler, self.group_ids = o.engine, o.generation, o.sampler, o.group_ids
        self.grad_spikes = o.grad_spikes
        self.update = o.update
        self.best: tuple[float, int] | None = None  # save_strategy=best: (the best value, its step's counter)

    def check_plan(self, *, evaluates: bool) -> None:
        """save_strategy=best saves only when an evaluation improves the metric: refused without evaluation
        during training, where it would save nothing."""
        if self.plan.strategy == "best" and not evaluates:
            raise ValueError("save_strategy=best saves a checkpoint when an evaluation improves metric_for_best_model, "
                             "but this run evaluates nothing during training: set eval_strategy=steps with eval_steps "
                             "(and an eval_dataset, or eval_data), or choose save_strategy=steps")

    def end_of_step(self, step: int, counters: Counters, metrics: dict, *, stopping: bool) -> Path | None:
        """The saving at the end of ``step`` (every rank calls): the checkpoint the plan asks for (a signal always
        saves one), and after the last step the final model at output_dir when :class:`Outputs` says so. Returns
        the checkpoint written (rank 0; None elsewhere or when none was)."""
        due = self.plan.due(self.length, step) or self._improved(step, metrics) or stopping
        path = self.save(step, counters) if due else None
        if step == self.length.steps and self.outputs.final_model:
            if due:
                if self.dist.is_main:
                    export_final_model(path, self.output_dir)  # the checkpoint's model files, hard-linked
                self.dist.barrier()
            else:
                self.save_model(self.output_dir)
        return path

    def _improved(self, step: int, metrics: dict) -> bool:
        """save_strategy=best: this step evaluated and its metric beats the best so far (rank 0's metrics)."""
        if self.plan.strategy != "best":
            return False
        found = None
        if self.dist.is_main:  # (an evaluation without the metric stops every rank, not rank 0 alone)
            try:
                found = (self.plan.best_value(metrics), None)
            except ValueError as error:
                found = (None, str(error))
        value, problem = self.dist.broadcast_object(found)
        if problem is not None:
            raise ValueError(problem)
        if value is None or not self.plan.improves(value, self.best[0] if self.best else None):
            return False
        self.best = (value, self.length.counter(step))
        return True

    def save_model(self, folder: Path) -> None:
        """The policy's model files (LoRA: the adapter) with training_args.bin in ``folder``, as transformers'
        ``save_model`` writes them; at output_dir's top they are the final model (recorded, replaced whole)."""
        model_state = full_state_dicts(self.policy, self.optimizer)[0] if is_sharded(self.policy) else None
        if self.dist.is_main:
            if Path(folder).resolve() == self.output_dir.resolve():
                save_final_model(self.output_dir, model=self.policy, tokenizer=self.tokenizer, model_state=model_state,
                                 merged=self.plan.merged_model, training_args=self.outputs.training_args)
            else:
                Path(folder).mkdir(parents=True, exist_ok=True)
                write_model(Path(folder), model=self.policy, tokenizer=self.tokenizer, output_dir=self.output_dir,
                            model_state=model_state, merged=self.plan.merged_model)
                save_training_args(Path(folder), self.outputs.training_args)
        self.dist.barrier()

    def save(self, step: int, counters: Counters) -> Path | None:
        """The checkpoint of the end of ``step`` (and the model card at output_dir, as TRL writes it with each)."""
        sampler_state, group_counter = self.generation.resume_state()  # async: before step+1's prompts were taken
        state = {"step": step, "sampler": sampler_state, "group_counter": group_counter,
                 "grad_spikes": self.grad_spikes.state_dict(), "skipped_in_a_row": counters.skipped_in_a_row,
                 "num_tokens": counters.num_tokens, "best": self.best}
        ahead = self.generation.saved_completions()  # async: step+1's responses, on every rank
        if ahead is not None:
            state["rollout_ahead"] = self.dist.gather_objects(ahead)
        path, model_state, optimizer_state = None, None, None
        if is_sharded(self.policy):  # gather the full states (a collective: every rank takes part)
            model_state, optimizer_state = full_state_dicts(self.policy, self.optimizer)
        if self.dist.is_main:
            snapshot = ckpt.Snapshot(self.policy, self.tokenizer, self.optimizer, self.scheduler, trainer_state=state,
                                     hf_state=self.hf_state(step, counters.num_tokens), model_state=model_state,
                                     optimizer_state=optimizer_state, training_args=self.outputs.training_args,
                                     extra=self.update.write_state if self.update is not None else None)
            base = getattr(self.policy, "get_base_model", lambda: self.policy)()
            write_model_card(self.output_dir, base_model=getattr(base, "name_or_path", None),
                             algo=self.plan.trained_with, hub_model_id=self.hub.repo_id if self.hub else None)
            path = ckpt.save_checkpoint(self.output_dir, self.length.counter(step), snapshot,
                                        keep_last=self.plan.keep_last, merged_model=self.plan.merged_model)
            if self.hub is not None:
                self.hub.saved(path)
        self.dist.barrier()
        return path

    def hf_state(self, step: int, num_tokens: int) -> dict:
        """transformers' TrainerState of the checkpoint at ``step``: optimiser steps, and log_history (TRL's log up
        to ``step``, rlvr.train.trl_log, with the evaluations' entries)."""
        length, entries = self.length, self.trl_log.entries
        rlvr_steps = [math.ceil(entry["step"] / length.optimizer_steps_per_step) for entry in entries]
        history = merge_evaluations(list(entries), rlvr_steps, [e for e in self.eval_log.read() if e["step"] <= step])
        save_steps = self.plan.every(length) * (1 if length.counts_optimizer_steps else length.optimizer_steps_per_step)
        best = {}
        if self.best is not None:  # save_strategy=best, as transformers' _determine_best_metric records it
            best = {"best_metric": self.best[0], "best_global_step": self.best[1],
                    "best_model_checkpoint": str(ckpt.checkpoint_dir(self.output_dir, self.best[1]))}
        state = ckpt.hf_trainer_state(length.optimizer_steps_done(step), max_steps=length.optimizer_steps,
                                      epoch=length.epoch(step), num_train_epochs=length.epochs, log_history=history,
                                      save_steps=save_steps, num_input_tokens_seen=num_tokens,
                                      train_batch_size=self.train_batch_size, **best)
        return state | {"logging_steps": self.trl_log.every}

    def restore(self, found: Path, *, config: dict, force: bool) -> tuple[int, Counters]:
        """Every rank restores ``found``; rank 0 drops the later checkpoints and log lines (resume_from_checkpoint:
        the later steps are abandoned) and writes the config again. Returns the step done and the counters."""
        ckpt.load_model_weights(self.policy, found)
        self.engine.sync_weights()
        ckpt.load_training_state(found, optimizer=self.optimizer, scheduler=self.scheduler, model=self.policy)
        state = ckpt.load_trainer_state(found)
        counters = Counters(state.get("skipped_in_a_row", 0), state.get("num_tokens", 0))
        self.sampler.load_state_dict(state["sampler"])
        self.group_ids.last = state["group_counter"]
        ahead = state.get("rollout_ahead")  # async_generation: the next step's responses, sampled before the save
        self.generation.restore(ahead[self.dist.rank] if ahead else None)
        self.grad_spikes.load_state_dict(state["grad_spikes"])
        if self.update is not None:
            self.update.read_state(found)
        self.best = tuple(state["best"]) if state.get("best") else None
        self.trl_log.restore(json.loads((found / "trainer_state.json").read_text(encoding="utf-8"))["log_history"])
        if self.dist.is_main:
            out = self.output_dir
            ckpt.remove_checkpoints_after(out, self.length.counter(state["step"]))
            self.metrics_log.truncate_after(state["step"])
            self.samples_log.truncate_after(state["step"])
            self.eval_log.truncate_after(state["step"])
            check_logged_steps(self.metrics_log.read(), state["step"], out, force=force)
            write_config(out / "config.yaml", config)
        self.dist.barrier()
        logger.info("resumed from %s (step %d)", found, state["step"])
        return state["step"], counters


def merge_evaluations(history: list[dict], steps: list[int], evaluations: list[dict]) -> list[dict]:
    """``history`` (an entry per metrics.jsonl line, of rlvr step ``steps[i]``) with the evaluations' entries
    (evaluations.jsonl lines: ``{"step": rlvr step, "log": entry}``) each after its step's line, in the order they
    were made (one before the first step first), as transformers' log_history holds them."""
    evaluations = sorted(evaluations, key=lambda e: e["step"])  # (stable: the order made)
    out, k = [], 0
    for entry, step in zip(history, steps, strict=True):
        while k < len(evaluations) and evaluations[k]["step"] < step:
            out.append(evaluations[k]["log"])
            k += 1
        out.append(entry)
    return out + [e["log"] for e in evaluations[k:]]
