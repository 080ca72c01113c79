"""The trainer's state in a checkpoint: written at the end of a step (``save``), read back on resume
(``restore``), and transformers' TrainerState of it (``hf_state``). The layout and the files are ``rlvr/run/``'s
(checkpoints.py); this module knows what the loop keeps: the weights, the optimiser and schedule, the data order,
the group counter, a round sampled ahead (async generation), the gradient-spike and skipped-step counters."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.parallel.runtime import DistContext, is_sharded
from rlvr.parallel.setup import full_state_dicts
from rlvr.run import checkpoints as ckpt
from rlvr.run.export import export_final_model
from rlvr.run.folder import JsonlLog, write_config
from rlvr.run.resume import check_logged_steps
from rlvr.train.plan import RunLength
from rlvr.train.run_plan import SavePlan

logger = logging.getLogger(__name__)


@dataclass
class Counters:
    """The loop's counters a checkpoint keeps."""

    skipped_in_a_row: int = 0  # optimiser steps since the last finite one
    num_tokens: int = 0  # prompt + completion tokens seen (TRL's num_tokens)


@dataclass
class Checkpointed:
    """The objects whose state a checkpoint holds (or, the engine, takes again on resume)."""

    policy: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    engine: Any  # takes the restored weights (sync_weights)
    rollouts: Any  # the data order before a round sampled ahead, and that round
    sampler: Any
    group_ids: Any
    grad_spikes: Any


class RunCheckpoints:
    """Saves and restores the run's state; every rank calls, rank 0 writes (atomically), the others wait."""

    def __init__(self, objects: Checkpointed, *, output_dir: Path, dist: DistContext, length: RunLength,
                 save: SavePlan, train_batch_size: int, hub, metrics_log: JsonlLog, samples_log: JsonlLog):
        self.output_dir, self.dist, self.length, self.plan = output_dir, dist, length, save
        self.train_batch_size, self.hub, self.metrics_log, self.samples_log = train_batch_size, hub, metrics_log, samples_log
        o = objects
        self.policy, self.tokenizer, self.optimizer, self.scheduler = o.policy, o.tokenizer, o.optimizer, o.scheduler
        self.engine, self.rollouts, self.sampler, self.group_ids = o.engine, o.rollouts, o.sampler, o.group_ids
        self.grad_spikes = o.grad_spikes

    def save(self, step: int, counters: Counters, *, final: bool = False) -> Path | None:
        """The checkpoint of the end of ``step``. ``final``: the last step, whose model is also put at output_dir
        (TRL's ``save_model``)."""
        sampler_state, group_counter = self.rollouts.resume_state()  # async: before step+1's prompts were taken
        state = {"step": step, "sampler": sampler_state, "group_counter": group_counter,
                 "grad_spikes": self.grad_spikes.state_dict(), "skipped_in_a_row": counters.skipped_in_a_row,
                 "num_tokens": counters.num_tokens}
        ahead = self.rollouts.saved_completions()  # async: step+1's responses, on every rank
        if ahead is not None:
            state["rollout_ahead"] = self.dist.gather_objects(ahead)
        path, model_state, optimizer_state = None, None, None
        if is_sharded(self.policy):  # gather the full states (a collective: every rank takes part)
            model_state, optimizer_state = full_state_dicts(self.policy, self.optimizer)
        if self.dist.is_main:
            snapshot = ckpt.Snapshot(self.policy, self.tokenizer, self.optimizer, self.scheduler, trainer_state=state,
                                     hf_state=self.hf_state(step, counters.num_tokens), model_state=model_state,
                                     optimizer_state=optimizer_state)
            path = ckpt.save_checkpoint(self.output_dir, self.length.counter(step), snapshot,
                                        keep_last=self.plan.keep_last, merged_model=self.plan.merged_model)
            if final:
                export_final_model(path, self.output_dir)
            if self.hub is not None:
                self.hub.saved(path)
        self.dist.barrier()
        return path

    def hf_state(self, step: int, num_tokens: int) -> dict:
        """transformers' TrainerState of the checkpoint at ``step``: optimiser steps, and log_history (the
        metrics.jsonl lines up to ``step``, each with its ``step`` in optimiser steps, as TRL logs them)."""
        length, lines = self.length, self.metrics_log.read()
        history = [{**line, "rlvr_step": line["step"], "step": length.optimizer_steps_done(line["step"])}
                   for line in lines]
        save_steps = self.plan.every(length) * (1 if length.counts_optimizer_steps else length.optimizer_steps_per_step)
        return ckpt.hf_trainer_state(length.optimizer_steps_done(step), max_steps=length.optimizer_steps,
                                     epoch=length.epoch(step), num_train_epochs=length.epochs, log_history=history,
                                     save_steps=save_steps, num_input_tokens_seen=num_tokens,
                                     train_batch_size=self.train_batch_size)

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
        self.rollouts.restore(ahead[self.dist.rank] if ahead else None)
        self.grad_spikes.load_state_dict(state["grad_spikes"])
        if self.dist.is_main:
            out = self.output_dir
            ckpt.remove_checkpoints_after(out, self.length.counter(state["step"]))
            self.metrics_log.truncate_after(state["step"])
            self.samples_log.truncate_after(state["step"])
            check_logged_steps(self.metrics_log.read(), state["step"], out, force=force)
            write_config(out / "config.yaml", config)
        self.dist.barrier()
        logger.info("resumed from %s (step %d)", found, state["step"])
        return state["step"], counters
