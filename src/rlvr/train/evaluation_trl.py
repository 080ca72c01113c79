"""TRL's evaluation of a GRPO run (``GRPOTrainer.evaluate``, and during training with ``eval_strategy``), computed
as TRL 1.16 and transformers compute it.

TRL's ``evaluate()`` is transformers' evaluation loop over TRL's eval sampler: the prompts in one seeded permutation
(``RepeatSampler(seed=args.seed)``, the same at every evaluation), each repeated ``num_generations_eval`` times, in
batches of ``per_device_eval_batch_size`` completions (whole groups, the last batch possibly smaller). Each batch is
sampled with the current policy, scored with the run's reward functions, its advantages taken within the batch, and
its loss computed as training computes it (``prediction_step``: ``compute_loss`` in eval mode, no accumulation);
each batch's metrics are appended to lists that TRL's ``log`` averages, NaN left out, under ``eval_<name>``
whatever the prefix. transformers adds ``<prefix>_loss`` (the batches' finite losses, weighted as its evaluation
loop weights them: :func:`eval_loss`) and
``speed_metrics``: ``<prefix>_runtime`` (s, 4 decimals), ``<prefix>_samples_per_second`` (prompts / s) and
``<prefix>_steps_per_second`` (ceil(prompts / batch size) / s, as transformers counts them, 3 decimals).

This does the same with the run's prompt format, engine, reward functions and loss (``PolicyUpdate.evaluation_loss``:
``rlvr.core.losses`` on the whole batch), on a group counter of its own (the training run's group ids and sampling
seeds are untouched). rlvr's other evaluation, ``eval_data``, is pass@k with the verifier (rlvr.train.evaluation).

Departures: one process evaluates (TRL shares the batches out over its processes); the vLLM importance-sampling
metrics (``sampling/*``) and the completions table are not logged for evaluations.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import replace

import torch

from rlvr.data.prompts import PromptBuilder
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.metrics import bonus_on, trl_rollout_metrics, trl_update_metrics
from rlvr.train.rewarding import logged_metric_means
from rlvr.train.rollout_phase import GroupGenerator, GroupIds
from rlvr.train.trl_evaluation import TrlEvalSettings
from rlvr.train.trl_metric_names import trl_log_name

EVAL_SEED = 1_000_003  # the evaluation's sampling seed (+ the batch's index): the same samples at every call
NOT_LOGGED = ("loss", "grad_norm", "learning_rate")  # trl_update_metrics' train-only values


def eval_order(num_prompts: int, seed: int) -> list[int]:
    """TRL's ``RepeatSampler`` order of the eval prompts: one ``torch.randperm`` of a generator seeded with ``seed``."""
    return torch.randperm(num_prompts, generator=torch.Generator().manual_seed(seed)).tolist()


def trl_evaluation(trainer, data, settings: TrlEvalSettings, *, prefix: str = "eval",
                   preparation_time: float | None = None) -> dict[str, float | None]:
    """TRL's ``evaluate()`` metrics of ``data`` (a Dataset, row dicts or a dataset spec) with ``trainer``'s current policy: ``<prefix>_loss``,
    the speed metrics, then TRL's batch metrics as ``eval_<name>`` (the module doc); no ``epoch`` (the caller's).
    ``preparation_time``: transformers' ``<prefix>_model_preparation_time`` (None: not logged)."""
    start = time.time()
    rows = trainer.eval_rows(data)  # (a str: a dataset spec, eval_mode=trl's eval_data)
    rows = [rows[i] for i in eval_order(len(rows), settings.seed)]
    prompts_per_batch = settings.batch_size // settings.num_generations
    rollout = replace(trainer.plan.rollout, responses_per_prompt=settings.num_generations, rephrased=False)
    prompts = PromptBuilder(trainer.tokenizer, trainer.prompt_format, rephrased=False)  # (its cache: rows' ids)
    if trainer.prompt_builder.max_tokens is not None:  # truncation=left cuts them as the training prompts
        prompts.truncate_to(trainer.prompt_builder.max_tokens)
    generator = GroupGenerator(rollout, trainer.engine, trainer.tokenizer, prompts, GroupIds(), trainer.dist,
                               policy=trainer.policy)
    rewarder = trainer.rewarder_recipe.build(max_steps=trainer.max_steps, tokenizer=trainer.tokenizer)
    losses, lists = [], defaultdict(list)
    try:
        for index, first in enumerate(range(0, len(rows), prompts_per_batch)):
            loss, metrics = _batch(trainer, generator, rewarder, rows[first:first + prompts_per_batch],
                                   seed=EVAL_SEED + index)
            losses.append(loss)
            for name, value in metrics.items():
                lists[name].append(math.nan if value is None else value)
    finally:
        rewarder.close()
    out = {f"{prefix}_loss": eval_loss(losses, num_samples=len(rows), batch_size=settings.batch_size)}
    if preparation_time is not None:
        out[f"{prefix}_model_preparation_time"] = preparation_time
    out |= speed_metrics(prefix, start, num_samples=len(rows), batch_size=settings.batch_size)
    out["eval_num_tokens"] = float(trainer.step_log.num_tokens)  # TRL: the training's tokens seen so far
    for name, values in lists.items():
        valid = [v for v in values if not math.isnan(v)]
        out[f"eval_{name}"] = sum(valid) / len(valid) if valid else None
    return out


