"""The training loop. One step reads as the algorithm (:meth:`Trainer.training_step`):

    rollout (generate G responses for B prompts) → reward → [score, anchors] → advantages → update → log

The set-up (``Trainer.__init__``) is the only code that reads the config: it compiles the decisions
of a step once (``plan.py``) and builds the phases from plain settings — ``GroupGenerator`` and
``RolloutResult`` (rollout_phase.py), ``Rewarder`` (rewarding.py), ``DaGRPOPhase`` (dagrpo.py),
``compute_advantages`` (experience.py), ``PolicyUpdate`` (update.py). docs/training.md walks through
one step; docs/design/architecture.md maps the rooms. Checkpoints and resume are in ``rlvr/run/``
(checkpoints.py, resume.py).

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
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr import threads
from rlvr.config import ExperimentConfig
from rlvr.config.origin import defaults_line
from rlvr.data import PromptSampler, load_python_rows, load_rows
from rlvr.data.prompts import PromptBuilder
from rlvr.eval import group_diversity
from rlvr.models import eos_token_ids
from rlvr.models.embedding import require_embedding_packages
from rlvr.parallel.runtime import full_weights, is_sharded
from rlvr.parallel.setup import full_state_dicts, init_distributed, shutdown_distributed
from rlvr.rollout import build_engine
from rlvr.run import checkpoints as ckpt
from rlvr.run.callbacks import Callbacks
from rlvr.run.export import export_final_model
from rlvr.run.folder import (
    JsonlLog,
    RunFolderLock,
    check_not_foreign,
    check_not_nested,
    check_path_encodable,
    mark_run_folder,
    new_run_folder,
    write_config,
)
from rlvr.run.hub import HubPush
from rlvr.run.progress import Progress
from rlvr.run.resume import check_logged_steps, check_resumable_config, resume_checkpoint, resume_output_dir
from rlvr.run.stopping import StopOnSignal, TrainingInterrupted, TrainingStopped
from rlvr.run.trackers import Trackers, open_trackers
from rlvr.train.dagrpo import build_dagrpo_phase
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.memory_bound import check_rollout_memory
from rlvr.train.metrics import (
    SAMPLING_METRICS,
    GradSpikes,
    PhaseTimer,
    memory_metrics,
    sample_records,
    step_metrics,
    trl_log_name,
    trl_rollout_metrics,
    trl_train_summary,
    trl_update_metrics,
)
from rlvr.train.plan import compile_plan, run_length, step_kind
from rlvr.train.rollout_phase import GroupGenerator, GroupIds, RolloutResult, Rollouts
from rlvr.train.setup import (
    attach_rephrasings,
    build_models,
    build_optimizer,
    build_rewarder,
    build_scheduler,
    build_scorer,
    build_training_eval,
    chat_rows,
    check_eval_overlap,
    check_optional_packages,
    check_reward_functions,
    check_scheduler,
    check_training_lengths,
    engine_spec,
    prompt_format,
    question_rows,
    rows_need_gold,
)
from rlvr.train.update import PolicyUpdate, UpdateResult

logger = logging.getLogger(__name__)


def async_lag_warning(async_generation: bool, is_correction) -> str | None:
    """The start-up warning for one-step-off-policy samples trained on without the importance correction."""
    if not async_generation or is_correction is not None:
        return None
    return ("async_generation=true with vllm_importance_sampling_correction=false: each step trains on responses "
            "sampled by the weights of the step before, as if they were the current policy's (the ratio is not "
            "corrected for the lag); set the correction on (its default with vLLM) unless that is what you want")


@dataclass
class StepResult:
    """What one training step produced: its metrics line, sample records, rollout and update."""

    metrics: dict
    samples: list[dict]
    rollout: RolloutResult | None = None
    update: UpdateResult | None = None  # None: no update (every group uniform)


class Trainer:
    """Builds everything from an :class:`ExperimentConfig` and runs the loop (on every rank).

    ``Trainer(cfg)`` runs what ``algo`` says: reinforcement learning, or (``algo=sft``) supervised
    fine-tuning on the data's solutions, whose trainer (``rlvr.train.sft.SFTTrainer``) it returns then.
    """

    def __new__(cls, cfg: ExperimentConfig, **kwargs):
        if cls is Trainer and step_kind(cfg) == "sft":
            from rlvr.train.sft import SFTTrainer  # (sft.py builds on this module)

            return super().__new__(SFTTrainer)
        return super().__new__(cls)

    def __init__(self, cfg: ExperimentConfig, *, callbacks=()):
        """``callbacks``: objects with ``on_step_end(step, metrics)`` / ``on_save(step, path)``, or
        ``transformers.TrainerCallback`` objects, called on rank 0 (``callbacks.py``)."""
        self.cfg = cfg
        self.user_callbacks = list(callbacks)
        HubPush.check(cfg.run)  # push_to_hub offline or without a token: refused before any folder is made
        self.dist = init_distributed(timeout_s=cfg.run.ddp_timeout)
        self._check_world()
        name = resume_output_dir(cfg.run.output_dir, cfg.run.resume_from_checkpoint)  # unset: the checkpoint's run
        if name is None and self.dist.is_main:
            name = str(new_run_folder(cfg.algorithm.algo))  # unique: created exclusively
        # one run directory for every rank, absolute: a reward function that changes the working directory
        # does not move where the run writes
        self.output_dir = Path(os.path.abspath(self.dist.broadcast_object(name)))
        check_path_encodable(self.output_dir)  # fail before loading or writing anything
        if cfg.run.logging_dir:
            check_path_encodable(Path(cfg.run.logging_dir), "logging_dir")
        check_not_foreign(self.output_dir)
        check_not_nested(self.output_dir)
        self.lock = RunFolderLock(self.output_dir) if self.dist.is_main else None  # one writer per folder
        try:
            self._set_up(cfg)
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise

    def _set_up(self, cfg: ExperimentConfig) -> None:
        """Everything but the run folder: data, model, engine, rewards, the phases, optimiser, logs."""
        self._check_output_dir()
        hub = HubPush.from_config(cfg.run, self.output_dir) if self.dist.is_main else None  # offline: refused now
        torch.manual_seed(cfg.run.seed)
        self.plan = compile_plan(cfg, world_size=self.dist.world_size)  # the decisions of a step, made once
        check_rollout_memory(completions_per_process=self.plan.batch.completions // self.plan.batch.world_size,
                             max_completion_length=self.plan.rollout.max_completion_length)  # before any work
        self.rows = self._load_rows()
        self.length = run_length(cfg, self.plan.batch, len(self.rows))  # max_steps, or epochs of the data
        self.max_steps = self.length.steps
        check_reward_functions(cfg, self.rows)  # an unknown reward or a missing column: before the model loads
        check_optional_packages(cfg)  # vllm, peft, the embed scorer's, the trackers': before the model loads too
        check_scheduler(cfg, self.max_steps * self.length.optimizer_steps_per_step)
        if self.dist.is_main:
            self._log_start(cfg)
        if self.dist.is_main:
            check_eval_overlap(cfg, self.rows)  # eval problems that are also training rows: a warning
        self._set_up_model(cfg)
        self._set_up_rollout(cfg)
        self._set_up_phases(cfg)
        self.metrics_log = JsonlLog(self.output_dir / "metrics.jsonl")
        self.samples_log = JsonlLog(self.output_dir / "samples.jsonl")
        self.grad_spikes = GradSpikes(factor=cfg.run.grad_spike_factor)
        self.skipped_in_a_row = 0  # optimiser steps since the last finite one
        self.trackers = Trackers({})  # report_to's are opened by rank 0 when the run starts (train)
        self.hub = hub
        self.num_tokens = 0  # prompt + completion tokens seen (TRL's num_tokens; kept in checkpoints)
        self.callbacks = Callbacks(self.user_callbacks, output_dir=self.output_dir, max_steps=self.max_steps,
                                   objects={"model": self.policy, "processing_class": self.tokenizer,
                                            "optimizer": self.optimizer, "lr_scheduler": self.scheduler})

    def _set_up_model(self, cfg: ExperimentConfig) -> None:
        """The policy on its device (LoRA, no dropout), the reference, the DDP/FSDP2 wrapping, the rollout engine."""
        models = build_models(cfg, self.plan, self.dist)
        self.policy, self.tokenizer, self.device = models.policy, models.tokenizer, models.device
        self.ref_model, self.train_model = models.reference, models.train_model
        if self.device.type == "cpu" and self.dist.is_main:
            logger.info("CPU: %d torch threads; %s", torch.get_num_threads(), threads.applied())
        engine, options = engine_spec(cfg, is_main=self.dist.is_main)  # rlvr | hf | vllm colocated | vllm server
        self.engine = build_engine(engine, self.policy, pad_token_id=self.tokenizer.pad_token_id,
                                   eos_token_ids=eos_token_ids(self.policy, self.tokenizer), **options)
        self.dist.barrier()  # vllm_mode=server: rank 0 has pushed the weights (version 1) before any rank samples

    def _set_up_rollout(self, cfg: ExperimentConfig) -> None:
        """The prompts (format, length limits), their order, and the rollout phase that samples them."""
        self.prompt_format = prompt_format(cfg, self.tokenizer, self.rows, log=self.dist.is_main)  # template or raw
        self.prompts = PromptBuilder(self.tokenizer, self.prompt_format, rephrased=self.plan.rollout.rephrased)
        self._apply_length_limits()  # before anything is generated
        self.sampler = PromptSampler(self.rows, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
        self.group_ids = GroupIds()
        self.generate_groups = GroupGenerator(self.plan.rollout, self.engine, self.tokenizer, self.prompts,
                                              self.group_ids, self.dist, policy=self.policy)
        self.rollouts = Rollouts(self.generate_groups, self.sampler, self.group_ids,  # async_generation: ahead
                                 prompts_per_step=self.plan.rollout.prompts_per_step,
                                 ahead=self.plan.engine.ahead)

    def _set_up_phases(self, cfg: ExperimentConfig) -> None:
        """The reward, DaGRPO and update phases, the optimiser and its schedule, and the training-time eval."""
        self.rewarder = build_rewarder(cfg, max_steps=self.max_steps, tokenizer=self.tokenizer)
        if self.dist.is_main:
            self.rewarder.check_golds(self.rows, cfg.data.data)  # one warning when most golds are not math
        if self.plan.diversity_every:
            require_embedding_packages("diversity_steps")
        scorer = build_scorer(cfg, device=self.device) if self.plan.dagrpo is not None else None
        self.dagrpo = build_dagrpo_phase(self.plan.dagrpo, scorer, rows=self.rows,
                                         max_completion_length=self.plan.rollout.max_completion_length,
                                         tokenizer=self.tokenizer, eos_token_id=self.engine.eos_token_ids[0],
                                         rewarder=self.rewarder)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(params, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.length.optimizer_steps)
        self.update = PolicyUpdate(self.plan.update, self.train_model, self.optimizer, self.scheduler,
                                   pad_token_id=self.tokenizer.pad_token_id, ref_model=self.ref_model, ctx=self.dist,
                                   max_optimizer_steps=self.length.optimizer_steps)
        self.evaluation = build_training_eval(cfg, self.plan, self.length, self.prompt_format)

    # ----------------------------------------------------------------- the algorithm
    def training_step(self, step: int) -> StepResult:
        """One step: rollout → reward → (DaGRPO: score, anchors) → advantages → update → log.

        A round draws B prompts; under DAPO's dynamic sampling rounds repeat until B pools with mixed
        rewards are kept (at most max_num_gen_batches). docs/training.md walks through every line.
        """
        timer, rollout = PhaseTimer(), RolloutResult(self.plan.rollout, step)
        while rollout.wants_another_round():
            with timer("rollout"):  # B prompts, G responses each (TA-GRPO: to each variant), per-request seeds
                groups = self.rollouts.round(step, seed=rollout.seed)  # async_generation: sampled ahead
            with timer("reward"):  # r = Σ_k w_k·f_k, each function's values kept
                reward_counts = self.rewarder.reward_groups(groups, step=step)
            with timer("score"):  # DaGRPO: s = α·r + (1−α)·q, anchors into failed groups
                dagrpo_counts = self.dagrpo.process(groups) if self.dagrpo is not None else None
            rollout.add(self.dist, groups, reward_counts, dagrpo_counts)  # every rank's groups; DAPO's filter
        self.rewarder.check_failures(step, rollout.reward_counts)  # a function that keeps failing stops the run
        if step < self.max_steps:  # async_generation: step+1's round is sampled during this update
            self.rollouts.start(step + 1, seed=RolloutResult(self.plan.rollout, step + 1).seed)
        advantages, advantage_metrics, update = None, {}, None
        if rollout.kept:
            experience = Experience.from_groups(rollout.kept, self.plan.prompts)  # flat, with the scoring prompts
            advantages, advantage_metrics = compute_advantages(self.plan.advantages, experience)  # [N]
            with timer("update"):  # μ passes × mini-batches of whole pools × micro-batches
                update = self.update(experience, advantages)
        else:
            logger.warning("step %d: every group had uniform rewards; no update", step)
        with timer("rollout"):
            self.rollouts.wait()  # async_generation: step+1's responses are done before the weights move
        if update is not None:
            with timer("update"):
                self.engine.sync_weights()  # engines holding their own copy (vLLM) take the new weights
        metrics = self._step_metrics(step, rollout, advantage_metrics, update, timer)
        samples = sample_records(step, rollout.kept, advantages, self.plan.num_completions_to_log)
        return StepResult(metrics, samples, rollout, update)

    def _step_metrics(self, step: int, rollout: RolloutResult, advantage_metrics: dict, update: UpdateResult | None,
                      timer: PhaseTimer) -> dict:
        """The step's line of metrics.jsonl."""
        train = (update.metrics(with_kl=self.plan.update.needs_reference) if update is not None
                 else UpdateResult.no_update_metrics(self.scheduler.get_last_lr()[0]))
        metrics = {
            **step_metrics(step, rollout, advantage_metrics, train, reward_names=self.rewarder.names,
                           tagrpo=self.plan.tagrpo_metrics, prompt_gap=update.prompt_gap if update else None),
            **self.grad_spikes.update(train["train/grad_norm"]),
            **timer.metrics(with_score=self.dagrpo is not None),
            **memory_metrics(self.device),
            **self._truncation_metrics(rollout),
            "perf/tokens_per_s": rollout.generated_tokens / max(timer.seconds["rollout"], 1e-9),
        }
        every, count = self.plan.diversity_every, self.plan.diversity_groups
        if every and step % every == 0:
            texts = [[g.policy_samples.texts[i] for i in g.policy_samples.on_policy] for g in rollout.generated[:count]]
            metrics["rollout/diversity"] = group_diversity(texts, device=str(self.device))
        return metrics | self._trl_metrics(step, rollout, update, metrics)

    def _trl_metrics(self, step: int, rollout: RolloutResult, update: UpdateResult | None, metrics: dict) -> dict:
        """The step's metrics under TRL's names, as TRL computes them (metrics.py), beside rlvr's."""
        groups = [g.policy_samples for g in rollout.generated]
        self.num_tokens += sum(len(g.generation_prompt(i)) + len(g.completions[i].token_ids)
                               for g in groups for i in g.on_policy)
        optimizer_steps = update.optimizer_steps + update.skipped_steps if update is not None else 0
        trl = trl_rollout_metrics(groups, self.rewarder.names, scale_rewards=self.plan.advantages.settings.scale_rewards)
        used = update.lr_used if update is not None and update.lr_used is not None else metrics["train/lr"]
        trl |= trl_update_metrics(update.sums if update is not None else {}, with_kl=self.plan.update.needs_reference,
                                  loss=metrics["train/loss"], grad_norm=metrics["train/grad_norm"],
                                  learning_rate=used, with_policy_loss=self.plan.update.loss.entropy_coef > 0)
        trl |= {"num_tokens": float(self.num_tokens), "epoch": self.length.epoch(step),
                "step_time": metrics["time/step_s"] / max(1, optimizer_steps)}
        if self.plan.update.loss.entropy_coef > 0:
            trl["entropy_coef"] = self.plan.update.loss.entropy_coef
        if self.plan.update.is_correction is not None:
            trl |= {f"sampling/{name}": metrics[ours] for name, ours in SAMPLING_METRICS.items()}
        return trl

    def _truncation_metrics(self, rollout: RolloutResult) -> dict:
        mode = self.truncation
        if mode == "drop":
            return {"data/prompts_dropped": self.prompts_dropped}
        if mode == "left":
            groups = rollout.generated
            return {"rollout/prompt_truncated_frac":
                    sum(self.prompts.is_truncated(g.row) for g in groups) / max(1, len(groups))}
        return {}

    # ----------------------------------------------------------------- the loop
    def train(self) -> list[dict]:
        """Run (or resume) to max_steps; return the metrics of the steps run now.

        Ctrl-C, SIGTERM or SIGHUP: the step under way is finished, a checkpoint written, and
        ``TrainingInterrupted`` raised (``rlvr/run/stopping.py``); a second signal stops at once.
        """
        main = self.dist.is_main
        history, progress, started = [], None, time.time()
        try:
            start = self.step_done = self._start()
            if main:  # TensorBoard / W&B / trackio / MLflow (trackers.py: TRL's tags), sent the resolved config
                r = self.cfg.run
                self.trackers = open_trackers(r.report_to, run_name=r.run_name,
                                              logging_dir=os.path.abspath(r.logging_dir) if r.logging_dir else None,
                                              output_dir=self.output_dir, config=self.cfg.to_dict(),
                                              log_name=trl_log_name)
            progress = Progress(self.max_steps, start, enabled=self.cfg.run.progress_bar and main)
            with StopOnSignal() as stop:
                for step in range(start + 1, self.max_steps + 1):
                    result = self.training_step(step)
                    metrics, self.step_done = result.metrics, step
                    if self.evaluation is not None and self.evaluation.due(step):
                        with full_weights(self.policy):  # FSDP2: gathered on every rank, used by rank 0
                            if main:
                                metrics.update(self.evaluation.run(self.policy, self.tokenizer, self.output_dir, step))
                            self.dist.barrier()
                    if main:
                        samples = result.samples if self.cfg.run.log_completions else []
                        metrics.update(self.trackers.log_step(self.length.counter(step), metrics, samples))
                        self.metrics_log.write([metrics])
                        if self.cfg.run.log_completions:
                            self.samples_log.write(result.samples)
                        self.callbacks.step_end(step, metrics)
                    history.append(metrics)
                    progress.update(metrics)
                    self._check_finite_steps(step, result.update)
                    stopping = self._stop_requested(stop)
                    if step == self.max_steps or self._save_due(step) or stopping:
                        path = self.save(step, final=step == self.max_steps)
                        if main:
                            self.callbacks.saved(step, path)
                    if stopping and step < self.max_steps:
                        raise TrainingInterrupted(stopping, step, path, self.output_dir)
            if main and history:  # transformers' end-of-training line, to the trackers
                self.trackers.log_summary(self.length.counter(self.max_steps), self._train_summary(history, started))
        finally:
            if progress is not None:
                progress.close()
            self.rollouts.close()
            if hasattr(self.engine, "close"):  # vllm_mode=server: leave the weight group (the server keeps running)
                self.engine.close()
            self.rewarder.close()
            self.trackers.close()
            if self.lock is not None:
                self.lock.release()
            shutdown_distributed(self.dist)  # also when a step raised (e.g. TrainingStopped)
        if main:
            progress.summary(self.metrics_log.read(), self.output_dir)
            if self.hub is not None:
                self.hub.push_final()
        return history

    def _train_summary(self, history: list[dict], started: float) -> dict[str, float]:
        """transformers' last log line over the steps this call ran (metrics.py, ``trl_train_summary``)."""
        done, b = self.length.optimizer_steps_done, self.plan.batch
        return trl_train_summary([m.get("loss") for m in history], [done(m["step"]) - done(m["step"] - 1) for m in history],
                                 runtime=time.time() - started, epoch=history[-1].get("epoch", self.length.epoch(history[-1]["step"])),
                                 completions_per_optimizer_step=b.micro_batch * b.accumulation * b.world_size)

    def _save_every(self) -> int:
        """Steps between checkpoints (0: only the last): save_steps (in the run's counter: optimiser steps for a
        TRL-shaped config), an epoch (in rlvr's steps), or none (save_strategy)."""
        return {"steps": self.cfg.run.save_steps, "epoch": self.length.steps_per_epoch, "no": 0}[self.cfg.run.save_strategy]

    def _save_due(self, step: int) -> bool:
        """A checkpoint at the end of ``step``: a multiple of save_steps was reached during it (TRL saves at that
        optimiser step; rlvr at the end of the step holding it), or the step ends an epoch."""
        every = self._save_every()
        if not every:
            return False
        if self.cfg.run.save_strategy == "epoch":
            return step % every == 0
        return self.length.counter(step) // every > self.length.counter(step - 1) // every

    def _stop_requested(self, stop: StopOnSignal) -> int:
        """The signal that asked this run to stop (0: none); on several ranks, any rank's request."""
        if not self.dist.enabled:
            return stop.requested or 0
        (largest,) = self.dist.max_floats([float(stop.requested or 0)])
        return int(largest)

    def save(self, step: int, *, final: bool = False) -> Path | None:
        """Rank 0 writes the checkpoint (atomically); the others wait for it. ``final``: the last step, whose
        model is also put at output_dir (TRL's ``save_model``)."""
        sampler_state, group_counter = self.rollouts.resume_state()  # async: before step+1's prompts were taken
        state = {"step": step, "sampler": sampler_state, "group_counter": group_counter,
                 "grad_spikes": self.grad_spikes.state_dict(), "skipped_in_a_row": self.skipped_in_a_row,
                 "num_tokens": self.num_tokens}
        ahead = self.rollouts.saved_completions()  # async: step+1's responses, on every rank
        if ahead is not None:
            state["rollout_ahead"] = self.dist.gather_objects(ahead)
        path, model_state, optimizer_state = None, None, None
        if is_sharded(self.policy):  # gather the full states (a collective: every rank takes part)
            model_state, optimizer_state = full_state_dicts(self.policy, self.optimizer)
        if self.dist.is_main:
            snapshot = ckpt.Snapshot(self.policy, self.tokenizer, self.optimizer, self.scheduler, trainer_state=state,
                                     hf_state=self._hf_state(step), model_state=model_state,
                                     optimizer_state=optimizer_state)
            path = ckpt.save_checkpoint(self.output_dir, self.length.counter(step), snapshot, keep_last=self.cfg.run.save_total_limit,
                                        merged_model=self.cfg.model.save_merged_model)
            if final:
                export_final_model(path, self.output_dir)
            if self.hub is not None:
                self.hub.saved(path)
        self.dist.barrier()
        return path

    def _hf_state(self, step: int) -> dict:
        """transformers' TrainerState of the checkpoint at ``step``: optimiser steps, and log_history (the
        metrics.jsonl lines up to ``step``, each with its ``step`` in optimiser steps, as TRL logs them)."""
        length, lines = self.length, self.metrics_log.read()
        history = [{**line, "rlvr_step": line["step"], "step": length.optimizer_steps_done(line["step"])}
                   for line in lines]
        save_steps = self._save_every() * (1 if length.counts_optimizer_steps else length.optimizer_steps_per_step)
        return ckpt.hf_trainer_state(length.optimizer_steps_done(step), max_steps=length.optimizer_steps,
                                     epoch=length.epoch(step), num_train_epochs=length.epochs, log_history=history,
                                     save_steps=save_steps, num_input_tokens_seen=self.num_tokens,
                                     train_batch_size=self.plan.batch.micro_batch)

    def _check_finite_steps(self, step: int, update: UpdateResult | None) -> None:
        """Count optimiser steps skipped for a non-finite loss/gradient in a row; stop after too many."""
        if update is None:
            return
        done, trailing = update.optimizer_steps, update.trailing_skips  # trailing: skipped after the last one taken
        self.skipped_in_a_row = trailing if done else self.skipped_in_a_row + trailing
        limit = self.cfg.run.max_skipped_steps
        if self.skipped_in_a_row >= limit:
            raise TrainingStopped(
                f"step {step}: {self.skipped_in_a_row} optimiser steps in a row had a non-finite loss or "
                f"gradient norm (limit max_skipped_steps={limit}); the weights are those of the last finite "
                "step. Look at train/loss and train/grad_norm in metrics.jsonl; lower learning_rate, set "
                "max_grad_norm, use float32, or check the reward function for NaN/inf"
            )

    # ----------------------------------------------------------------- set-up helpers
    def _apply_length_limits(self) -> None:
        """Prompts over the budget: refused (truncation=error), left out (drop) or cut from the left (left)."""
        cfg, mode = self.cfg, self.cfg.rollout.truncation
        check = check_training_lengths(
            self.rows, source=cfg.data.data, max_completion_length=self.plan.rollout.max_completion_length,
            max_prompt_length=cfg.rollout.max_prompt_length, prompt_format=self.prompt_format,
            policy=self.policy, tokenizer=self.tokenizer, engine=self.engine,
            tokenize=self.prompts.variants, refuse=mode == "error")
        self.truncation = mode
        self.prompts_dropped = len(check.too_long) if mode == "drop" else 0
        if mode == "drop" and check.too_long:
            over = set(check.too_long)
            self.rows = [row for i, row in enumerate(self.rows) if i not in over]
            if not self.rows:
                raise ValueError(f"truncation=drop left no rows of {cfg.data.data}: every prompt is over "
                                 f"{check.budget} tokens; raise max_prompt_length or use truncation=left")
            logger.warning("truncation=drop: %d of %d prompts of %s are over %d tokens and are left out "
                           "(data/prompts_dropped)", len(over), len(over) + len(self.rows), cfg.data.data, check.budget)
        if mode == "left" and check.budget is not None:
            self.prompts.truncate_to(check.budget)
            if check.too_long:
                logger.warning("truncation=left: %d prompts of %s are over %d tokens and keep their last %d "
                               "(rollout/prompt_truncated_frac)", len(check.too_long), cfg.data.data,
                               check.budget, check.budget)

    def _check_output_dir(self) -> None:
        """A folder holding a run is continued (resume=true) or replaced (overwrite_output_dir=true), never
        silently restarted; resume=true on metrics without a checkpoint does not wipe them."""
        run = self.cfg.run
        metrics = self.output_dir / "metrics.jsonl"
        has_metrics = metrics.exists() and metrics.stat().st_size > 0
        has_checkpoint = bool(ckpt.list_checkpoints(self.output_dir))
        if run.overwrite_output_dir or not (has_metrics or has_checkpoint):
            return
        if not (run.resume or run.resume_from_checkpoint):
            raise ValueError(f"{self.output_dir} already holds a run; pass resume=true to continue it, "
                             "overwrite_output_dir=true to start it over, or choose a new output_dir")
        if not has_checkpoint:
            raise ValueError(f"resume=true but {self.output_dir} has metrics and no checkpoint to resume from "
                             "(it stopped before its first save); starting over would wipe its metrics.jsonl: "
                             "pass overwrite_output_dir=true to start over, or choose a new output_dir")

    def _start(self) -> int:
        """Prepare the run directory; on resume restore the newest checkpoint. Returns the last step done.

        Every rank restores the same checkpoint; only rank 0 writes files.
        """
        out, main = self.output_dir, self.dist.is_main
        self._check_output_dir()
        self.dist.barrier()  # every rank has looked at the folder before rank 0 writes to it
        run = self.cfg.run
        found = self.dist.broadcast_object(resume_checkpoint(out, run.resume_from_checkpoint)
                                           if main and (run.resume or run.resume_from_checkpoint) else None)
        if found is not None:
            check_resumable_config(out / "config.yaml", self.cfg.flat(), force=self.cfg.run.force_resume)
        if main:
            mark_run_folder(out)
        if found is None:
            if main:
                if self.cfg.run.overwrite_output_dir:
                    ckpt.remove_checkpoints(out)
                write_config(out / "config.yaml", self.cfg.to_dict())
                self.metrics_log.reset()
                self.samples_log.reset()
            self.dist.barrier()
            return 0
        ckpt.load_model_weights(self.policy, found)
        self.engine.sync_weights()
        ckpt.load_training_state(found, optimizer=self.optimizer, scheduler=self.scheduler, model=self.policy)
        state = ckpt.load_trainer_state(found)
        self.skipped_in_a_row = state.get("skipped_in_a_row", 0)
        self.num_tokens = state.get("num_tokens", 0)
        self.sampler.load_state_dict(state["sampler"])
        self.group_ids.last = state["group_counter"]
        ahead = state.get("rollout_ahead")  # async_generation: the next step's responses, sampled before the save
        self.rollouts.restore(ahead[self.dist.rank] if ahead else None)
        self.grad_spikes.load_state_dict(state["grad_spikes"])
        if main:
            ckpt.remove_checkpoints_after(out, self.length.counter(state["step"]))  # resume_from_checkpoint: the later steps are abandoned
            self.metrics_log.truncate_after(state["step"])
            self.samples_log.truncate_after(state["step"])
            check_logged_steps(self.metrics_log.read(), state["step"], out, force=self.cfg.run.force_resume)
            write_config(out / "config.yaml", self.cfg.to_dict())
        self.dist.barrier()
        logger.info("resumed from %s (step %d)", found, state["step"])
        return state["step"]

    def _log_start(self, cfg: ExperimentConfig) -> None:
        """Rank 0's start-up lines: whose defaults, the step's batch as TRL counts it, and a warned choice."""
        line = defaults_line(cfg)
        if line is not None:
            logger.info("%s", line)
        b, k = self.plan.batch, self.length.optimizer_steps_per_step
        logger.info("each step: %d prompts x %d completions on %d process(es), micro-batches of %d, %d per optimiser "
                    "step, %d optimiser step(s) per step; %d steps (%d per epoch of %d prompts)", b.prompts_per_step,
                    b.completions_per_prompt, b.world_size, b.micro_batch, b.accumulation, k, self.max_steps,
                    self.length.steps_per_epoch, len(self.rows))
        warning = async_lag_warning(self.plan.engine.ahead, self.plan.update.is_correction)
        if warning is not None:
            logger.warning("%s", warning)

    def _load_rows(self) -> list[dict]:
        """The training rows (with rephrasings): rank 0 first, so it alone fills any on-disk cache."""
        cfg, rows = self.cfg, None
        gold = rows_need_gold(cfg)  # user reward functions only: rows without a gold are kept, as TRL keeps them
        source = ((lambda: load_rows(cfg.data.data, gold=gold)) if cfg.python.data is None
                  else (lambda: load_python_rows(cfg.python.data, gold=gold)))
        load = lambda: chat_rows(attach_rephrasings(question_rows(source(), cfg), cfg.tagrpo, data=cfg.data.data,
                                                    seed=cfg.run.seed), cfg)
        if self.dist.is_main:
            rows = load()
        self.dist.barrier()
        return rows if rows is not None else load()

    def _check_world(self) -> None:
        """nproc and the prompt count must fit the processes torchrun started."""
        run, world = self.cfg.run, self.dist.world_size
        if run.nproc > 1 and world != run.nproc:
            raise ValueError(f"nproc={run.nproc} but this job has {world} process(es); launch with "
                             f"`rlvr train nproc={run.nproc} ...` or torchrun --nproc-per-node {run.nproc} "
                             "(and then leave nproc=1)")
        prompts = self.cfg.batch_shape(world).prompts_per_step  # (refuses what does not share out over the ranks)
        if prompts < world:
            raise ValueError(f"prompts_per_step={prompts} is smaller than the {world} processes: every rank needs at "
                             f"least one prompt; use prompts_per_step >= {world}")
