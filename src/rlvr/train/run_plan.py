"""The run's life around the step, decided once at start-up as the step's decisions are (``plan.py``).

The loop (``trainer.py``) reads these decisions, never the config:

- **folder**: where the run writes (``output_dir``, or a new folder named after ``algo``), whether a folder
  holding a run is continued (``resume``, ``resume_from_checkpoint``, ``force_resume``) or replaced
  (``overwrite_output_dir``), and the resolved config it records (config.yaml, the trackers);
- **saving** (:class:`SavePlan`): when a checkpoint is due (``save_strategy``, ``save_steps``, an epoch, an
  improved ``metric_for_best_model``), how many are kept, LoRA's merged model;
- **logging**: TRL's log (:class:`LoggingPlan`: ``logging_strategy``, ``logging_steps``, ``logging_first_step``,
  ``include_num_input_tokens_seen``, ``skip_memory_metrics``), completions to samples.jsonl, the progress bar,
  the trackers (``report_to``, ``run_name``, ``logging_dir``);
- **stopping**: after how many non-finite optimiser steps in a row; the gradient-spike factor;
- **prompts**: their length limit and what happens to longer ones (``truncation``), the data order
  (``seed``, ``shuffle``);
- **processes**: the DDP timeout, and that ``nproc`` and the prompts fit the processes (:func:`check_world`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from rlvr.config import ExperimentConfig
from rlvr.run.hub import HubPush
from rlvr.train.plan import RunLength, StepPlan


@dataclass(frozen=True)
class SavePlan:
    """When the run writes a checkpoint, and what it keeps (transformers' ``save_strategy`` rules)."""

    strategy: str  # steps | epoch | best | no
    save_steps: float  # strategy=steps: in the run's counter (optimiser steps for a TRL-shaped config); < 1: a fraction
    keep_last: int | None  # save_total_limit (None: all)
    merged_model: bool  # LoRA: also the merged full model
    best_metric: str | None = None  # strategy=best: the metric's key in the step's line (eval/<name>)
    greater_is_better: bool = True
    trained_with: str = "grpo"  # the algorithm the model card names (algo)

    def every(self, length: RunLength) -> int:
        """Steps between checkpoints (0: none between): save_steps (in the run's counter; a fraction below 1 of the
        run's length, rounded up, as transformers' ``TrainerState.compute_steps``), an epoch (in rlvr's steps)."""
        steps = self.save_steps
        if 0 < steps < 1:
            steps = math.ceil(steps * length.counter(length.steps))
        return {"steps": int(steps), "epoch": length.steps_per_epoch}.get(self.strategy, 0)

    def due(self, length: RunLength, step: int) -> bool:
        """A scheduled checkpoint at the end of ``step``: a multiple of save_steps was reached during it (TRL saves
        at that optimiser step; rlvr at the end of the step holding it), or the step ends an epoch; with either
        strategy also the last step, as transformers saves at the end of training (best: :meth:`best_value`)."""
        if self.strategy in ("steps", "epoch") and step == length.steps:
            return True
        every = self.every(length)
        if not every:
            return False
        if self.strategy == "epoch":
            return step % every == 0
        return length.counter(step) // every > length.counter(step - 1) // every

    def best_value(self, metrics: dict) -> float | None:
        """strategy=best: the value of the metric in ``metrics``, a step's line, when the step evaluated (its line
        has eval/ keys); None otherwise. ValueError when it evaluated without the metric (transformers' KeyError)."""
        if self.strategy != "best" or not any(key.startswith("eval/") for key in metrics):
            return None
        if self.best_metric not in metrics:
            found = sorted(key.removeprefix("eval/") for key in metrics if key.startswith("eval/"))
            raise ValueError(f"metric_for_best_model={self.best_metric.removeprefix('eval/')} is not among the "
                             f"evaluation's metrics ({', '.join(found)}): name one of them")
        return float(metrics[self.best_metric])

    def improves(self, value: float, best: float | None) -> bool:
        return best is None or (value > best if self.greater_is_better else value < best)


@dataclass(frozen=True)
class LoggingPlan:
    """When TRL's log gets an entry, and what it holds beside TRL's metrics (``rlvr.train.trl_log`` writes it)."""

    strategy: str  # steps | epoch | no
    steps: float  # logging_steps: a count, or a fraction (below 1) of the run's units
    first_step: bool  # logging_first_step
    tokens_seen: bool  # include_num_input_tokens_seen (all / non_padding: TRL's count either way)
    memory: bool  # not skip_memory_metrics: transformers' memory metrics in the end-of-training entry

    def every(self, units: int) -> int:
        """logging_steps in units (transformers' ``compute_steps``: a fraction of the run, rounded up)."""
        return math.ceil(units * self.steps) if self.steps < 1 else int(self.steps)


@dataclass(frozen=True)
class RunPlan:
    output_dir: str | None  # None: a new folder named after ``folder_prefix``
    folder_prefix: str  # algo
    resume: bool  # resume=true or resume_from_checkpoint set
    resume_from_checkpoint: str | None
    force_resume: bool
    overwrite_output_dir: bool
    save: SavePlan
    logging: LoggingPlan  # TRL's log (trainer_state.json's log_history, the trackers' TRL series, on_log)
    log_completions: bool
    progress_bar: bool
    report_to: tuple[str, ...]
    run_name: str | None
    logging_dir: str | None
    max_skipped_steps: int
    grad_spike_factor: float
    truncation: str  # error | drop | left
    max_prompt_length: int | None
    seed: int
    shuffle: bool
    ddp_timeout: int
    config: dict[str, Any]  # the resolved config by section: config.yaml and the trackers
    flat: dict[str, Any]  # the same, flat: what a resume compares


def compile_run_plan(cfg: ExperimentConfig) -> RunPlan:
    """The run-life decisions of a validated config (push_to_hub offline or without a token: refused here, before
    any folder is made)."""
    r = cfg.run
    HubPush.check(r)
    return RunPlan(
        output_dir=r.output_dir, folder_prefix=cfg.algorithm.algo,
        resume=bool(r.resume or r.resume_from_checkpoint), resume_from_checkpoint=r.resume_from_checkpoint,
        force_resume=r.force_resume, overwrite_output_dir=r.overwrite_output_dir,
        save=SavePlan(strategy=r.save_strategy, save_steps=r.save_steps, keep_last=r.save_total_limit,
                      merged_model=cfg.model.save_merged_model, best_metric=best_metric_key(r.metric_for_best_model),
                      greater_is_better=r.greater_is_better if r.greater_is_better is not None else
                      not str(r.metric_for_best_model).endswith("loss"), trained_with=cfg.algorithm.algo),
        logging=LoggingPlan(strategy=r.logging_strategy, steps=r.logging_steps, first_step=r.logging_first_step,
                            tokens_seen=r.include_num_input_tokens_seen != "no", memory=not r.skip_memory_metrics),
        log_completions=r.log_completions, progress_bar=r.progress_bar, report_to=tuple(r.report_to),
        run_name=r.run_name, logging_dir=r.logging_dir, max_skipped_steps=r.max_skipped_steps,
        grad_spike_factor=r.grad_spike_factor, truncation=cfg.rollout.truncation,
        max_prompt_length=cfg.rollout.max_prompt_length, seed=r.seed, shuffle=cfg.data.shuffle,
        ddp_timeout=r.ddp_timeout, config=cfg.to_dict(), flat=cfg.flat(),
    )


def best_metric_key(name: str | None) -> str | None:
    """metric_for_best_model's key in a step's line: ``eval/<name>``, transformers' ``eval_<name>`` (a name given
    with its ``eval_`` or ``eval/`` prefix keeps it once)."""
    if name is None:
        return None
    return "eval/" + name.removeprefix("eval_").removeprefix("eval/")


def check_world(cfg: ExperimentConfig, world: int) -> None:
    """nproc and the prompt count must fit the processes torchrun started."""
    nproc = cfg.run.nproc
    if nproc > 1 and world != nproc:
        raise ValueError(f"nproc={nproc} but this job has {world} process(es); launch with "
                         f"`rlvr train nproc={nproc} ...` or torchrun --nproc-per-node {nproc} "
                         "(and then leave nproc=1)")
    prompts = cfg.batch_shape(world).prompts_per_step  # (refuses what does not share out over the ranks)
    if prompts < world:
        raise ValueError(f"prompts_per_step={prompts} is smaller than the {world} processes: every rank needs at "
                         f"least one prompt; use prompts_per_step >= {world}")


def async_lag_warning(async_generation: bool, is_correction) -> str | None:
    """The start-up warning for one-step-off-policy samples trained on without the importance correction."""
    if not async_generation or is_correction is not None:
        return None
    return ("async_generation=true with vllm_importance_sampling_correction=false: each step trains on responses "
            "sampled by the weights of the step before, as if they were the current policy's (the ratio is not "
            "corrected for the lag); set the correction on (its default with vLLM) unless that is what you want")


def start_lines(defaults: str | None, plan: StepPlan, length: RunLength, num_rows: int) -> list[tuple[int, str]]:
    """Rank 0's start-up lines (log level, text): whose defaults (``defaults``: rlvr.config.defaults_line's), the
    step's batch as TRL counts it, and a warned choice."""
    b = plan.batch
    lines = [(logging.INFO, defaults)] if defaults is not None else []
    lines.append((logging.INFO, (
        f"each step: {b.prompts_per_step} prompts x {b.completions_per_prompt} completions on {b.world_size} "
        f"process(es), micro-batches of {b.micro_batch}, {b.accumulation} per optimiser step, "
        f"{length.optimizer_steps_per_step} optimiser step(s) per step; {length.steps} steps "
        f"({length.steps_per_epoch} per epoch of {num_rows} prompts)")))
    warning = async_lag_warning(plan.engine.ahead, plan.update.is_correction)
    if warning is not None:
        lines.append((logging.WARNING, warning))
    lines.extend((logging.WARNING, ignored) for ignored in plan.engine.ignored)
    return lines