def _batch(trainer, generator: GroupGenerator, rewarder, rows: list[dict], *, seed: int) -> tuple[float, dict]:
    """One eval batch (TRL's ``prediction_step``): sampled, rewarded, its advantages and loss; (loss, TRL's metrics
    of the batch under TRL's names)."""
    plan = trainer.plan
    requests = generator.requests(rows, seed=seed)
    groups = generator.groups(requests, generator.sample(requests))
    counts = rewarder.reward_groups(groups, step=getattr(trainer, "step_done", 0) + 1)
    metrics = trl_rollout_metrics(groups, rewarder.names, scale_rewards=plan.advantages.settings.scale_rewards)
    metrics |= {trl_log_name(key) or key: value for key, value in logged_metric_means(counts).items()}
    experience = Experience.from_groups(groups, plan.scoring_prompts)
    advantages, _ = compute_advantages(plan.advantages, experience)  # [N], within the batch, as TRL's
    loss, sums = trainer.update.evaluation_loss(experience, advantages)
    update = trl_update_metrics(sums, with_kl=plan.update.needs_reference, loss=None, grad_norm=None,
                                learning_rate=0.0, with_policy_loss=bonus_on(plan.update),
                                policy=plan.update.loss.policy_loss)
    return loss, metrics | {k: v for k, v in update.items() if k not in NOT_LOGGED}


def eval_loss(losses: list[float], *, num_samples: int, batch_size: int) -> float | None:
    """transformers' ``<prefix>_loss`` of the batches' ``losses``: each batch's loss repeated ``batch_size`` times,
    the last batch's cut to ``num_samples % batch_size`` copies when that is not 0 (accelerate's
    ``gather_for_metrics`` drops a last batch's padding by the dataset's length, here the prompts), the non-finite
    ones left out (``logging_nan_inf_filter``, when any is finite), then the mean."""
    weights = [batch_size] * len(losses)
    if losses and num_samples % batch_size:
        weights[-1] = num_samples % batch_size
    pairs = [(loss, w) for loss, w in zip(losses, weights) if math.isfinite(loss)] or list(zip(losses, weights))
    total = sum(w for _, w in pairs)
    return sum(loss * w for loss, w in pairs) / total if total else None


def speed_metrics(prefix: str, start: float, *, num_samples: int, batch_size: int) -> dict[str, float]:
    """transformers' ``speed_metrics`` of an evaluation that began at ``start`` (``time.time()``): ``num_samples``
    prompts, ``ceil(num_samples / batch_size)`` steps, as ``Trainer.evaluate`` counts them."""
    runtime = time.time() - start
    out = {f"{prefix}_runtime": round(runtime, 4)}
    if runtime > 0:
        out[f"{prefix}_samples_per_second"] = round(num_samples / runtime, 3)
        out[f"{prefix}_steps_per_second"] = round(math.ceil(num_samples / batch_size) / runtime, 3)
    return out
