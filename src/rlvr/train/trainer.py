"""The training loop. One step reads as the algorithm (:meth:`Trainer.training_step`):

    rollout (generate G responses for B prompts) → reward → [score, anchors] → advantages → update → log

This module is the loop. Its set-up (``Trainer.__init__``) alone reads the config: it compiles the step's
decisions (``plan.py``) and the run's (``run_plan.py``) once, and builds the phases from plain settings
(rollout_phase.py, rewarding.py, dagrpo.py, experience.py, update.py; the run folder: ``rlvr/run/start.py``;
checkpoints: ``checkpointing.py``). docs/training.md walks through one step; docs/design/architecture.md maps it.

Reproducibility: every sampled response has its own seed, from (seed, step, round, its position
in the step's requests); data order depends only on (seed, rows consumed), and the policy runs in
eval mode (no dropout), and no summation order depends on timing, so the same command repeats bit for
bit on the same machine, thread count and world size, and a resumed run repeats an uninterrupted one
(docs/training.md "Reproducibility"; docs/design/pitfalls.md #7); W processes sample what one process
samples (``rlvr/parallel/``).
"""

from __future__ import annotations

import logging
import os
import types
from pathlib import Path

import torch

from rlvr import threads
from rlvr.config import ExperimentConfig
from rlvr.config.defaults_line import defaults_line
from rlvr.data import PromptSampler
from rlvr.data.prompts import PromptBuilder
from rlvr.models.embedding import require_embedding_packages
from rlvr.parallel.setup import init_distributed, shutdown_distributed
from rlvr.run.callbacks import Callbacks
from rlvr.run.folder import JsonlLog, RunFolderLock
from rlvr.run.hub import HubPush
from rlvr.run.progress import Progress
from rlvr.run.start import check_output_dir, open_run_folder, run_folder
from rlvr.run.stopping import StopOnSignal, TrainingInterrupted, TrainingStopped, count_skipped_steps, requested_stop
from rlvr.run.trackers import Trackers, open_trackers
from rlvr.train import setup
from rlvr.train.checkpointing import Checkpointed, Counters, Outputs, RunCheckpoints
from rlvr.train.dagrpo import build_dagrpo_phase
from rlvr.train.evaluation import evaluate_due
from rlvr.train.evaluation_trl import trl_evaluation
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.length_limits import apply_length_limits
from rlvr.train.memory_bound import check_rollout_memory
from rlvr.train.metrics import GradSpikes, PhaseTimer, StepLog, sample_records
from rlvr.train.plan import compile_plan, run_length
from rlvr.train.rollout_phase import GroupGenerator, GroupIds, RolloutResult, Rollouts
from rlvr.train.run_logs import MemoryMetrics, RunLogs
from rlvr.train.run_plan import check_world, compile_run_plan, start_lines
from rlvr.train.setup import build_models
from rlvr.train.sft import sft_training_step
from rlvr.train.step_result import StepResult
from rlvr.train.trl_metric_names import trl_log_name
from rlvr.train.update import PolicyUpdate

__all__ = ["StepResult", "Trainer", "TrainingInterrupted", "TrainingStopped"]
logger = logging.getLogger(__name__)


