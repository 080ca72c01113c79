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

from rlvr.train.trl_evaluation import (  # noqa: F401  (the API's names)
    MODEL_PREPARATION,
    EvalOptions,
    TrainingEvaluation,
    evaluate_datasets,
    log_entry,
    merged,
    one_process,
)

# (rlvr.train is imported where it is used: ``from rlvr import GRPOTrainer`` stays light until training)

# the GRPOConfig keys read here (not by rlvr's config), with TRL's defaults (do_eval: read by scripts; TRL's trainer
# does nothing with it, nor does this one)
EVAL_DEFAULTS = {"eval_strategy": "no", "eval_steps": None, "eval_delay": 0, "eval_on_start": False, "do_eval": False,
                 "per_device_eval_batch_size": 8, "num_generations_eval": None}
STRATEGIES = ("no", "steps", "epoch")


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