class Trainer:
    """Builds everything from an :class:`ExperimentConfig` and runs the loop (on every rank).

    ``Trainer(cfg)`` runs what ``algo`` says: reinforcement learning, or (``algo=sft``) supervised
    fine-tuning on the data's solutions (``training_step`` is then ``rlvr.train.sft.sft_training_step``).
    """

    def __init__(self, cfg: ExperimentConfig, *, callbacks=(), outputs: Outputs | None = None):
        """``callbacks``: objects with ``on_step_end(step, metrics)`` / ``on_save(step, path)``, or
        ``transformers.TrainerCallback`` objects, called on rank 0 (``callbacks.py``); ``outputs``: GRPOTrainer's."""
        self.run = run = compile_run_plan(cfg)  # the run's life: folder, saving, logging, stopping
        self.memory = MemoryMetrics(skip=not run.logging.memory)  # transformers' memory metrics (stages init, train)
        self.memory.begin("init")
        self.user_callbacks = list(callbacks)
        self.dist = init_distributed(timeout_s=run.ddp_timeout)
        check_world(cfg, self.dist.world_size)
        # the decisions of a step, made once: before the run folder (a refused engine or algorithm part leaves none)
        self.plan = compile_plan(cfg, world_size=self.dist.world_size)
        self.output_dir = run_folder(self.dist, output_dir=run.output_dir, prefix=run.folder_prefix,
                                     resume_from_checkpoint=run.resume_from_checkpoint, logging_dir=run.logging_dir)
        self.lock = RunFolderLock(self.output_dir) if self.dist.is_main else None  # one writer per folder
        try:
            self._set_up(cfg, outputs or Outputs(training_args=run.config))
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise
        finally:
            self.memory.end()

    def _set_up(self, cfg: ExperimentConfig, outputs: Outputs) -> None:
        """Everything but the run folder: data, model, engine, rewards, the phases, optimiser, logs."""
        run, main = self.run, self.dist.is_main
        if outputs.folder_check_first:  # (TRL's GRPOTrainer.model before train(): checked when training starts)
            check_output_dir(self.output_dir, resume=run.resume, overwrite=run.overwrite_output_dir)
        self.hub = hub = HubPush.from_config(cfg.run, self.output_dir) if main else None  # offline: refused now
        torch.manual_seed(run.seed)
        check_rollout_memory(completions_per_process=self.plan.batch.completions_per_process,
                             max_completion_length=self.plan.rollout.max_completion_length)  # before any work
        self.rows = setup.load_training_rows(cfg, self.dist)  # rank 0 first (algo=sft: rows with solutions)
        self.length = run_length(cfg, self.plan.batch, len(self.rows))  # max_steps, or epochs of the data
        self.max_steps = self.length.steps
        setup.check_before_loading(cfg, self.rows, self.max_steps * self.length.optimizer_steps_per_step)
        if main:  # whose defaults, the step's batch as TRL counts it, a warned choice
            for level, line in start_lines(defaults_line(cfg), self.plan, self.length, len(self.rows)):
                logger.log(level, "%s", line)
            setup.check_eval_overlap(cfg, self.rows)  # eval problems that are also training rows: a warning
        self._set_up_model(cfg)
        self._set_up_rollout(cfg)
        self._set_up_phases(cfg)
        self.metrics_log, self.samples_log = (JsonlLog(self.output_dir / f"{n}.jsonl") for n in ("metrics", "samples"))
        self.grad_spikes = GradSpikes(factor=run.grad_spike_factor)
        self.step_log = StepLog(self.plan, reward_names=self.rewarder.names, grad_spikes=self.grad_spikes,
                                device=self.device, scheduler=self.scheduler, epoch=self.length.epoch,
                                with_score=self.dagrpo is not None, length_limits=self.length_limits,
                                prompt_builder=self.prompt_builder)
        self.skipped_in_a_row = 0  # optimiser steps since the last finite one
        self.trackers = Trackers({})  # report_to's are opened by rank 0 when the run starts (train)
        self.callbacks = Callbacks(self.user_callbacks, output_dir=self.output_dir, objects={
            "model": self.policy, "processing_class": self.tokenizer, "optimizer": self.optimizer,
            "lr_scheduler": self.scheduler}, max_steps=self.length.optimizer_steps)  # (TRL's: optimiser steps)
        self.logs = RunLogs(self.plan, self.length, run, callbacks=self.callbacks, metrics_log=self.metrics_log,
                            samples_log=self.samples_log, main=main)  # TRL's log, metrics.jsonl, samples.jsonl
        self.checkpoints = RunCheckpoints(
            Checkpointed(self.policy, self.tokenizer, self.optimizer, self.scheduler, self.engine, self.generation,
                         self.sampler, self.group_ids, self.grad_spikes, self.update), output_dir=self.output_dir,
            dist=self.dist, length=self.length, save=run.save, train_batch_size=self.plan.batch.micro_batch, hub=hub,
            logs=(self.metrics_log, self.samples_log), outputs=outputs, trl_log=self.logs.trl_log)
        if self.plan.mode == "sft":  # supervised fine-tuning on the anchors: SFT's step in place of RL's
            self.training_step = types.MethodType(sft_training_step, self)

    def _set_up_model(self, cfg: ExperimentConfig) -> None:
        """The policy on its device (LoRA, no dropout), the reference, the DDP/FSDP2 wrapping, the rollout engine."""
        models = build_models(cfg, self.plan, self.dist)
        self.policy, self.tokenizer, self.device = models.policy, models.tokenizer, models.device
        self.ref_model, self.train_model = models.reference, models.train_model
        if self.device.type == "cpu" and self.dist.is_main:
            logger.info("CPU: %d torch threads; %s", torch.get_num_threads(), threads.applied())
        # rlvr|hf|vllm|server, wrapped in the tool loop with tools
        self.engine = setup.rollout_engine(cfg, self.plan, self.policy, self.tokenizer, is_main=self.dist.is_main)
        self.dist.barrier()  # vllm_mode=server: rank 0 has pushed the weights (version 1) before any rank samples

    def _set_up_rollout(self, cfg: ExperimentConfig) -> None:
        """The prompts (format, length limits), their order, and the rollout phase that samples them."""
        self.prompt_format = setup.prompt_format(cfg, self.tokenizer, self.rows, tools=self.plan.rollout.tools,
                                                 log=self.dist.is_main)  # template or raw
        self.prompt_builder = PromptBuilder(self.tokenizer, self.prompt_format, rephrased=self.plan.rollout.rephrased)
        self.length_limits = apply_length_limits(  # before anything is generated
            self.rows, truncation=self.run.truncation, max_prompt_length=self.run.max_prompt_length,
            source=cfg.data.data, max_completion_length=self.plan.rollout.max_completion_length,
            prompt_format=self.prompt_format, policy=self.policy, tokenizer=self.tokenizer, engine=self.engine,
            prompts=self.prompt_builder)
        self.rows = self.length_limits.rows
        self.sampler = PromptSampler(self.rows, seed=self.run.seed, shuffle=self.run.shuffle)
        self.group_ids = GroupIds()
        self.generate_groups = GroupGenerator(self.plan.rollout, self.engine, self.tokenizer, self.prompt_builder,
                                              self.group_ids, self.dist, policy=self.policy)
        self.generation = Rollouts(self.generate_groups, self.sampler, self.group_ids,  # async_generation: ahead
                                   prompts_per_step=self.plan.rollout.prompts_per_step, ahead=self.plan.engine.ahead)

    def _set_up_phases(self, cfg: ExperimentConfig) -> None:
        """The reward, DaGRPO and update phases, the optimiser and its schedule, and the training-time eval."""
        self.rewarder_recipe = setup.rewarder_recipe(cfg, tools=self.plan.rollout.tools)  # (TRL's evaluations too)
        self.rewarder = self.rewarder_recipe.build(max_steps=self.max_steps, tokenizer=self.tokenizer)
        self.eval_rows = setup.eval_rows(cfg)  # how TRL's evaluation reads its data (the Trainer keeps no config)
        if self.dist.is_main:
            self.rewarder.check_golds(self.rows, cfg.data.data)  # one warning when most golds are not math
        if self.plan.diversity_every:
            require_embedding_packages("diversity_steps")
        scorer = setup.build_scorer(cfg, device=self.device) if self.plan.dagrpo is not None else None
        self.dagrpo = build_dagrpo_phase(self.plan.dagrpo, scorer, rows=self.rows, rewarder=self.rewarder,
                                         max_completion_length=self.plan.rollout.max_completion_length,
                                         tokenizer=self.tokenizer, eos_token_id=self.engine.eos_token_ids[0])
        self.optimizer = setup.build_optimizer([p for p in self.policy.parameters() if p.requires_grad], cfg.optim)
        self.scheduler = setup.build_scheduler(self.optimizer, cfg.optim, self.length.optimizer_steps)
        self.update = PolicyUpdate(self.plan.update, self.train_model, self.optimizer, self.scheduler,
                                   pad_token_id=self.tokenizer.pad_token_id, ref_model=self.ref_model, ctx=self.dist,
                                   max_optimizer_steps=self.length.optimizer_steps)
        self.evaluation = setup.build_training_eval(cfg, self.plan, self.length, self.prompt_format, trainer=self,
                                                    evaluate=trl_evaluation)  # (eval_mode=trl: TRL's)

    # ----------------------------------------------------------------- the algorithm
    def training_step(self, step: int) -> StepResult:
        """One step: rollout → reward → (DaGRPO: score, anchors) → advantages → update → log.

        A round draws B prompts; under DAPO's dynamic sampling rounds repeat until B pools with mixed
        rewards are kept (at most max_num_gen_batches). docs/training.md walks through every line.
        """
        timer, rollout = PhaseTimer(), RolloutResult(self.plan.rollout, step)
        while rollout.wants_another_round():
            with timer("rollout"):  # B prompts, G responses each (TA-GRPO: to each variant), per-request seeds
                groups = self.generation.round(step, seed=rollout.seed)  # async_generation: sampled ahead
            with timer("reward"):  # r = Σ_k w_k·f_k, each function's values kept
                reward_counts = self.rewarder.reward_groups(groups, step=step)
            with timer("score"):  # DaGRPO: s = α·r + (1−α)·q, anchors into failed groups
                dagrpo_counts = self.dagrpo.process(groups) if self.dagrpo is not None else None
            rollout.add(self.dist, groups, reward_counts, dagrpo_counts)  # every rank's groups; DAPO's filter
        self.rewarder.check_failures(step, rollout.reward_counts)  # a function that keeps failing stops the run
        if step < self.max_steps:  # async_generation: step+1's round is sampled during this update
            self.generation.start(step + 1, seed=RolloutResult(self.plan.rollout, step + 1).seed)
        advantages, advantage_metrics, update = None, {}, None
        if rollout.kept:
            experience = Experience.from_groups(rollout.kept, self.plan.scoring_prompts)  # flat, with the scoring prompts
            advantages, advantage_metrics = compute_advantages(self.plan.advantages, experience)  # [N]
            with timer("update"):  # μ passes × mini-batches of whole pools × micro-batches
                update = self.update(experience, advantages)
        else:
            logger.warning("step %d: every group had uniform rewards; no update", step)
        with timer("rollout"):
            self.generation.wait()  # async_generation: step+1's responses are done before the weights move
        if update is not None:
            with timer("update"):
                self.engine.sync_weights()  # engines holding their own copy (vLLM) take the new weights
        metrics = self.step_log.line(step, rollout, advantage_metrics, update, timer)
        samples = sample_records(step, rollout.kept, advantages, self.plan.num_completions_to_log)
        return StepResult(metrics, samples, rollout, update)

    # ----------------------------------------------------------------- the loop
    def train(self) -> list[dict]:
        """Run (or resume) to max_steps; return the metrics of the steps run now. Ctrl-C, SIGTERM or SIGHUP: the
        step under way is finished, a checkpoint written, and ``TrainingInterrupted`` raised
        (``rlvr/run/stopping.py``); a second signal stops at once."""
        main, run = self.dist.is_main, self.run
        history, progress = [], None
        try:
            self.memory.begin("train")
            start = self.step_done = self._start()
            self.logs.start(start, tokens=self.step_log.num_tokens)
            if main:  # TensorBoard / W&B / trackio / MLflow (trackers.py: TRL's tags), sent the resolved config
                self.trackers = open_trackers(list(run.report_to), run_name=run.run_name,
                                              logging_dir=os.path.abspath(run.logging_dir) if run.logging_dir else None,
                                              output_dir=self.output_dir, config=run.config, log_name=trl_log_name)
            progress = Progress(self.max_steps, start, enabled=run.progress_bar and main)
            with StopOnSignal() as stop:
                evaluate_due(self, start, at_start=True)  # eval_on_start (TRL's), also on resume
                for step in range(start + 1, self.max_steps + 1):
                    result = self.training_step(step)
                    metrics, self.step_done = result.metrics, step
                    self.logs.record(step, result)  # TRL's log: the entries of the step's optimiser steps
                    metrics.update(evaluate_due(self, step, in_line=True))  # rlvr's pass@k: into the step's line
                    if main:  # the trackers, metrics.jsonl, samples.jsonl
                        self.logs.write(step, result, self.trackers)
                    evaluated = evaluate_due(self, step)  # TRL's: an entry of its own, after the step's line
                    history.append(metrics)
                    progress.update(metrics)
                    if result.update is not None:  # non-finite optimiser steps in a row: stop after too many
                        self.skipped_in_a_row = count_skipped_steps(
                            self.skipped_in_a_row, step=step, taken=result.update.optimizer_steps,
                            trailing=result.update.trailing_skips, limit=run.max_skipped_steps)
                    stopping = requested_stop(stop, self.dist)  # a signal, on any rank
                    path = self.save(step, metrics=metrics | evaluated, stopping=bool(stopping))  # a signal saves too
                    if main and path is not None:
                        self.callbacks.saved(step, path)
                    if stopping and step < self.max_steps:
                        raise TrainingInterrupted(stopping, step, path, self.output_dir)
            self.logs.finish(self.trackers, self.memory.end())  # transformers' end-of-training entry of TRL's log
        finally:
            if progress is not None:
                progress.close()
            self.close()
            shutdown_distributed(self.dist)  # also when a step raised (e.g. TrainingStopped)
        if main:
            progress.summary(self.metrics_log.read(), self.output_dir)
            if self.hub is not None:
                self.hub.push_final()
        return history

    def close(self) -> None:
        """Release the rollout thread, a vLLM server's weight group, the reward workers, trackers, the folder lock."""
        self.generation.close()
        if hasattr(self.engine, "close"):  # vllm_mode=server: leave the weight group (the server keeps running)
            self.engine.close()
        self.rewarder.close()
        self.memory.end()  # (transformers' peak-memory thread, when a step raised)
        self.trackers.close()
        if self.lock is not None:
            self.lock.release()

    def save(self, step: int, metrics: dict, stopping: bool = False) -> Path | None:
        """The end of ``step``'s saving: checkpointing.py's ``end_of_step`` (the checkpoint written, on rank 0)."""
        return self.checkpoints.end_of_step(step, Counters(self.skipped_in_a_row, self.step_log.num_tokens), metrics,
                                            stopping=stopping)

    def _start(self) -> int:
        """Open the run folder (run/start.py); on resume restore the newest checkpoint. Returns the last step done."""
        run = self.run
        self.checkpoints.check_plan(evaluates=self.evaluation is not None)  # save_strategy=best needs evaluations
        found = open_run_folder(self.output_dir, self.dist, resume=run.resume, force_resume=run.force_resume,
                                resume_from_checkpoint=run.resume_from_checkpoint, overwrite=run.overwrite_output_dir,
                                config=run.config, flat=run.flat,
                                logs=(self.metrics_log, self.samples_log, self.checkpoints.eval_log))
        if found is None:
            return 0
        step, counters = self.checkpoints.restore(found, config=run.config, force=run.force_resume)
        self.skipped_in_a_row, self.step_log.num_tokens = counters.skipped_in_a_row, counters.num_tokens
        return step

